"""What one ``forget`` costs on each backend (the conformance suite's four,
and Redis with its persistence files on).

    python -m benchmarks.bench_forget [--n 10] [--records 200]

Per backend: a store with ``--records`` records in ``shared.people`` (a
namespace that keeps history and is indexed), each written twice; then
``--n`` of them forgotten one by one, timed. Prints the median and the
maximum in milliseconds. Redis servers and the cluster are started for the
run (tests/helpers) in a temporary directory and stopped at the end:

- ``memory``: ``memory://``;
- ``file``: ``durability="flush"``;
- ``redis``: one server, no persistence;
- ``redis aof+rdb``: one server with ``appendonly yes`` and ``save 3600 1``
  (a forget waits for the AOF rewrite and the snapshot);
- ``cluster wait=1``: 3 primaries and 3 replicas, no persistence;
- ``cluster aof+rdb``: the same with AOF and snapshots on every node.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hrm_memory import MemoryManager


@contextmanager
def _redis(tmp: Path, persist: bool) -> Iterator[str]:
    from tests.helpers.redis_server import RedisServer

    extra = ("--save", "3600 1") if persist else ()
    with RedisServer(tmp / ("redis-p" if persist else "redis"), appendonly=persist, extra=extra) as server:
        yield server.fresh_url()


@contextmanager
def _cluster(tmp: Path, persist: bool) -> Iterator[str]:
    import redis

    from tests.helpers.redis_cluster import RedisCluster

    with RedisCluster(tmp / ("cluster-p" if persist else "cluster"), appendonly=persist) as cluster:
        if persist:
            for port in cluster.ports:
                r = redis.Redis(port=port)
                r.config_set("save", "3600 1")
                r.close()
        yield cluster.fresh_url(wait="1")


def _run(mm: MemoryManager, n: int, records: int) -> list[float]:
    for i in range(records):
        mm.write("shared.people", f"p{i}", {"note": f"person {i}, first"})
        mm.write("shared.people", f"p{i}", {"note": f"person {i}, second"})
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        mm.forget("shared.people", f"p{i}")
        times.append((time.perf_counter() - t0) * 1000)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--records", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hrm-bench-forget-") as d:
        tmp = Path(d)
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("memory", lambda: MemoryManager(backend="memory://")),
            ("file", lambda: MemoryManager(tmp / "root", durability="flush")),
        ]
        print("| backend | forget median (ms) | max (ms) |\n|---|---|---|")
        for name, opener in cases:
            with opener() as mm:
                t = _run(mm, args.n, args.records)
            print(f"| {name} | {statistics.median(t):.1f} | {max(t):.1f} |")
        for name, ctx in (("redis", lambda: _redis(tmp, False)), ("redis aof+rdb", lambda: _redis(tmp, True)),
                          ("cluster wait=1", lambda: _cluster(tmp, False)),
                          ("cluster aof+rdb", lambda: _cluster(tmp, True))):
            with ctx() as url, MemoryManager(tmp / name.replace(" ", "_"), backend=url) as mm:
                t = _run(mm, args.n, args.records)
            print(f"| {name} | {statistics.median(t):.1f} | {max(t):.1f} |")


if __name__ == "__main__":
    main()
