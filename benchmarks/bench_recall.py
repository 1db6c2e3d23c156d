"""Recall quality on LoCoMo, against a plain BM25 baseline, in one run.

Data: LoCoMo (Maharana et al., ACL 2024, "Evaluating Very Long-Term
Conversational Memory of LLM Agents"), the ten conversations of
``data/locomo10.zip`` in the public repository ``snap-research/locomo``. The
repository carries no licence file; the data is read at run time from a local
clone (``--repo``, or ``$HRM_MEMORY_LOCOMO``) and never committed here.

Task: every dialogue turn of a conversation is one memory (``{"text",
"speaker", "date"}``, the image caption appended to the text when there is
one) in one namespace, in one store per conversation, written in the
conversation's order;
every question of categories 1-5 that has evidence turns is a query whose
relevant memories are those turns. recall@k (the figure the recall target is set in) is the share
of questions with an evidence turn among the first k results; share@k the
share of a question's evidence turns among them, averaged.

Held-out split: the ranking's constants chosen on LoCoMo (the near column's
weight and window, recall/textindex.py) were tuned on conversations 0-4
(``--split tune``); the figures reported are on conversations 5-9
(``--split report``, the default); ``--split all`` runs all ten.

Baseline: SQLite FTS5 with ``tokenize='porter unicode61'`` over ``"speaker:
text"``, the question's words OR-ed, ranked by bm25: the stemmed baseline a
retrieval engineer runs first. Ours: ``mm.recall(question, namespaces=...,
k=10)``, lexical, with what the engine does (passages, what was said just
before a turn in its own column, stopwords out of the query, the speaker's
name indexed beside the text, routing, ...).

With ``--embed minilm`` (all-MiniLM-L6-v2, ``hrm_memory.recall.embedders``; needs
the ``embed`` extra and numpy) the same run also ranks by the embedder alone
(cosine of the question against each turn, numpy: hybrid's dense half, on the
same text the index embeds) and runs ``recall()`` hybrid with each fusion,
RRF and weighted; ``--weights`` adds weighted fusion at other text weights.
Every text is embedded once per run (``--cache FILE.npz`` keeps them across
runs, outside the repository), so the latencies are the index's own; the
embedder's speed is measured apart.

Run: .venv/bin/python benchmarks/bench_recall.py [--repo PATH]
     EMBVENV/bin/python benchmarks/bench_recall.py --embed minilm [--cache F.npz] [--weights W ...]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.recall import search as recall_module

try:
    import numpy as np
except ImportError:  # lexical mode needs no numpy
    np = None  # type: ignore[assignment]

KS = (1, 5, 10)
DEFAULT_REPO = "/work/.mirror/snap-research+locomo/repo"


def load(repo: str) -> list[dict[str, Any]]:
    """The ten conversations, from the zip in the repository's HEAD (a bare
    git directory or a work tree)."""
    path = Path(repo)
    if (path / "data" / "locomo10.zip").exists():
        blob = (path / "data" / "locomo10.zip").read_bytes()
    else:
        blob = subprocess.run(
            ["git", f"--git-dir={path}", "show", "HEAD:data/locomo10.zip"], check=True, capture_output=True
        ).stdout
    z = zipfile.ZipFile(io.BytesIO(blob))
    return [json.loads(z.read(n)) for n in sorted(z.namelist()) if n.endswith(".json")]


def turns(conv: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for name, session in conv.items():
        m = re.fullmatch(r"session_(\d+)", name)
        if not m or not isinstance(session, list):
            continue
        date = conv.get(f"{name}_date_time", "")
        for turn in session:
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            out.append({"id": turn["dia_id"], "speaker": turn["speaker"], "text": text, "date": date})
    return out


def questions(conv: dict[str, Any], ids: set[str]) -> list[tuple[str, set[str]]]:
    out = []
    for qa in conv.get("qa", []):
        evidence = {e.strip() for e in qa.get("evidence", []) if isinstance(e, str)} & ids
        if evidence:
            out.append((qa["question"], evidence))
    return out


def baseline(docs: list[dict[str, str]]) -> Callable[[str, int], list[str]]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(id UNINDEXED, text, tokenize='porter unicode61')")
    db.executemany("INSERT INTO f VALUES (?, ?)", [(d["id"], f"{d['speaker']}: {d['text']}") for d in docs])

    def search(question: str, k: int) -> list[str]:
        words = re.findall(r"\w+", question.lower())
        if not words:
            return []
        q = " OR ".join(f'"{w}"' for w in dict.fromkeys(words))
        return [r[0] for r in db.execute("SELECT id FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (q, k))]

    return search


def score(results: list[tuple[list[str], set[str]]]) -> dict[str, float]:
    out = {}
    for k in KS:
        out[f"recall@{k}"] = sum(1 for r, ev in results if set(r[:k]) & ev) / len(results)
        out[f"share@{k}"] = sum(len(set(r[:k]) & ev) / len(ev) for r, ev in results) / len(results)
    return out


SPLITS = {"tune": range(0, 5), "report": range(5, 10), "all": range(0, 10)}


class CachedEmbedder:
    """An embedder (texts -> vectors) behind a cache by text, shared by every
    mode of a run so each text is embedded once; optionally kept in a file
    (``--cache``, outside the repository) across runs. Time spent embedding is
    counted apart (``seconds``, ``texts``), so recall()'s latency below is the
    index's own."""

    def __init__(self, fn: Callable[[list[str]], Any], path: str | None = None) -> None:
        self.fn, self.path = fn, path
        self.vecs: dict[str, Any] = {}
        self.seconds, self.texts = 0.0, 0
        if path and Path(path).exists():
            with np.load(path) as z:
                self.vecs = dict(zip(z["texts"].tolist(), z["vectors"]))

    def embed_documents(self, texts: list[str]) -> list[Any]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.vecs))
        if missing:
            t0 = time.perf_counter()
            out = np.asarray(self.fn(missing), dtype=np.float32)
            self.seconds += time.perf_counter() - t0
            self.texts += len(missing)
            self.vecs.update(zip(missing, out))
        return [self.vecs[t] for t in texts]

    def embed_query(self, text: str) -> Any:
        return self.embed_documents([text])[0]

    def matrix(self, texts: list[str]) -> Any:
        m = np.asarray(self.embed_documents(texts), dtype=np.float32)
        return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)

    def save(self) -> None:
        if self.path:
            keys = list(self.vecs)
            np.savez(self.path, texts=np.array(keys, dtype=object).astype(str),
                     vectors=np.stack([self.vecs[k] for k in keys]))


def embedder_speed(fn: Callable[[list[str]], Any], texts: list[str], queries: list[str]) -> dict[str, float]:
    """Throughput in batches (``texts``) and one-text latency (``queries``),
    uncached."""
    fn(texts[:8])
    t0 = time.perf_counter()
    fn(texts)
    batch = time.perf_counter() - t0
    one = []
    for q in queries:
        t0 = time.perf_counter()
        fn([q])
        one.append(time.perf_counter() - t0)
    return {"texts_per_s": len(texts) / batch, "query_p50_ms": sorted(one)[len(one) // 2] * 1000}


def body(d: dict[str, str]) -> str:
    """The text the index embeds for a turn (its indexed paths, one per line:
    ``text`` then ``speaker``), so dense-only is exactly hybrid's dense half."""
    return f"{d['text']}\n{d['speaker']}"


def run(repo: str, embed: CachedEmbedder | None = None, weights: tuple[float, ...] = (),
        split: str = "report") -> dict[str, Any]:
    """Every mode on the same data, in one pass over the conversations of
    ``split``; ``weights``: also weighted fusion at these text weights (tuning)."""
    convs = [c for i, c in enumerate(load(repo)) if i in SPLITS[split]]
    extra = [f"weighted@{w}" for w in weights] if embed is not None else []
    modes = ["baseline", "lexical"] + (["dense", "rrf", "weighted", *extra] if embed is not None else [])
    results: dict[str, list[tuple[list[str], set[str]]]] = {m: [] for m in modes}
    latencies: dict[str, list[float]] = {m: [] for m in modes}
    n_docs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, conv in enumerate(convs):
            # one store per conversation (no conversation's turns compete with another's), one per mode
            managers = {"lexical": MemoryManager(f"{tmp}/{i}/lexical", durability="flush")}
            if embed is not None:
                for mode in ("rrf", "weighted", *extra):
                    fusion = mode.split("@")[0]
                    managers[mode] = MemoryManager(f"{tmp}/{i}/{mode}", durability="flush", embed=embed, fusion=fusion)
            docs = turns(conv)
            n_docs += len(docs)
            ns = f"bench.conv{i}"
            for mm in managers.values():
                mm.declare(NamespaceSpec(ns, index=("text", "speaker"), kind="episodic"))
                for d in docs:
                    mm.write(ns, d["id"], {"text": d["text"], "speaker": d["speaker"], "date": d["date"]})
                mm.recall("warm up the index", namespaces=ns)
            search = baseline(docs)
            qs = questions(conv, {d["id"] for d in docs})
            if embed is not None:
                ids = [d["id"] for d in docs]
                turn_m = embed.matrix([body(d) for d in docs])
                q_m = embed.matrix([q for q, _ in qs])
            for j, (q, evidence) in enumerate(qs):
                t0 = time.perf_counter()
                results["baseline"].append((search(q, max(KS)), evidence))
                latencies["baseline"].append(time.perf_counter() - t0)
                if embed is not None:
                    t0 = time.perf_counter()
                    top = np.argsort(-(turn_m @ q_m[j]), kind="stable")[: max(KS)]
                    latencies["dense"].append(time.perf_counter() - t0)
                    results["dense"].append(([ids[t] for t in top], evidence))
                for mode, mm in managers.items():
                    if "@" in mode:  # a module constant: set for this call, put back after
                        w = float(mode.split("@")[1])
                        saved, recall_module.FUSION_WEIGHTS = recall_module.FUSION_WEIGHTS, (w, 1 - w)
                    t0 = time.perf_counter()
                    hits = mm.recall(q, namespaces=ns, k=max(KS))
                    latencies[mode].append(time.perf_counter() - t0)
                    results[mode].append(([h.key for h in hits], evidence))
                    if "@" in mode:
                        recall_module.FUSION_WEIGHTS = saved
            for mm in managers.values():
                mm.close()
        if embed is not None:
            sample = [body(d) for d in turns(convs[0])[:512]]
            speed = embedder_speed(embed.fn, sample, [q["question"] for q in convs[0]["qa"][:30]])
    return {
        "speed": speed if embed is not None else None,
        "conversations": len(convs),
        "split": split,
        "memories": n_docs,
        "questions": len(results["lexical"]),
        "scores": {m: score(r) for m, r in results.items()},
        "p50_ms": {m: sorted(v)[len(v) // 2] * 1000 for m, v in latencies.items()},
        # the two names the lexical report has always used
        "ours": score(results["lexical"]),
        "baseline": score(results["baseline"]),
    }


def report(res: dict[str, Any], label: str) -> str:
    o, b = res["ours"], res["baseline"]
    lines = [
        (f"LoCoMo ({res['conversations']} conversations ({SPLIT_NAMES[res['split']]}), {res['memories']} turns,"
         f" {res['questions']} questions of categories 1-5 with evidence); {label};"
         f" recall() p50 {res['p50_ms']['lexical']:.2f} ms"),
        "",
        "| metric | FTS5 porter, OR, bm25 (baseline) | recall() | ratio |",
        "|---|---|---|---|",
    ]
    for key in [f"recall@{k}" for k in KS] + [f"share@{k}" for k in KS]:
        lines.append(f"| {key} | {b[key]:.3f} | {o[key]:.3f} | {o[key] / b[key]:.2f}x |")
    return "\n".join(lines)


SPLIT_NAMES = {"tune": "0-4, the tuning split", "report": "5-9, held out", "all": "0-9, tuning split included"}

LABELS = {
    "baseline": "FTS5 porter, OR, bm25 (baseline)",
    "lexical": "recall(), lexical",
    "dense": "dense only (cosine, numpy)",
    "rrf": "recall(), hybrid RRF",
    "weighted": "recall(), hybrid weighted",
}


def report_all(res: dict[str, Any], embed: CachedEmbedder, name: str) -> str:
    sc, p50 = res["scores"], res["p50_ms"]
    metrics = [f"recall@{k}" for k in KS] + [f"share@{k}" for k in KS]
    lines = [
        (f"LoCoMo ({res['conversations']} conversations ({SPLIT_NAMES[res['split']]}), {res['memories']} turns,"
         f" {res['questions']} questions of categories 1-5 with evidence); embedder {name}"),
        "",
        "| mode | " + " | ".join(metrics) + " | r@5 vs baseline | p50 ms |",
        "|---|" + "---|" * (len(metrics) + 2),
    ]
    labels = dict(LABELS)
    labels.update({m: f"recall(), hybrid weighted, text weight {m.split('@')[1]} (tuning)" for m in sc if "@" in m})
    for mode, label in labels.items():
        s = sc[mode]
        lines.append(f"| {label} | " + " | ".join(f"{s[m]:.3f}" for m in metrics)
                     + f" | {s['recall@5'] / sc['baseline']['recall@5']:.2f}x | {p50[mode]:.2f} |")
    best_fusion = max(("rrf", "weighted"), key=lambda m: sc[m]["recall@5"])
    better_half = max(("lexical", "dense"), key=lambda m: sc[m]["recall@5"])
    ok = sc[best_fusion]["recall@5"] >= sc[better_half]["recall@5"]
    lines += [
        "",
        ("p50: baseline and dense-only time the ranking alone; recall() modes time the whole call, with the"
        " question's vector served from the cache, so hybrid's figure leaves out embedding the question:"
        f" {res['speed']['query_p50_ms']:.1f} ms p50 for one text here ({name} in batches of 64:"
        f" {res['speed']['texts_per_s']:.0f} texts/s over 512 turns)."),
        (f"hybrid ({best_fusion}) recall@5 {sc[best_fusion]['recall@5']:.3f} vs its better half ({better_half})"
        f" {sc[better_half]['recall@5']:.3f}: {'no worse' if ok else 'WORSE'}"),
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", default=os.environ.get("HRM_MEMORY_LOCOMO", DEFAULT_REPO))
    ap.add_argument("--embed", choices=["none", "minilm"], default="none",
                    help="also run dense-only and hybrid recall (RRF and weighted) with this embedder")
    ap.add_argument("--cache", help="keep the embeddings in this .npz file across runs (outside the repository)")
    ap.add_argument("--weights", type=float, nargs="*", default=[],
                    help="also run weighted fusion at these text weights (tuning; the default is FUSION_WEIGHTS)")
    ap.add_argument("--split", choices=sorted(SPLITS), default="report",
                    help="conversations 0-4 (tune: where the ranking's constants were chosen), 5-9 (report, held"
                         " out) or all")
    ap.add_argument("--rrf-k", type=int, help="override hrm_memory.recall.search.RRF_K for this run (tuning)")
    args = ap.parse_args()
    if args.rrf_k is not None:
        recall_module.RRF_K = args.rrf_k
    embed = None
    if args.embed == "minilm":
        from hrm_memory.recall.embedders import minilm

        embed = CachedEmbedder(minilm(), args.cache)
    res = run(args.repo, embed, tuple(args.weights), args.split)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]},"
          f" load average {os.getloadavg()[0]:.1f}")
    if embed is None:
        print(report(res, "lexical"))
    else:
        embed.save()
        print(report_all(res, embed, f"{args.embed} (RRF_K={recall_module.RRF_K},"
                         f" weighted {recall_module.FUSION_WEIGHTS[0]}/{recall_module.FUSION_WEIGHTS[1]})"))


if __name__ == "__main__":
    main()
