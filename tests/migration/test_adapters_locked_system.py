"""Locked_system's legacy APIs over the MemoryManager (adapters/): the focus
loop (fast/slow/bridge memory, history, bootstrap), consent, LockedLoop's
conversation and note capture. Each gets a realistic call sequence with the
legacy return values (shared/legacy/LEGACY_API.md), the records they land
in (migration/layout.py), a run on the real legacy files where the data
ships them, and the cases where the adapters refuse to lose data.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.clock import freeze
from tests.helpers.legacy import DATA, legacy

from hrm_memory import adapters  # noqa: F401  (installs the legacy import paths)
from hrm_memory.adapters import use_manager
from hrm_memory import CorruptRecord, MemoryManager


from locked_system.capabilities.note_capture import NoteCaptureCapability, NoteType  # noqa: E402
from locked_system.loop import ConversationStore  # noqa: E402
from locked_system.memory import (  # noqa: E402
    BridgeMemory,
    CommitmentLease,
    Decision,
    FastMemory,
    GateTransition,
    History,
    InteractionSignals,
    SlowMemory,
)
from locked_system.memory.bridge import BridgeSignal  # noqa: E402
from locked_system.memory.consent import (  # noqa: E402
    ConsentManager,
    format_consent_prompt,
    format_consent_status,
)
from locked_system.memory.slow import BootstrapSnapshot  # noqa: E402


def is_naive_iso(value: str) -> bool:
    return datetime.fromisoformat(value).tzinfo is None


def rd(mm: MemoryManager, namespace: str, key: str) -> Any:
    """The record in its legacy (expanded) shape, None if absent."""
    return mm.read(namespace, key, None)


# -- locked_system: the focus loop ---------------------------------------------------------


def test_focus_loop(store: MemoryManager, tmp_path: Path) -> None:
    memory_dir = tmp_path / "memory"
    fast = FastMemory(memory_dir / "fast")
    slow = SlowMemory(memory_dir / "slow")
    history = History(memory_dir / "history")
    assert not memory_dir.exists()  # memory_dir does not choose where data goes

    # progress
    assert fast.get_progress().momentum == "steady" and fast.get_recent_interactions() == []
    fast.update_progress(milestone_completed="outline", blocker_added="waiting on Gaurav", momentum="accelerating")
    fast.update_progress(milestone_completed="outline", blocker_removed="waiting on Gaurav")
    progress = store.read("focus.interactions", "progress")
    assert progress["milestones_completed"] == ["outline", "outline"] and progress["blockers"] == []
    assert progress["momentum"] == "accelerating" and is_naive_iso(progress["last_update"])
    fast.reset_progress(total_milestones=3)
    assert store.read("focus.interactions", "progress")["milestones_total"] == 3

    # a commitment lease for 3 turns, one interaction and one decrement per turn
    slow.set_commitment(CommitmentLease(frame="<sales play>", turns_remaining=3))
    history.add_gate_transition(GateTransition("commitment", "sensemaking", "execution", "lease taken"))
    turns = []
    for turn in range(105):
        fast.record_interaction(
            InteractionSignals(user_input_length=turn, response_length=2 * turn, had_commitment=slow.has_commitment())
        )
        slow.decrement_commitment()
        turns.append(slow.get_commitment().turns_remaining)  # type: ignore[union-attr]
    assert turns[:4] == [2, 1, 0, -1]  # goes negative
    assert not slow.has_commitment() and slow.get_commitment() is not None
    recent = fast.get_recent_interactions(3)
    assert [s.user_input_length for s in recent] == [102, 103, 104]
    assert [s.had_commitment for s in fast.get_recent_interactions(105)[:4]] == [True, True, True, False]
    assert len(fast.get_recent_interactions(200)) == 105  # this object keeps them all

    # on disk: the newest 100 in the legacy record, the 5 older ones kept in overflow
    on_disk = store.read("focus.interactions", "interactions")
    assert [e["user_input_length"] for e in on_disk] == list(range(5, 105))
    assert list(on_disk[0]) == [
        "user_input_length", "response_length", "altitude_used", "stance_used", "had_commitment", "timestamp",
    ]  # fmt: skip
    overflow = store.query("focus.interactions", "interactions_overflow_*")
    assert [e["user_input_length"] for r in overflow for e in r.value] == [0, 1, 2, 3, 4]
    assert [s.user_input_length for s in FastMemory(memory_dir / "fast").get_recent_interactions(200)] == list(
        range(5, 105)
    )

    slow.renew_commitment(turns=20)
    assert slow.has_commitment()
    assert store.read("focus.slow", "commitment") == {
        "frame": "<sales play>",
        "horizon_authority": "mid",
        "success_criteria": [],
        "non_goals": [],
        "lease_expiry": "20 turns",
        "renewal_prompt": "Continue with this focus?",
        "turns_remaining": 20,
    }
    history.add_gate_transition(GateTransition("evaluation", "execution", "evaluation", "lease renewed"))
    slow.clear_commitment()
    assert slow.get_commitment() is None and store.read("focus.slow", "commitment") is None
    SlowMemory(memory_dir / "slow").renew_commitment()  # no lease: no-op
    assert store.read("focus.slow", "commitment") is None

    decision = Decision("d1", "focus on sim racing", ["cash flow"], "drops HVAC", "medium")
    slow.add_decision(decision)
    assert slow.get_decisions() == [decision] and slow.get_recent_decisions(1) == [decision]
    assert SlowMemory(memory_dir / "slow").get_decisions() == [decision]

    gates = History(memory_dir / "history").get_gate_transitions()
    assert [(g.gate, g.from_stance, g.to_stance) for g in gates] == [
        ("commitment", "sensemaking", "execution"),
        ("evaluation", "execution", "evaluation"),
    ]
    assert history.get_recent_transitions(1) == gates[-1:]
    for entry in store.read("focus.gates", "gate_history"):
        assert is_naive_iso(entry["timestamp"])


def test_bootstrap_and_bridge(store: MemoryManager, tmp_path: Path) -> None:
    slow = SlowMemory(tmp_path / "slow")
    assert slow.get_bootstrap() is None
    snap = BootstrapSnapshot(datetime(2026, 1, 11, 21, 0), "connect", "Ravi", "racing|family")
    slow.set_bootstrap(snap)
    assert SlowMemory(tmp_path / "slow").get_bootstrap() == snap
    slow.clear_bootstrap()
    assert store.read("focus.slow", "bootstrap") is None
    old = BootstrapSnapshot.from_dict(
        {"bootstrap_timestamp": "2026-01-11T21:00:00", "ladder_position": 2, "consent_state": "full",
         "user_state_summary": "Ravi", "stabilizers": "racing", "other": 1}
    )  # fmt: skip
    assert (old.stage, old.complete, old.user_name, old.favorite_things) == ("complete", True, "Ravi", "racing")

    bridge = BridgeMemory(tmp_path / "bridge")
    bridge.add_signal(BridgeSignal("stance", "fast", "user frustrated"))
    assert not bridge.has_emergency()
    bridge.add_signal(BridgeSignal("stop", "fast", "user asked to stop", severity="emergency"))
    assert BridgeMemory(tmp_path / "bridge").has_emergency()
    bridge.clear_signals()
    assert bridge.get_pending_signals() == [] and store.read("focus.bridge", "bridge_signals") == []


def test_locked_system_on_legacy_data(store: MemoryManager, tmp_path: Path) -> None:
    interactions = legacy("locked_system/memory/fast/interactions.json")
    store.write("focus.interactions", "interactions", interactions, imported=True)
    store.write("focus.slow", "commitment", legacy("locked_system/memory/slow/commitment.json"), imported=True)
    store.write("focus.gates", "gate_history", legacy("locked_system/memory/history/gate_history.json"), imported=True)

    fast = FastMemory(tmp_path / "fast")
    assert len(fast.get_recent_interactions(1000)) == 100
    assert all(s.timestamp.tzinfo is None for s in fast.get_recent_interactions(1000))
    fast.record_interaction(InteractionSignals())
    on_disk = store.read("focus.interactions", "interactions")
    assert on_disk[:99] == interactions[1:]  # stored strings unchanged
    day = interactions[0]["timestamp"][:10]
    assert store.read("focus.interactions", f"interactions_overflow_{day}") == interactions[:1]

    slow = SlowMemory(tmp_path / "slow")
    lease = slow.get_commitment()
    assert lease is not None and lease.frame == "<sales play>" and lease.turns_remaining == 0
    assert not slow.has_commitment()
    assert len(History(tmp_path / "history").get_gate_transitions()) == 15


@pytest.mark.parametrize(
    ("cls", "namespace", "key", "value"),
    [
        (FastMemory, "focus.interactions", "interactions", [{"user_input_length": 1, "mood": "x"}]),
        (FastMemory, "focus.interactions", "progress", {"momentum": "steady", "last_update": "not a time"}),
        (SlowMemory, "focus.slow", "commitment", {"frame": "f", "extra": 1}),
        (History, "focus.gates", "gate_history", {"not": "a list"}),
        (BridgeMemory, "focus.bridge", "bridge_signals", [{"signal_type": "x"}]),
        (ConsentManager, "focus.consent", "legacy", ["not", "an object"]),
    ],
)
def test_locked_system_refuses_to_wipe_unreadable_records(
    store: MemoryManager, tmp_path: Path, cls: type, namespace: str, key: str, value: Any
) -> None:
    """The legacy loaders swallowed such errors and the next save overwrote the
    file (ConsentManager raised AttributeError for a non-object top level and
    took bad JSON for "no consent yet"); here they raise CorruptRecord."""
    store.write(namespace, key, value)
    with pytest.raises(CorruptRecord) as info:
        cls(tmp_path)
    assert (info.value.namespace, info.value.key) == (namespace, key)  # type: ignore[attr-defined]
    assert store.read(namespace, key) == value


def test_record_interaction_with_cross_process_locking(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "locked", durability="flush", locking=True) as mm, use_manager(mm):
        fast = FastMemory(tmp_path)
        for i in range(102):
            fast.record_interaction(InteractionSignals(user_input_length=i))
        assert len(mm.read("focus.interactions", "interactions")) == 100
        assert sum(len(r.value) for r in mm.query("focus.interactions", "interactions_overflow_*")) == 2


# -- locked_system: consent ------------------------------------------------------------------


def test_consent_manager(store: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError):
        ConsentManager(str(tmp_path))  # type: ignore[arg-type]  # not wrapped in Path, as in legacy
    freeze(monkeypatch, "hrm_memory.adapters.locked_system.memory.consent", datetime(2026, 1, 11, 21, 35, 26, 1234))
    cm = ConsentManager(tmp_path)
    assert cm.consent_path == tmp_path / "consent.json"
    assert cm.needs_consent() and cm.get_preferences() is None
    assert cm.get_summary() == {"status": "not_configured", "message": "No consent preferences set"}
    assert not cm.can_persist("conversation")
    cm.revoke_all()  # nothing to revoke: still needs consent, nothing stored
    assert cm.needs_consent() and store.read("focus.consent", "legacy") is None

    cm.grant_consent(conversation_history=True, interaction_signals=True, learned_preferences=False)
    assert not cm.needs_consent()
    assert store.consent.status() == {"conversation": True, "signals": True, "preferences": False}
    assert [cm.can_persist(c) for c in ("conversation", "signals", "preferences", "notes")] == [
        True, True, False, False,
    ]  # fmt: skip
    stamp = "2026-01-11T21:35:26.001234"
    assert cm.get_summary() == {
        "status": "configured",
        "conversation_history": True,
        "interaction_signals": True,
        "learned_preferences": False,
        "first_consent_at": stamp,
        "last_updated_at": stamp,
    }
    assert store.read("focus.consent", "legacy") == {
        "conversation_history": True,
        "interaction_signals": True,
        "learned_preferences": False,
        "first_consent_at": stamp,
        "last_updated_at": stamp,
        "consent_version": 1,
    }
    prefs = cm.get_preferences()
    assert prefs is not None
    assert format_consent_status(prefs) == (
        "MEMORY CONSENT STATUS\n"
        "\n"
        "  Conversation history:  ✓ enabled\n"
        "  Interaction signals:   ✓ enabled\n"
        "  Learned preferences:   ✗ disabled\n"
        "\n"
        "  First consent: 2026-01-11\n"
        "  Last updated:  2026-01-11"
    )
    prompt = format_consent_prompt()
    assert all(s in prompt for s in ("1", "2", "3", "'12'", "'all'", "'none'"))

    # the consent-gated namespace follows: granted, the conversation reaches disk
    store.write("focus.conversation", "conversation", {"messages": [], "turn_count": 0, "last_saved": stamp})
    assert store.get_record("focus.conversation", "conversation").persisted  # type: ignore[union-attr]

    cm.grant_consent(learned_preferences=True)
    assert store.consent.granted("preferences")
    cm.revoke_all()
    assert store.consent.status() == {"conversation": False, "signals": False, "preferences": False}
    assert not cm.needs_consent() and not cm.can_persist("conversation")
    assert ConsentManager(tmp_path).get_summary()["conversation_history"] is False


def test_consent_from_migrated_document(store: MemoryManager, tmp_path: Path) -> None:
    doc = legacy("locked_system/memory/consent.json")
    store.write("focus.consent", "legacy", doc, imported=True)
    store.consent.revoke("signals")  # an explicit decision made through the manager
    cm = ConsentManager(tmp_path)
    assert cm.get_summary()["first_consent_at"] == doc["first_consent_at"]
    # undecided categories follow the migrated document; an explicit revoke is not undone
    assert store.consent.status() == {"conversation": True, "signals": False, "preferences": True}
    assert cm.can_persist("conversation") and not cm.can_persist("signals")


# -- locked_system.loop: LockedLoop's conversation ------------------------------------------------


def test_conversation_is_consent_gated(store: MemoryManager, tmp_path: Path) -> None:
    conv = ConversationStore(tmp_path)
    assert conv.needs_consent() and conv.get_history() == [] and conv.turn_count == 0
    conv.add_turn("hi", "hello")
    assert conv.get_history() == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert rd(store, "focus.conversation", "conversation") is None  # no consent: nothing stored

    conv.grant_consent(conversation_history=True)
    assert conv.save() is True
    record = store.get_record("focus.conversation", "conversation")
    assert record is not None and record.persisted
    for i in range(60):
        conv.add_turn(f"q{i}", f"a{i}")
    saved = rd(store, "focus.conversation", "conversation")
    assert len(saved["messages"]) == 100 and saved["turn_count"] == 61
    assert saved["messages"][-1] == {"role": "assistant", "content": "a59"}
    assert len(conv.get_history()) == 122
    again = ConversationStore(tmp_path)
    assert again.get_history() == saved["messages"] and again.turn_count == 61

    conv.revoke_consent()
    conv.add_turn("secret", "kept in memory only")
    assert rd(store, "focus.conversation", "conversation")["turn_count"] == 61
    assert conv.get_consent_summary()["conversation_history"] is False
    # the load happens regardless of consent
    assert ConversationStore(tmp_path).turn_count == 61
    conv.clear_conversation()
    assert conv.get_history() == [] and rd(store, "focus.conversation", "conversation") is None


def test_conversation_on_legacy_file(store: MemoryManager, tmp_path: Path) -> None:
    data = legacy("locked_system/memory/conversation.json")
    store.write("focus.conversation", "conversation", data, imported=True)
    conv = ConversationStore(tmp_path, ConsentManager(tmp_path))
    assert conv.get_history() == data["messages"] and conv.turn_count == data["turn_count"]
    assert (len(conv.get_history()), conv.turn_count) == (100, 131)


def test_conversation_corrupt(store: MemoryManager, tmp_path: Path) -> None:
    store.write("focus.conversation", "conversation", [1, 2], imported=True)
    with pytest.raises(CorruptRecord):
        ConversationStore(tmp_path)


# -- locked_system.capabilities.note_capture -------------------------------------------------------


def test_note_capture(store: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hrm_memory.migration.formats import render

    notes = NoteCaptureCapability(tmp_path / "notes")
    assert rd(store, "focus.notes", "developer") == {"raw": "# Developer Notes\n\n", "title": "Developer Notes", "entries": []}
    assert rd(store, "focus.notes", "personal")["raw"] == "# Personal Notes\n\n"
    freeze(monkeypatch, "hrm_memory.adapters.locked_system.note_capture", datetime(2026, 1, 11, 20, 42, 31))
    result = notes.capture(NoteType.DEVELOPER, "fix the lease parser")
    assert result["success"] and result["authorized"] and result["verified"]
    assert result["file"] == str(tmp_path / "notes" / "developer.md")
    freeze(monkeypatch, "hrm_memory.adapters.locked_system.note_capture", datetime(2026, 1, 11, 20, 49, 5))
    notes.capture("developer", "second\nline two")
    notes.capture("personal", "call mom")
    value = rd(store, "focus.notes", "developer")
    assert value["raw"] == (
        "# Developer Notes\n\n\n## 2026-01-11 20:42\nfix the lease parser\n\n## 2026-01-11 20:49\nsecond\nline two\n"
    )
    assert value["entries"] == [
        {"heading": "2026-01-11 20:42", "body": "fix the lease parser"},
        {"heading": "2026-01-11 20:49", "body": "second\nline two"},
    ]
    assert render(value, {"type": "text", "syntax": "markdown-notes"}) == value["raw"].encode()
    assert notes.get_recent_notes("developer") == ["2026-01-11 20:42\nfix the lease parser\n", "2026-01-11 20:49\nsecond\nline two\n"]
    assert notes.get_recent_notes(NoteType.DEVELOPER, 1) == ["2026-01-11 20:49\nsecond\nline two\n"]
    formatted = notes.get_notes_formatted()
    assert [(f["type"], f["content"]) for f in formatted] == [
        ("developer", "second\nline two"), ("personal", "call mom"), ("developer", "fix the lease parser"),
    ]
    assert formatted[0]["datetime"] == datetime(2026, 1, 11, 20, 49) and formatted[0]["timestamp"] == "2026-01-11 20:49"
    assert notes.get_all_notes_summary()["developer"]["count"] == 2
    assert len(notes.get_write_log()) == 3

    denied = NoteCaptureCapability(tmp_path, authorization_check=lambda grantee, kind: grantee == "user")
    result = denied.capture("personal", "nope")
    assert not result["success"] and not result["authorized"]
    assert not NoteCaptureCapability(tmp_path).capture("shopping", "milk")["success"]
    assert rd(store, "focus.notes", "personal")["raw"].count("\n## ") == 1
    assert NoteCaptureCapability.detect_note_intent("make a developer note: the gate is flaky") == "developer"
    assert NoteCaptureCapability.detect_note_intent("personal note: buy milk") == "personal"
    assert NoteCaptureCapability.detect_note_intent("what is the plan") is None
    assert NoteCaptureCapability.extract_note_content("make a developer note: the gate is flaky") == "the gate is flaky"


def test_note_capture_on_legacy_file(store: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hrm_memory.migration.formats import decode, render

    path = DATA / "locked_system/memory/notes/developer.md"
    if not path.is_file():
        pytest.skip("legacy developer notes are absent")
    data = path.read_bytes()
    decoded = decode("notes", data)
    store.write("focus.notes", "developer", decoded.value, imported=True)
    notes = NoteCaptureCapability(tmp_path)
    before = len(notes.get_recent_notes("developer", 10_000))
    assert before == len(decoded.value["entries"]) > 0
    freeze(monkeypatch, "hrm_memory.adapters.locked_system.note_capture", datetime(2026, 2, 1, 9, 30))
    assert notes.capture("developer", "adapter note")["success"]
    value = rd(store, "focus.notes", "developer")
    assert render(value, decoded.fmt) == data + b"\n## 2026-02-01 09:30\nadapter note\n"
    assert value["entries"][-1] == {"heading": "2026-02-01 09:30", "body": "adapter note"}
    assert value["entries"][:-1] == decoded.value["entries"]
    assert notes.get_notes_formatted("developer", 1)[0]["content"] == "adapter note"
