"""What the posting budget (recall/textindex.py ``POSTINGS``) changes in
recall's ranking, and what it saves, on bench_recall_speed's data.

For each of bench_recall_speed's 200 queries, on a store of ``--n`` records
(built under ``--dir`` with the same sentences and kept there for reruns):
the words recall ranks with the budget and without it; for the queries where
they differ, the share of the top 10 records (FTS5's bm25 ranking of the
passages, the first stage of recall) that the two rankings share, and the
thread CPU of that ranking with and without the budget; then ``recall()``'s
thread CPU p50/p90/p99 over the 200 queries x ``--reps``, with the budget and
without it.

    python -m benchmarks.bench_recall_budget [--n 1000000] [--dir PATH] [--reps 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from pathlib import Path

from hrm_memory import MemoryManager
from hrm_memory.recall import text as rt
from hrm_memory.recall import textindex as ti

from .bench_recall_speed import NS, SEED, SPECS, Corpus, fill
from .harness import DEFAULT_BENCH_DIR, log, percentile

UNLIMITED = 10**12


def store(corpus: Corpus, n: int, base: Path) -> Path:
    root = base / f"recall-budget-{n}"
    if not (root / "index" / ti.FILE_NAME).exists():
        log(f"building {n:,} records under {root}")
        with MemoryManager(root, durability="flush", namespaces=SPECS) as mm:
            fill(mm, NS, corpus.sentences(n, seed=SEED + n))
            mm.recall("warm up", namespaces=NS)
    return root


def ranked(db: sqlite3.Connection, match: str, start: int) -> tuple[float, list[int]]:
    """Thread CPU seconds of the ranking (mean of 3, after one untimed) and its best 10 records."""
    sql, args = (ti.RANKED, (match, 25)) if not start else (ti._RANKED_FROM, (match, start, 25))
    db.execute(sql, args).fetchall()
    t0 = time.thread_time()
    for _ in range(3):
        rows = db.execute(sql, args).fetchall()
    docs: list[int] = []
    for rowid, _ in rows:
        if rowid >> ti.PART_BITS not in docs:
            docs.append(rowid >> ti.PART_BITS)
    return (time.thread_time() - t0) / 3, docs[:10]


def window_start(db: sqlite3.Connection, match: str, newest: int | None) -> int:
    if not newest:
        return 0
    nth = db.execute(ti._NTH_NEWEST, (match, newest - 1)).fetchone()
    return nth[0] if nth else 0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=DEFAULT_BENCH_DIR)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    corpus = Corpus()
    queries = corpus.queries(200, seed=SEED + 1)
    root = store(corpus, args.n, args.dir)
    budget = ti.POSTINGS
    index = ti.TextIndex(root / "index")
    db = sqlite3.connect(f"file:{root / 'index' / ti.FILE_NAME}?mode=ro", uri=True)
    shared, t_full, t_budget = [], [], []
    try:
        for q in queries:
            terms = rt.query_terms(q)
            ti.POSTINGS = UNLIMITED
            full = index.selective(terms) or terms
            ti.POSTINGS = budget
            kept = index.selective(terms) or terms
            newest = index.window(kept)
            if kept == full and not newest:
                continue
            tf, best_full = ranked(db, rt.fts_query(full), 0)
            tb, best_kept = ranked(db, rt.fts_query(kept), window_start(db, rt.fts_query(kept), newest))
            t_full.append(tf)
            t_budget.append(tb)
            shared.append(len(set(best_full) & set(best_kept)) / max(1, len(best_full)))
    finally:
        ti.POSTINGS = budget
        index.close()
        db.close()
    print(f"{args.n:,} records, budget {budget:,} passages: {len(shared)} of {len(queries)} queries ranked differently")
    if shared:
        print(f"- top 10 records shared with the ranking without the budget: mean {statistics.mean(shared):.2f}, "
              f"min {min(shared):.2f}")
        print(f"- their ranking's thread CPU, mean: {statistics.mean(t_full) * 1e3:.2f} ms without the budget, "
              f"{statistics.mean(t_budget) * 1e3:.2f} ms with it")
    for label, value in (("with the budget", budget), ("without it", UNLIMITED)):
        ti.POSTINGS = value
        cpu: list[float] = []
        with MemoryManager(root, durability="flush", namespaces=SPECS) as mm:
            for q in queries:
                mm.recall(q, namespaces=NS)
            for _ in range(args.reps):
                for q in queries:
                    t0 = time.thread_time()
                    mm.recall(q, namespaces=NS)
                    cpu.append(time.thread_time() - t0)
        cpu.sort()
        print(f"- recall() thread CPU {label}: p50 {percentile(cpu, 50) * 1e3:.2f} ms, "
              f"p90 {percentile(cpu, 90) * 1e3:.2f}, p99 {percentile(cpu, 99) * 1e3:.2f}")
    ti.POSTINGS = budget


if __name__ == "__main__":
    main()
