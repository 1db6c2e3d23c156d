"""``hrm-memory recall QUERY`` and ``hrm-memory context HRM``: memories by meaning
(:meth:`MemoryManager.recall`) and an HRM's memory as a prompt (:meth:`MemoryManager.context`)."""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Callable
from typing import Any

from hrm_memory.core.spec import NamespaceSpec
from hrm_memory.manager import MemoryManager
from hrm_memory.cli.textfmt import EXIT_NOT_FOUND, EXIT_OK, table
from hrm_memory.cli.textfmt import dump_json as _dump


def int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``lo..hi`` (at least ``lo`` without ``hi``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            wanted = f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise argparse.ArgumentTypeError(f"expected an integer {wanted}, got {text!r}")
        return value

    return parse


#: What ``recall --help`` says about what is searched and what a hit's figures mean.
RECALL_NOTE = (
    "Searched: the namespaces declared with an index (the README's namespace table, column 'recall index'; "
    "'hrm-memory ls' lists them all); any other namespace is never searched (read it with 'hrm-memory query NS'). "
    "When nothing is found, stderr names the namespaces searched and those holding records that are not indexed. "
    "SCORE orders one recall's hits: each hit's share of the best one's (the first is 1). CONFIDENCE, in 0..1, "
    "says how well a hit answers and compares across queries: filter on it. SNIPPET is the passage that answers."
)


def register(sub: Any) -> None:
    s = sub.add_parser("recall", help="memories matching a query by meaning, best first (exit 1 if none)",
                       description=f"Memories matching QUERY by meaning, best first. {RECALL_NOTE}")
    s.add_argument("query", help="what to recall, in plain words")
    s.add_argument("--ns", action="append", metavar="GLOB", help="namespace glob to search (repeatable; default all)")
    s.add_argument("-k", type=int_in(1, 1000), default=10, help="how many hits (default 10)")
    s.add_argument("--kind", action="append", help="keep memories of this kind (repeatable)")
    s.add_argument("--cold", action="store_true", help="search archived records at once")
    s.add_argument("--explain", action="store_true", help="say why each hit ranked where it did")


def cmd_recall(mm: MemoryManager, args: argparse.Namespace) -> int:
    hits = mm.recall(
        args.query, namespaces=args.ns or "*", kinds=args.kind, k=args.k, explain=args.explain, include_cold=args.cold
    )
    if args.json:
        print(_dump([
            {"namespace": h.namespace, "key": h.key, "score": h.score, "confidence": h.confidence,
             "tier": h.record.tier, "version": h.record.version, "snippet": h.snippet, "value": h.record.value,
             **({"why": h.why} if h.why is not None else {})}
            for h in hits
        ]))
    else:
        rows = [{"namespace": h.namespace, "key": h.key, "score": f"{h.score:.3g}",
                 "confidence": round(h.confidence, 2), "tier": h.record.tier,
                 "snippet": " ".join(h.snippet.split())} for h in hits]  # the passage that answers, on one line
        print(table(rows, ["namespace", "key", "score", "confidence", "tier", "snippet"]))
        if args.explain and hits and hits[0].why:
            why = hits[0].why
            print(f"query type: {why.get('type')}")
            for stage in why.get("path", []):
                print(f"  stage {stage['stage']}: {stage['hits']} hit(s), best confidence {stage['confidence']}"
                      + (" (cold included)" if stage["cold"] else ""))
    if not hits:
        matched = [s for s in mm.namespaces() if any(fnmatch.fnmatchcase(s.name, g) for g in args.ns or ["*"])]
        indexed = [s.name for s in matched if s.index]
        print(f"nothing found in the {len(indexed)} indexed namespace(s) searched: {', '.join(indexed) or 'none'}"
              + _unindexed_note(mm, matched), file=sys.stderr)
        return EXIT_NOT_FOUND
    return EXIT_OK


def _unindexed_note(mm: MemoryManager, specs: list[NamespaceSpec]) -> str:
    """Where data sits that recall and context never read: those of
    ``specs`` declared without an index that hold a record (one read each)."""
    holding = [s.name for s in specs if not s.index and mm.query(s.name, "*", limit=1)]
    if not holding:
        return ""
    return (f"\nnot searched (declared without an index), holding records: {', '.join(holding)}; read them with "
            "'hrm-memory query NS'. A namespace declared with an index is searched "
            "(NamespaceSpec(..., index=('$',)) in Python; docs/recall.md)")


def register_context(sub: Any) -> None:
    s = sub.add_parser("context", help="an HRM's memory as a prompt within a token budget")
    s.add_argument("hrm", help="the HRM whose memory to render, e.g. altitude")
    s.add_argument("--budget", type=int_in(0, 1_000_000), default=2000, help="tokens at most (o200k; default 2000)")
    s.add_argument("--query", help="lead with memories recalled for this query")
    s.add_argument("--section", action="append", help="keep only this section (repeatable)")


def cmd_context(mm: MemoryManager, args: argparse.Namespace) -> int:
    ctx = mm.context(args.hrm, budget=args.budget, query=args.query, sections=args.section)
    if args.json:
        print(_dump({
            "hrm": ctx.hrm, "text": ctx.text, "tokens": ctx.tokens, "budget": ctx.budget, "omitted": ctx.omitted,
            "counter": ctx.counter, "legend": ctx.legend,
            "sections": [{"name": s.name, "budget": s.budget, "tokens": s.tokens, "shown": s.shown,
                          "omitted": s.omitted} for s in ctx.sections],
        }))
    else:
        print(ctx.text)
    if not ctx.text and args.budget:
        specs = mm.scope(args.hrm).namespaces()
        indexed = [s.name for s in specs if s.index]
        print(f"the context of {args.hrm} is empty: it is built from the indexed namespaces {args.hrm} may read "
              f"({', '.join(indexed) or 'none'}), and they hold nothing it shows" + _unindexed_note(mm, specs),
              file=sys.stderr)
    return EXIT_OK
