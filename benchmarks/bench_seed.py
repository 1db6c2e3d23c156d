"""The hot path where HRMs live: seed namespaces, tracing set up the usual way.

Every row is an operation on a seed namespace, with the codec it declares:
``focus.fast`` and ``altitude.session`` (hot tier), ``altitude.patterns`` and
``reasoning.strategies`` (warm tier, ``durability="flush"``); ``bench.hot``
(a hot namespace without a codec) is the one extra row. Each is measured

- *untraced*: the OpenTelemetry API only (no SDK configured), and
- *traced*: the standard deployment, the SDK set as the **global** provider
  (``trace.set_tracer_provider(TracerProvider())`` with a
  ``BatchSpanProcessor`` to an exporter that discards what it is given),
  the manager built without ``tracer_provider=``,

as a tight loop of N operations of a ~200-byte dict followed by
``provider.force_flush()`` (so every span is built, sampled and handed to
the exporter inside the time), wall clock per operation. The peers
(LangGraph ``InMemoryStore`` get/put for the hot tier, ``diskcache`` get/set
for the warm one) run in the same process, right before the rows compared
with them, so a ratio is taken under one load. A provider can be set
globally once per process: each rep runs one process per mode, the modes
interleaved rep by rep, and *added* (traced minus untraced) compares
processes run back to back.

Values: ``make_record`` (the benchmarks' ~207-byte record, which no seed
codec shortens: its compact form is itself) and, on the ``coded`` rows, a
~230-byte ``focus`` interaction record the codec shortens (six aliased
fields, three coded stances): the write then stores a different compact
form and its span carries a non-zero ``hrm.memory.tokens_saved``.

    python -m benchmarks.bench_seed [--n 20000] [--reps 5]
    python -m benchmarks.bench_seed --instructions [--n 3000]   # callgrind, per op, every thread
    python -m benchmarks.bench_seed --instructions --inline [--n 2000]

``--instructions`` counts instructions per operation under callgrind
(``(instructions with N ops - with 0) / N``, all threads, the final flush
included): the figure to A/B changes with on a shared machine. Traced, the
count still moves between runs by a few percent: under callgrind the
caller runs ~50x slower, so which thread finishes a batch of spans, and
when, depends on timing. ``--inline`` takes that out: the traced mode is
then ``traced-inline``, the SDK provider set globally with a
``SimpleSpanProcessor`` to the same null exporter, and every batch of
deferred spans finished on the caller's thread (the drainer's timer and
its slow-batch switch set out of reach: ``Recorder.TICK``, ``Recorder.SLOW``,
a seam listed in docs/architecture.md). What tracing adds to an operation
is then a deterministic count, to compare two revisions with (run this
file against each checkout: it imports only ``hrm_memory`` and
``benchmarks.harness``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness import CountingExporter, OtherLoad, callgrind, make_record

HOT = ("focus.fast", "altitude.session")
WARM = ("altitude.patterns", "reasoning.strategies")
HOT_KEYS = 2_000  # hot writes and reads cycle over these keys (the hot namespaces cap at 10,000)

#: A focus interaction record (the legacy FastMemory's signals): the focus
#: codec aliases six of its fields and codes its three stances.
CODED = {
    "user_input_length": 142,
    "response_length": 610,
    "altitude_used": "L2",
    "stance_used": "sensemaking",
    "had_commitment": True,
    "from_stance": "discovery",
    "to_stance": "execution",
    "note": "asked to split the patent filing into three steps before friday",
    "turn": 17,
}

#: (row id, label, op, namespace or peer, value kind, peer row id for the ratio)
ROWS: list[tuple[str, str, str, str, str, str | None]] = [
    ("lg.put", "LangGraph InMemoryStore: put", "write", "langgraph", "record", None),
    ("focus.fast.write", "write `focus.fast` (hot)", "write", "focus.fast", "record", "lg.put"),
    ("altitude.session.write", "write `altitude.session` (hot)", "write", "altitude.session", "record", "lg.put"),
    ("focus.fast.write.coded", "write `focus.fast` (hot), coded value", "write", "focus.fast", "coded", "lg.put"),
    ("bench.hot.write", "write `bench.hot` (hot, no codec)", "write", "bench.hot", "record", "lg.put"),
    ("lg.get", "LangGraph InMemoryStore: get", "read", "langgraph", "record", None),
    ("focus.fast.read", "read `focus.fast`", "read", "focus.fast", "record", "lg.get"),
    ("altitude.session.read", "read `altitude.session`", "read", "altitude.session", "record", "lg.get"),
    ("focus.fast.read.coded", "read `focus.fast`, coded value", "read", "focus.fast", "coded", "lg.get"),
    ("bench.hot.read", "read `bench.hot` (hot, no codec)", "read", "bench.hot", "record", "lg.get"),
    ("dc.set", "diskcache Cache: set", "write", "diskcache", "record", None),
    ("altitude.patterns.write", "write `altitude.patterns` (warm, flush)", "write", "altitude.patterns", "record",
     "dc.set"),
    ("reasoning.strategies.write", "write `reasoning.strategies` (warm, flush)", "write", "reasoning.strategies",
     "record", "dc.set"),
    ("dc.get", "diskcache Cache: get (after reopen)", "read", "diskcache", "record", None),
    ("altitude.patterns.read", "read `altitude.patterns` (after reopen)", "read", "altitude.patterns", "record",
     "dc.get"),
    ("reasoning.strategies.read", "read `reasoning.strategies` (after reopen)", "read", "reasoning.strategies",
     "record", "dc.get"),
]  # fmt: skip

#: Instruction-count rows only (``--instructions``): what the SDK does per
#: span whoever makes it, hrm-memory's part excluded.
FLOOR_ROWS: list[tuple[str, str, str, str, str, str | None]] = [
    ("sdk.floor", "SDK floor: a span id, a ReadableSpan, BatchSpanProcessor.on_end, export", "write", "sdk",
     "record", None),
    ("bare.span", "bare SDK span: `start_as_current_span` entered and left", "write", "bare", "record", None),
]  # fmt: skip

#: The baseline: the same rows measured before the seed-namespace hot-path work
#: (one run, 20,000 ops, CPython 3.11), in µs: untraced, traced.
BASELINE_FIGURES = {
    "focus.fast.write": (11.1, 67.8),
    "focus.fast.read": (2.7, 7.4),
    "altitude.session.write": (9.2, 56.7),
    "altitude.patterns.write": (26.7, 77.3),
    "altitude.patterns.read": (9.4, 13.7),
    "lg.put": (4.6, 4.6),
    "lg.get": (1.3, 1.3),
}

#: Throughput targets: (row, peer row, ratio required, mode)
RATIO_TARGETS = [
    ("focus.fast.write", "lg.put", 1.0, "untraced"),
    ("focus.fast.read", "lg.get", 1.0, "untraced"),
    ("altitude.session.write", "lg.put", 1.0, "untraced"),
    ("altitude.session.read", "lg.get", 1.0, "untraced"),
    ("focus.fast.write", "lg.put", 0.5, "traced"),
    ("focus.fast.read", "lg.get", 0.5, "traced"),
    ("altitude.session.write", "lg.put", 0.5, "traced"),
    ("altitude.session.read", "lg.get", 0.5, "traced"),
    ("altitude.patterns.write", "dc.set", 2.0, "traced"),
    ("altitude.patterns.read", "dc.get", 1.0, "traced"),
]
ADDED_LIMIT_US = 5.0


def _value(kind: str, i: int) -> dict[str, Any]:
    if kind == "record":
        return make_record(i)
    return {**CODED, "turn": i, "response_length": 600 + i % 97}


def install_global_provider(inline: bool = False) -> tuple[Any, CountingExporter]:
    """The standard set-up: an SDK provider set globally, a batch processor, a
    (null) exporter. ``inline``: a simple processor instead (spans exported on
    the thread that finishes them)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    exporter = CountingExporter()
    provider = TracerProvider()
    processor = SimpleSpanProcessor if inline else BatchSpanProcessor
    provider.add_span_processor(processor(exporter))  # type: ignore[arg-type]
    trace.set_tracer_provider(provider)
    return provider, exporter


@dataclass
class _Ctx:
    n: int
    root: Path
    flush: Callable[[], object]
    rows: list[str]
    only_ops: int | None = None  # callgrind: this many timed ops (0: none)


def _manager(path: Path) -> Any:
    from hrm_memory import MemoryManager, NamespaceSpec

    mm = MemoryManager(path, durability="flush")
    if "bench.hot" not in mm.namespaces():
        mm.declare(NamespaceSpec("bench.hot", tier="hot"))
    return mm


_TIMED = [0]


def _timed(fn: Callable[..., object], calls: list[tuple[Any, ...]], flush: Callable[[], object]) -> float:
    """Microseconds per call of a tight loop over ``calls`` and the final flush.

    A full collection first, outside the time: the garbage of the rows
    before (a closed manager, its records) is theirs. A full collection
    here walks the whole heap (~83,000 objects with the peers and the SDK
    loaded: ~28 ms, 1.4 µs an operation of a 20,000-op loop), and without
    this one it fell in whichever row the earlier ones had brought to the
    threshold: with the rows swapped, the second hot-write row of a traced
    process was the slow one, whichever namespace it wrote. Collections the
    loop's own allocations cause stay in its time."""
    calls = calls[: _TIMED[0]]
    gc.collect()
    clock = time.perf_counter
    t0 = clock()
    for args in calls:
        fn(*args)
    flush()
    return (clock() - t0) / max(1, len(calls)) * 1e6


def run_row(row: str, ctx: _Ctx) -> float:
    _, _, op, where, kind, _ = next(r for r in ROWS + FLOOR_ROWS if r[0] == row)
    n = ctx.n
    timed = n if ctx.only_ops is None else ctx.only_ops  # callgrind: 0 or n timed ops, the rest alike
    warm = where in WARM or where == "diskcache"
    if warm:
        keys = [f"rec-{i:08d}" for i in range(n)]
        random.Random(2).shuffle(keys)
        values = {k: _value(kind, i) for i, k in enumerate(keys)}
    else:
        keys = [f"k{i % HOT_KEYS:05d}" for i in range(n)]
        values = {k: _value(kind, i) for i, k in enumerate(keys[:HOT_KEYS])}
    _TIMED[0] = timed
    warmup = [f"w{i:05d}" for i in range(500)]
    path = ctx.root / row
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    try:
        if where == "sdk":
            return _sdk_floor(n, ctx.flush)
        if where == "bare":
            return _bare_span(n, ctx.flush)
        if where == "langgraph":
            from langgraph.store.memory import InMemoryStore

            store = InMemoryStore()
            ns = ("bench", "hot")
            for k, v in values.items():
                store.put(ns, k, v)
            if op == "write":
                return _timed(store.put, [(ns, k, values[k]) for k in keys], lambda: None)
            return _timed(store.get, [(ns, k) for k in keys], lambda: None)
        if where == "diskcache":
            import diskcache
            import orjson

            cache = diskcache.Cache(str(path))
            try:
                if op == "write":
                    for k in warmup:
                        cache.set(k, orjson.dumps(values[keys[0]]))
                    dumps = orjson.dumps
                    return _timed(lambda k, v: cache.set(k, dumps(v)), [(k, values[k]) for k in keys], lambda: None)
                for k in keys:
                    cache.set(k, orjson.dumps(values[k]))
                cache.close()
                cache = diskcache.Cache(str(path))
                loads = orjson.loads
                return _timed(lambda k: loads(cache.get(k)), [(k,) for k in keys], lambda: None)
            finally:
                cache.close()
        mm = _manager(path)
        try:
            if op == "write":
                for k in warmup[: 100 if not warm else 500]:
                    mm.write(where, k, values[keys[0]])
                ctx.flush()
                return _timed(mm.write, [(where, k, values[k]) for k in keys], ctx.flush)
            for k, v in values.items():
                mm.write(where, k, v)
            if warm:
                mm.close()
                mm = _manager(path)
            ctx.flush()
            return _timed(mm.read, [(where, k) for k in keys], ctx.flush)
        finally:
            mm.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sdk_floor(n: int, flush: Callable[[], object]) -> float:
    """The SDK's own per-span work, as little as a span needs: a span id, a
    ``ReadableSpan`` (the SDK's constructor) and the global provider's
    processors' ``on_end`` (the batch processor's queue and, at the flush,
    the export): what any instrumentation pays per span."""
    import random

    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan

    provider: Any = trace.get_tracer_provider()
    if not hasattr(provider, "_active_span_processor"):  # untraced: no SDK, nothing to floor
        return _timed(lambda i: None, [(i,) for i in range(n)], flush)
    on_end = provider._active_span_processor.on_end
    resource = provider.resource  # (without it, each ReadableSpan would build a default Resource)
    parent = trace.SpanContext(1, 2, False, trace.TraceFlags(1))
    bits = random.getrandbits
    attrs = {"db.system.name": "hrm-memory", "db.operation.name": "write", "db.collection.name": "focus.fast"}

    def one(i: int) -> None:
        ctx = trace.SpanContext(parent.trace_id, bits(64), False, parent.trace_flags)
        on_end(ReadableSpan(name="memory.write", context=ctx, parent=parent, resource=resource, attributes=attrs,
                            start_time=i, end_time=i + 1))  # fmt: skip

    return _timed(one, [(i,) for i in range(n)], flush)


def _bare_span(n: int, flush: Callable[[], object]) -> float:
    """What any instrumented call pays for its span through the public API:
    ``tracer.start_as_current_span`` entered and left, through the global
    provider (untraced: the API's no-op tracer), the final flush included.
    The unit what tracing adds to an operation is compared with."""
    from opentelemetry import trace

    start = trace.get_tracer("bench.bare").start_as_current_span

    def one() -> None:
        with start("memory.write"):
            pass

    return _timed(one, [()] * n, flush)


def worker(mode: str, n: int, rows: list[str], only_ops: int | None = None) -> dict[str, Any]:
    flush: Callable[[], object] = lambda: None  # noqa: E731
    exporter = None
    if mode == "traced-inline" or os.environ.get("BENCH_SEED_INLINE"):
        # Every batch finished on the caller's thread: no slow-batch switch
        # to the drainer thread, and its timer out of reach.
        from hrm_memory.tracing.sdk import Recorder

        Recorder.SLOW = float("inf")
        if mode == "traced-inline":
            Recorder.TICK = 3600.0
    if mode in ("traced", "traced-inline"):
        provider, exporter = install_global_provider(inline=mode == "traced-inline")
        flush = provider.force_flush
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        ctx = _Ctx(n, Path(tmp), flush, rows, only_ops)
        for row in rows:
            out[row] = run_row(row, ctx)
    if exporter is not None:
        out["exported"] = exporter.count
    return out


# -- the parent: reps, processes, table -------------------------------------------------------


@dataclass
class SeedResults:
    n: int
    reps: int
    got: dict[str, list[dict[str, Any]]]  # mode -> per rep: row -> µs/op
    load: float  # share of the CPUs other processes used meanwhile
    loadavg: tuple[float, float]

    def us(self, mode: str, row: str) -> list[float]:
        return [r[row] for r in self.got[mode]]

    def mean(self, mode: str, row: str) -> float:
        return statistics.mean(self.us(mode, row))

    def added(self, row: str) -> tuple[float, float, float]:
        """Traced minus untraced: mean, and the min-max over reps paired in order."""
        pairs = [t - u for t, u in zip(self.us("traced", row), self.us("untraced", row))]
        return statistics.mean(pairs), min(pairs), max(pairs)

    def ratio(self, row: str, peer: str, mode: str) -> tuple[float, float, float]:
        """ops/s of ``row`` over ops/s of ``peer`` in the same process: median, min, max over reps."""
        rs = [r[peer] / r[row] for r in self.got[mode]]
        return statistics.median(rs), min(rs), max(rs)


def run(n: int, reps: int, rows: list[str] | None = None) -> SeedResults:
    rows = rows or [r[0] for r in ROWS]
    got: dict[str, list[dict[str, Any]]] = {"untraced": [], "traced": []}
    load = OtherLoad()
    la0 = os.getloadavg()[0]
    for _ in range(reps):
        for mode in ("untraced", "traced"):
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_seed", "--worker", mode, str(n), ",".join(rows)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            got[mode].append(json.loads(done.stdout.splitlines()[-1]))
    return SeedResults(n, reps, got, load.share(), (la0, os.getloadavg()[0]))


def _f(x: float) -> str:
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def table(res: SeedResults) -> str:
    rows = [r for r in ROWS if r[0] in res.got["untraced"][0]]
    lines = [
        f"µs per operation: a loop of {res.n:,} ops then `force_flush()`; mean over {res.reps} reps "
        f"(min-max); other processes used {res.load:.0%} of the CPUs meanwhile (load average "
        f"{res.loadavg[0]:.1f} before, {res.loadavg[1]:.1f} after, {os.cpu_count()} CPUs).",
        "",
        "| op | untraced | traced (global SDK, batch processor) | added by tracing: mean (min to max) "
        "| ops/s vs peer, untraced | ops/s vs peer, traced | baseline (before): untraced / traced |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, label, _op, where, _kind, peer in rows:
        u = res.us("untraced", row)
        t = res.us("traced", row)
        is_peer = where in ("langgraph", "diskcache")
        before = BASELINE_FIGURES.get(row)
        if is_peer:
            cells = [f"{_f(statistics.mean(u + t))} ({_f(min(u + t))}-{_f(max(u + t))})", "(same)", "", "", ""]
        else:
            a, lo, hi = res.added(row)
            cells = [
                f"{_f(statistics.mean(u))} ({_f(min(u))}-{_f(max(u))})",
                f"{_f(statistics.mean(t))} ({_f(min(t))}-{_f(max(t))})",
                f"{a:+.2f} ({lo:+.2f} to {hi:+.2f})",
            ]
            for mode in ("untraced", "traced"):
                if peer is None:
                    cells.append("")
                else:
                    m, rlo, rhi = res.ratio(row, peer, mode)
                    cells.append(f"{m:.2f}x ({rlo:.2f}-{rhi:.2f})")
            cells = [cells[0], cells[1], cells[2], cells[3], cells[4]]
        prev = "" if before is None else (f"{before[0]}" if is_peer else f"{before[0]} / {before[1]}")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {prev} |")
    return "\n".join(lines)


def outcomes(res: SeedResults) -> list[tuple[str, str, str, bool]]:
    """(target, required, measured, met) for the seed-namespace targets: tracing
    added, and throughput against the peers untraced and traced."""
    out = []
    labels = {r[0]: r[1] for r in ROWS}
    for row, label, _op, where, _kind, _peer in ROWS:
        if where in ("langgraph", "diskcache", "bench.hot") or row.endswith(".coded") or row not in res.got["traced"][0]:
            continue
        a, lo, hi = res.added(row)
        out.append((f"tracing (global SDK + batch processor) added to {label}, loop + flush",
                    f"< {ADDED_LIMIT_US:g} µs", f"{a:+.2f} µs ({lo:+.2f} to {hi:+.2f})", a < ADDED_LIMIT_US))  # fmt: skip
    for row, peer, need, mode in RATIO_TARGETS:
        if row not in res.got[mode][0]:
            continue
        m, lo, hi = res.ratio(row, peer, mode)
        out.append((f"{labels[row]}, {mode}, >= {need:g}x {labels[peer].split(':')[0]} {labels[peer].split(': ')[1]}",
                    f">= {need:g}x", f"{m:.2f}x ({lo:.2f}-{hi:.2f})", m >= need))  # fmt: skip
    return out


# -- instruction counts ---------------------------------------------------------------------


def _callgrind(mode: str, row: str, n: int, ops: int) -> int:
    return callgrind([sys.executable, "-m", "benchmarks.bench_seed", "--worker", mode, str(n), row, str(ops)])


def instructions(n: int, rows: list[str], inline: bool = False) -> str:
    from concurrent.futures import ThreadPoolExecutor

    traced = "traced-inline" if inline else "traced"
    with ThreadPoolExecutor(2) as pool:
        jobs = {
            (mode, row, ops): pool.submit(_callgrind, mode, row, n, ops)
            for row in rows
            for mode in ("untraced", traced)
            for ops in (0, n)
        }
        per = {(m, r): (jobs[(m, r, n)].result() - jobs[(m, r, 0)].result()) / n for m, r, o in jobs if o == n}
    how = "simple processor, every batch on the caller's thread" if inline else "batch"
    lines = [
        f"Instructions per operation (callgrind, every thread, the final flush included; N={n:,})",
        "",
        f"| op | untraced | traced (global SDK, {how}) | added |",
        "|---|---|---|---|",
    ]
    labels = {r[0]: r[1] for r in ROWS + FLOOR_ROWS}
    for row in rows:
        u, t = per[("untraced", row)], per[(traced, row)]
        lines.append(f"| {labels[row]} | {u:,.0f} | {t:,.0f} | {t - u:+,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rows", help="comma-separated row ids (default: all)")
    ap.add_argument("--instructions", action="store_true", help="callgrind instruction counts instead of timings")
    ap.add_argument("--inline", action="store_true",
                    help="with --instructions: spans finished on the caller's thread (a deterministic count)")
    args = ap.parse_args(argv)
    rows = args.rows.split(",") if args.rows else [r[0] for r in ROWS]
    if args.instructions:
        print(instructions(args.n if args.n != 20_000 else 3_000, rows, args.inline))
        return 0
    res = run(args.n, args.reps, rows)
    print(table(res))
    print()
    for text, need, got, met in outcomes(res):
        print(f"- {text}: {got} (required {need}): {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, n_, rows_ = sys.argv[2:5]
        ops = int(sys.argv[5]) if len(sys.argv) > 5 else None
        print(json.dumps(worker(mode, int(n_), rows_.split(","), ops)))
    else:
        sys.exit(main())
