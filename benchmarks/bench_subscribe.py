"""What a cross-process subscription costs idle, and how soon it hears (file backend).

(a) Idle: a process opens a store, takes 10 cross-process subscriptions and
    does nothing; its own CPU time (every thread: getrusage RUSAGE_SELF) over
    ``--idle`` seconds, as a percentage of one CPU.
(b) Latency: a writer process writes ``--n`` records, one every ``--gap`` ms,
    and notes the time each ``write()`` returned; a subscriber process notes
    when each callback ran. Latency = callback time - return time (one clock,
    CLOCK_REALTIME, same host). It can be slightly negative: the change log
    entry is appended under the write's lock, before ``write()`` returns.

Both run with file-system notifications (the default) and with the fallback
forced (``notifications=False``: polling every 5 ms). ``--python`` runs the
processes measured with another interpreter, e.g. a checkout of an older
commit (one without ``notifications=`` is measured as it is: it polls).

(c) With ``--append``: what logging hot changes would cost, a hot write
    beside one change-log append (medians of interleaved rounds).

usage: python -m benchmarks.bench_subscribe [--idle 30] [--n 1000] [--gap 2]
       [--python PATH] [--modes notified,polling] | --append
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The measured processes. argv: root, mode ("notified", "polling" or "default":
# pass nothing, for a commit without the parameter), then their own.
_OPEN = """
import sys, time, json, os, resource, threading
from hrm_memory import MemoryManager
root, mode = sys.argv[1], sys.argv[2]
kw = {} if mode == "default" else {"notifications": mode == "notified"}
"""

IDLE = _OPEN + """
seconds = float(sys.argv[3])
globs = ["focus.*", "altitude.*", "reasoning.*", "learning.*", "shared.*",
         "focus.slow", "focus.lanes", "altitude.patterns", "shared.people", "*"]
with MemoryManager(root, **kw) as mm:
    subs = [mm.subscribe(g, lambda e: None) for g in globs]
    time.sleep(1.0)  # start-up done
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    time.sleep(seconds)
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"cpu_s": cpu, "wall_s": t1 - t0, "threads": threading.active_count()}))
    for s in subs:
        s.cancel()
"""

SUBSCRIBER = _OPEN + """
n, timeout = int(sys.argv[3]), float(sys.argv[4])
arrivals = {}
done = threading.Event()
def on_event(e):
    arrivals[e.key] = time.time_ns()
    if len(arrivals) > n:  # the writer's warm-up write, then n
        done.set()
with MemoryManager(root, durability="flush", **kw) as mm:
    with mm.subscribe("focus.slow", on_event):
        print("ready", flush=True)
        done.wait(timeout)
print(json.dumps(arrivals))
"""

WRITER = """
import sys, time, json
from hrm_memory import MemoryManager
root, n, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) / 1000
returned = {}
with MemoryManager(root, durability="flush") as mm:
    mm.write("focus.slow", "warm-up", 0)
    for i in range(n):
        key = f"k{i}"
        mm.write("focus.slow", key, i)
        returned[key] = time.time_ns()
        time.sleep(gap)
print(json.dumps(returned))
"""


def _quiet(python: str, code: str, *args: str, timeout: float) -> str:
    out = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return out.stdout


def idle(python: str, mode: str, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as root:
        got = json.loads(_quiet(python, IDLE, root, mode, str(seconds), timeout=seconds + 60))
    got["cpu_pct"] = 100 * got["cpu_s"] / got["wall_s"]
    return got  # type: ignore[no-any-return]


def latency(python: str, mode: str, n: int, gap: float) -> list[float]:
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as root:
        sub = subprocess.Popen(
            [python, "-c", SUBSCRIBER, root, mode, str(n), "60"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert sub.stdout is not None
            if sub.stdout.readline().strip() != "ready":
                raise RuntimeError("the subscriber did not start")
            returned = json.loads(_quiet(python, WRITER, root, str(n), str(gap), timeout=120))
            arrivals = json.loads(sub.communicate(timeout=90)[0])
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.wait()
    missing = sorted(set(returned) - set(arrivals))
    if missing:
        raise RuntimeError(f"{len(missing)} of {n} events never arrived (first: {missing[:3]})")
    return sorted((arrivals[k] - returned[k]) / 1e6 for k in returned)


def hot_write_vs_log_append(n: int = 20_000, rounds: int = 5) -> tuple[float, float]:
    """Median us per op over interleaved rounds, in this process: a hot
    write (``altitude.session``, untraced) and one change-log append, what
    logging every hot change would add to it."""
    from hrm_memory import MemoryManager
    from hrm_memory.storage.file.changes import FileChangeLog

    hot: list[float] = []
    append: list[float] = []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as root:
        log = FileChangeLog(Path(root) / "log")
        with MemoryManager(Path(root) / "store", durability="flush") as mm:
            for _ in range(rounds):
                t = time.perf_counter()
                for i in range(n):
                    mm.write("altitude.session", f"k{i % 100}", {"turn": i})
                hot.append((time.perf_counter() - t) / n * 1e6)
                t = time.perf_counter()
                for i in range(n):
                    log.append("write", "altitude.session", f"k{i % 100}", i, "0" * 32)
                append.append((time.perf_counter() - t) / n * 1e6)
        log.close()
    return statistics.median(hot), statistics.median(append)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=float, default=30.0, help="seconds of idle measurement per mode")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--gap", type=float, default=2.0, help="ms between writes")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--modes", default="notified,polling")
    ap.add_argument("--append", action="store_true", help="only: a hot write beside a change-log append")
    args = ap.parse_args(argv)
    if args.append:
        hot, append = hot_write_vs_log_append()
        text = f"hot write {hot:.2f} us, change-log append {append:.2f} us ({append / hot:.2f}x the write)"
        print(text)
        return text
    load = os.getloadavg()
    lines = [
        f"python: {args.python}; load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        "",
        f"| mode | idle CPU, 10 subscriptions, {args.idle:g} s | threads | latency p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in args.modes.split(","):
        quiet = idle(args.python, mode, args.idle)
        lat = latency(args.python, mode, args.n, args.gap)
        q = statistics.quantiles(lat, n=100)
        lines.append(
            f"| {mode} | {quiet['cpu_pct']:.3f}% ({quiet['cpu_s'] * 1000:.0f} ms CPU) | {quiet['threads']:.0f} | "
            f"{q[49]:.3f} | {q[89]:.3f} | {q[98]:.3f} | {lat[-1]:.3f} |"
        )
        print(lines[-1], flush=True)
    load = os.getloadavg()
    lines.append("")
    lines.append(f"load average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
