"""What keeping history costs a write (docs/history.md, "Where history lives").

Three measurements, each bounded:

- ``--bytes``: bytes and log records appended to the store's files by one
  overwrite of a ~0.9 KB record in a namespace keeping 60 versions, with 1,
  10 and 50 versions behind it (sizes of every warm log before and after),
  and the wall time of an overwrite at those depths (``--keys`` keys each
  brought to the depth, then each overwritten once, ``durability="flush"``).
- ``--seed``: the seed-namespace rows of ``bench_seed`` that a history-keeping
  warm write touches, in the same worker process: ``diskcache`` ``set``, a
  write of ``altitude.patterns`` (warm, flush, 20 versions kept) and a bare
  SDK span (``tracer.start_as_current_span`` entered and left, through the
  same global provider and batch processor), each a loop of N then
  ``force_flush()``; untraced and traced processes interleaved rep by rep as
  ``bench_seed`` does. Reported: ops/s of the write over ops/s of
  ``diskcache`` ``set`` (traced), what tracing adds to the write (traced
  minus untraced) and to the bare span, and their ratio.
- ``--instructions``: callgrind instructions per first write, overwrite,
  read, ``history()`` and query (50 records) in a namespace keeping 20
  versions, untraced (``(with N ops - with none) / N``, every run with the
  same set-up, ``PYTHONHASHSEED=0``).

    python -m benchmarks.bench_history --bytes [--keys 100]
    python -m benchmarks.bench_history --seed [--n 20000] [--reps 3]
    python -m benchmarks.bench_history --instructions [--n 500] [--ops first,overwrite,read,history,query]

The module imports only ``hrm_memory`` and ``benchmarks.bench_seed``'s
harness, so a copy of it runs against another checkout for a before/after.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEPTHS = (1, 10, 50)
KEPT = 60
NS = "bench.kept"


def _record(i: int) -> dict[str, Any]:
    """~0.9 KB, different each version."""
    return {"note": f"revision {i}", "body": (f"observation {i:06d} " * 40)[:820], "n": i}


def _logs(root: Path) -> tuple[int, int]:
    """(bytes, records) of every warm log under ``root`` (two newlines frame each record)."""
    size = lines = 0
    for p in (root / "warm").rglob("*.log"):
        data = p.read_bytes()
        size += len(data)
        lines += data.count(b"\n") // 2
    return size, lines


def appended(keys: int) -> list[dict[str, float]]:
    from hrm_memory import Keep, MemoryManager, NamespaceSpec

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        spec = NamespaceSpec(NS, history=Keep(versions=KEPT))
        with MemoryManager(root, durability="flush", namespaces=[spec]) as mm:
            written = 0
            names = [f"k{i:04d}" for i in range(keys)]
            for depth in DEPTHS:
                # Bring every key to `depth` versions behind its current one.
                while written < depth + 1:
                    for k in names:
                        mm.write(NS, k, _record(written))
                    written += 1
                size0, lines0 = _logs(root)
                mm.write(NS, names[0], _record(written))
                size1, lines1 = _logs(root)
                gc.collect()
                t0 = time.perf_counter()
                for k in names[1:]:
                    mm.write(NS, k, _record(written))
                us = (time.perf_counter() - t0) / (len(names) - 1) * 1e6
                written += 1
                behind = len(mm.history(NS, names[0])) - 2  # the versions behind the one just superseded
                out.append({"depth": depth, "behind": behind, "bytes": size1 - size0, "records": lines1 - lines0,
                            "us": us})  # fmt: skip
    return out


# -- the seed rows, the bare span -----------------------------------------------------------


def _bare_span(n: int, flush: Any) -> float:
    from opentelemetry import trace

    tracer = trace.get_tracer("bench.bare")
    start = tracer.start_as_current_span
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(n):
        with start("memory.write"):
            pass
    flush()
    return (time.perf_counter() - t0) / n * 1e6


def worker(mode: str, n: int) -> dict[str, float]:
    """``bench_seed``'s rows ``dc.set`` and ``altitude.patterns.write``, timed
    by its worker (the global provider set up as it sets it when traced),
    then a bare span under the same provider."""
    from opentelemetry import trace

    from benchmarks import bench_seed

    out: dict[str, float] = bench_seed.worker(mode, n, ["dc.set", "altitude.patterns.write"])
    out.pop("exported", None)
    flush = getattr(trace.get_tracer_provider(), "force_flush", lambda: None)
    out["bare.span"] = _bare_span(n, flush)
    return out


def seed(n: int, reps: int) -> str:
    from benchmarks.harness import OtherLoad

    got: dict[str, list[dict[str, float]]] = {"untraced": [], "traced": []}
    load = OtherLoad()
    la0 = os.getloadavg()[0]
    for _ in range(reps):
        for mode in ("untraced", "traced"):
            done = subprocess.run([sys.executable, "-m", "benchmarks.bench_history", "--worker", mode, str(n)],
                                  capture_output=True, text=True, check=True)  # fmt: skip
            got[mode].append(json.loads(done.stdout.splitlines()[-1]))
    share, la1 = load.share(), os.getloadavg()[0]

    def col(mode: str, row: str) -> list[float]:
        return [r[row] for r in got[mode]]

    def span(xs: list[float]) -> str:
        return f"{statistics.mean(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"

    ratio = [r["dc.set"] / r["altitude.patterns.write"] for r in got["traced"]]
    added = [t - u for t, u in zip(col("traced", "altitude.patterns.write"), col("untraced", "altitude.patterns.write"))]
    bare = [t - u for t, u in zip(col("traced", "bare.span"), col("untraced", "bare.span"))]
    share_of_span = [a / b for a, b in zip(added, bare)]
    lines = [
        f"µs per operation, loop of {n:,} then force_flush(); mean (min-max) over {reps} reps; other processes "
        f"used {share:.0%} of the CPUs meanwhile (load average {la0:.1f} before, {la1:.1f} after, "
        f"{os.cpu_count()} CPUs)",
        "",
        "| row | untraced | traced |",
        "|---|---|---|",
    ]
    for row, label in (("dc.set", "diskcache `set`"), ("altitude.patterns.write", "write `altitude.patterns` (warm, flush)"),
                       ("bare.span", "bare SDK span (`start_as_current_span` + end)")):  # fmt: skip
        lines.append(f"| {label} | {span(col('untraced', row))} | {span(col('traced', row))} |")
    lines += [
        "",
        f"- ops/s of the traced write over ops/s of diskcache `set` (same process): median "
        f"{statistics.median(ratio):.2f}x ({min(ratio):.2f}-{max(ratio):.2f})",
        f"- added by tracing to the write: {statistics.mean(added):+.2f} µs ({min(added):+.2f} to {max(added):+.2f})",
        f"- a bare SDK span, traced minus untraced: {statistics.mean(bare):+.2f} µs ({min(bare):+.2f} to {max(bare):+.2f}); "
        f"traced, whole: {span(col('traced', 'bare.span'))} µs",
        f"- added to the write over the bare span's added: {statistics.mean(share_of_span):.2f}x "
        f"({min(share_of_span):.2f}-{max(share_of_span):.2f})",
    ]
    return "\n".join(lines)


# -- instructions -----------------------------------------------------------------------------


#: Operations counted per call of ``instr_worker`` (a query returns 50 records).
PER_CALL = {"first": 1, "overwrite": 1, "read": 1, "history": 1, "query": 10}


def instr_worker(op: str, n: int) -> None:
    """The same set-up for every op (so one run with no op is the base of
    all): a namespace keeping 20 versions, one key written 30 times, 50 keys
    written once; then ``n`` of ``op`` (``query``: ``n / 10`` queries)."""
    from hrm_memory import Keep, MemoryManager, NamespaceSpec

    spec = NamespaceSpec(NS, history=Keep(versions=20))
    with tempfile.TemporaryDirectory() as tmp, MemoryManager(tmp, durability="flush", namespaces=[spec]) as mm:
        for i in range(30):
            mm.write(NS, "k", {"a": i, "pad": "x" * 200})
        for i in range(50):
            mm.write(NS, f"q{i:02d}", {"a": i, "pad": "x" * 200})
        if op == "first":  # a first write of a key, in a namespace keeping history
            for i in range(n):
                mm.write(NS, f"new{i:06d}", {"a": i, "pad": "x" * 200})
        elif op == "overwrite":
            for i in range(n):
                mm.write(NS, "k", {"a": i, "pad": "x" * 200})
        elif op == "read":
            for _ in range(n):
                mm.read(NS, "k")
        elif op == "history":
            for _ in range(n):
                mm.history(NS, "k")
        elif op == "query":
            for _ in range(n // PER_CALL["query"]):
                mm.query(NS, "q*")


def _callgrind(op: str, n: int) -> int:
    from benchmarks.harness import callgrind

    return callgrind([sys.executable, "-m", "benchmarks.bench_history", "--instr-worker", op, str(n)])


def instructions(n: int, ops: list[str]) -> str:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        base = pool.submit(_callgrind, "none", 0)
        runs = {op: pool.submit(_callgrind, op, n) for op in ops}
        zero = base.result()
        lines = ["| op (namespace keeping 20 versions, untraced) | instructions/op |", "|---|---|"]
        for op in ops:
            per = (runs[op].result() - zero) / n * PER_CALL[op]
            label = "query (50 records)" if op == "query" else op
            lines.append(f"| {label} | {per:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", action="store_true")
    ap.add_argument("--seed", action="store_true")
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ops", default="first,overwrite,read,history,query", help="--instructions: which ops")
    args = ap.parse_args(argv)
    if args.bytes:
        print("| versions behind the one superseded | bytes appended | records appended | µs per overwrite |")
        print("|---|---|---|---|")
        for row in appended(args.keys):
            print(f"| {row['behind']} | {row['bytes']:,} | {row['records']} | {row['us']:.1f} |")
    if args.seed:
        print(seed(args.n, args.reps))
    if args.instructions:
        print(instructions(args.n if args.n != 20_000 else 500, args.ops.split(",")))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]))))
    elif len(sys.argv) > 1 and sys.argv[1] == "--instr-worker":
        instr_worker(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
