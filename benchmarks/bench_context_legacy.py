"""The legacy prompts against ``mm.context()`` on the real legacy data: facts kept per token.

The legacy data (``../shared/legacy/data`` beside the repository, or
``--legacy``) is migrated into a temporary root (``engine.apply``; the data is
read, never copied into the repository). Then, on that store:

- **v1**: ``the_assist.core.memory.Memory().build_context_prompt()`` and
  **v2**: ``the_assist.core.memory_v2.CompressedMemory().build_context()``,
  through the adapters (``use_manager(mm)``), which reproduce the legacy text;
- **ours**: ``mm.context("altitude", budget=B, now=NOW)`` for each budget.

Tokens: ``hrm_memory.core.tokens.count`` (o200k_base) of each whole text.

Facts, read from the migrated records the legacy prompts are built from:

- v1 (``shared.north_stars/v1``, ``altitude.context/context``): every north
  star, current priority, pending commitment and active thread, as written;
- v2 (``altitude.compressed/state``): every north-star code, priority code,
  commitment code (the ``what`` of ``what:when:ctx``), person name, and
  pattern code strong enough for v2 to show it (score >= 0.7, v2's SHOW_AT).

A fact is kept when its normalised text (lower case, runs of white space as
one space, typographic quotes and dashes as ASCII) occurs in the normalised
context with no word character on either side (so ``bella`` is not found in
``umbrella``, nor ``pepper`` in ``pepper_potts_style``). The same check run on
the legacy prompt itself is printed as a control (every v1 fact is in the v1
prompt, every v2 fact in the v2 prompt).

Then every budget from ``--step`` to ``--max-budget`` in steps of ``--step``
is rendered, to find the smallest at which every v1 fact and every v2 fact is
in the text (a larger budget can only add entries in practice, but this is a
scan, not an assumption).

    python -m benchmarks.bench_context_legacy [--legacy PATH] [--now EPOCH]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hrm_memory import MemoryManager
from hrm_memory.core.tokens import count, tokenizer_info

from .harness import md_table

BUDGETS = (300, 500, 546, 800, 1010, 1200, 1500, 2000)
DEFAULT_LEGACY = Path(__file__).resolve().parents[2] / "shared" / "legacy" / "data"
#: 2026-01-12 12:00 UTC: two days after the legacy data's last session, so
#: relative dates render as they would have the next working day.
NOW = 1_768_219_200.0
SHOW_AT = 0.7


def norm(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = text.replace("\u2013", "-").replace("\u2014", "-")
    return " ".join(text.lower().split())


def present(fact: str, normed_text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(norm(fact))}(?!\w)", normed_text) is not None


def facts_of(mm: MemoryManager) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(kind, fact) pairs carried by the v1 prompt, and by the v2 prompt."""
    stars: dict[str, Any] = mm.read("shared.north_stars", "v1") or {}
    context: dict[str, Any] = mm.read("altitude.context", "context") or {}
    state: dict[str, Any] = mm.read("altitude.compressed", "state") or {}
    v1 = ([("north star", s) for s in stars.get("north_stars", [])]
          + [("priority", s) for s in stars.get("current_priorities", [])]
          + [("pending commitment", s) for s in context.get("pending_commits", [])]
          + [("active thread", s) for s in context.get("active_threads", [])])
    v2 = ([("north star code", s) for s in state.get("north_stars", [])]
          + [("priority code", s) for s in state.get("priorities", [])]
          + [("commitment code", str(s).split(":", 1)[0]) for s in state.get("commits", [])]
          + [("person", name) for name in state.get("people", {})]
          + [("pattern code", code) for code, score in state.get("patterns", {}).items() if score >= SHOW_AT])
    return v1, v2


def kept(facts: Sequence[tuple[str, str]], text: str) -> list[tuple[str, str]]:
    t = norm(text)
    return [f for f in facts if present(f[1], t)]


def _smallest(mm: MemoryManager, facts: Sequence[tuple[str, str]], args: argparse.Namespace,
              sections: Sequence[str] | None = None) -> Any:
    for b in range(args.step, args.max_budget + 1, args.step):
        ctx = mm.context("altitude", budget=b, now=args.now, sections=sections)
        if len(kept(facts, ctx.text)) == len(facts):
            return ctx
    return None


def same_information(mm: MemoryManager, root: Path, args: argparse.Namespace,
                     v1_facts: Sequence[tuple[str, str]], v2_facts: Sequence[tuple[str, str]],
                     v1_tokens: int, v2_tokens: int) -> list[list[object]]:
    """``context()`` of a store holding only what each legacy prompt prints
    (v1: the north stars and priorities, the pending commitments and active
    threads, the two newest conversation summaries; v2: the compressed state,
    all of which it prints), so that both sides carry the same information:
    the tokens of everything rendered (with and without the legend of codes,
    which v2 does not carry), the smallest budget keeping every checked fact,
    and the checked facts' own text, one per line, with no markup at all: no
    rendering of them can be shorter, whatever its format."""
    stars: dict[str, Any] = mm.read("shared.north_stars", "v1") or {}
    context: dict[str, Any] = mm.read("altitude.context", "context") or {}
    state: dict[str, Any] = mm.read("altitude.compressed", "state") or {}
    talks = sorted(mm.query("altitude.conversations"), key=lambda r: r.key, reverse=True)[:2]
    v1_records = [
        ("shared.north_stars", "v1", {k: stars[k] for k in ("north_stars", "current_priorities") if k in stars}),
        ("altitude.context", "context", {k: context[k] for k in ("pending_commits", "active_threads") if k in context}),
        *[("altitude.conversations", r.key, {"summary": r.value.get("summary", "")}) for r in talks],
    ]
    v2_records = [("altitude.compressed", "state", state)]
    rows: list[list[object]] = []
    for label, records, facts in (("v1", v1_records, v1_facts), ("v2", v2_records, v2_facts),
                                  ("v1 + v2", v1_records + v2_records, [*v1_facts, *v2_facts])):
        with MemoryManager(root / label.replace(" ", ""), durability="flush") as only:
            for ns, key, value in records:
                only.write(ns, key, value)
            whole = only.context("altitude", budget=1_000_000, now=args.now)
            legend = sum(count(f"- {c}={t}") for c, t in whole.legend.items())
            smallest = _smallest(only, facts, args)
            bound = count("\n".join(f for _, f in facts))
            rows.append([label, f"{whole.tokens:,}", f"{whole.tokens - legend:,}",
                         "-" if smallest is None else f"{smallest.tokens:,} (budget {smallest.budget:,})",
                         f"{bound:,}", f"{1 - bound / v1_tokens:.0%}", f"{(whole.tokens - legend) / v1_tokens:.2f}",
                         f"{(whole.tokens - legend) / v2_tokens:.2f}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--legacy", type=Path, default=DEFAULT_LEGACY)
    ap.add_argument("--now", type=float, default=NOW, help="the clock relative dates are written against")
    ap.add_argument("--step", type=int, default=25)
    ap.add_argument("--max-budget", type=int, default=12_000)
    args = ap.parse_args(argv)
    if not args.legacy.is_dir():
        print(f"no legacy data at {args.legacy}", file=sys.stderr)
        return 2
    import hrm_memory.adapters  # noqa: F401  (installs the legacy module names)
    from hrm_memory.adapters.runtime import use_manager
    from hrm_memory.migration import engine

    with tempfile.TemporaryDirectory(prefix="ctx-legacy-") as tmp, \
            MemoryManager(Path(tmp) / "store", durability="flush") as mm:
        t = time.perf_counter()
        engine.apply(mm, args.legacy)
        migrated_s = time.perf_counter() - t
        with use_manager(mm):
            from the_assist.core.memory import Memory  # type: ignore[import-not-found]
            from the_assist.core.memory_v2 import CompressedMemory  # type: ignore[import-not-found]

            v1_text = Memory().build_context_prompt()
            v2_text = CompressedMemory().build_context()
        v1_tokens, v2_tokens = count(v1_text), count(v2_text)
        v1_facts, v2_facts = facts_of(mm)

        def row(label: str, text: str, toks: int) -> list[object]:
            a, b = kept(v1_facts, text), kept(v2_facts, text)
            return [label, f"{toks:,}", f"{len(a)}/{len(v1_facts)} ({len(a) / len(v1_facts):.0%})",
                    f"{len(b)}/{len(v2_facts)} ({len(b) / len(v2_facts):.0%})",
                    f"{toks / v1_tokens:.2f}", f"{toks / v2_tokens:.2f}"]

        rows = [row("legacy v1 prompt", v1_text, v1_tokens), row("legacy v2 prompt", v2_text, v2_tokens)]
        renders = {}
        for b in BUDGETS:
            ctx = mm.context("altitude", budget=b, now=args.now)
            assert ctx.tokens <= b and ctx.tokens == count(ctx.text)
            renders[b] = ctx
            rows.append(row(f"context(budget={b:,})", ctx.text, ctx.tokens))
        smallest = _smallest(mm, v1_facts + v2_facts, args)
        if smallest is not None:
            rows.append(row(f"context(budget={smallest.budget:,}): smallest keeping all", smallest.text,
                            smallest.tokens))
        scans = []
        for label, facts, sections in (
            ("every v1 fact", v1_facts, None),
            ("every v1 fact, sections now + goals", v1_facts, ("now", "goals")),
            ("every v2 fact", v2_facts, None),
            ("every v2 fact, sections goals + people + patterns", v2_facts, ("goals", "people", "patterns")),
            ("every v1 and v2 fact", v1_facts + v2_facts, None),
        ):
            ctx = _smallest(mm, facts, args, sections)
            scans.append([label, "-" if ctx is None else f"{ctx.budget:,}", "-" if ctx is None else f"{ctx.tokens:,}",
                          "-" if ctx is None else f"{ctx.tokens / v1_tokens:.2f}",
                          "-" if ctx is None else f"{ctx.tokens / v2_tokens:.2f}"])
        same = same_information(mm, Path(tmp), args, v1_facts, v2_facts, v1_tokens, v2_tokens)
        print(f"legacy data: {args.legacy} (migrated in {migrated_s:.1f} s into a temporary root); "
              f"now = {args.now:.0f}; counter: {tokenizer_info()['counter']} {tokenizer_info()['encoding']}\n")
        print(md_table(["prompt", "tokens", "v1 facts kept", "v2 facts kept", "tokens / v1", "tokens / v2"], rows))
        print(f"\nSmallest budget (scan in steps of {args.step} up to {args.max_budget:,}) whose text holds:\n")
        print(md_table(["facts", "budget", "tokens", "tokens / v1", "tokens / v2"], scans))
        print("\nThe same information only: a store holding just what each legacy prompt prints (see"
              " same_information()); every section rendered, unlimited budget:\n")
        print(md_table(["information of", "context() tokens", "without the legend", "smallest keeping every fact",
                        "the facts alone (lower bound)", "best saving vs v1 the bound allows",
                        "tokens / v1 (no legend)", "tokens / v2 (no legend)"], same))
        print()
        for label, facts in (("v1", v1_facts), ("v2", v2_facts)):
            kinds: dict[str, int] = {}
            for k, _ in facts:
                kinds[k] = kinds.get(k, 0) + 1
            print(f"{label} facts checked ({len(facts)}): " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
        for b, ctx in renders.items():
            lost = [f for f in v1_facts + v2_facts if f not in kept(v1_facts + v2_facts, ctx.text)]
            shown = "; ".join(f"{k}: {v[:40]}" for k, v in lost[:8]) + (" ..." if len(lost) > 8 else "")
            print(f"budget {b}: {len(lost)} facts not in the text" + (f" ({shown})" if lost else ""))
        both = v1_facts + v2_facts
        at_v1, at_v2 = len(kept(both, renders[546].text)), len(kept(both, renders[800].text))
        v1_own, v2_own = len(kept(both, v1_text)), len(kept(both, v2_text))
        print(f"\nfacts at the legacy prompts' sizes: context(budget=546) keeps {at_v1} facts, v1 keeps {v1_own}: "
              f"{'met' if at_v1 >= v1_own else 'NOT met'}; context(budget=800) keeps {at_v2}, v2 keeps {v2_own}: "
              f"{'met' if at_v2 >= v2_own else 'NOT met'}")
        if smallest is None:
            print(f"no budget up to {args.max_budget:,} keeps every fact")
        else:
            print(f"every fact: smallest budget keeping all {len(both)} facts: {smallest.budget:,} "
                  f"(text {smallest.tokens:,} tokens = {smallest.tokens / v1_tokens:.2f}x v1's {v1_tokens:,}, "
                  f"{smallest.tokens / v2_tokens:.2f}x v2's {v2_tokens:,}; v1 + v2 together {v1_tokens + v2_tokens:,}); "
                  f"target <= 1,010: {'met' if smallest.budget <= 1010 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
