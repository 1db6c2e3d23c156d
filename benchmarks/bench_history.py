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


# -- the seed rows, paired in one process ---------------------------------------------------

#: The blocks of a round of ``--paired``, in their first round's order (each
#: round starts one block later, so no block always follows the same one).
BLOCKS = ("dc.set", "write.untraced", "write.traced", "span.sdk", "span.noop", "span.floor", "span.sdk.attrs")
#: The attributes of a traced write's span of ``altitude.patterns`` (as
#: exported), for the ``span.sdk.attrs`` block: a bare span that carries them.
WRITE_ATTRS = {
    "db.system.name": "hrm-memory", "db.operation.name": "write", "gen_ai.operation.name": "update_memory",
    "gen_ai.memory.store.id": "altitude.patterns", "db.collection.name": "altitude.patterns",
    "gen_ai.memory.record.id": "r0000-000000", "hrm.memory.key": "r0000-000000", "hrm.memory.tier": "warm",
    "hrm.memory.bytes": 207, "hrm.memory.version": 1, "hrm.memory.persisted": True, "hrm.memory.tokens_saved": 0,
}  # fmt: skip


def paired_worker(block: int, rounds: int) -> dict[str, list[float]]:
    """µs per operation of each block, round by round, all in this process.

    One SDK provider set globally (a batch processor to a null exporter, as
    ``bench_seed`` sets it up); a manager through it (``write.traced``) and
    one given ``NoOpTracerProvider()`` (``write.untraced``: the pipeline
    asks its tracing for a span and gets none), each on a root of its own,
    writing ``altitude.patterns`` (warm, flush, history kept) with a new key
    every write; ``diskcache`` ``set`` of the same values; a bare span
    through the global provider (``span.sdk``) and through the API's no-op
    tracer (``span.noop``); and the SDK's floor (``span.floor``): what any
    span reaching the batch processor pays however it is made, a span id, a
    ``ReadableSpan`` (its public constructor) and the processor's ``on_end``
    (and the export, at the flush); and a bare span through the global
    provider carrying the attributes a traced write's span carries
    (``span.sdk.attrs``: what instrumenting the write by hand would cost).
    Every block is ``block`` operations then the
    provider's ``force_flush()`` (the traced blocks) in the time, after a
    full collection. Adjacent blocks share the machine's state of that
    moment, so a difference taken within a round is not another process's
    luck (its address layout, its cores, the page cache it found)."""
    import random

    import diskcache
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from benchmarks.harness import CountingExporter, make_record
    from hrm_memory import MemoryManager

    provider = TracerProvider()
    processor = BatchSpanProcessor(CountingExporter())  # type: ignore[arg-type]
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    flush = provider.force_flush
    resource = provider.resource
    parent = trace.SpanContext(1, 2, False, trace.TraceFlags(1))
    floor_attrs = {"db.system.name": "hrm-memory", "db.operation.name": "write", "db.collection.name": "altitude.patterns"}
    bits = random.getrandbits
    ns = "altitude.patterns"
    got: dict[str, list[float]] = {b: [] for b in BLOCKS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        traced = MemoryManager(root / "traced", durability="flush")
        untraced = MemoryManager(root / "untraced", durability="flush", tracer_provider=trace.NoOpTracerProvider())
        cache = diskcache.Cache(str(root / "dc"))
        sdk_span = trace.get_tracer("bench.bare").start_as_current_span
        noop_span = trace.NoOpTracerProvider().get_tracer("bench.bare").start_as_current_span
        dumps = json.dumps
        values = [make_record(i) for i in range(block)]
        for i in range(500):  # warm-up: files, buckets, the codec's caches
            traced.write(ns, f"w{i:05d}", values[i % block])
            untraced.write(ns, f"w{i:05d}", values[i % block])
            cache.set(f"w{i:05d}", dumps(values[i % block]))
        flush()

        def run(name: str, r: int) -> float:
            keys = [f"r{r:04d}-{i:06d}" for i in range(block)]
            gc.collect()
            clock = time.perf_counter
            t0 = clock()
            if name == "dc.set":
                for k, v in zip(keys, values):
                    cache.set(k, dumps(v))
            elif name == "write.untraced":
                for k, v in zip(keys, values):
                    untraced.write(ns, k, v)
            elif name == "write.traced":
                for k, v in zip(keys, values):
                    traced.write(ns, k, v)
                flush()
            elif name == "span.sdk":
                for _ in keys:
                    with sdk_span("memory.write"):
                        pass
                flush()
            elif name == "span.sdk.attrs":
                for _ in keys:
                    with sdk_span("update_memory", attributes=WRITE_ATTRS):
                        pass
                flush()
            elif name == "span.noop":
                for _ in keys:
                    with noop_span("memory.write"):
                        pass
            else:
                on_end = processor.on_end
                for i in range(block):
                    ctx = trace.SpanContext(1, bits(64), False, parent.trace_flags)
                    on_end(ReadableSpan(name="memory.write", context=ctx, parent=parent, resource=resource,
                                        attributes=floor_attrs, start_time=i, end_time=i + 1))  # fmt: skip
                flush()
            return (clock() - t0) / block * 1e6

        try:
            for r in range(rounds):
                order = BLOCKS[r % len(BLOCKS):] + BLOCKS[: r % len(BLOCKS)]
                for name in order:
                    got[name].append(run(name, r))
        finally:
            traced.close()
            untraced.close()
            cache.close()
    return got


def paired(block: int, rounds: int, procs: int) -> str:
    """``--paired``: :func:`paired_worker` in ``procs`` processes one after
    another; per round, the traced write's ops/s over ``set``'s, what tracing
    adds to the write (traced - untraced) and to a bare span (SDK - no-op),
    and their ratio; medians and quartiles over every round of every process."""
    from benchmarks.harness import OtherLoad

    load = OtherLoad()
    la0 = os.getloadavg()[0]
    runs = []
    for _ in range(procs):
        done = subprocess.run([sys.executable, "-m", "benchmarks.bench_history", "--paired-worker", str(block),
                               str(rounds)], capture_output=True, text=True, check=True)  # fmt: skip
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    share, la1 = load.share(), os.getloadavg()[0]

    def each(run: dict[str, list[float]]) -> dict[str, list[float]]:
        rows = list(zip(*(run[b] for b in BLOCKS)))
        dc, wu, wt, ss, sn, sf, sa = (list(c) for c in zip(*rows))
        added = [t - u for t, u in zip(wt, wu)]
        bare = [s - n for s, n in zip(ss, sn)]
        return {
            "ratio": [d / t for d, t in zip(dc, wt)],
            "added": added,
            "bare": bare,
            "share": [a / b for a, b in zip(added, bare)],
            "share_whole": [a / s for a, s in zip(added, ss)],
            "floor_share": [f / b for f, b in zip(sf, bare)],
            "share_attrs": [a / (t - n) for a, t, n in zip(added, sa, sn)],
            "span.sdk.attrs": sa,
            "dc.set": dc, "write.untraced": wu, "write.traced": wt, "span.sdk": ss, "span.noop": sn, "span.floor": sf,
        }  # fmt: skip

    per = [each(r) for r in runs]

    def q(xs: list[float], fmt: str) -> str:
        a, m, b = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0], xs[0], xs[0])
        return f"{format(m, fmt)} ({format(a, fmt)}-{format(b, fmt)})"

    def joined(name: str) -> list[float]:
        return [x for p in per for x in p[name]]

    lines = [
        f"{procs} processes x {rounds} rounds of {block:,} operations a block; median (quartiles) over the "
        f"{procs * rounds} rounds; other processes used {share:.0%} of the CPUs meanwhile (load average "
        f"{la0:.1f} before, {la1:.1f} after, {os.cpu_count()} CPUs)",
        "",
        "| block | µs per operation |",
        "|---|---|",
    ]
    labels = {"dc.set": "diskcache `set`", "write.untraced": "write `altitude.patterns`, untraced (no-op provider)",
              "write.traced": "write `altitude.patterns`, traced (global SDK provider, batch processor)",
              "span.sdk": "bare span through the global SDK provider (+ flush)", "span.noop": "bare span, the API's no-op tracer",
              "span.floor": "the SDK's floor: span id, `ReadableSpan`, the batch processor's `on_end` (+ flush)",
              "span.sdk.attrs": "bare span through the global SDK provider with the write span's 12 attributes (+ flush)"}  # fmt: skip
    for b in BLOCKS:
        lines.append(f"| {labels[b]} | {q(joined(b), '.2f')} |")
    lines += [
        "",
        f"- traced write ops/s over diskcache `set` ops/s: {q(joined('ratio'), '.2f')}x; per process (median): "
        + ", ".join(f"{statistics.median(p['ratio']):.2f}x" for p in per),
        f"- added by tracing to the write: {q(joined('added'), '+.2f')} µs; per process: "
        + ", ".join(f"{statistics.median(p['added']):+.2f}" for p in per),
        f"- added by the SDK to a bare span: {q(joined('bare'), '+.2f')} µs",
        f"- added to the write over added to a bare span: {q(joined('share'), '.2f')}x; per process: "
        + ", ".join(f"{statistics.median(p['share']):.2f}x" for p in per),
        f"- added to the write over a whole bare SDK span: {q(joined('share_whole'), '.2f')}x",
        f"- the SDK's floor over what the SDK adds to a bare span: {q(joined('floor_share'), '.2f')}x",
        f"- added to the write over what the SDK adds to a bare span carrying the same 12 attributes: "
        f"{q(joined('share_attrs'), '.2f')}x",
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
    ap.add_argument("--paired", action="store_true", help="the seed rows in one process, block by block")
    ap.add_argument("--block", type=int, default=2000, help="--paired: operations a block")
    ap.add_argument("--rounds", type=int, default=20, help="--paired: rounds a process")
    ap.add_argument("--procs", type=int, default=3, help="--paired: processes, one after another")
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
    if args.paired:
        print(paired(args.block, args.rounds, args.procs))
    if args.instructions:
        print(instructions(args.n if args.n != 20_000 else 500, args.ops.split(",")))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]))))
    elif len(sys.argv) > 1 and sys.argv[1] == "--paired-worker":
        print(json.dumps(paired_worker(int(sys.argv[2]), int(sys.argv[3]))))
    elif len(sys.argv) > 1 and sys.argv[1] == "--instr-worker":
        instr_worker(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
