"""Consent gating (the canary never reaches disk before consent) and schemas."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from hrm_memory import InvalidValue, MemoryManager, NamespaceSpec
from hrm_memory import UnknownConsentCategory
from hrm_memory.core.schemas import SchemaViolation, UnknownSchema
from tests.helpers.canary import files_holding

CANARY = "CANARY-consent-5b1e0f"


def test_default_is_deny_and_nothing_reaches_disk(root: Path) -> None:
    with MemoryManager(root) as mm:
        assert mm.consent.status() == {"conversation": False, "signals": False, "preferences": False}
        mm.write("altitude.history", "s1", {"summary": CANARY})
        rec = mm.get_record("altitude.history", "s1")
        assert rec is not None and rec.value == {"summary": CANARY}
        assert rec.persisted is False and rec.tier == "hot"
        assert [r.key for r in mm.query("altitude.history")] == ["s1"]
        mm.update("learning.feedback", "f", lambda v: {"note": CANARY})
        assert files_holding(root, CANARY) == []
    with MemoryManager(root) as mm:  # a session-only value ends with the session
        assert mm.read("altitude.history", "s1") is None


def test_grant_keeps_the_creation_time_of_waiting_records(root: Path) -> None:
    """consent.grant() keeps created_at and updated_at of the records written while consent was denied."""
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.conversation", "turn", "hello")
        before = mm.get_record("focus.conversation", "turn")
        time.sleep(0.02)
        mm.consent.grant("conversation")
        after = mm.get_record("focus.conversation", "turn")
        assert after.persisted and (after.created_at, after.updated_at) == (before.created_at, before.updated_at)


def test_canary_grant_then_revoke_with_purge(root: Path) -> None:
    with MemoryManager(root) as mm:
        mm.write("altitude.history", "s1", {"summary": CANARY})
        mm.write("learning.patterns", "p1", {"note": CANARY})  # another category
        assert files_holding(root, CANARY) == []

        report = mm.consent.grant("conversation")
        assert report["persisted"] == {"altitude.history": 1}
        assert files_holding(root, CANARY) == []  # persisted sealed: ciphertext only
        rec = mm.get_record("altitude.history", "s1")
        assert rec is not None and rec.persisted and rec.tier == "warm"
        mm.write("altitude.history", "s2", {"summary": CANARY + "-2"})
        assert mm.archive(now=time.time() + 365 * 86400)["altitude.history"] == 2  # some of it cold as well
        assert files_holding(root, CANARY) == []

        report = mm.consent.revoke("conversation", purge=True)
        assert report["purged"]["altitude.history"]["warm"] == 2
        assert report["purged"]["altitude.history"]["cold"] >= 2
        assert files_holding(root, CANARY) == []
        assert mm.read("altitude.history", "s1") is None
        assert mm.query("altitude.history", include_cold=True) == []
        # revoked: new writes stay in memory again
        mm.write("altitude.history", "s3", {"summary": CANARY})
        assert files_holding(root, CANARY) == []
        assert mm.read("altitude.history", "s3") == {"summary": CANARY}
        assert mm.check() == []


#: A lower-case word of the canary: the recall index keeps words (and the text
#: they came from); either form in any file is a leak.
CANARY_WORD = "qqcanary5b1e0f"


def index_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "index").iterdir())


def test_canary_never_in_the_recall_index_before_consent(root: Path) -> None:
    """Gated text is searchable in its process, and no
    file under the root holds it: the index file, its -wal and -shm included."""
    with MemoryManager(root) as mm, MemoryManager(root) as other:
        mm.write("altitude.history", "s1", {"summary": f"{CANARY} {CANARY_WORD}"})
        mm.write("focus.conversation", "c1", f"said {CANARY_WORD} aloud")
        mm.remember(f"The user whispered {CANARY_WORD} {CANARY}", kind="episodic", namespace="focus.conversation")
        mm.write("altitude.patterns", "p1", {"note": "ungated words land in the index file"})
        hits = mm.recall(CANARY_WORD, k=10)
        assert {(h.namespace, h.key) for h in hits} >= {("altitude.history", "s1"), ("focus.conversation", "c1")}
        assert mm.recall("ungated words")
        assert other.recall(CANARY_WORD) == []  # another manager, as another process would
        assert "recall.db" in index_files(root) and "recall.db-wal" in index_files(root)
        for needle in (CANARY, CANARY_WORD):
            assert files_holding(root, needle) == []
    for needle in (CANARY, CANARY_WORD):
        assert files_holding(root, needle) == []


def test_canary_scrubbed_from_the_recall_index_by_revoke_with_purge(root: Path) -> None:
    """Once consented the text is indexed on disk;
    revoke(purge=True) leaves none of it in any file (rows deleted, segments
    merged, free pages zeroed, WAL truncated), even with another manager
    holding the index open."""
    with MemoryManager(root) as mm, MemoryManager(root) as other:
        mm.write("altitude.patterns", "keep", {"note": "an ungated pattern stays indexed"})
        mm.consent.grant("conversation")
        for i in range(30):
            mm.write("altitude.history", f"s{i}", {"summary": f"{CANARY} {CANARY_WORD} session {i} notes"})
        mm.write("focus.conversation", "c1", f"said {CANARY_WORD} aloud")
        # altitude.history keeps its newest 20 warm: the rest is archived already
        assert len(mm.recall(CANARY_WORD, k=50, include_cold=True)) == 31
        assert len(other.recall(CANARY_WORD, k=50, include_cold=True)) == 31  # caught up from the log
        mm.archive(now=time.time() + 365 * 86400)  # some of it cold: indexed as archived
        mm.write("altitude.history", "late", {"summary": f"{CANARY} {CANARY_WORD} late"})
        assert mm.recall(CANARY_WORD, k=50, include_cold=True)
        leaked = files_holding(root, CANARY_WORD)
        assert any(p.startswith("index/") for p in leaked)  # the grep does see the index

        mm.consent.revoke("conversation", purge=True)
        for needle in (CANARY, CANARY_WORD):
            assert files_holding(root, needle) == []
        assert mm.recall(CANARY_WORD, include_cold=True) == []
        assert other.recall(CANARY_WORD, include_cold=True) == []
        assert [h.key for h in mm.recall("ungated pattern")] == ["keep"]
        for needle in (CANARY, CANARY_WORD):
            assert files_holding(root, needle) == []
    for needle in (CANARY, CANARY_WORD):
        assert files_holding(root, needle) == []


def test_canary_scrubbed_from_the_recall_index_by_undeclare_with_purge(root: Path) -> None:
    with MemoryManager(root) as mm:
        mm.declare(NamespaceSpec("t.secret", index=("$",)))
        mm.write("t.secret", "k", {"text": f"{CANARY} {CANARY_WORD}"})
        mm.write("altitude.patterns", "keep", {"note": "an ungated pattern stays indexed"})
        assert [h.key for h in mm.recall(CANARY_WORD)] == ["k"]
        assert files_holding(root, CANARY_WORD)
        mm.undeclare("t.secret", purge=True)
        for needle in (CANARY, CANARY_WORD):
            assert files_holding(root, needle) == []
        assert mm.recall("ungated pattern")


def test_revoke_without_purge_keeps_what_was_consented(root: Path) -> None:
    with MemoryManager(root) as mm:
        mm.consent.grant("preferences")
        mm.write("learning.patterns", "old", {"n": CANARY})
        mm.consent.revoke("preferences")
        mm.write("learning.patterns", "new", {"n": CANARY + "-new"})
        assert mm.get_record("learning.patterns", "old").persisted  # type: ignore[union-attr]
        assert not mm.get_record("learning.patterns", "new").persisted  # type: ignore[union-attr]
        assert files_holding(root, CANARY + "-new") == []
    with MemoryManager(root) as mm:
        assert mm.read("learning.patterns", "old") == {"n": CANARY}
        assert mm.read("learning.patterns", "new") is None


def test_consent_is_shared_by_processes_on_the_root(root: Path) -> None:
    with MemoryManager(root) as a, MemoryManager(root) as b:
        a.consent.grant("signals")
        assert b.consent.granted("signals")
        with pytest.raises(UnknownConsentCategory) as info:
            a.consent.grant("telepathy")
        assert isinstance(info.value, ValueError)


def test_ungated_namespaces_persist_without_consent(mm: MemoryManager) -> None:
    mm.write("altitude.patterns", "timeboxing", {"s": 0.9})
    assert mm.get_record("altitude.patterns", "timeboxing").persisted  # type: ignore[union-attr]


def test_span_says_not_persisted(root: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(root, tracer_provider=provider) as mm:
        mm.write("altitude.history", "s", {"x": 1})
    (span,) = exporter.get_finished_spans()
    assert span.attributes["hrm.memory.persisted"] is False and span.attributes["hrm.memory.tier"] == "hot"
    provider.shutdown()


class Strategy(BaseModel):
    name: str
    score: float
    tags: list[str] = []


def test_schema_violation_names_namespace_key_field(root: Path) -> None:
    spec = NamespaceSpec("reasoning.checked", schema="tests.consent.test_consent:Strategy")
    with MemoryManager(root, namespaces=[spec]) as mm:
        mm.write("reasoning.checked", "ok", {"name": "decompose", "score": 0.5})
        with pytest.raises(SchemaViolation) as info:
            mm.write("reasoning.checked", "bad", {"name": "x", "score": "high"})
        err = info.value
        assert isinstance(err, InvalidValue) and isinstance(err, ValueError)
        assert (err.namespace, err.key, err.field) == ("reasoning.checked", "bad", "score")
        assert "reasoning.checked" in str(err) and "'bad'" in str(err) and "score" in str(err)
        with pytest.raises(SchemaViolation) as info:
            mm.write("reasoning.checked", "bad", {"name": "x", "score": 1.0, "tags": ["a", 2]})
        assert info.value.field == "tags.1"
        with pytest.raises(SchemaViolation):
            mm.update("reasoning.checked", "ok", lambda v: {**v, "score": None})
        assert mm.read("reasoning.checked", "bad") is None
        assert mm.read("reasoning.checked", "ok") == {"name": "decompose", "score": 0.5}


def test_unknown_schema_is_a_clear_error(root: Path) -> None:
    with MemoryManager(root, namespaces=[NamespaceSpec("t.x", schema="nowhere:Model")]) as mm:
        with pytest.raises(UnknownSchema):
            mm.write("t.x", "k", {})
