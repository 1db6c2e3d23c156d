"""Open time, first-read latency and bytes on disk as an hrm-memory store grows.

For each size (0, 10,000 and 1,000,000 records, capped by ``--max-n``) a
fresh root is filled with ``durability="flush"`` into one warm namespace
``bench.big`` (declared with ``ttl=1.0``). From ``--archive-from`` records
on, all but the last ``--warm-tail`` records are written, moved to the cold
tier with ``archive(now=time.time() + 10**9)``, and then the tail is written,
so the store is mostly cold. Then, on that root:

- *open*: ``MemoryManager(root)`` + ``close()``, ``--open-reps`` times;
- *first read*: open, time one ``read`` of a random warm (and a random cold)
  key, close; ``--open-reps`` times with different keys;
- *footprint*: bytes under the root, apparent (``st_size``) and allocated
  (``st_blocks * 512``), files and directories included.

Separately, ``--footprint-n`` records (default 100,000) spread over 5 warm
namespaces give bytes on disk per record against the records' JSON bytes
(sum of ``len(orjson.dumps(value))``), next to diskcache, lmdb and the
file-per-key store holding the same records.

    python -m benchmarks.bench_open [--max-n 1000000] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.storage.file.warm.tier import bucket_of

from .harness import (
    DEFAULT_BENCH_DIR,
    Dataset,
    DiskUsage,
    disk_usage,
    disk_usage_by_entry,
    fmt_num,
    fresh_dir,
    log,
    make_key,
    make_record,
    md_table,
    percentile,
)
from .stores import DiskcacheStore, FilePerKeyStore, HrmStore, LmdbStore, Store

NAMESPACE = "bench.big"
SIZES = (0, 10_000, 1_000_000)
FOOTPRINT_TARGET = 1.5


@dataclass(frozen=True)
class Config:
    max_n: int = 1_000_000
    open_reps: int = 20
    archive_from: int = 100_000
    warm_tail: int = 10_000
    footprint_n: int = 100_000
    peers_footprint: bool = True
    bench_dir: Path = DEFAULT_BENCH_DIR


QUICK = {"max_n": 10_000, "open_reps": 5, "footprint_n": 5_000, "archive_from": 10_000, "warm_tail": 1_000}


# -- filling ------------------------------------------------------------------------


@dataclass
class Filled:
    n: int
    json_bytes: int = 0
    fill_s: float = 0.0
    archive_s: float = 0.0
    warm: int = 0
    cold: int = 0


def _write_range(mm: MemoryManager, start: int, stop: int, filled: Filled) -> None:
    t0 = time.perf_counter()
    for i in range(start, stop):
        value = make_record(i)
        filled.json_bytes += len(orjson.dumps(value))
        mm.write(NAMESPACE, make_key(i), value)
        if (i + 1) % 200_000 == 0:
            log(f"open: wrote {i + 1:,} records")
    filled.fill_s += time.perf_counter() - t0


def fill(root: Path, n: int, cfg: Config) -> Filled:
    """Fill a fresh ``root`` with ``n`` records (mostly cold from ``archive_from``)."""
    filled = Filled(n)
    with MemoryManager(root, durability="flush") as mm:
        mm.declare(NamespaceSpec(NAMESPACE, ttl=1.0))
        tail = min(cfg.warm_tail, n) if n >= cfg.archive_from else n
        _write_range(mm, 0, n - tail, filled)
        if tail < n:
            t0 = time.perf_counter()
            mm.archive(now=time.time() + 10**9)
            filled.archive_s = time.perf_counter() - t0
        _write_range(mm, n - tail, n, filled)
        ns = mm.stats()["namespaces"][NAMESPACE]
        filled.warm, filled.cold = ns["keys"], ns["archived"]
    return filled


# -- timing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    p50_us: float
    p99_us: float
    samples: int

    @classmethod
    def of(cls, samples_ns: list[int]) -> Latency:
        s = sorted(samples_ns)
        return cls(percentile(s, 50) / 1e3, percentile(s, 99) / 1e3, len(s))


def time_open(root: Path, reps: int) -> Latency:
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        MemoryManager(root).close()
        samples.append(time.perf_counter_ns() - t0)
    return Latency.of(samples)


@dataclass(frozen=True)
class Reads:
    """Right after open: the first read (builds its bucket's index), then a
    read of another key of the same bucket (index already built)."""

    first: Latency
    next: Latency | None


def time_first_reads(root: Path, pairs: list[tuple[int, int | None]], *, stored: bool = True) -> Reads:
    """Per ``(i, j)``: open, time the read of key ``i`` then of key ``j``
    (if any), close. ``stored`` says whether the keys exist; values are checked.
    The garbage collector is off during each timed read, as ``timeit`` has
    it: a collection of the garbage of this benchmark's own earlier managers
    (a full one took ~1-2 ms) is not the read's cost."""
    firsts: list[int] = []
    nexts: list[int] = []
    for i, j in pairs:
        with MemoryManager(root) as mm:
            gc.disable()
            try:
                firsts.append(_timed_read(mm, i, stored))
            finally:
                gc.enable()
            if j is not None:
                nexts.append(_timed_read(mm, j, stored))
    return Reads(Latency.of(firsts), Latency.of(nexts) if nexts else None)


def _timed_read(mm: MemoryManager, i: int, stored: bool) -> int:
    t0 = time.perf_counter_ns()
    value = mm.read(NAMESPACE, make_key(i))
    elapsed = time.perf_counter_ns() - t0
    if value != (make_record(i) if stored else None):
        raise AssertionError(f"read of {make_key(i)} returned {value!r}")
    return elapsed


def _read_pairs(lo: int, hi: int, k: int, seed: int) -> list[tuple[int, int | None]]:
    """``k`` random ids in ``[lo, hi)``, each with another id of the same bucket."""
    if hi <= lo:
        return []
    rng = random.Random(seed)
    pairs: list[tuple[int, int | None]] = []
    for i in rng.sample(range(lo, hi), min(k, hi - lo)):
        bucket = bucket_of(make_key(i))
        mates = (rng.randrange(lo, hi) for _ in range(10_000))
        pairs.append((i, next((j for j in mates if j != i and bucket_of(make_key(j)) == bucket), None)))
    return pairs


@dataclass
class SizeResult:
    filled: Filled
    open: Latency
    warm: Reads | None
    cold: Reads | None
    miss: Reads | None
    disk: DiskUsage
    parts: dict[str, DiskUsage]  # per top-level entry of the root


def measure_size(n: int, cfg: Config) -> SizeResult:
    root = fresh_dir(cfg.bench_dir / "open" / f"n{n}")
    log(f"open: filling {n:,} records")
    filled = fill(root, n, cfg)
    log(f"open: filled in {filled.fill_s:.1f} s (+ archive {filled.archive_s:.1f} s); timing")
    cold_n = n - filled.warm
    warm_pairs = _read_pairs(cold_n, n, cfg.open_reps, seed=n)
    cold_pairs = _read_pairs(0, cold_n, cfg.open_reps, seed=n + 1)
    result = SizeResult(
        filled,
        time_open(root, cfg.open_reps),
        time_first_reads(root, warm_pairs) if warm_pairs else None,
        time_first_reads(root, cold_pairs) if cold_pairs else None,
        time_first_reads(root, [(n + 1, None)] * cfg.open_reps, stored=False) if n == 0 else None,
        disk_usage(root),
        disk_usage_by_entry(root),
    )
    shutil.rmtree(root, ignore_errors=True)
    return result


# -- footprint ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Footprint:
    store: str
    n: int
    json_bytes: int
    disk: DiskUsage
    parts: dict[str, DiskUsage]  # per top-level entry of the root

    @property
    def apparent_ratio(self) -> float:
        return self.disk.apparent / self.json_bytes

    @property
    def allocated_ratio(self) -> float:
        return self.disk.allocated / self.json_bytes


FOOTPRINT_STORES: dict[str, Callable[[Path], Store]] = {
    'hrm-memory warm (durability="flush")': partial(HrmStore, tier="warm", durability="flush"),
    "diskcache Cache": DiskcacheStore,
    "lmdb": partial(LmdbStore, sync=False),
    "file per key": partial(FilePerKeyStore, fsync=False),
}


def measure_footprint(name: str, factory: Callable[[Path], Store], data: Dataset, cfg: Config) -> Footprint:
    root = fresh_dir(cfg.bench_dir / "footprint" / name.split()[0])
    log(f"footprint: {name}, {len(data):,} records")
    store = factory(root)
    try:
        for args in data.write_calls():
            store.put(*args)
    finally:
        store.close()
    json_bytes = sum(len(orjson.dumps(v)) for v in data.values)
    parts = disk_usage_by_entry(root) if isinstance(store, HrmStore) else {}
    result = Footprint(name, len(data), json_bytes, disk_usage(root), parts)
    shutil.rmtree(root, ignore_errors=True)
    return result


def run_footprints(cfg: Config) -> list[Footprint]:
    n = min(cfg.footprint_n, cfg.max_n)
    data = Dataset.build(n)
    stores = FOOTPRINT_STORES if cfg.peers_footprint else dict(list(FOOTPRINT_STORES.items())[:1])
    return [measure_footprint(name, factory, data, cfg) for name, factory in stores.items()]


@dataclass
class OpenResults:
    sizes: list[SizeResult] = field(default_factory=list)
    footprints: list[Footprint] = field(default_factory=list)


def run(cfg: Config) -> OpenResults:
    out = OpenResults()
    for n in (s for s in SIZES if s <= cfg.max_n):
        out.sizes.append(measure_size(n, cfg))
    out.footprints = run_footprints(cfg)
    return out


# -- reporting -------------------------------------------------------------------------------


def _lat(lat: Latency | None) -> str:
    return "-" if lat is None else f"{fmt_num(lat.p50_us)} / {fmt_num(lat.p99_us)}"


def _reads(reads: Reads | None) -> str:
    if reads is None:
        return "-"
    return _lat(reads.first) + ("" if reads.next is None else f" (next: {_lat(reads.next)})")


def _per_record(nbytes: int, n: int) -> str:
    return "-" if n == 0 else fmt_num(nbytes / n)


def sizes_table(results: OpenResults) -> str:
    rows = [
        (
            f"{r.filled.n:,}",
            f"{r.filled.warm:,} / {r.filled.cold:,}",
            _lat(r.open),
            _reads(r.warm),
            _reads(r.cold),
            _reads(r.miss),
            _per_record(r.disk.apparent, r.filled.n),
            _per_record(r.disk.allocated, r.filled.n),
            "-" if r.filled.n == 0 else f"{r.disk.allocated / r.filled.json_bytes:.2f}x",
            _breakdown(r.parts, r.filled.n),
            f"{r.filled.fill_s:.1f} s" + (f" + archive {r.filled.archive_s:.1f} s" if r.filled.archive_s else ""),
        )
        for r in results.sizes
    ]
    headers = [
        "records",
        "warm / cold",
        "open+close µs p50 / p99",
        "first read, warm key µs p50 / p99 (next read, same bucket)",
        "first read, cold key µs p50 / p99 (next read, same bucket)",
        "first read, missing key µs p50 / p99",
        "bytes/record apparent",
        "bytes/record allocated",
        "allocated / JSON bytes",
        "apparent bytes/record by directory",
        "fill time",
    ]
    return md_table(headers, rows)


def footprint_table(results: OpenResults) -> str:
    rows = [
        (
            f.store,
            f"{f.n:,}",
            fmt_num(f.json_bytes / f.n),
            fmt_num(f.disk.apparent / f.n),
            fmt_num(f.disk.allocated / f.n),
            f"{f.apparent_ratio:.2f}x",
            f"{f.allocated_ratio:.2f}x",
            f"{f.disk.files:,}",
            _breakdown(f.parts, f.n),
        )
        for f in results.footprints
    ]
    headers = [
        "store",
        "records",
        "JSON bytes/record",
        "apparent bytes/record",
        "allocated bytes/record",
        "apparent / JSON",
        "allocated / JSON",
        "files",
        "hrm-memory: apparent bytes/record by directory (>= 1)",
    ]
    return md_table(headers, rows)


def _breakdown(parts: dict[str, DiskUsage], n: int) -> str:
    """Apparent bytes per record of each directory holding at least 1 byte/record."""
    if not parts or n == 0:
        return "-"
    shares = sorted(((u.apparent / n, name) for name, u in parts.items()), reverse=True)
    return ", ".join(f"{name}/ {fmt_num(x)}" for x, name in shares if x >= 1)


def hrm_footprint(results: OpenResults) -> Footprint | None:
    return next((f for f in results.footprints if f.store.startswith("hrm-memory")), None)


def to_json(results: OpenResults) -> dict[str, Any]:
    return asdict(results)


# -- command line --------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-n", type=int, default=Config.max_n, help="largest store size to build")
    p.add_argument("--open-reps", type=int, default=Config.open_reps, help="opens (and first reads) per size")
    p.add_argument("--archive-from", type=int, default=Config.archive_from, help="sizes from here on are mostly cold")
    p.add_argument("--warm-tail", type=int, default=Config.warm_tail, help="records written after the archive")
    p.add_argument("--footprint-n", type=int, default=Config.footprint_n, help="records for the footprint")
    p.add_argument("--no-peers-footprint", action="store_true", help="footprint of hrm-memory only")


def config_from(args: argparse.Namespace) -> Config:
    base = Config(
        max_n=args.max_n,
        open_reps=args.open_reps,
        archive_from=args.archive_from,
        warm_tail=args.warm_tail,
        footprint_n=args.footprint_n,
        peers_footprint=not args.no_peers_footprint,
        bench_dir=args.dir,
    )
    if args.quick:
        return Config(**{**asdict(base), **QUICK})
    return base


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.add_argument("--quick", action="store_true", help=f"fast smoke run: {QUICK}")
    p.add_argument("--dir", type=Path, default=DEFAULT_BENCH_DIR, help="scratch directory (disk-backed)")
    p.add_argument("--json", type=Path, help="also write the raw results here")
    args = p.parse_args(argv)
    results = run(config_from(args))
    print(sizes_table(results))
    print()
    print(footprint_table(results))
    if args.json:
        args.json.write_bytes(orjson.dumps(to_json(results), option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
