"""LangGraph stores in one run: hrm-memory's MemoryStore against InMemoryStore and SqliteStore.

    python -m benchmarks.bench_langgraph [--n 2000] [--reps 3] [--out FILE.md]
    python -m benchmarks.bench_langgraph --quality [--repo LOCOMO_CLONE]

Each store is driven through LangGraph's own API (``put``, ``get``,
``search``), the way a graph's nodes call it. Per rep and per store: a fresh
store in a fresh directory under ``bench-data/`` (SQLite's file there too);
``put`` of N new items (the record set of ``benchmarks.harness``: ~207-byte
dicts, 5 namespaces ``("bench", "ns<i>")``, shuffled order), ``get`` of the N
items (shuffled), then ``search`` of one namespace (N/5 items) with a filter
(``{"kind": "plan"}``, limit 10) and without (limit 10), 50 calls each. The
stores are interleaved (rep 1 of each, then rep 2, ...); a ratio is the median
over reps of MemoryStore's ops/s over the peer's ops/s in the same rep.

Durability is not the same everywhere: InMemoryStore keeps nothing;
SqliteStore commits each put (its default ``synchronous`` setting: FULL, an
fsync per commit in rollback-journal mode); MemoryStore runs both with
``durability="fsync"`` (an fsync per put: the comparable figure) and with
``"flush"`` (survives a crash of the process, not of the machine).

``--quality``: search quality on the recall issue's benchmark (LoCoMo, as
``benchmarks/bench_recall.py`` reads it: every dialogue turn one item
``{"text", "speaker", "date"}`` in namespace ``("conv", "<i>")``, every
question of categories 1-4 a ``search(("conv", "<i>"), query=q, limit=10)``,
its evidence turns the relevant items; recall@k and hit@k as there), through
the LangGraph API: ``InMemoryStore`` and ``MemoryStore`` with the same
embedder (a deterministic hashed bag of words, 256 dimensions, on ``text``;
no model is downloaded), the same embedder handed to hrm-memory's recall
(``query_mode="recall"``: hybrid text and vectors), and ``MemoryStore`` without
an embedder, whose query goes through hrm-memory's lexical recall over ``text``
and ``speaker``.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


from benchmarks.harness import (
    DEFAULT_BENCH_DIR,
    fmt_num,
    log,
    machine_info,
    make_key,
    make_record,
    md_table,
)

OPS = ("put", "get", "search (filter)", "search (no filter)")
SEARCHES = 50


@contextmanager
def _memory_store(root: Path, durability: str) -> Iterator[Any]:
    from hrm_memory.langgraph import MemoryStore

    with MemoryStore(root=str(root), durability=durability) as store:
        yield store


@contextmanager
def _inmemory(root: Path) -> Iterator[Any]:
    from langgraph.store.memory import InMemoryStore

    yield InMemoryStore()


@contextmanager
def _sqlite(root: Path) -> Iterator[Any]:
    from langgraph.store.sqlite import SqliteStore

    root.mkdir(parents=True, exist_ok=True)
    with SqliteStore.from_conn_string(str(root / "store.sqlite")) as store:
        store.setup()
        yield store


STORES: dict[str, Callable[[Path], Any]] = {
    "MemoryStore (fsync)": lambda root: _memory_store(root, "fsync"),
    "MemoryStore (flush)": lambda root: _memory_store(root, "flush"),
    "InMemoryStore": _inmemory,
    "SqliteStore (file)": _sqlite,
}


def _rate(calls: list[Callable[[], object]]) -> float:
    gc.collect()
    start = time.perf_counter()
    for call in calls:
        call()
    return len(calls) / (time.perf_counter() - start)


def one_rep(name: str, root: Path, n: int, seed: int) -> dict[str, float]:
    shutil.rmtree(root, ignore_errors=True)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    items = [(("bench", f"ns{i % 5}"), make_key(i), make_record(i)) for i in order]
    out: dict[str, float] = {}
    with STORES[name](root) as store:
        out["put"] = _rate([lambda ns=ns, k=k, v=v: store.put(ns, k, v) for ns, k, v in items])
        random.Random(seed + 1).shuffle(items)
        out["get"] = _rate([lambda ns=ns, k=k: store.get(ns, k) for ns, k, _ in items])
        got = store.get(*items[0][:2])
        assert got is not None and got.value == items[0][2], name
        found = store.search(("bench", "ns1"), filter={"kind": "plan"}, limit=10)
        assert found and all(i.value["kind"] == "plan" for i in found), name
        out["search (filter)"] = _rate(
            [lambda: store.search(("bench", "ns1"), filter={"kind": "plan"}, limit=10)] * SEARCHES
        )
        out["search (no filter)"] = _rate([lambda: store.search(("bench", "ns1"), limit=10)] * SEARCHES)
    shutil.rmtree(root, ignore_errors=True)
    return out


def run(n: int, reps: int, bench_dir: Path) -> str:
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in STORES}
    for rep in range(reps):
        for name in STORES:
            log(f"rep {rep + 1}/{reps}: {name}")
            runs[name].append(one_rep(name, bench_dir / "langgraph" / name.split()[0].lower(), n, 1000 + rep))
    ours = ("MemoryStore (fsync)", "MemoryStore (flush)")
    rows = []
    for op in OPS:
        row: list[object] = [op]
        row += [fmt_num(statistics.median(r[op] for r in runs[name])) for name in STORES]
        for mine, peer in ((ours[1], "InMemoryStore"), (ours[0], "SqliteStore (file)"), (ours[1], "SqliteStore (file)")):
            ratio = statistics.median(a[op] / b[op] for a, b in zip(runs[mine], runs[peer]))
            row.append(f"{ratio:.2f}x")
        rows.append(row)
    headers = ["op (ops/s, median of reps)", *STORES, "flush / InMemory", "fsync / Sqlite", "flush / Sqlite"]
    info = machine_info(bench_dir)
    machine = md_table(["", ""], [(k, v) for k, v in info.items() if k in ("date", "hrm-memory revision", "cpu", "os", "python", "bench dir", "versions", "load average at start (1/5/15 min)")])
    return (
        f"N = {n:,} items ({n // 5:,} per namespace), {reps} reps, {SEARCHES} searches per search case.\n\n"
        + md_table(headers, rows)
        + "\n\n"
        + machine
        + "\n"
    )


def hashed_bow(texts: list[str], dims: int = 256) -> list[list[float]]:
    """A deterministic embedder: word counts hashed into ``dims`` signed buckets."""
    import re
    import zlib

    out = []
    for text in texts:
        vec = [0.0] * dims
        for word in re.findall(r"\w+", text.lower()):
            h = zlib.crc32(word.encode())
            vec[h % dims] += 1.0 if h & 0x80000000 else -1.0
        out.append(vec)
    return out


def quality(repo: str, bench_dir: Path) -> str:
    from langgraph.store.memory import InMemoryStore

    from benchmarks.bench_recall import KS, load, questions, score, turns
    from hrm_memory.langgraph import MemoryStore

    root = bench_dir / "langgraph-quality"
    shutil.rmtree(root, ignore_errors=True)
    dense = {"dims": 256, "embed": hashed_bow, "fields": ["text"]}
    stores: dict[str, Any] = {
        "InMemoryStore, hashed-BoW embedder": InMemoryStore(index=dense),  # type: ignore[arg-type]
        "MemoryStore, same embedder": MemoryStore(root=str(root / "dense"), durability="flush", index=dense),  # type: ignore[arg-type]
        "MemoryStore, same embedder, query_mode='recall' (hybrid)": MemoryStore(
            root=str(root / "hybrid"), durability="flush", index=dense, query_mode="recall"  # type: ignore[arg-type]
        ),
        "MemoryStore, no embedder (lexical recall)": MemoryStore(
            root=str(root / "lexical"), durability="flush", index={"fields": ["text", "speaker"]}  # type: ignore[typeddict-item]
        ),
    }
    results: dict[str, list[tuple[list[str], set[str]]]] = {name: [] for name in stores}
    seconds: dict[str, float] = {name: 0.0 for name in stores}
    n_docs = n_q = 0
    for i, conv in enumerate(load(repo)):
        docs = turns(conv)
        n_docs += len(docs)
        ns = ("conv", str(i))
        qs = questions(conv, {d["id"] for d in docs})
        n_q += len(qs)
        log(f"conversation {i}: {len(docs)} turns, {len(qs)} questions")
        for name, store in stores.items():
            # one put per turn: InMemoryStore's batch fails when two turns of a
            # batch have the same text (it embeds each distinct text once but
            # counts every one)
            for d in docs:
                store.put(ns, d["id"], {"text": d["text"], "speaker": d["speaker"], "date": d["date"]})
            t0 = time.perf_counter()
            for q, evidence in qs:
                results[name].append(([h.key for h in store.search(ns, query=q, limit=max(KS))], evidence))
            seconds[name] += time.perf_counter() - t0
    for store in stores.values():
        if isinstance(store, MemoryStore):
            store.close()
    shutil.rmtree(root, ignore_errors=True)
    rows = []
    for name, res in results.items():
        sc = score(res)
        rows.append([name, *(f"{sc[f'recall@{k}']:.3f}" for k in KS), *(f"{sc[f'hit@{k}']:.3f}" for k in KS),
                     f"{seconds[name] / max(n_q, 1) * 1000:.1f}"])
    headers = ["store", *(f"recall@{k}" for k in KS), *(f"hit@{k}" for k in KS), "ms per search (mean)"]
    return f"LoCoMo: {n_docs:,} turns, {n_q:,} questions (categories 1-4).\n\n" + md_table(headers, rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH_DIR)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quality", action="store_true", help="search quality on LoCoMo instead of throughput")
    parser.add_argument("--repo", default=None, help="LoCoMo clone (default: bench_recall's)")
    args = parser.parse_args()
    if args.quality:
        from benchmarks.bench_recall import DEFAULT_REPO

        text = quality(args.repo or os.environ.get("HRM_MEMORY_LOCOMO") or DEFAULT_REPO, args.bench_dir)
    else:
        text = run(args.n, args.reps, args.bench_dir)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
