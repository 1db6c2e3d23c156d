"""Bare codes (one word each) in a field render several to a line, in their
order, at most GROUP a line; prose items keep a line each; bookkeeping fields
are not entries."""

from __future__ import annotations

from pathlib import Path

from hrm_memory import MemoryManager
from hrm_memory.context.render import GROUP
from hrm_memory.core.tokens import count

NOW = 1_768_600_000.0


def test_codes_share_lines_and_prose_keeps_its_own(tmp_path: Path) -> None:
    words = ("amber birch cedar delta ember fjord grove heron irises juniper kestrel lupine maple nectar orchid"
             " pinecone quince").split()
    codes = [f"{w}_set" for w in words][: GROUP + 5]
    assert len(codes) == GROUP + 5
    prose = ["Call the patent office about the filing", "Plan the family trip"]
    state = {
        "priorities": codes[:3] + [prose[0]] + codes[3:] + [prose[1]],
        "patterns": {c: 1.0 - i / 100 for i, c in enumerate(codes[:4])} | {"weak_one": 0.2},
        "last_update": "2026-01-10T22:41:16",
        "session_count": 0,
    }
    with MemoryManager(tmp_path, durability="flush") as mm:
        mm.write("altitude.compressed", "state", state)
        ctx = mm.context("altitude", budget=4000, now=NOW)
    lines = ctx.text.splitlines()
    goals = lines[lines.index("## Goals and commitments") + 1:]
    goals = goals[: next(i for i, x in enumerate(goals) if x.startswith("## "))]
    # in order: 3 codes, the prose, 12 codes, 2 codes, the prose
    assert goals == [
        "- " + ", ".join(codes[:3]),
        "- " + prose[0],
        "- " + ", ".join(codes[3:3 + GROUP]),
        "- " + ", ".join(codes[3 + GROUP:]),
        "- " + prose[1],
    ]
    # scored codes: those shown, best first, on one line; a weak one not at all
    assert "- " + ", ".join(codes[:4]) in lines
    assert "weak_one" not in ctx.text
    # bookkeeping is not an entry
    assert "0\n" not in ctx.text + "\n" and "ago" not in ctx.text
    assert ctx.tokens == count(ctx.text) <= 4000
