"""Tracing overhead per operation, three modes in one run (issue 4).

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
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from hrm_memory import MemoryManager, NamespaceSpec


class CountingExporter(SpanExporter):
    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


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


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    modes = ["no-sdk", "sdk-batch", "sdk-batch-deferred"]
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.reps):
        for m in modes:  # interleaved, so drift hits every mode alike
            results[m].append(run_mode(m, args.n))
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in results.items()}
    base = med["no-sdk"]
    lines = [
        f"Tracing overhead per operation (hot tier; N={args.n:,} ops per op kind, median of {args.reps} reps; µs)",
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
    main()
