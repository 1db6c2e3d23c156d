"""context() renders an HRM's memory within a token budget.

The property: over random stores and budgets (budgets smaller than any entry
included), ``tokens <= budget`` and ``tokens`` is a fresh o200k count of
``text``. Then what a demanding user checks by hand: skip-not-stop, footers
that count what they hide, dedup, byte-identical renders, bounded reads, the
span, the scope, the CLI, and the facts of the real legacy prompts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hrm_memory import InvalidArgument, MemoryManager, NamespaceSpec
from hrm_memory.context.render import PER_NAMESPACE
from hrm_memory.core.tokens import count
from tests.helpers.legacy import DATA

LEGACY = DATA
NOW = 1_768_600_000.0

texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=400
) | st.lists(st.sampled_from("plan patent family gaurav bella sunday market cheer timeboxing".split()), min_size=1,
             max_size=120).map(" ".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["altitude.patterns", "altitude.memories", "shared.people", "shared.north_stars"]),
                  texts),
        max_size=30,
    ),
    budget=st.integers(min_value=0, max_value=2500),
    query=st.none() | st.sampled_from(["patent", "family plans", "zzz"]),
)
def test_never_over_budget_and_tokens_is_a_fresh_count(records: list[tuple[str, str]], budget: int,
                                                        query: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        mm = MemoryManager(tmp, durability="flush")
        try:
            for i, (ns, text) in enumerate(records):
                mm.write(ns, f"k{i}", {"text": text})
            ctx = mm.context("altitude", budget=budget, query=query, now=NOW)
            assert ctx.tokens <= budget
            assert ctx.tokens == count(ctx.text)
            assert sum(s.tokens for s in ctx.sections) >= ctx.tokens - len(ctx.sections)  # footers inside
        finally:
            mm.close()


@pytest.fixture
def mm(tmp_path: Path) -> Any:
    m = MemoryManager(tmp_path / "store", durability="flush")
    yield m
    m.close()


def test_an_entry_that_does_not_fit_is_skipped_not_a_stop(mm: MemoryManager) -> None:
    mm.write("altitude.patterns", "a-big", {"text": " ".join(f"word{i}" for i in range(400))})
    for i in range(5):
        mm.write("altitude.patterns", f"b{i}", {"text": f"small fact number {i}"})
    ctx = mm.context("altitude", budget=120, sections=["patterns"], now=NOW)
    assert "small fact number" in ctx.text
    assert ctx.tokens <= 120


def test_the_footer_counts_what_it_hides_inside_the_budget(mm: MemoryManager) -> None:
    for i in range(15):
        mm.write("altitude.patterns", f"p{i:02}", {"text": f"pattern {i}: the user {'plans ' * 3}distinctly {i}"})
    ctx = mm.context("altitude", budget=60, sections=["patterns"], now=NOW)
    (section,) = [s for s in ctx.sections if s.name == "patterns"]
    assert section.shown >= 1 and section.omitted >= 1
    assert section.shown + section.omitted == 15
    m = re.search(r"^\+(\d+) more$", ctx.text, re.M)
    assert m and int(m.group(1)) == section.omitted
    assert ctx.tokens == count(ctx.text) <= 60


def test_near_duplicates_are_shown_once(mm: MemoryManager) -> None:
    mm.write("shared.north_stars", "a", {"text": "Build meaningful technology products for people"})
    mm.write("altitude.memories", "b", {"text": "build meaningful technology products for people!", "kind": "prospective"})
    ctx = mm.context("altitude", now=NOW)
    assert ctx.text.lower().count("meaningful technology") == 1


def test_identical_input_renders_byte_identical_text(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MemoryManager(root, durability="flush") as mm:
        for i in range(40):
            mm.write("altitude.patterns", f"p{i}", {"text": f"pattern {i} seen 2026-01-0{i % 9 + 1}T10:00:00"})
        first = mm.context("altitude", budget=300, now=NOW).text
        assert mm.context("altitude", budget=300, now=NOW).text == first
    with MemoryManager(root, durability="flush") as again:
        assert again.context("altitude", budget=300, now=NOW).text == first
    assert "T10:00" not in first  # timestamps are written short


def test_reads_are_bounded_whatever_the_store_size(mm: MemoryManager) -> None:
    for i in range(PER_NAMESPACE * 5):
        mm.write("altitude.patterns", f"p{i:04}", {"text": f"observation {i}"})
    ctx = mm.context("altitude", budget=100_000, sections=["patterns"], now=NOW)
    (section,) = [s for s in ctx.sections if s.name == "patterns"]
    assert section.shown + section.omitted == PER_NAMESPACE
    assert f"observation {PER_NAMESPACE * 5 - 1}" in ctx.text  # the newest ones
    assert "observation 0\n" not in ctx.text + "\n"


def test_a_query_leads_with_recalled_memories(mm: MemoryManager) -> None:
    mm.write("altitude.patterns", "p", {"text": "the user avoids customer calls"})
    mm.write("altitude.patterns", "q", {"text": "prefers numbers over bullets"})
    ctx = mm.context("altitude", query="customer calls", now=NOW)
    assert ctx.text.startswith("## Recalled\nthe user avoids customer calls")


def test_scope_renders_its_own_hrm_and_arguments_are_checked(mm: MemoryManager) -> None:
    mm.write("shared.people", "bella", {"name": "Bella", "relationship": "daughter"})
    assert "Bella" in mm.scope("focus").context(now=NOW).text  # shared is readable by every HRM
    with pytest.raises(InvalidArgument):
        mm.scope("focus").context("altitude")
    with pytest.raises(InvalidArgument):
        mm.context()
    for bad in (-1, 1.5, "100"):
        with pytest.raises(InvalidArgument):
            mm.context("altitude", budget=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        mm.context("altitude", sections=["nope"])


def test_one_span_per_render_with_figures_and_never_the_text(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(tmp_path / "s", durability="flush", tracer_provider=provider, deferred_spans=False) as mm:
        mm.write("altitude.patterns", "p", {"text": "secret-canary-7731 pattern"})
        exporter.clear()
        ctx = mm.context("altitude", budget=500, now=NOW)
    (span,) = [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("db.operation.name") == "context"]
    attrs = dict(span.attributes or {})
    assert attrs["hrm.memory.tokens"] == ctx.tokens and attrs["hrm.memory.budget"] == 500
    assert attrs["hrm.memory.omitted"] == ctx.omitted
    assert "secret-canary-7731" not in json.dumps(attrs)


def test_cli_context_json(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MemoryManager(root, durability="flush") as mm:
        for i in range(30):
            mm.write("altitude.patterns", f"p{i}", {"text": f"a fairly long observation about habit number {i}"})
    out = subprocess.run([sys.executable, "-m", "hrm_memory.cli.main", "--root", str(root), "--json", "context",
                          "altitude", "--budget", "80"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["tokens"] <= 80 and data["tokens"] == count(data["text"]) and data["omitted"] > 0


@pytest.mark.skipif(not LEGACY.is_dir(), reason="needs ../shared/legacy/data beside the repository")
def test_legacy_facts_survive_in_the_default_budget(tmp_path: Path) -> None:
    from hrm_memory.migration import engine

    with MemoryManager(tmp_path / "store", durability="flush") as mm:
        engine.apply(mm, LEGACY)
        stars = mm.read("shared.north_stars", "v1")
        context = mm.read("altitude.context", "context")
        state = mm.read("altitude.compressed", "state")
        ctx = mm.context("altitude", budget=2000, now=NOW)
        assert ctx.tokens <= 2000
        text = ctx.text
        facts = (
            stars["north_stars"] + stars["current_priorities"] + context["pending_commits"]
            + state["north_stars"] + state["priorities"] + list(state["people"])
        )
        people = mm.read("altitude.context", "entities_people")["people"]
        facts += [p["name"] for p in people.values()]
        missing = [f for f in facts if f.lower() not in text.lower()]
        assert not missing, missing


def test_cli_recall_finds_and_says_when_nothing_is_found(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MemoryManager(root, durability="flush") as mm:
        mm.write("shared.people", "bella", {"name": "Bella", "note": "won her cheer competition"})

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hrm_memory.cli.main", "--root", str(root), "--json", *args],
                              capture_output=True, text=True, timeout=60)

    found = cli("recall", "competitions", "--explain")
    assert found.returncode == 0, found.stderr
    (hit,) = json.loads(found.stdout)
    assert (hit["namespace"], hit["key"]) == ("shared.people", "bella") and 0 < hit["confidence"] <= 1
    assert hit["why"]["path"]
    nothing = cli("recall", "zqnothing")
    assert nothing.returncode == 1 and json.loads(nothing.stdout) == []
    assert cli("recall", "x", "-k", "0").returncode == 2


def test_recall_and_context_on_redis_across_two_hosts(tmp_path: Path) -> None:
    """Recall and context on the Redis backend; each "host" (its own
    root) keeps its own index, caught up from the Redis change stream."""
    from tests.helpers.redis_server import fresh_url, require_redis

    require_redis()
    url = fresh_url()
    with MemoryManager(tmp_path / "a", backend=url) as a, MemoryManager(tmp_path / "b", backend=url) as b:
        a.write("shared.people", "bella", {"name": "Bella", "note": "cheer competition winner"})
        assert [h.key for h in b.recall("competitions")] == ["bella"]
        b.write("shared.people", "gaurav", {"name": "Gaurav", "note": "work bottleneck"})
        assert [h.key for h in a.recall("bottleneck")] == ["gaurav"]
        assert "Gaurav" in a.context("altitude", budget=200, now=NOW).text
        a.delete("shared.people", "bella")
        assert b.recall("competitions") == []
        assert "Bella" not in b.context("altitude", budget=200, now=NOW).text


def test_a_repeated_render_is_reused_until_something_indexed_changes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MemoryManager(root, durability="flush") as mm, MemoryManager(root, durability="flush") as other:
        mm.write("altitude.patterns", "p1", {"text": "prefers numbered lists"})
        first = mm.context("altitude", now=NOW)
        first.legend["x"] = "mutated by the caller"
        again = mm.context("altitude", now=NOW + 5)  # same day: the same text
        assert again.text == first.text and "x" not in again.legend
        mm.write("altitude.patterns", "p2", {"text": "dislikes long meetings"})
        assert "dislikes long meetings" in mm.context("altitude", now=NOW).text
        other.write("shared.people", "bella", {"name": "Bella", "note": "cheer competition"})  # another process
        assert "Bella" in mm.context("altitude", now=NOW).text
        mm.delete("altitude.patterns", "p1")
        assert "prefers numbered lists" not in mm.context("altitude", now=NOW).text
        mm.consent.grant("preferences")
        mm.write("learning.patterns", "g", {"text": "gated pattern zqgated"})
        assert "zqgated" not in mm.context("altitude", now=NOW).text  # learning.* is not altitude's to read
        assert "zqgated" in mm.context("learning", now=NOW).text
        mm.consent.revoke("preferences", purge=True)
        assert "zqgated" not in mm.context("learning", now=NOW).text
