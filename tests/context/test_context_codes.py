"""Word-like entries of a field (codes, ``name(role):topic``) share lines,
joined by a space; prose items keep a line each; a scored map shows the keys
scoring at least SHOW_SCORE; bookkeeping fields are not entries."""

from __future__ import annotations

from pathlib import Path

from hrm_memory import MemoryManager
from hrm_memory.core.tokens import count

NOW = 1_768_600_000.0


def test_codes_share_lines_and_prose_keeps_its_own(tmp_path: Path) -> None:
    words = ("amber birch cedar delta ember fjord grove heron irises juniper kestrel lupine maple nectar orchid"
             " pinecone quince").split()
    codes = [f"{w}_set" for w in words][:11]
    scored = [f"{w}_way" for w in words][11:15]
    prose = ["Call the patent office about the filing", "Plan the family trip"]
    state = {
        "priorities": codes[:3] + [prose[0]] + codes[3:] + [prose[1]],
        "patterns": {c: 1.0 - i / 100 for i, c in enumerate(scored)} | {"weak_one": 0.2},
        "last_update": "2026-01-10T22:41:16",
        "session_count": 0,
    }
    with MemoryManager(tmp_path, durability="flush") as mm:
        mm.write("altitude.compressed", "state", state)
        ctx = mm.context("altitude", budget=4000, now=NOW)
    lines = ctx.text.splitlines()
    goals = lines[lines.index("## Goals and commitments") + 1:]
    goals = goals[: next(i for i, x in enumerate(goals) if x.startswith("## "))]
    assert prose[0] in goals and prose[1] in goals  # prose: a line each
    code_lines = [x for x in goals if x not in prose]
    assert len(code_lines) < len(codes)  # codes share lines...
    assert sorted(w for x in code_lines for w in x.split(" ")) == sorted(codes)  # ...each once, space-joined
    # scored codes: those shown, on one line; a weak one not at all
    assert " ".join(scored) in lines
    assert "weak_one" not in ctx.text
    # bookkeeping is not an entry
    assert "0\n" not in ctx.text and "ago" not in ctx.text
    assert ctx.tokens == count(ctx.text) <= 4000
