"""Shared pieces of the benchmarks: the record set, one timing loop, statistics,
machine description and markdown tables."""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BENCH_DIR = REPO_ROOT / "bench-data"
N_NAMESPACES = 5

# -- the records ---------------------------------------------------------------

_AGENTS = ("reasoning", "focus", "altitude", "learning")
_KINDS = ("observation", "plan", "reflection", "tool_call", "summary")
_WORDS = (
    "deadline", "focus", "meeting", "draft", "review", "inbox", "budget", "call",
    "report", "sprint", "design", "email", "ticket", "notes", "lunch", "retro",
)  # fmt: skip


def make_record(i: int) -> dict[str, Any]:
    """A JSON-like record of about 207 bytes (as orjson), determined by ``i``."""
    h = (i * 2654435761) & 0xFFFFFFFF
    words = [_WORDS[(h >> s) & 15] for s in range(0, 30, 3)]
    return {
        "id": i,
        "agent": _AGENTS[h & 3],
        "kind": _KINDS[(h >> 2) % len(_KINDS)],
        "text": " ".join(words),
        "score": (h % 100_000) / 100_000,
        "step": h % 10_000,
        "tags": words[:3],
        "ts": 1_700_000_000 + i / 1000,
    }


def make_key(i: int) -> str:
    return f"rec-{i:08d}"


@dataclass(frozen=True)
class Dataset:
    """``n`` records spread round-robin over ``N_NAMESPACES`` namespaces;
    ``order`` is a fixed shuffle of their indices (writes and reads use it)."""

    namespaces: list[int]
    keys: list[str]
    values: list[dict[str, Any]]
    order: list[int]

    @classmethod
    def build(cls, n: int, *, start: int = 0, seed: int = 42) -> Dataset:
        ids = range(start, start + n)
        order = list(range(n))
        random.Random(seed).shuffle(order)
        return cls(
            [i % N_NAMESPACES for i in ids],
            [make_key(i) for i in ids],
            [make_record(i) for i in ids],
            order,
        )

    def __len__(self) -> int:
        return len(self.keys)

    def write_calls(self) -> list[tuple[int, str, dict[str, Any]]]:
        return [(self.namespaces[j], self.keys[j], self.values[j]) for j in self.order]

    def read_calls(self) -> list[tuple[int, str]]:
        return [(self.namespaces[j], self.keys[j]) for j in self.order]

    def mean_json_bytes(self) -> float:
        return statistics.fmean(len(orjson.dumps(v)) for v in self.values)


# -- timing ----------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    """One timed run (or the median of several): throughput and latency."""

    ops_per_s: float
    p50_us: float
    p99_us: float

    @staticmethod
    def median(runs: Sequence[Stats]) -> Stats:
        return Stats(
            statistics.median(r.ops_per_s for r in runs),
            statistics.median(r.p50_us for r in runs),
            statistics.median(r.p99_us for r in runs),
        )


def release_together(procs: Sequence[subprocess.Popen[str]], timeout: float = 600) -> list[Any]:
    """Start worker processes at once (tests.helpers.mp_workers.release) and
    return each one's last stdout line as JSON. A worker that fails raises,
    with the end of its output."""
    from tests.helpers.mp_workers import release

    release(procs)
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"worker failed: {text[-500:]}")
        out.append(json.loads(text.strip().splitlines()[-1]))
    return out


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace the section of ``path`` that starts at the line ``heading``
    (up to the next ``## `` heading, a blank line kept before it), or append
    ``section`` when there is none."""
    text = path.read_text() if path.exists() else ""
    if heading + "\n" in text:
        start = text.index(heading + "\n")
        nxt = text.find("\n## ", start + len(heading))
        rest = "\n" + text[nxt + 1 :] if nxt >= 0 else ""
        text = text[:start] + section.rstrip("\n") + "\n" + rest
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of already sorted samples."""
    if not sorted_samples:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_samples)))
    return sorted_samples[rank - 1]


def time_calls(
    fn: Callable[..., object],
    calls: Sequence[tuple[Any, ...]],
    finish: Callable[[], object] | None = None,
) -> Stats:
    """Call ``fn(*args)`` for each ``args``, timing every call with
    ``perf_counter_ns``. Throughput is ``len(calls)`` over the wall time of the
    whole loop, so it includes the ~0.1 µs of the two clock reads per call,
    and ``finish()`` (work left in the background, e.g. a span flush)."""
    clock = time.perf_counter_ns
    samples = [0] * len(calls)
    gc.collect()
    start = clock()
    for j, args in enumerate(calls):
        t0 = clock()
        fn(*args)
        samples[j] = clock() - t0
    if finish is not None:
        finish()
    wall = clock() - start
    samples.sort()
    return Stats(len(calls) * 1e9 / wall, percentile(samples, 50) / 1e3, percentile(samples, 99) / 1e3)


class CountingExporter:
    """A span exporter that counts the spans it is given and drops them.
    Duck-typed rather than derived from the SDK's ``SpanExporter``, so that
    importing this module loads no SDK (untraced runs must not); the SDK is
    imported when one is made."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.count = 0
        self._success = SpanExportResult.SUCCESS

    def export(self, spans: Sequence[Any]) -> Any:
        self.count += len(spans)
        return self._success

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def callgrind(argv: Sequence[str], cwd: str | None = None) -> int:
    """Instructions ``argv`` (a command line) executes under ``valgrind
    --tool=callgrind``, every thread counted. ``PYTHONHASHSEED=0``: the same
    strings hash alike in every run and revision, as set and dict layouts
    move a count by ~2% otherwise."""
    import re

    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        cwd=cwd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1))


def time_once(fn: Callable[[], object]) -> float:
    """Seconds taken by one call of ``fn``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- disk usage ----------------------------------------------------------------------


@dataclass(frozen=True)
class DiskUsage:
    apparent: int  # sum of st_size
    allocated: int  # sum of st_blocks * 512
    files: int


def disk_usage(root: Path) -> DiskUsage:
    """Sizes of every file and directory under ``root`` (``root`` included)."""
    apparent = allocated = files = 0
    for path in _walk(root):
        st = path.lstat()
        apparent += st.st_size
        allocated += st.st_blocks * 512
        files += path.is_file()
    return DiskUsage(apparent, allocated, files)


def disk_usage_by_entry(root: Path) -> dict[str, DiskUsage]:
    """:func:`disk_usage` of each top-level entry of ``root``."""
    return {child.name: disk_usage(child) for child in sorted(root.iterdir())}


def _walk(root: Path) -> Iterable[Path]:
    yield root
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in (*dirnames, *filenames):
            yield base / name


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


# -- the machine -----------------------------------------------------------------------


def _busy_cpu_seconds() -> float:
    """CPU seconds spent busy (not idle or iowait) by the whole machine since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class OtherLoad:
    """How busy the rest of the machine was while we ran: all busy CPU time
    minus this process's own and its finished children's (the benchmarks
    that run workers in subprocesses), as a share of the CPUs over the wall
    time."""

    def __init__(self) -> None:
        self._wall = time.perf_counter()
        self._busy = _busy_cpu_seconds()
        self._ours = _own_cpu_seconds()

    def share(self) -> float:
        wall = time.perf_counter() - self._wall
        others = _busy_cpu_seconds() - self._busy - (_own_cpu_seconds() - self._ours)
        return max(0.0, others) / (wall * (os.cpu_count() or 1))


def _own_cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _mem_total_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "?"


def filesystem_of(path: Path) -> str:
    """``type (device, mount point)`` from ``df -T``."""
    lines = _run(["df", "-T", str(path)]).splitlines()
    if len(lines) < 2:
        return "?"
    fields = lines[-1].split()
    return f"{fields[1]} ({fields[0]}, mounted on {fields[-1]})"


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "-"


LIBRARY_PATHS = ("shared", "storage", "namespaces")


def source_revision() -> str:
    """The git commit measured, and the library files modified on top of it."""
    head = _run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"]) or "?"
    status = _run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", *LIBRARY_PATHS])
    changed = [line.split(maxsplit=1)[1] for line in status.splitlines() if line.strip()]
    return head + (f" + uncommitted changes to {', '.join(changed)}" if changed else " (library clean)")


def machine_info(bench_dir: Path) -> dict[str, str]:
    load = os.getloadavg()
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "hrm-memory revision": source_revision(),
        "cpu": f"{_cpu_model()}, nproc = {_run(['nproc'])}",
        "memory": _mem_total_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "bench dir": f"{bench_dir} on {filesystem_of(bench_dir)}",
        "/tmp": filesystem_of(Path("/tmp")),
        "load average at start (1/5/15 min)": " / ".join(f"{x:.2f}" for x in load),
        "versions": ", ".join(
            f"{d} {_version(d)}"
            for d in ("hrm-memory", "orjson", "langgraph", "diskcache", "lmdb", "opentelemetry-api")
        ),
    }


def wait_until_quiet(max_wait_s: float, threshold: float = 0.25, window_s: float = 10.0) -> float:
    """Sleep in ``window_s`` steps until other processes use less than
    ``threshold`` of the CPUs over a window, or ``max_wait_s`` has passed.
    Return the share seen in the last window."""
    deadline = time.monotonic() + max_wait_s
    while True:
        load = OtherLoad()
        time.sleep(window_s)
        share = load.share()
        if share < threshold or time.monotonic() >= deadline:
            return share
        log(f"waiting for a quieter machine: other processes use {share:.0%} of the CPUs")


# -- output ------------------------------------------------------------------------------


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt_num(x: float, digits: int = 3) -> str:
    """A number with about ``digits`` significant digits, thousands separated."""
    if math.isnan(x):
        return "-"
    if x >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x)))) if x else 0
    return f"{x:,.{decimals}f}"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
