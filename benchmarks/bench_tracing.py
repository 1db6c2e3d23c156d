"""Tracing overhead per operation, three modes in one run.

- ``no-sdk``: the OpenTelemetry API only (no provider configured);
- ``sdk-batch``: SDK TracerProvider + BatchSpanProcessor, spans made with the
  SDK's own start_span/end on the caller's thread (``deferred_spans=False``);
- ``sdk-batch-deferred``: same provider, hrm-memory's deferred path: the caller
  records the span, a drainer thread finishes it into a real SDK span.

Operations: hot-tier write and read (in-memory namespace, so storage cost is
small and the tracing cost shows). For each mode: the caller's time per op
(the loop), the finishing time per span spent after the loop (flush), and the
total, minus the ``no-sdk`` baseline. Exporter: a no-op exporter that counts.

usage: python -m benchmarks.bench_tracing [--n 100000] [--reps 3]

Instruction counts (wall-clock timings on a loaded 2-vCPU VM are
noise): ``--instructions`` runs each case under ``valgrind --tool=callgrind``
(every thread counted, the drainer's and the batch processor's included) and
reports (instructions with N ops - instructions with 0 ops) / N, for

- ``none``: no SDK; ``langgraph``: LangGraph ``InMemoryStore.get``/``put``;
- ``batch``: SDK + ``BatchSpanProcessor`` to an exporter that discards;
- ``simple``: SDK + ``SimpleSpanProcessor`` + ``InMemorySpanExporter``;

each as *total* (the loop, then ``provider.force_flush()``) and *caller*
(the loop only: no batch is finished, its records go back to the free list
unfinished, so this is the caller's thread alone less the batches). ``--base-tracing FILE``
loads another ``tracing.py`` (say ``git show REV:shared/memory/tracing.py``)
in place of this checkout's, for before/after figures:

    python -m benchmarks.bench_tracing --instructions [--n 5000] [--base-tracing /tmp/tracing_before.py]

Wall clock: ``--wall`` runs each case (no SDK; SDK +
``BatchSpanProcessor``; SDK + ``SimpleSpanProcessor``, both to an exporter
that counts and discards) in its own process, the cases interleaved rep by
rep, and prints per operation the caller's p50 (2,000 calls timed one by
one), the total of a tight loop of N ops followed by ``provider.force_flush()``
(mean, min-max over reps), the CPU time of all the process's threads over
that loop and flush (clock ticks: 0.1 µs an op at N=100,000; less moved by
other processes than wall time, as waiting for a CPU is not counted), the
garbage collector's share, and the machine's load average (other processes
move the figures: read them with it);
``--verbose`` adds each rep's per-thread CPU and context switches:

    python -m benchmarks.bench_tracing --wall [--n 100000] [--reps 5] [--verbose]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from hrm_memory import MemoryManager, NamespaceSpec

from .harness import CountingExporter


def run_mode(mode: str, n: int) -> dict[str, float]:
    exporter = CountingExporter()
    provider = None
    if mode != "no-sdk":
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=8192))
    value = {"topic": "patent_file", "status": "pending", "detail": "x" * 120, "n": 3, "s": 0.8}
    with tempfile.TemporaryDirectory() as root, MemoryManager(
        root,
        namespaces=[NamespaceSpec("bench.hot", tier="hot")],
        tracer_provider=provider,
        deferred_spans=mode == "sdk-batch-deferred",
    ) as mm:
        keys = [f"k{i % 1000}" for i in range(n)]
        for k in keys[:1000]:
            mm.write("bench.hot", k, value)
        if provider:
            provider.force_flush()
        exporter.count = 0
        out: dict[str, float] = {}
        for op in ("write", "read"):
            t0 = time.perf_counter()
            if op == "write":
                for k in keys:
                    mm.write("bench.hot", k, value)
            else:
                for k in keys:
                    mm.read("bench.hot", k)
            t1 = time.perf_counter()
            if provider:
                provider.force_flush()
            t2 = time.perf_counter()
            out[f"{op}_caller_us"] = (t1 - t0) / n * 1e6
            out[f"{op}_finish_us"] = (t2 - t1) / n * 1e6
        out["exported"] = exporter.count
    if provider:
        provider.shutdown()
    return out


# -- instruction counts (callgrind) --------------------------------------------------------

VALUE = {"topic": "patent_file", "status": "pending", "detail": "x" * 120, "n": 3, "s": 0.8}


def count_worker(mode: str, op: str, n: int, caller_only: bool, base_tracing: str | None) -> None:
    """One measured process: 100 keys written, then ``n`` reads or writes."""
    import sys

    if base_tracing:  # loaded by _SWAP before hrm_memory was first imported
        assert sys.modules["hrm_memory.tracing.spans.spans"].__file__ == base_tracing, "the base tracing module is not in use"
    keys = [f"k{i % 100}" for i in range(n)]
    if mode == "langgraph":
        from langgraph.store.memory import InMemoryStore

        store = InMemoryStore()
        ns = ("bench", "hot")
        for i in range(100):
            store.put(ns, f"k{i}", VALUE)
        if op == "read":
            for k in keys:
                store.get(ns, k)
        else:
            for k in keys:
                store.put(ns, k, VALUE)
        return
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from hrm_memory.tracing import spans as tracing

    provider = None
    if mode != "none":
        provider = TracerProvider()
        if mode == "batch":
            provider.add_span_processor(BatchSpanProcessor(CountingExporter()))
        else:
            provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    if caller_only:
        from hrm_memory.tracing import sdk as tracing_sdk

        def recycle(self: Any) -> None:  # the records come back as a drain returns them, unfinished
            self.due = self.BATCH
            self.free += self.pending
            self.pending.clear()

        tracing_sdk.Recorder.kick = recycle  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as root:
        mm = MemoryManager(root, namespaces=[NamespaceSpec("bench.hot", tier="hot")], tracer_provider=provider)
        for i in range(100):
            mm.write("bench.hot", f"k{i}", VALUE)
            mm.read("bench.hot", f"k{i}")
        if provider:
            provider.force_flush()
        if op == "read":
            read = mm.read
            for k in keys:
                read("bench.hot", k)
        else:
            write = mm.write
            for k in keys:
                write("bench.hot", k, VALUE)
        if caller_only:
            for rec in list(tracing._recorders.values()):
                rec.pending.clear()
        elif provider:
            provider.force_flush()
        mm.close()
    if provider:
        provider.shutdown()


# Run as ``python -c``: another tracing.py takes the place of hrm_memory.tracing.spans.spans
# before anything imports hrm_memory (this module does, at its top).
_SWAP = """
import importlib.util, runpy, sys
base = sys.argv[-1]
if base.endswith(".py"):
    spec = importlib.util.spec_from_file_location("hrm_memory.tracing.spans.spans", base)
    module = importlib.util.module_from_spec(spec)
    sys.modules["hrm_memory.tracing.spans.spans"] = module
    spec.loader.exec_module(module)
sys.argv = ["bench_tracing", *sys.argv[1:]]
runpy.run_module("benchmarks.bench_tracing", run_name="__main__")
"""


def _instructions(args: list[str]) -> int:
    import sys

    from benchmarks.harness import callgrind

    return callgrind([sys.executable, "-c", _SWAP, "--worker", *args])


def instructions_table(n: int, base_tracing: str | None) -> str:
    from concurrent.futures import ThreadPoolExecutor

    base = [base_tracing] if base_tracing else []
    cases = [("none", "total"), ("langgraph", "total")]
    cases += [(m, c) for m in ("batch", "simple") for c in ("caller", "total")]
    with ThreadPoolExecutor(2) as pool:
        jobs = {
            (mode, part, op, k): pool.submit(_instructions, [mode, op, str(k), part, *base])
            for mode, part in cases
            for op in ("read", "write")
            for k in (0, n)
        }
        per = {key[:3]: (jobs[key].result() - jobs[(*key[:3], 0)].result()) / n for key in jobs if key[3] == n}
    lines = [
        f"Instructions per operation (callgrind, all threads; N={n:,}; hot tier, ~206-byte value)",
        "",
        "| case | read | read: added vs no SDK | write | write: added vs no SDK |",
        "|---|---|---|---|---|",
    ]
    for mode, part in cases:
        r, w = per[(mode, part, "read")], per[(mode, part, "write")]
        label = {"none": "no SDK", "langgraph": "LangGraph InMemoryStore get / put"}.get(mode, f"{mode}: {part}")
        added = mode not in ("none", "langgraph")
        ar = f"{r - per[('none', 'total', 'read')]:+,.0f}" if added else ""
        aw = f"{w - per[('none', 'total', 'write')]:+,.0f}" if added else ""
        lines.append(f"| {label} | {r:,.0f} | {ar} | {w:,.0f} | {aw} |")
    return "\n".join(lines)


# -- wall clock --------------------------------------------------------------------------


def _thread_cpu() -> dict[str, tuple[float, int, int]]:
    """Per thread of this process: CPU seconds, voluntary and involuntary context switches."""
    import os
    import threading

    out: dict[str, tuple[float, int, int]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        name = names.get(tid, "other")
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
        except OSError:
            continue
        out[f"{name}[{tid}]"] = (
            (int(fields[11]) + int(fields[12])) / tick,
            int(status["voluntary_ctxt_switches"]),
            int(status["nonvoluntary_ctxt_switches"]),
        )
    return out


def wall_worker(mode: str, op: str, n: int) -> dict[str, Any]:
    """One measured process: ``n`` hot reads or writes (1,000 keys) in a
    tight loop, then ``provider.force_flush()``; and the p50 of 2,000 calls
    timed one by one. Also the garbage collector's time and each thread's CPU."""
    import gc

    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = CountingExporter()
    provider = None
    if mode != "none":
        provider = TracerProvider()
        provider.add_span_processor((BatchSpanProcessor if mode == "batch" else SimpleSpanProcessor)(exporter))
    gc_time = [0.0, 0.0]
    gc_count = [0, 0, 0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[1]
            gc_count[info["generation"]] += 1

    with tempfile.TemporaryDirectory() as root:
        mm = MemoryManager(root, namespaces=[NamespaceSpec("bench.hot", tier="hot")], tracer_provider=provider)
        keys = [f"k{i % 1000}" for i in range(n)]
        call = mm.read if op == "read" else mm.write
        args: tuple[Any, ...] = () if op == "read" else (VALUE,)
        for k in keys[:1000]:
            mm.write("bench.hot", k, VALUE)
        for k in keys[:5000]:  # warm up: specialised byte code, the drainer thread running
            call("bench.hot", k, *args)
        if provider:
            provider.force_flush()
        per: list[float] = []
        clock = time.perf_counter
        for k in keys[:2000]:
            t0 = clock()
            call("bench.hot", k, *args)
            per.append(clock() - t0)
        if provider:
            provider.force_flush()
        exporter.count = 0
        cpu0 = _thread_cpu()
        gc.callbacks.append(on_gc)
        t0 = clock()
        for k in keys:
            call("bench.hot", k, *args)
        t1 = clock()
        if provider:
            provider.force_flush()
        t2 = clock()
        gc.callbacks.remove(on_gc)
        cpu1 = _thread_cpu()
        mm.close()
    if provider:
        provider.shutdown()
    threads = {
        name: [b - a for a, b in zip(cpu0.get(name, (0.0, 0, 0)), v)] for name, v in cpu1.items()
    }
    return {
        "p50_us": statistics.median(per) * 1e6,
        "loop_us": (t1 - t0) / n * 1e6,
        "total_us": (t2 - t0) / n * 1e6,
        "gc_us": gc_time[0] / n * 1e6,
        "cpu_us": sum(v[0] for v in threads.values()) / n * 1e6,  # every thread's, the loop and the flush
        "gc_collections": gc_count,
        "threads": {k: v for k, v in threads.items() if any(v)},
        "exported": exporter.count,
    }


#: The limits on what tracing adds to an operation (SDK + batch processor).
CALLER_LIMIT_US = 2.0
TOTAL_LIMIT_US = 5.0


@dataclass
class WallResults:
    n: int
    reps: int
    load: tuple[float, float]  # 1-minute load average before and after
    got: dict[tuple[str, str], list[dict[str, Any]]]

    def stat(self, mode: str, op: str, field: str) -> tuple[float, float, float]:
        xs = [r[field] for r in self.got[(mode, op)]]
        return statistics.mean(xs), min(xs), max(xs)

    def added(self, mode: str, op: str, field: str) -> float:
        """Mean of ``field`` with the SDK minus its mean without."""
        return self.stat(mode, op, field)[0] - self.stat("none", op, field)[0]


def run_wall(n: int, reps: int) -> WallResults:
    """Each case in its own process, the cases interleaved rep by rep (drift
    hits them alike); the machine's load is kept, as it moves the figures."""
    import json
    import os
    import subprocess
    import sys

    cases = [(m, op) for op in ("read", "write") for m in ("none", "batch", "simple")]
    got: dict[tuple[str, str], list[dict[str, Any]]] = {c: [] for c in cases}
    load0 = os.getloadavg()
    for _ in range(reps):
        for mode, op in cases:
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_tracing", "--wall-worker", mode, op, str(n)],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            got[(mode, op)].append(json.loads(out.splitlines()[-1]))
    return WallResults(n, reps, (load0[0], os.getloadavg()[0]), got)


def wall_outcomes(res: WallResults) -> list[tuple[str, float, float]]:
    """``(target, measured µs, limit µs)`` for the tracing targets:
    what an SDK with a ``BatchSpanProcessor`` adds to a hot read and write,
    on the caller's path (p50 of calls timed one by one) and in total (a
    loop of N operations and the final ``force_flush``, per operation)."""
    out = []
    for op in ("read", "write"):
        out.append(
            (f"tracing, SDK + batch processor: caller's path added to a hot {op} (p50)", res.added("batch", op, "p50_us"),
             CALLER_LIMIT_US)
        )  # fmt: skip
        out.append(
            (f"tracing, SDK + batch processor: total added to a hot {op} ({res.n:,}-op loop + force_flush)",
             res.added("batch", op, "total_us"), TOTAL_LIMIT_US)
        )  # fmt: skip
    return out


def wall_table(res: WallResults, verbose: bool = False) -> str:
    import os

    n, reps, (load0, load1), got, stat = res.n, res.reps, res.load, res.got, res.stat
    cases = list(got)
    lines = [
        f"Wall clock per operation, µs (hot tier, 1,000 keys, ~206-byte value; N={n:,} ops then "
        f"provider.force_flush(); {reps} reps, each case in its own process, interleaved; "
        f"load average {load0:.2f} before, {load1:.2f} after, {os.cpu_count()} CPUs)",
        "",
        "| case | caller p50 | caller p50 added | total: mean (min-max) | total added (mean; min-max vs no-SDK mean) "
        "| CPU, all threads: mean (min) | CPU added (mean; min vs min) | of which GC | spans exported |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, op in cases:
        p50, _, _ = stat(mode, op, "p50_us")
        tot, lo, hi = stat(mode, op, "total_us")
        gcu, _, _ = stat(mode, op, "gc_us")
        b50, _, _ = stat("none", op, "p50_us")
        btot, _, _ = stat("none", op, "total_us")
        label = {"none": "no SDK", "batch": "SDK + BatchSpanProcessor", "simple": "SDK + SimpleSpanProcessor"}[mode]
        added = mode != "none"
        exported = statistics.mean(r["exported"] for r in got[(mode, op)])
        cpu, cpu_lo, _ = stat(mode, op, "cpu_us")
        bcpu, bcpu_lo, _ = stat("none", op, "cpu_us")
        lines.append(
            f"| {op}: {label} | {p50:.2f} | {f'{p50 - b50:+.2f}' if added else ''} | {tot:.2f} ({lo:.2f}-{hi:.2f}) | "
            + (f"{tot - btot:+.2f} ({lo - btot:+.2f} to {hi - btot:+.2f})" if added else "")
            + f" | {cpu:.2f} ({cpu_lo:.2f}) | "
            + (f"{cpu - bcpu:+.2f} ({cpu_lo - bcpu_lo:+.2f})" if added else "")
            + f" | {gcu:.2f} | {exported:,.0f} |"
        )
    if verbose:
        lines += ["", "Per rep: CPU seconds, voluntary / involuntary context switches of each thread; GC runs per generation"]
        for (mode, op), rs in got.items():
            for r in rs:
                lines.append(f"  {op} {mode}: total {r['total_us']:.2f} gc {r['gc_collections']} threads {r['threads']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--reps", type=int, help="repetitions (default 3; 5 with --wall)")
    ap.add_argument("--instructions", action="store_true", help="callgrind instruction counts instead of timings")
    ap.add_argument("--base-tracing", help="with --instructions: another tracing.py to load instead")
    ap.add_argument("--wall", action="store_true", help="wall clock: caller p50 and 100k-op loop + force_flush")
    ap.add_argument("--verbose", action="store_true", help="with --wall: each rep's threads and GC runs")
    args = ap.parse_args(argv)
    if args.wall:
        text = wall_table(run_wall(args.n, args.reps or 5), args.verbose)
        print(text)
        return text
    if args.instructions:
        text = instructions_table(args.n if args.n != 100_000 else 5_000, args.base_tracing)
        print(text)
        return text
    modes = ["no-sdk", "sdk-batch", "sdk-batch-deferred"]
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    reps = args.reps or 3
    for _ in range(reps):
        for m in modes:  # interleaved, so drift hits every mode alike
            results[m].append(run_mode(m, args.n))
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in results.items()}
    base = med["no-sdk"]
    lines = [
        f"Tracing overhead per operation (hot tier; N={args.n:,} ops per op kind, median of {reps} reps; µs)",
        "",
        "| mode | write: caller | write: finishing | write: added vs no-sdk | read: caller | read: finishing | read: added vs no-sdk | spans exported / created |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in modes:
        r = med[m]
        added_w = r["write_caller_us"] + r["write_finish_us"] - base["write_caller_us"] - base["write_finish_us"]
        added_r = r["read_caller_us"] + r["read_finish_us"] - base["read_caller_us"] - base["read_finish_us"]
        created = 0 if m == "no-sdk" else 2 * args.n
        lines.append(
            f"| {m} | {r['write_caller_us']:.2f} | {r['write_finish_us']:.2f} | {added_w:+.2f} | "
            f"{r['read_caller_us']:.2f} | {r['read_finish_us']:.2f} | {added_r:+.2f} | {int(r['exported']):,} / {created:,} |"
        )
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 1 and sys.argv[1] == "--wall-worker":
        import json

        print(json.dumps(wall_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, op, n, part = sys.argv[2:6]
        count_worker(mode, op, int(n), part == "caller", sys.argv[6] if len(sys.argv) > 6 else None)
    else:
        main()
