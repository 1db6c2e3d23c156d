"""A/B: this checkout against another revision, per operation, in one run.

    python -m benchmarks.bench_ab --base-python /path/to/other/checkout/.venv/bin/python [--rounds 4]

Each round runs the same worker (this file, ``--worker``) once under each
interpreter, alternating which goes first, so both revisions see the same
machine state. The other checkout's interpreter must import its own
revision (its editable install); the worker imports ``hrm_memory`` and falls
back to the round-1 name ``shared.memory``. The noise is the spread of a
revision against itself across rounds: for each operation, the largest
|round / median - 1| of either revision.

Each figure is the best of 5 passes in a worker; the table shows the median
over rounds. Operations: hot write and read, warm write (``flush``) and read (cached),
update, a 100-key query, each with tracing off (no SDK) and with the
OpenTelemetry SDK and a batch processor (spans exported to nowhere).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

N = 20_000
VALUE = {"title": "timeboxing", "score": 0.8, "tags": ["a", "b"], "note": "x" * 120}


def _rate(fn: Callable[[int], Any], n: int, reps: int = 5) -> float:
    """Ops per second: the best of ``reps`` passes (the least disturbed one)."""
    best = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        best = max(best, n / (time.perf_counter() - start))
    return best


def worker(traced: bool) -> dict[str, float]:
    try:
        from hrm_memory import MemoryManager, NamespaceSpec
    except ImportError:  # the round-1 layout
        from shared.memory import MemoryManager, NamespaceSpec  # type: ignore[no-redef]
    provider = None
    if traced:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class Nowhere(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Nowhere(), max_queue_size=1 << 20))
    specs = [NamespaceSpec("bench.hot", tier="hot"), NamespaceSpec("bench.warm")]
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with MemoryManager(tmp, durability="flush", namespaces=specs, tracer_provider=provider) as mm:
            keys = [f"k{i % 1000}" for i in range(N)]
            out["hot write"] = _rate(lambda i: mm.write("bench.hot", keys[i], VALUE), N)
            out["hot read"] = _rate(lambda i: mm.read("bench.hot", keys[i]), N)
            out["warm write (flush)"] = _rate(lambda i: mm.write("bench.warm", keys[i], VALUE), N // 4)
            out["warm read"] = _rate(lambda i: mm.read("bench.warm", keys[i]), N)
            out["update"] = _rate(lambda i: mm.update("bench.warm", "n", lambda v: (v or 0) + 1), N // 4)
            for i in range(100):
                mm.write("bench.warm", f"q{i}", VALUE)
            out["query 100 keys"] = _rate(lambda i: mm.query("bench.warm", "q*"), 200)
    if provider is not None:
        provider.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-python", required=True, help="interpreter of the other checkout")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    here = Path(__file__).resolve()
    pythons = {"new": sys.executable, "base": args.base_python}
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for r in range(args.rounds):
        order = ["new", "base"] if r % 2 == 0 else ["base", "new"]
        for name in order:
            for traced in (False, True):
                done = subprocess.run(
                    [pythons[name], str(here), "--worker", "traced" if traced else "off"],
                    check=True, capture_output=True, text=True, cwd=str(here.parent.parent if name == "new" else Path(args.base_python).parent.parent.parent),
                )
                runs.setdefault((name, "sdk" if traced else "no sdk"), []).append(json.loads(done.stdout))
    rows = []
    for mode in ("no sdk", "sdk"):
        for op in runs[("new", mode)][0]:
            new = [r[op] for r in runs[("new", mode)]]
            base = [r[op] for r in runs[("base", mode)]]
            mn, mb = statistics.median(new), statistics.median(base)
            noise = max(abs(x / m - 1) for xs, m in ((new, mn), (base, mb)) for x in xs)
            rows.append({"mode": mode, "op": op, "base": mb, "new": mn, "ratio": mn / mb, "noise": noise})
    print("| tracing | operation | base ops/s | new ops/s | new / base | noise (max spread) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['mode']} | {row['op']} | {row['base']:,.0f} | {row['new']:,.0f} | "
            f"{row['ratio']:.2f}x | ±{row['noise'] * 100:.0f}% |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2] == "traced")))
    else:
        main()
