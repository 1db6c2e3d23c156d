"""hrm-memory against its peers: ops/s, p50 and p99 per operation.

Every case runs ``--reps`` times (the reps of all cases are interleaved, so
a burst of background noise spreads over all of them) and the table shows
the median over reps of each figure. One rep:

- *write*: open a fresh, empty store; write ``--warmup`` other records
  (untimed: creates files, tables, buckets); then time ``N`` writes of new
  keys in a fixed shuffled order.
- *read*: open a fresh store and write the ``N`` records (untimed); for the
  persistent stores close and reopen it (so no process-level cache is warm;
  the OS page cache is); then time ``N`` reads in a fixed shuffled order and
  check a sample of the values read back.

Records are ~206-byte JSON-like dicts spread over 5 namespaces.

    python -m benchmarks.bench_peers [--n 10000] [--fsync-n 2000] [--reps 5] [--quick]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from .harness import DEFAULT_BENCH_DIR, CountingExporter, Dataset, Stats, fmt_num, log, md_table, time_calls
from .stores import (
    DictStore,
    DiskcacheStore,
    FilePerKeyStore,
    HrmStore,
    LangGraphStore,
    LmdbStore,
    Store,
)

StoreFactory = Callable[[Path], Store]


@dataclass(frozen=True)
class Target:
    """A design target: this case's ops/s >= ``ratio`` x those of case ``ref``."""

    ref: str
    ratio: float
    text: str


@dataclass(frozen=True)
class Case:
    id: str
    label: str
    factory: StoreFactory
    op: str  # "write" | "read"
    fsync: bool = False  # an fsync per write: runs with the smaller --fsync-n
    reopen: bool = False  # read after close and reopen
    compare: str | None = None  # peer case for the ratio column
    target: Target | None = None


@dataclass(frozen=True)
class Config:
    n: int = 10_000
    fsync_n: int = 2_000
    reps: int = 5
    warmup: int = 1_000
    bench_dir: Path = DEFAULT_BENCH_DIR


QUICK = {"n": 500, "fsync_n": 50, "reps": 2, "warmup": 100}


@dataclass
class CaseResult:
    case: Case
    n: int
    runs: list[Stats] = field(default_factory=list)

    @property
    def stats(self) -> Stats:
        return Stats.median(self.runs)


def _sdk_provider(*, batch: bool = False) -> Any:
    """An OpenTelemetry SDK provider whose spans go to an exporter that
    discards them: one by one through a ``SimpleSpanProcessor`` (the full
    cost of tracing except the export itself), or with ``batch`` through a
    ``BatchSpanProcessor`` (the usual production set-up)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor((BatchSpanProcessor if batch else SimpleSpanProcessor)(CountingExporter()))  # type: ignore[arg-type]
    return provider


def cases() -> list[Case]:
    hot = partial(HrmStore, tier="hot")
    flush = partial(HrmStore, tier="warm", durability="flush")
    fsync = partial(HrmStore, tier="warm", durability="fsync")
    files = partial(FilePerKeyStore, fsync=False)
    return [
        Case("dict.write", "dict: set", DictStore, "write"),
        Case("dict.read", "dict: get", DictStore, "read"),
        Case("langgraph.write", "LangGraph InMemoryStore: put", LangGraphStore, "write"),
        Case("langgraph.read", "LangGraph InMemoryStore: get", LangGraphStore, "read"),
        Case("diskcache.write", "diskcache Cache: set", DiskcacheStore, "write"),
        Case("diskcache.read", "diskcache Cache: get (after reopen)", DiskcacheStore, "read", reopen=True),
        Case("lmdb.write", "lmdb sync=False: put", partial(LmdbStore, sync=False), "write"),
        Case("lmdb.read", "lmdb: get (after reopen)", partial(LmdbStore, sync=False), "read", reopen=True),
        Case("lmdb_sync.write", "lmdb sync=True: put", partial(LmdbStore, sync=True), "write", fsync=True),
        Case("files.write", "file per key: write+rename", files, "write"),
        Case("files.read", "file per key: read", files, "read", reopen=True),
        Case(
            "files_fsync.write",
            "file per key: write+fsync+rename+dir fsync",
            partial(FilePerKeyStore, fsync=True),
            "write",
            fsync=True,
        ),
        Case(
            "hrm.hot.write",
            "hrm-memory hot: write",
            hot,
            "write",
            target=Target("langgraph.write", 1.0, "hot write >= LangGraph InMemoryStore put"),
        ),
        Case(
            "hrm.hot.read",
            "hrm-memory hot: read",
            hot,
            "read",
            target=Target("langgraph.read", 1.0, "hot read >= LangGraph InMemoryStore get"),
        ),
        Case(
            "hrm.warm_flush.write",
            'hrm-memory warm: write, durability="flush"',
            flush,
            "write",
            target=Target("diskcache.write", 2.0, "warm write (flush) >= 2x diskcache set"),
        ),
        Case(
            "hrm.warm_fsync.write",
            'hrm-memory warm: write, durability="fsync"',
            fsync,
            "write",
            fsync=True,
            target=Target("lmdb_sync.write", 1.0, "warm write (fsync) >= lmdb sync=True put"),
        ),
        Case("hrm.warm.read", "hrm-memory warm: read, cache warm", flush, "read", compare="diskcache.read"),
        Case(
            "hrm.warm_cold.read",
            "hrm-memory warm: read, cold cache (after reopen)",
            flush,
            "read",
            reopen=True,
            target=Target("diskcache.read", 1.0, "warm read (cold cache) >= diskcache get"),
        ),
        Case(
            "hrm.hot_sdk.write",
            "hrm-memory hot: write, OTel SDK on ³",
            partial(hot, tracer_provider=_sdk_provider()),
            "write",
            compare="langgraph.write",
        ),
        Case(
            "hrm.hot_sdk.read",
            "hrm-memory hot: read, OTel SDK on ³",
            partial(hot, tracer_provider=_sdk_provider()),
            "read",
            compare="langgraph.read",
        ),
        Case(
            "hrm.hot_sdk_batch.write",
            "hrm-memory hot: write, OTel SDK + batch processor ⁴",
            partial(hot, tracer_provider=_sdk_provider(batch=True)),
            "write",
            target=Target(
                "langgraph.write", 1.0, "hot write with OTel SDK + batch processor >= LangGraph InMemoryStore put"
            ),
        ),
        Case(
            "hrm.hot_sdk_batch.read",
            "hrm-memory hot: read, OTel SDK + batch processor ⁴",
            partial(hot, tracer_provider=_sdk_provider(batch=True)),
            "read",
            target=Target(
                "langgraph.read", 1.0, "hot read with OTel SDK + batch processor >= LangGraph InMemoryStore get"
            ),
        ),
        Case(
            "hrm.warm_flush_sdk.write",
            'hrm-memory warm: write, "flush", OTel SDK on ³',
            partial(flush, tracer_provider=_sdk_provider()),
            "write",
            compare="diskcache.write",
        ),
    ]


# -- running ---------------------------------------------------------------------


def _fill(store: Store, data: Dataset) -> None:
    for args in data.write_calls():
        store.put(*args)


def _verify(store: Store, data: Dataset, sample: int = 100) -> None:
    rng = random.Random(7)
    for j in rng.sample(range(len(data)), min(sample, len(data))):
        got = store.get(data.namespaces[j], data.keys[j])
        if got != data.values[j]:
            raise AssertionError(f"read back {got!r} for {data.keys[j]}, expected {data.values[j]!r}")


def run_rep(case: Case, data: Dataset, warmup: Dataset, path: Path) -> Stats:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    store = case.factory(path)
    try:
        if case.op == "write":
            _fill(store, warmup)
            stats = time_calls(store.put, data.write_calls(), store.flush)
            _verify(store, data)
            return stats
        _fill(store, data)
        if case.reopen:
            store.close()
            store = case.factory(path)
        stats = time_calls(store.get, data.read_calls(), store.flush)
        _verify(store, data)
        return stats
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)


def _ref_id(case: Case) -> str | None:
    return case.target.ref if case.target else case.compare


def run_order(results: list[CaseResult]) -> list[CaseResult]:
    """Each case that is compared with a peer runs right after that peer, so
    the two see the same background load; the others keep their order."""
    followers: dict[str, list[CaseResult]] = {}
    for r in results:
        ref = _ref_id(r.case)
        if ref is not None and any(x.case.id == ref for x in results):
            followers.setdefault(ref, []).append(r)
    placed = {id(r) for group in followers.values() for r in group}
    order: list[CaseResult] = []
    for r in results:
        if id(r) not in placed:
            order += [r, *followers.get(r.case.id, [])]
    return order


def run(cfg: Config, selected: list[Case] | None = None) -> list[CaseResult]:
    todo = selected if selected is not None else cases()
    # Timed keys come after the warm-up keys, so a write never overwrites.
    warmup = Dataset.build(cfg.warmup, start=0, seed=1)
    big = Dataset.build(cfg.n, start=cfg.warmup, seed=2)
    small = Dataset.build(cfg.fsync_n, start=cfg.warmup, seed=3)
    results = [CaseResult(c, cfg.fsync_n if c.fsync else cfg.n) for c in todo]
    work = cfg.bench_dir / "peers"
    for rep in range(cfg.reps):
        log(f"peers: rep {rep + 1}/{cfg.reps}")
        for res in run_order(results):
            stats = run_rep(res.case, small if res.case.fsync else big, warmup, work / res.case.id)
            res.runs.append(stats)
    shutil.rmtree(work, ignore_errors=True)
    return results


# -- reporting --------------------------------------------------------------------


def _by_id(results: list[CaseResult]) -> dict[str, CaseResult]:
    return {r.case.id: r for r in results}


def ratio_to(res: CaseResult, ref_id: str | None, results: list[CaseResult]) -> float | None:
    """Median over reps of (ops/s of ``res`` / ops/s of the ref case) in the
    same rep: a paired ratio, as the two ran back to back."""
    ref = _by_id(results).get(ref_id) if ref_id else None
    if ref is None:
        return None
    return statistics.median(a.ops_per_s / b.ops_per_s for a, b in zip(res.runs, ref.runs))


def _ratio_cell(res: CaseResult, results: list[CaseResult]) -> str:
    by_id = _by_id(results)
    ref_id = _ref_id(res.case)
    ratio = ratio_to(res, ref_id, results)
    if ratio is None or ref_id is None:
        return ""
    cell = f"{ratio:.2f}x {by_id[ref_id].case.label.split(':')[0]}"
    if res.case.target:
        met = "met" if ratio >= res.case.target.ratio else "**not met**"
        cell += f" (target >= {res.case.target.ratio:g}x: {met})"
    return cell


def _spread(res: CaseResult) -> str:
    """Range of ops/s over the reps, as +-% of the median (half the range)."""
    rates = [s.ops_per_s for s in res.runs]
    return f"±{(max(rates) - min(rates)) / 2 / res.stats.ops_per_s * 100:.0f}%"


def table(results: list[CaseResult]) -> str:
    rows = [
        (
            r.case.label,
            f"{r.n:,}" + (" ¹" if r.case.fsync else ""),
            fmt_num(r.stats.ops_per_s),
            _spread(r),
            fmt_num(r.stats.p50_us),
            fmt_num(r.stats.p99_us),
            _ratio_cell(r, results),
        )
        for r in results
    ]
    return md_table(
        ["store: operation", "N", "ops/s", "spread ²", "p50 µs", "p99 µs", "ops/s vs design peer"], rows
    )


@dataclass(frozen=True)
class TargetOutcome:
    text: str
    measured: float
    required: float

    @property
    def met(self) -> bool:
        return self.measured >= self.required


def target_outcomes(results: list[CaseResult]) -> list[TargetOutcome]:
    out = []
    for r in results:
        t = r.case.target
        ratio = ratio_to(r, t.ref, results) if t else None
        if t is not None and ratio is not None:
            out.append(TargetOutcome(t.text, ratio, t.ratio))
    return out


def to_json(results: list[CaseResult]) -> list[dict[str, Any]]:
    return [
        {
            "id": r.case.id,
            "label": r.case.label,
            "n": r.n,
            "median": asdict(r.stats),
            "runs": [asdict(s) for s in r.runs],
        }
        for r in results
    ]


# -- command line -----------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=Config.n, help="records per case (default %(default)s)")
    p.add_argument("--fsync-n", type=int, default=Config.fsync_n, help="records for fsync-per-write cases")
    p.add_argument("--reps", type=int, default=Config.reps, help="repetitions; medians are reported")
    p.add_argument("--warmup", type=int, default=Config.warmup, help="untimed writes before a timed write run")
    p.add_argument("--quick", action="store_true", help=f"fast smoke run: {QUICK}")
    p.add_argument("--dir", type=Path, default=DEFAULT_BENCH_DIR, help="scratch directory (disk-backed)")


def config_from(args: argparse.Namespace) -> Config:
    if args.quick:
        return Config(bench_dir=args.dir, **QUICK)
    return Config(args.n, args.fsync_n, args.reps, args.warmup, args.dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.add_argument("--only", help="run only cases whose id contains this text (or one of these, comma-separated)")
    p.add_argument("--json", type=Path, help="also write the raw results here")
    args = p.parse_args(argv)
    cfg = config_from(args)
    only = args.only.split(",") if args.only else None
    selected = [c for c in cases() if any(o in c.id for o in only)] if only else None
    results = run(cfg, selected)
    print(table(results))
    print(f"\n¹ fsync per write: N = {cfg.fsync_n:,}")
    for t in target_outcomes(results):
        print(f"- {t.text}: {t.measured:.2f}x, {'met' if t.met else 'NOT met'}")
    if args.json:
        args.json.write_bytes(orjson.dumps(to_json(results), option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
