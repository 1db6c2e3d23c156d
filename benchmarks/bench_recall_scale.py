"""Recall at scale: does the record holding every word of a question come
first, how fast, at what cost in bytes and memory; and a plain SQLite FTS5
table on the same data and questions, in the same run.

Data (generated here, seeded, deterministic): N records spread round-robin
over 4 indexed ``*.memories`` namespaces (focus, altitude, learning,
reasoning; indexed paths ``text`` and ``tags[*]``), written through the
public API (``MemoryManager.write``, durability ``flush``). A value is
``{"text", "tags", "name", "n"}``, about 196 bytes of JSON: a text of 15-19
words drawn from a vocabulary of 14,000 words (40 English function words
first, then made-up words) with a Zipf frequency (exponent 1.0), two tags
from 500, a name from 1,000, a number.

Questions: Q records picked at random (seeded); from each, 3, 1 or 5
distinct words of its text, in random order (any of its words: often one or
two of the 40 function words, which many records share). A second set of 3-word
questions, "3 content words", draws them among the record's words outside
the 40 function words (records with fewer than 3 such words are skipped).
A question is answered when its source record is among
``recall(q, namespaces="*.memories", k=10)``.

Baseline: one FTS5 table (``porter unicode61``) over the same indexed text
(text and tags), queried with the question's words AND-ed, then OR-ed when
the AND finds nothing, ordered by bm25, LIMIT 10.

Reported per size: top-10 rate per question length (ours, baseline);
``recall()`` p50/p99 wall and thread CPU (each question timed once, after
one warm-up recall), and the baseline's the same way; index bytes against the JSON bytes of the values;
index build (the first recall of a fresh process over a store with no
index) time and peak RSS, in a subprocess of its own; ``close()`` of an
idle store (opened, one read, closed) with and without the index file.

The store and the baseline table are cached under ``--dir``
(``bench-data/recall-scale/``, gitignored), so a rerun only re-indexes
(``--keep-index``: not even that).

Run: .venv/bin/python benchmarks/bench_recall_scale.py --sizes 10000 100000 [--questions 200]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from hrm_memory import MemoryManager

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIR = REPO / "bench-data" / "recall-scale"
SEED = 4141
DATA_VERSION = 1
NAMESPACES = ("focus.memories", "altitude.memories", "learning.memories", "reasoning.memories")
GLOB = "*.memories"
FUNCTION_WORDS = ["the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are",
                  "with", "as", "i", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by",
                  "not", "but", "what", "all", "were", "we", "when", "your", "can", "said", "there"]
N_WORDS = 14_000
ZIPF_S = 1.0
LENGTHS = (3, 1, 5)
#: The question sets reported: the word counts above (any words of the
#: record), then 3 words outside :data:`FUNCTION_WORDS`.
CONTENT = "3c"
SETS = (*map(str, LENGTHS), CONTENT)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _made_up(rng: random.Random, n: int, syllables: tuple[int, int], seen: set[str]) -> list[str]:
    onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
              "br", "ch", "cl", "dr", "fl", "gr", "pl", "sh", "st", "tr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
    codas = ["", "", "", "n", "r", "s", "l", "m", "nd", "st"]
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                    for _ in range(rng.randint(*syllables)))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


class Data:
    """The vocabulary, tags and names, and the records, from :data:`SEED`."""

    def __init__(self) -> None:
        rng = random.Random(SEED)
        seen = set(FUNCTION_WORDS)
        made = _made_up(rng, N_WORDS - len(FUNCTION_WORDS), (2, 3), seen)
        rng.shuffle(made)  # which made-up word is common is chance, not its length
        self.words = FUNCTION_WORDS + made
        self.cum = list(itertools.accumulate(1.0 / (r ** ZIPF_S) for r in range(1, len(self.words) + 1)))
        self.tags = _made_up(rng, 500, (2, 3), seen)
        self.names = [w.capitalize() for w in _made_up(rng, 1000, (2, 3), seen)]

    def records(self, n: int) -> Any:
        """``(i, namespace, key, value)`` for i in 0..n-1, the same for every n."""
        rng = random.Random(SEED + 1)
        words, cum, tags, names = self.words, self.cum, self.tags, self.names
        for i in range(n):
            text = " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(15, 19)))
            value = {"text": text, "tags": rng.sample(tags, 2), "name": rng.choice(names), "n": rng.randrange(10**6)}
            yield i, NAMESPACES[i % len(NAMESPACES)], f"m{i:07d}", value


def questions(data: Data, n: int, count: int) -> dict[str, list[dict[str, str]]]:
    """``count`` questions of each length, each from a random record of the first ``n``."""
    rng = random.Random(SEED + 2 + n)
    picks = {length: sorted(rng.sample(range(n), count)) for length in LENGTHS}
    wanted = {i for p in picks.values() for i in p}
    texts: dict[int, tuple[str, str, str]] = {}
    for i, ns, key, value in data.records(n):
        if i in wanted:
            texts[i] = (ns, key, value["text"])
    out: dict[str, list[dict[str, str]]] = {}
    for length, idx in picks.items():
        qs = []
        for i in idx:
            ns, key, text = texts[i]
            distinct = list(dict.fromkeys(text.split()))
            if len(distinct) < length:
                continue
            qs.append({"q": " ".join(rng.sample(distinct, length)), "ns": ns, "key": key})
        out[str(length)] = qs
    return out


def content_questions(data: Data, n: int, count: int) -> list[dict[str, str]]:
    """``count`` questions of 3 distinct words of a random record of the first
    ``n``, none of them a function word (a record with fewer such words is
    skipped: it yields no question)."""
    rng = random.Random(SEED + 3 + n)
    idx = sorted(rng.sample(range(n), count))
    wanted = set(idx)
    function = set(FUNCTION_WORDS)
    qs = []
    for i, ns, key, value in data.records(n):
        if i in wanted:
            content = [w for w in dict.fromkeys(value["text"].split()) if w not in function]
            if len(content) >= 3:
                qs.append({"q": " ".join(rng.sample(content, 3)), "ns": ns, "key": key})
        if i >= idx[-1]:
            break
    return qs


def load_questions(data: Data, n: int, where: Path, count: int) -> dict[str, list[dict[str, str]]]:
    """Every question set of a size: the cached ones, the content-word set
    made (and cached) on first use."""
    qs: dict[str, list[dict[str, str]]] = json.loads((where / "questions.json").read_text())
    extra = where / "questions-content.json"
    if not extra.exists():
        extra.write_text(json.dumps(content_questions(data, n, count)))
    qs[CONTENT] = json.loads(extra.read_text())
    return qs


# -- building (cached) -------------------------------------------------------------------


def build_store(data: Data, n: int, where: Path, count: int) -> dict[str, Any]:
    meta_path = where / "meta.json"
    if meta_path.exists():
        return dict(json.loads(meta_path.read_text()))
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    log(f"n={n:,}: writing the store through the public API")
    json_bytes = 0
    t0 = time.perf_counter()
    with MemoryManager(where / "store", durability="flush") as mm:
        write = mm.write
        for i, ns, key, value in data.records(n):
            write(ns, key, value)
            json_bytes += len(orjson.dumps(value))
            if i and i % 100_000 == 0:
                log(f"n={n:,}: {i:,} written ({time.perf_counter() - t0:.0f} s)")
    write_s = time.perf_counter() - t0
    log(f"n={n:,}: wrote in {write_s:.0f} s; the baseline table")
    t0 = time.perf_counter()
    db = sqlite3.connect(where / "fts5.db")
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(body, tokenize='porter unicode61')")
    db.execute("CREATE TABLE keys(id INTEGER PRIMARY KEY, key TEXT)")
    db.execute("BEGIN")
    for i, _ns, key, value in data.records(n):
        db.execute("INSERT INTO fts(rowid, body) VALUES (?, ?)", (i + 1, value["text"] + "\n" + "\n".join(value["tags"])))
        db.execute("INSERT INTO keys(id, key) VALUES (?, ?)", (i + 1, key))
    db.execute("COMMIT")
    db.close()
    fts_s = time.perf_counter() - t0
    qs = questions(data, n, count)
    (where / "questions.json").write_text(json.dumps(qs))
    meta = {"n": n, "json_bytes": json_bytes, "write_s": write_s, "fts_build_s": fts_s, "questions": count,
            "data_version": DATA_VERSION, "mean_value_bytes": json_bytes / n}
    meta_path.write_text(json.dumps(meta))
    return meta


def index_child(root: str) -> None:
    """In a process of its own: index the store (its first recall), print
    seconds and peak RSS (MiB) as JSON."""
    t0 = time.perf_counter()
    with MemoryManager(root, durability="flush") as mm:
        mm.recall("warm", namespaces=GLOB)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_rss_mib": peak}))


def close_child(root: str, reps: str) -> None:
    """In a process of its own: median seconds of close() of a store opened and read once."""
    samples = []
    for _ in range(int(reps)):
        mm = MemoryManager(root, durability="flush")
        mm.read(NAMESPACES[0], "m0000000")
        t0 = time.perf_counter()
        mm.close()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    print(json.dumps({"close_ms": samples[len(samples) // 2] * 1e3}))


def child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# -- measuring ------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))] if s else float("nan")


def run_ours(root: Path, qs: dict[str, list[dict[str, str]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with MemoryManager(root, durability="flush") as mm:
        mm.recall("warm up", namespaces=GLOB)
        for length, items in qs.items():
            wall, cpu, found, full = [], [], 0, 0
            for item in items:
                c0, t0 = time.thread_time(), time.perf_counter()
                hits = mm.recall(item["q"], namespaces=GLOB, k=10)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
                found += any(h.key == item["key"] and h.namespace == item["ns"] for h in hits)
                words = item["q"].lower().split()
                full += sum(all(w in (h.record.value.get("text", "").lower().split() + h.record.value.get("tags", []))
                                for w in words) for h in hits)
            out[length] = {"top10": found / len(items), "p50": pct(wall, 50), "p99": pct(wall, 99),
                           "cpu_p50": pct(cpu, 50), "cpu_p99": pct(cpu, 99), "full_hits": full, "n": len(items)}
    return out


def run_baseline(db_path: Path, qs: dict[str, list[dict[str, str]]]) -> dict[str, Any]:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    sql = "SELECT k.key FROM fts JOIN keys k ON k.id = fts.rowid WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT 10"
    out: dict[str, Any] = {}
    for length, items in qs.items():
        wall, cpu, found, shared = [], [], 0, 0
        for item in items:
            words = ['"' + w + '"' for w in item["q"].split()]
            c0, t0 = time.thread_time(), time.perf_counter()
            keys = [k for (k,) in db.execute(sql, (" AND ".join(words),))]
            if not keys:
                keys = [k for (k,) in db.execute(sql, (" OR ".join(words),))]
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            found += item["key"] in keys
            # (untimed) records holding every word: past 10, the source is one of many
            held = db.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (" AND ".join(words),)).fetchone()[0]
            shared += held > 10
        out[length] = {"top10": found / len(items), "p50": pct(wall, 50), "p99": pct(wall, 99),
                       "cpu_p50": pct(cpu, 50), "cpu_p99": pct(cpu, 99), "n": len(items), "shared": shared}
    db.close()
    return out


def bench_size(data: Data, n: int, base: Path, count: int, keep_index: bool) -> dict[str, Any]:
    where = base / f"n{n}-seed{SEED}-v{DATA_VERSION}-q{count}"
    meta = build_store(data, n, where, count)
    root = where / "store"
    res: dict[str, Any] = {"n": n, "meta": meta}
    if not keep_index or not (root / "index").exists():
        shutil.rmtree(root / "index", ignore_errors=True)
        log(f"n={n:,}: indexing (a fresh process)")
        res["index"] = child("--index-child", str(root))
        log(f"n={n:,}: indexed in {res['index']['seconds']:.1f} s, peak RSS {res['index']['peak_rss_mib']:.0f} MiB")
    res["index_bytes"] = sum(p.stat().st_size for p in (root / "index").iterdir() if p.is_file())
    res["store_bytes"] = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    qs = load_questions(data, n, where, count)
    log(f"n={n:,}: questions")
    res["ours"] = run_ours(root, qs)
    res["baseline"] = run_baseline(where / "fts5.db", qs)
    res["close_indexed_ms"] = child("--close-child", str(root), "30")["close_ms"]
    moved = where / "index.away"
    os.replace(root / "index", moved)
    try:
        res["close_unindexed_ms"] = child("--close-child", str(root), "30")["close_ms"]
    finally:
        os.replace(moved, root / "index")
    return res


def report(results: list[dict[str, Any]], label: str) -> str:
    lines = [f"### {label}", "",
             "| records | question | top-10 ours | top-10 FTS5 | ours p50 / p99 ms | ours CPU p50 / p99 ms"
             " | FTS5 p50 / p99 ms | FTS5 CPU p50 / p99 ms | hits holding all words (ours, of 10 x Q)"
             " | questions whose words > 10 records hold |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for length in SETS:
            o, b = r["ours"][length], r["baseline"][length]
            what = "3 content words" if length == CONTENT else f"{length} word" + ("s" if length != "1" else "")
            lines.append(f"| {r['n']:,} | {what} (Q={o['n']}) | {o['top10']:.1%} | {b['top10']:.1%}"
                         f" | {o['p50'] * 1e3:.2f} / {o['p99'] * 1e3:.2f} | {o['cpu_p50'] * 1e3:.2f} / {o['cpu_p99'] * 1e3:.2f}"
                         f" | {b['p50'] * 1e3:.2f} / {b['p99'] * 1e3:.2f} | {b['cpu_p50'] * 1e3:.2f} / {b['cpu_p99'] * 1e3:.2f}"
                         f" | {o['full_hits']} | {b.get('shared', '?')} |")
    lines += ["", "| records | JSON bytes | index bytes | index / JSON | index build s | build peak RSS MiB"
              " | close() idle, indexed / unindexed ms | write s (cached) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        m, ix = r["meta"], r.get("index", {})
        lines.append(f"| {r['n']:,} | {m['json_bytes']:,} | {r['index_bytes']:,} | {r['index_bytes'] / m['json_bytes']:.2f}x"
                     f" | {ix.get('seconds', float('nan')):.1f} | {ix.get('peak_rss_mib', float('nan')):.0f}"
                     f" | {r['close_indexed_ms']:.3f} / {r['close_unindexed_ms']:.3f} | {m['write_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--index-child":
        return index_child(sys.argv[2])
    if len(sys.argv) > 1 and sys.argv[1] == "--close-child":
        return close_child(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--questions", type=int, default=200, help="questions of each length")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--keep-index", action="store_true", help="reuse the cached index (no build measured)")
    ap.add_argument("--label", default="recall at scale")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    args = ap.parse_args()
    data = Data()
    results = []
    for n in args.sizes:
        results.append(bench_size(data, n, args.dir, args.questions, args.keep_index))
        log(f"n={n:,}: " + ", ".join(f"{k}w ours {v['top10']:.1%} p50 {v['p50'] * 1e3:.2f} ms"
                                      for k, v in results[-1]["ours"].items()))
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; {os.cpu_count()} cores")
    print(report(results, args.label))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
