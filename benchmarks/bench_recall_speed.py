"""Recall speed: latency of ``recall()`` as the store grows, and what the index
costs the write path.

Data: sentences of 6-18 words drawn from a fixed-seed vocabulary (40 English
function words, then 30,000 made-up words of 2-4 syllables) with Zipfian
frequencies (rank ``r`` has weight ``1 / r**1.07``), one record ``{"text":
sentence}`` per key in one namespace ``bench.text`` declared with
``index=("text",)``, written with ``durability="flush"``.

Queries (200, fixed seed): 2-4 words, each drawn with the same Zipfian
weights, plus one rare word (rank 5,000-30,000) in half of them; stopwords
are left out by recall itself, as for any query. Every query is run once
untimed (warm the caches), then the set three times, timed one by one; p50
and p99 over all of those calls.

Per size (10k, 100k, 1M, capped by ``--max-n``):

- *build*: the writes, timed (records/s);
- *first recall after building*: the same process's first ``recall()``,
  which indexes everything written since the last one (the write path only
  noted the keys): the deferred cost, reported in total and per record;
- *first recall in a new process* (a fresh ``MemoryManager`` on the root):
  the index is current; the process opens it and reads the change log
  from the index's cursor (no key list is compared unless a dead writer
  left a ``recover`` entry);
- *steady state*: p50/p99 as above, lexical;
- *hybrid* (10k and 100k): ``MemoryManager(embed=...)`` with a deterministic
  hashing-trick embedder (words hashed into 64 dimensions, signed), the
  first recall (which embeds every record) and steady-state p50/p99.

Write path: ``mm.write`` into an indexed namespace against one without an
index (same data, same manager settings, ``durability="flush"``), in
alternating blocks; the ratio of the median per-write times (target <= 1.3x).

    python -m benchmarks.bench_recall_speed [--max-n 1000000] [--out BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import random
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.recall import text as rt
from hrm_memory.recall.search import candidates_for
from hrm_memory.recall.textindex import RANKED, TextIndex, first_probe

from .harness import (
    DEFAULT_BENCH_DIR,
    OtherLoad,
    fmt_num,
    fresh_dir,
    log,
    machine_info,
    md_table,
    percentile,
    write_section,
)

SECTION = "## Recall: speed"
NS = "bench.text"
PLAIN = "bench.plain"
SPECS = [
    NamespaceSpec(NS, index=("text",), kind="semantic", description="indexed sentences"),
    NamespaceSpec(PLAIN, description="the same sentences, no index"),
]
FUNCTION_WORDS = ["the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are", "with", "as", "i", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "not", "but", "what", "all", "were", "we", "when", "your", "can", "said"]
N_WORDS = 30_000
ZIPF_S = 1.07
SEED = 1515
#: The worst case: nothing but function words, so recall keeps them all and
#: they match nearly every record.
STOPWORD_QUERIES = ["of the", "what is it", "that you", "and the", "was it the", "in the of", "we are", "he was"]


# -- data ------------------------------------------------------------------------------


class Corpus:
    """The vocabulary and its Zipfian weights; sentences and queries from fixed seeds."""

    def __init__(self) -> None:
        rng = random.Random(SEED)
        onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch", "cl", "dr", "fl", "gr", "pl", "sh", "st", "tr", "th"]
        vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
        codas = ["", "", "", "n", "r", "s", "l", "m", "nd", "st", "rk"]
        words: list[str] = list(FUNCTION_WORDS)
        seen = set(words)
        while len(words) < len(FUNCTION_WORDS) + N_WORDS:
            w = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(2, 4)))
            if w not in seen:
                seen.add(w)
                words.append(w)
        self.words = words
        self.cum = list(itertools.accumulate(1.0 / (r**ZIPF_S) for r in range(1, len(words) + 1)))

    def sentences(self, n: int, seed: int) -> list[str]:
        rng = random.Random(seed)
        lengths = [rng.randint(6, 18) for _ in range(n)]
        flat = rng.choices(self.words, cum_weights=self.cum, k=sum(lengths))
        out, i = [], 0
        for length in lengths:
            out.append(" ".join(flat[i : i + length]).capitalize() + ".")
            i += length
        return out

    def queries(self, n: int, seed: int) -> list[str]:
        """``n`` queries of 2-4 content words drawn with the corpus's Zipfian
        weights (a rare one, rank 5,000+, last in every other query), half of
        them led by a function word, as people phrase them."""
        rng = random.Random(seed)
        first = len(FUNCTION_WORDS)
        content, base = self.words[first:], self.cum[first - 1]
        cum = [c - base for c in self.cum[first:]]
        out = []
        for j in range(n):
            q = rng.choices(content, cum_weights=cum, k=rng.randint(2, 4))
            if j % 2 == 0:
                q[-1] = self.words[rng.randrange(5_000, len(self.words))]
            if j % 4 < 2:
                q.insert(0, rng.choice(FUNCTION_WORDS))
            out.append(" ".join(q))
        return out


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def hashing_embedder(texts: list[str]) -> list[list[float]]:
    """Words hashed into 64 signed dimensions (deterministic, no model)."""
    out = []
    for text in texts:
        v = [0.0] * 64
        for w in text.lower().split():
            h = int.from_bytes(hashlib.blake2b(w.strip(".,").encode(), digest_size=4).digest(), "little")
            v[h & 63] += 1.0 if h & 64 else -1.0
        out.append(v)
    return out


# -- measuring -------------------------------------------------------------------------


def fill(mm: MemoryManager, ns: str, sentences: Sequence[str], start: int = 0) -> float:
    """Write the sentences; return the seconds it took."""
    write = mm.write
    t0 = time.perf_counter()
    for i, s in enumerate(sentences, start):
        write(ns, f"doc-{i:08d}", {"text": s})
    return time.perf_counter() - t0


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def latencies(mm: MemoryManager, queries: Sequence[str], reps: int,
              cpu: list[float] | None = None) -> tuple[list[float], float]:
    """Seconds per call (sorted) and the mean number of hits; ``cpu``, when
    given, receives each call's thread CPU seconds (sorted): the call's own
    work, which other processes on a busy machine do not inflate as they do
    the wall time (recall runs on the caller's thread, SQLite included)."""
    for q in queries:
        mm.recall(q, namespaces=NS)
    samples, hits = [], 0
    recall = mm.recall
    for _ in range(reps):
        for q in queries:
            c0 = time.thread_time()
            t0 = time.perf_counter()
            found = recall(q, namespaces=NS)
            samples.append(time.perf_counter() - t0)
            if cpu is not None:
                cpu.append(time.thread_time() - c0)
            hits += len(found)
    samples.sort()
    if cpu is not None:
        cpu.sort()
    return samples, hits / len(samples)


def fts_floor(root: Path, queries: Sequence[str], reps: int) -> float:
    """p50 of the bare FTS5 query recall starts from: the index's own ranking
    statement (``textindex.RANKED``) for the same terms after pruning,
    OR-ed, as many rows as recall(k=10)'s first try ranks; rowids and scores
    only: no join, no check against the store, no ranking signals, one
    stage. The floor under recall's latency."""
    db = sqlite3.connect(f"file:{root / 'index' / 'recall.db'}?mode=ro", uri=True)
    try:
        probe = first_probe(candidates_for(10, dense=False))  # recall(k=10)'s first try
        index = TextIndex(root / "index")  # recall's own pruning of common words
        try:
            matches = [rt.fts_query(index.selective(rt.query_terms(q)) or rt.query_terms(q)) for q in queries]
        finally:
            index.close()
        for m in matches:
            db.execute(RANKED, (m, probe)).fetchall()
        samples = []
        for _ in range(reps):
            for m in matches:
                t0 = time.perf_counter()
                db.execute(RANKED, (m, probe)).fetchall()
                samples.append(time.perf_counter() - t0)
    finally:
        db.close()
    samples.sort()
    return percentile(samples, 50)


def bench_size(corpus: Corpus, n: int, queries: list[str], base: Path, reps: int, hybrid: bool) -> dict[str, Any]:
    root = fresh_dir(base / f"recall-{n}")
    log(f"n={n:,}: generating sentences")
    sentences = corpus.sentences(n, seed=SEED + n)
    out: dict[str, Any] = {"n": n}
    with MemoryManager(root, durability="flush", namespaces=SPECS) as mm:
        log(f"n={n:,}: writing")
        out["build_s"] = fill(mm, NS, sentences)
        del sentences
        log(f"n={n:,}: wrote in {out['build_s']:.1f} s; first recall (indexes all of it)")
        out["first_s"] = timed(lambda: mm.recall(queries[0], namespaces=NS))
        log(f"n={n:,}: first recall {out['first_s']:.1f} s")
    with MemoryManager(root, durability="flush", namespaces=SPECS) as mm:
        out["first_new_process_s"] = timed(lambda: mm.recall(queries[1], namespaces=NS))
        cpu: list[float] = []
        samples, mean_hits = latencies(mm, queries, reps, cpu)
        out["p50"], out["p99"] = percentile(samples, 50), percentile(samples, 99)
        out["cpu_p50"], out["cpu_p90"], out["cpu_p99"] = (percentile(cpu, q) for q in (50, 90, 99))
        out["mean_hits"] = mean_hits
        log(f"n={n:,}: lexical p50 {out['p50'] * 1e3:.2f} ms, p99 {out['p99'] * 1e3:.2f} ms")
        worst, _ = latencies(mm, STOPWORD_QUERIES, 1)
        out["stopwords_p50"] = percentile(worst, 50)
        log(f"n={n:,}: function-words-only queries p50 {out['stopwords_p50'] * 1e3:.2f} ms")
    out["index_bytes"] = sum(p.stat().st_size for p in (root / "index").iterdir())
    out["fts_p50"] = fts_floor(root, queries, reps)
    log(f"n={n:,}: bare FTS5 p50 {out['fts_p50'] * 1e3:.2f} ms")
    if hybrid:
        # Another index, built with vectors: the same records, a new index dir.
        shutil.rmtree(root / "index")
        with MemoryManager(root, durability="flush", namespaces=SPECS, embed=hashing_embedder) as mm:
            out["hybrid_first_s"] = timed(lambda: mm.recall(queries[0], namespaces=NS))
            log(f"n={n:,}: hybrid first recall (embeds everything) {out['hybrid_first_s']:.1f} s")
            # Dense retrieval is slow: fewer queries, each timed once.
            samples = []
            for q in queries[: 20 if n <= 10_000 else 10]:
                samples.append(timed(lambda q=q: mm.recall(q, namespaces=NS)))
            samples.sort()
            out["hybrid_queries"] = len(samples)
            out["hybrid_p50"], out["hybrid_p99"] = percentile(samples, 50), percentile(samples, 99)
            log(f"n={n:,}: hybrid p50 {out['hybrid_p50'] * 1e3:.2f} ms, p99 {out['hybrid_p99'] * 1e3:.2f} ms")
    shutil.rmtree(root, ignore_errors=True)
    return out


def bench_write_path(corpus: Corpus, base: Path, n: int, blocks: int) -> dict[str, float]:
    """Per-write seconds into the indexed namespace and the plain one, in
    alternating blocks of ``n`` writes (fresh keys each block), medians; and the
    deferred cost: the first recall after ``n`` indexed writes, per write."""
    root = fresh_dir(base / "recall-write-path")
    sentences = corpus.sentences(n, seed=SEED)
    indexed: list[float] = []
    plain: list[float] = []
    deferred: list[float] = []
    with MemoryManager(root, durability="flush", namespaces=SPECS) as mm:
        fill(mm, NS, sentences[:1000], start=10**7)  # warm both namespaces' files
        fill(mm, PLAIN, sentences[:1000], start=10**7)
        mm.recall("warm", namespaces=NS)
        for b in range(blocks):
            order = [(NS, indexed), (PLAIN, plain)] if b % 2 == 0 else [(PLAIN, plain), (NS, indexed)]
            for ns, into in order:
                into.append(fill(mm, ns, sentences, start=b * n) / n)
            deferred.append(timed(lambda: mm.recall("warm", namespaces=NS)) / n)
    shutil.rmtree(root, ignore_errors=True)
    return {"indexed_us": statistics.median(indexed) * 1e6, "plain_us": statistics.median(plain) * 1e6,
            "ratio": statistics.median(indexed) / statistics.median(plain),
            "deferred_us": statistics.median(deferred) * 1e6, "n": n, "blocks": blocks}


# -- report ----------------------------------------------------------------------------


def ms(x: float | None) -> str:
    return "-" if x is None else fmt_num(x * 1e3)


def secs(x: float | None) -> str:
    return "-" if x is None else fmt_num(x)


def report(rows: list[dict[str, Any]], wp: dict[str, float], info: dict[str, str], command: str,
           other_load: float, reps: int, n_queries: int) -> str:
    table = md_table(
        ["records", "build (writes/s)", "first recall after building, s (per record, us)",
         "first recall, new process, ms", "lexical p50 ms", "lexical p99 ms",
         "thread CPU p50 / p90 / p99 ms", "mean hits",
         "function words only, p50 ms", "bare FTS5 p50 ms", "index MB", "hybrid: first recall s", "hybrid p50 ms", "hybrid p99 ms"],
        [[f"{r['n']:,}", fmt_num(r["n"] / r["build_s"]), f"{secs(r['first_s'])} ({fmt_num(r['first_s'] / r['n'] * 1e6)})",
          ms(r["first_new_process_s"]), ms(r["p50"]), ms(r["p99"]),
          f"{ms(r['cpu_p50'])} / {ms(r['cpu_p90'])} / {ms(r['cpu_p99'])}", fmt_num(r["mean_hits"]), ms(r["stopwords_p50"]), ms(r["fts_p50"]),
          fmt_num(r["index_bytes"] / 1e6), secs(r.get("hybrid_first_s")), ms(r.get("hybrid_p50")),
          ms(r.get("hybrid_p99"))] for r in rows],
    )
    targets = {10_000: 0.001, 100_000: 0.002, 1_000_000: 0.005}  # the p50 latency targets by store size
    verdict = "; ".join(
        f"p50 at {r['n']:,}: **{r['p50'] * 1e3:.2f} ms** wall, **{r['cpu_p50'] * 1e3:.2f} ms** thread CPU (target "
        f"< {targets[r['n']] * 1e3:g} ms: {'met' if r['p50'] < targets[r['n']] else 'not met'} in wall time, "
        f"{'met' if r['cpu_p50'] < targets[r['n']] else 'not met'} in CPU)"
        for r in rows if r["n"] in targets) or "no size run"
    ratio_verdict = "met" if wp["ratio"] <= 1.3 else "not met"
    hybrid_counts = ", ".join(f"{r['hybrid_queries']} queries at {r['n']:,}" for r in rows if "hybrid_queries" in r)
    examples = ", ".join(f'"{q}"' for q in STOPWORD_QUERIES[:3])
    slow_builds = [r for r in rows if r["build_s"] + r["first_s"] > 600]
    lines = [
        SECTION,
        "",
        f"`{command}` (`benchmarks/bench_recall_speed.py`), {info['date']}, revision {info['hrm-memory revision']}.",
        (f"Machine: {info['cpu']} (2 cores), {info['memory']}, {info['os']}, {info['python']}; bench dir "
         f"{info['bench dir']}. Other processes used {other_load:.0%} of the CPUs over the run (load average at "
         f"start {info['load average at start (1/5/15 min)']})"
         + ("; **noisy**: the figures are upper bounds." if other_load >= 0.10 else ": a quiet machine.")),
        "",
        ("Data: one namespace `bench.text` (`index=(\"text\",)`, `kind=\"semantic\"`), one record "
         "`{\"text\": sentence}` per key; sentences of 6-18 words from a 30,040-word vocabulary (40 English "
         f"function words first) with Zipfian frequencies (s = {ZIPF_S}), fixed seed. Queries: {n_queries} of "
         "2-4 content words with the same frequencies, half of them with a rare word (rank 5,000+), half led by "
         f"a function word; each run once untimed, then {reps} times timed; `k=10`, lexical unless said. Hybrid: "
         "`MemoryManager(embed=...)` with a hashing-trick embedder (64 signed dimensions, no model), the default "
         f"fusion (weighted, text 0.9 / dense 0.1){' and numpy' if _has_numpy() else ', no numpy (a pure-Python dot product)'}; its p50/p99 are over {hybrid_counts or 'no size'}, each timed once."),
        "",
        table,
        "",
        f"- {verdict}.",
        ("- *First recall after building* is the deferred cost of the index: the writes only noted their keys, "
         "and the first recall indexed all of them (read back from the store, text extracted, inserted into "
         "FTS5, one transaction). *New process*: the index was current; a new process's first recall opens it "
         f"and reads the change log from its cursor. *Function words only*: queries such as {examples}: with nothing else "
         "left, recall searches for them, and they match nearly every record. *Bare FTS5*: the same queries' "
         "terms, OR-ed, best 25 by bm25 straight from the index file (no join, no check against the store, no "
         "ranking signals, one stage): the floor under recall's latency."),
        (f"- Write path (`mm.write`, `durability=\"flush\"`, {wp['blocks']} alternating blocks of {wp['n']:,} "
         f"writes): indexed namespace {wp['indexed_us']:.1f} us per write, no index {wp['plain_us']:.1f} us: "
         f"**{wp['ratio']:.2f}x** (target <= 1.3x: {ratio_verdict}). Deferred: the first recall after each "
         f"block cost {wp['deferred_us']:.1f} us per record written."),
    ]
    for r in slow_builds:
        lines.append(f"- {r['n']:,} records took {(r['build_s'] + r['first_s']) / 60:.1f} min to write and index "
                     f"({r['build_s'] / 60:.1f} min of writes, {r['first_s'] / 60:.1f} min for the first recall).")
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-n", type=int, default=1_000_000)
    parser.add_argument("--hybrid-max-n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--write-n", type=int, default=5_000, help="writes per block on the write path")
    parser.add_argument("--write-blocks", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=DEFAULT_BENCH_DIR)
    parser.add_argument("--out", type=Path, default=None, help="write the section into this file (BENCHMARKS.md)")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.bench_recall_speed" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    args.dir.mkdir(parents=True, exist_ok=True)
    info = machine_info(args.dir)
    load = OtherLoad()
    corpus = Corpus()
    queries = corpus.queries(args.queries, seed=SEED + 1)
    log("write path")
    wp = bench_write_path(corpus, args.dir, args.write_n, args.write_blocks)
    log(f"write path: {wp['ratio']:.2f}x ({wp['indexed_us']:.1f} vs {wp['plain_us']:.1f} us)")
    rows = []
    for n in (10_000, 100_000, 1_000_000):
        if n > args.max_n:
            break
        rows.append(bench_size(corpus, n, queries, args.dir, args.reps, hybrid=n <= args.hybrid_max_n))
    section = report(rows, wp, info, command, load.share(), args.reps, len(queries))
    print(section)
    if args.out is not None:
        write_section(args.out, SECTION, section)


if __name__ == "__main__":
    main()
