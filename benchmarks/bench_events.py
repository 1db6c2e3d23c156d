"""Cross-process delivery latency of subscriptions.

A writer process writes N records (paced, one every ``--gap`` ms) each
carrying its send time; this process subscribes (``remote=True``) and
stamps each event on arrival. Latency = arrival - send, same clock.

usage: python -m benchmarks.bench_events [--n 2000] [--gap 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hrm_memory import Event, MemoryManager, NamespaceSpec

WRITER = """
import sys, time
from hrm_memory import MemoryManager, NamespaceSpec
root, n, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) / 1000
with MemoryManager(root, durability=sys.argv[4], namespaces=[NamespaceSpec("lat.data")]) as mm:
    time.sleep(0.3)
    for i in range(n):
        mm.write("lat.data", f"k{i}", {"sent": time.time_ns()})
        time.sleep(gap)
"""


def measure(n: int, gap: float, durability: str, poll: float) -> list[float]:
    arrivals: dict[str, int] = {}
    done = threading.Event()

    def on_event(e: Event) -> None:
        arrivals[e.key] = time.time_ns()
        if len(arrivals) == n:
            done.set()

    with tempfile.TemporaryDirectory(dir=Path.cwd()) as root:
        with MemoryManager(root, namespaces=[NamespaceSpec("lat.data")], poll_interval=poll) as mm:
            with mm.subscribe("lat.*", on_event):
                proc = subprocess.Popen([sys.executable, "-c", WRITER, root, str(n), str(gap), durability])
                done.wait(timeout=120)
                proc.wait()
            sent = {r.key: r.value["sent"] for r in mm.query("lat.data")}
    return [(arrivals[k] - sent[k]) / 1e6 for k in arrivals]


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--gap", type=float, default=1.0, help="ms between writes")
    args = ap.parse_args(argv)
    lines = [
        f"Cross-process subscription latency (writer process -> subscriber process, N={args.n:,} writes, "
        f"one every {args.gap} ms; ms)",
        "",
        "| writer durability | subscriber poll interval | received | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for durability, poll in (("flush", 0.005), ("fsync", 0.005), ("flush", 0.001)):
        lat = sorted(measure(args.n, args.gap, durability, poll))
        q = statistics.quantiles(lat, n=100)
        lines.append(
            f"| {durability} | {poll * 1000:.0f} ms | {len(lat):,} / {args.n:,} | {q[49]:.2f} | {q[89]:.2f} | "
            f"{q[98]:.2f} | {lat[-1]:.2f} |"
        )
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
