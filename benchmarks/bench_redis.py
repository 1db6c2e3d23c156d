"""hrm-memory on Redis against redis-py on the same server, and
against the file backend, in one run; then durability per persistence setting.

    python -m benchmarks.bench_redis [--n 2000] [--reps 5] [--out BENCHMARKS.md]

Starts its own redis-server (the Debian package's binary, on a free loopback
port, data in a temporary directory; ``appendonly yes``, ``appendfsync
everysec`` for the operation tables) and stops it at the end.

Operations (~207-byte records, no tracing SDK configured), each the same on
both sides:

- write: ``mm.write(ns, key, value)`` against ``HSET hash key json`` (redis-py,
  the value dumped with orjson), and against ``HSET`` + ``XADD`` in one
  MULTI/EXEC (the record and a change-stream entry, as hrm-memory's write makes). hrm-memory's write also assigns the version,
  checks the checksum-carrying header, honours a foreign lease and appends
  the change-log entry, all in one Lua script: one round trip, like HSET.
- read: ``mm.read`` against ``HGET`` + ``orjson.loads``.
- update (read-modify-write with an arbitrary Python function, atomic across
  hosts): ``mm.update`` (lease + read in one script, write, release: three
  round trips) against redis-py's optimistic transaction (``WATCH``, ``HGET``,
  ``MULTI``/``HSET``/``EXEC``: three round trips) and against redis-py's
  ``Lock`` around ``HGET``/``HSET`` (four).

Within a rep the cases of one operation take turns, 100 calls at a time, the
order alternating (load from other processes falls on all alike); ops/s is
calls over the time spent in them; the tables give medians over reps. Then 4 processes x 500 updates, and the cross-process
delivery latency of two "hosts". Durability: per setting, write throughput through
hrm-memory, then a writer is cut off by SIGKILL of the server, which is
restarted, and the acknowledged writes that are missing are counted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import redis

from hrm_memory import MemoryManager, MemoryStoreError
from tests.helpers.redis_server import RedisServer

from .harness import (OtherLoad, Stats, machine_info, make_key, make_record, md_table, percentile, release_together,
                      time_calls, write_section)

NS = "altitude.patterns"
REPO = Path(__file__).resolve().parent.parent
SECTION = "## The Redis backend (`benchmarks/bench_redis.py`)"


def _hset_xadd(r: redis.Redis, hkey: str, key: str, value: Any) -> None:
    """The record and a change-stream entry, in one round trip (MULTI/EXEC)."""
    pipe = r.pipeline(transaction=True)
    pipe.hset(hkey, key, orjson.dumps(value))
    pipe.xadd(hkey + ":events", {"e": key}, maxlen=100_000, approximate=True)
    pipe.execute()


def _direct_update(r: redis.Redis, hkey: str, key: str) -> None:
    with r.pipeline() as pipe:
        while True:
            try:
                pipe.watch(hkey)
                value = orjson.loads(pipe.hget(hkey, key) or b"0")  # type: ignore[arg-type]
                pipe.multi()
                pipe.hset(hkey, key, orjson.dumps(value + 1))
                pipe.execute()
                return
            except redis.WatchError:
                continue


def _locked_update(r: redis.Redis, hkey: str, key: str) -> None:
    with r.lock("bench:lock:" + hkey, timeout=10, blocking_timeout=10):
        value = orjson.loads(r.hget(hkey, key) or b"0")  # type: ignore[arg-type]
        r.hset(hkey, key, orjson.dumps(value + 1))


def interleaved(group: list[tuple[str, Callable[..., object], list[tuple[Any, ...]]]], flip: bool,
                chunk: int = 100) -> dict[str, Stats]:
    """Time each case's calls, the cases taking turns chunk by chunk."""
    clock = time.perf_counter_ns
    samples: dict[str, list[int]] = {name: [] for name, _, _ in group}
    longest = max(len(calls) for _, _, calls in group)
    for j, start in enumerate(range(0, longest, chunk)):
        order = group if (j % 2 == 0) != flip else list(reversed(group))
        for name, fn, calls in order:
            out = samples[name]
            for args in calls[start : start + chunk]:
                t0 = clock()
                fn(*args)
                out.append(clock() - t0)
    stats = {}
    for name, got in samples.items():
        got.sort()
        stats[name] = Stats(len(got) * 1e9 / sum(got), percentile(got, 50) / 1e3, percentile(got, 99) / 1e3)
    return stats


def measure_ops(server: RedisServer, work: Path, n: int, reps: int) -> dict[str, list[Stats]]:
    records = [(make_key(i), make_record(i)) for i in range(n)]
    r = redis.Redis.from_url(server.url)
    results: dict[str, list[Stats]] = {}
    for rep in range(reps):
        url = server.fresh_url()
        hkey = f"direct{rep}:{NS}"
        hrm = MemoryManager(work / f"unused{rep}", backend=url)
        quiet = MemoryManager(work / f"quiet{rep}", backend=server.fresh_url(), signal_log=False)
        flush = MemoryManager(work / f"file-flush{rep}", durability="flush")
        fsync = MemoryManager(work / f"file-fsync{rep}", durability="fsync")
        cases: list[tuple[str, Callable[..., object], list[tuple[Any, ...]]]] = [
            ("write/hrm-redis", hrm.write, [(NS, k, v) for k, v in records]),
            ("write/hrm-redis signal_log=False", quiet.write, [(NS, k, v) for k, v in records]),
            ("write/redis-py", lambda k, v: r.hset(hkey, k, orjson.dumps(v)), records),
            ("write/redis-py HSET+XADD", lambda k, v: _hset_xadd(r, hkey, k, v), records),
            ("write/hrm-file-flush", flush.write, [(NS, k, v) for k, v in records]),
            ("write/hrm-file-fsync", fsync.write, [(NS, k, v) for k, v in records[: max(200, n // 10)]]),
            ("read/hrm-redis", hrm.read, [(NS, k) for k, _ in records]),
            ("read/redis-py", lambda k: orjson.loads(r.hget(hkey, k)), [(k,) for k, _ in records]),  # type: ignore[arg-type]
            ("read/hrm-file", flush.read, [(NS, k) for k, _ in records]),
            ("update/hrm-redis", lambda k: hrm.update("focus.slow", k, lambda v: (v or 0) + 1), [(f"c{i % 50}",) for i in range(n)]),
            ("update/redis-py WATCH", lambda k: _direct_update(r, hkey + ":c", k), [(f"c{i % 50}",) for i in range(n)]),
            ("update/redis-py Lock", lambda k: _locked_update(r, hkey + ":l", k), [(f"c{i % 50}",) for i in range(n)]),
            ("update/hrm-file", lambda k: flush.update("focus.slow", k, lambda v: (v or 0) + 1), [(f"c{i % 50}",) for i in range(n)]),
        ]
        # Writes first (reads need the data). Within a group the cases take
        # turns chunk by chunk (100 calls each, the order alternating), so a
        # burst of load from other processes falls on all of them alike.
        groups = [cases[0:6], cases[6:9], cases[9:13]]
        for group in groups:
            for name, stats in interleaved(group, flip=rep % 2 == 1).items():
                results.setdefault(name, []).append(stats)
        hrm.close()
        quiet.close()
        flush.close()
        fsync.close()
    r.flushdb()
    r.close()
    return results


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.redis_server", *args], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def measure_processes(server: RedisServer, work: Path) -> dict[str, float]:
    """4 processes x 500 update(+1) on one key; two "hosts" (processes on
    different roots) writing 200 keys each, 5 ms apart, and receiving each
    other's events (poll interval 2 ms): delivery latency."""
    url = server.fresh_url()
    phases = release_together([_spawn("counter", url, "500") for _ in range(4)])
    with MemoryManager(None, backend=url) as mm:
        total = mm.read("focus.slow", "n")
    wall = max(p["t1"] for p in phases) - min(p["t0"] for p in phases)
    url = server.fresh_url()
    hosts = release_together([_spawn("host", url, str(work / "host-a"), "a", "200", "b"),
                    _spawn("host", url, str(work / "host-b"), "b", "200", "a")])
    lat = sorted(
        got[k] - sent[k]
        for me, peer in ((0, 1), (1, 0))
        for got, sent in [(hosts[me]["got"], hosts[peer]["sent"])]
        for k in sent
        if k in got
    )
    return {"updates_total": total, "updates_wall_s": wall, "events": len(lat), "expected_events": 400,
            "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3}


def measure_durability(work: Path, n: int) -> list[tuple[str, Stats, int, int, str]]:
    settings = [
        ("appendonly no (no RDB either)", False, "everysec", "everything since start-up", "everything"),
        ("appendonly yes, appendfsync no", True, "no", "none (the kernel has the AOF writes)", "up to the kernel's writeback, ~30 s"),
        ("appendonly yes, appendfsync everysec", True, "everysec", "none", "about 1 s (Redis: up to 2 s)"),
        ("appendonly yes, appendfsync always", True, "always", "none", "none: fsync before the reply"),
    ]
    out = []
    for label, aof, fsync, _, os_crash in settings:
        with RedisServer(work / f"dur-{fsync}-{aof}", appendonly=aof, appendfsync=fsync) as server:
            url = server.fresh_url(socket_timeout="2")
            with MemoryManager(None, backend=url) as mm:
                stats = time_calls(mm.write, [(NS, make_key(i), make_record(i)) for i in range(n)])
                acked: dict[str, int] = {}
                count = [0]
                stop = threading.Event()

                def writer() -> None:
                    i = 0
                    while not stop.is_set():
                        key = f"k{i % 100}"
                        try:
                            mm.write(NS, key, {"i": i})
                        except MemoryStoreError:
                            return
                        acked[key] = i
                        count[0] += 1
                        i += 1

                thread = threading.Thread(target=writer)
                thread.start()
                time.sleep(1.0)
                server.kill()
                stop.set()
                thread.join(10)
                server.start()
                lost = 0
                for key, i in acked.items():
                    got = mm.read(NS, key)
                    if got is None or got["i"] < i:
                        lost += 1
                out.append((label, stats, count[0], lost, os_crash))
    return out


def _ratio(results: dict[str, list[Stats]], a: str, b: str) -> str:
    """Median over reps of (time per op of a / time per op of b)."""
    pairs = [y.ops_per_s / x.ops_per_s for x, y in zip(results[a], results[b])]
    return f"{statistics.median(pairs):.2f}x"


def report(ops: dict[str, list[Stats]], durability: list[tuple[str, Stats, int, int, str]], info: dict[str, str],
           argv: str, redis_version: str, load: float, procs: dict[str, float]) -> str:
    med = {k: Stats.median(v) for k, v in ops.items()}
    rows = [(name, f"{s.ops_per_s:,.0f}", f"{s.p50_us:.0f}", f"{s.p99_us:.0f}") for name, s in med.items()]
    overhead = [
        ("write", _ratio(ops, "write/hrm-redis", "write/redis-py"), "HSET"),
        ("write", _ratio(ops, "write/hrm-redis", "write/redis-py HSET+XADD"), "MULTI/HSET/XADD/EXEC (record + change entry)"),
        ("write, change log off (`signal_log=False`)", _ratio(ops, "write/hrm-redis signal_log=False", "write/redis-py"), "HSET"),
        ("read", _ratio(ops, "read/hrm-redis", "read/redis-py"), "HGET + orjson.loads"),
        ("update", _ratio(ops, "update/hrm-redis", "update/redis-py WATCH"), "WATCH/HGET/MULTI-HSET-EXEC"),
        ("update", _ratio(ops, "update/hrm-redis", "update/redis-py Lock"), "redis-py Lock + HGET + HSET"),
    ]
    against_file = [
        ("write", _ratio(ops, "write/hrm-redis", "write/hrm-file-flush"), "file, durability=flush"),
        ("write", _ratio(ops, "write/hrm-redis", "write/hrm-file-fsync"), "file, durability=fsync"),
        ("read", _ratio(ops, "read/hrm-redis", "read/hrm-file"), "file (read cache warm)"),
        ("update", _ratio(ops, "update/hrm-redis", "update/hrm-file"), "file, flush, thread lock only"),
    ]
    dur_rows = [
        (label, f"{s.ops_per_s:,.0f}", f"{s.p50_us:.0f}", f"{s.p99_us:.0f}", f"{acked:,}", f"{lost} of 100", os_crash)
        for label, s, acked, lost, os_crash in durability
    ]
    machine = md_table(["", ""], [(k, v) for k, v in info.items() if k in ("date", "hrm-memory revision", "cpu", "memory", "os", "python")]
                       + [("redis-server", redis_version), ("redis-py", redis.__version__),
                          ("CPU used by other processes during the run", f"{load:.0%} of all CPUs (mean)")])
    return "\n\n".join([
        SECTION,
        f"Command: `{argv}`. One redis-server on 127.0.0.1 (loopback TCP), `appendonly yes`, "
        "`appendfsync everysec` for the operation tables; no tracing SDK configured. Medians over reps; "
        "a ratio is the median over reps of (time per op through hrm-memory / time per op of the other), "
        "the cases of one operation taking turns 100 calls at a time. The machine is shared (2 vCPUs, other agents' work running), so "
        "absolute figures drift by tens of percent between runs; the ratios less so.",
        machine,
        "**Operations** (ops/s and latency in microseconds):",
        md_table(["case", "ops/s", "p50 us", "p99 us"], rows),
        "**Overhead of hrm-memory on Redis against redis-py doing the same on the same server** (target <= 1.5x):",
        md_table(["operation", "hrm-memory / redis-py", "redis-py side", "<= 1.5x?"],
                 [(*row, "yes" if float(row[1][:-1]) <= 1.5 else "**no**") for row in overhead]),
        "**Redis backend against the file backend** (time per op, Redis / file; above 1 the file backend is faster):",
        md_table(["operation", "redis / file", "file backend"], against_file),
        "**Several processes** (`tests.helpers.redis_server` workers, one Redis):",
        md_table(["measure", "result"], [
            ("4 processes x 500 `update(+1)` on one key", f"{procs['updates_total']} (expected 2000) in "
             f"{procs['updates_wall_s']:.2f} s"),
            ("two processes on different roots, 200 writes each 5 ms apart: events received from the other",
             f"{procs['events']:.0f} of {procs['expected_events']:.0f}"),
            ("cross-process delivery latency (write call to callback, poll interval 2 ms)",
             f"p50 {procs['p50_ms']:.1f} ms, p99 {procs['p99_ms']:.1f} ms"),
        ]),
        "**Durability per persistence setting** (write throughput through hrm-memory; then a writer thread "
        "rewrites 100 keys until SIGKILL of redis-server cuts it off, the server is restarted, and the keys whose "
        "last acknowledged write is not there are counted; the power-loss window is Redis's documented behaviour, not measured here: it "
        "needs a power cut):",
        md_table(["setting", "writes/s", "p50 us", "p99 us", "writes acknowledged before SIGKILL",
                  "keys whose last acknowledged write was lost", "lost on power loss / OS crash"], dur_rows),
    ]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    command = "python -m benchmarks.bench_redis" + "".join(f" {a}" for a in (argv if argv is not None else __import__("sys").argv[1:]))
    with tempfile.TemporaryDirectory(prefix="hrm-bench-redis-") as tmp:
        work = Path(tmp)
        info = machine_info(work)
        load = OtherLoad()
        with RedisServer(work / "redis", appendonly=True, appendfsync="everysec") as server:
            redis_version = str(redis.Redis.from_url(server.url).info("server")["redis_version"])
            ops = measure_ops(server, work, args.n, args.reps)
            procs = measure_processes(server, work)
        durability = measure_durability(work, args.n)
        section = report(ops, durability, info, command, redis_version, load.share(), procs)
    print(section)
    if args.out is not None:
        write_section(args.out, SECTION, section)


if __name__ == "__main__":
    main()
