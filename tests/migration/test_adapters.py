"""The legacy APIs over the MemoryManager (adapters/): the call sequences a
real HRM makes, with the exact legacy return values and context text
(shared/legacy/LEGACY_API.md), the records they land in
(migration/layout.py), and the cases where the adapters refuse to lose data.
"""

from __future__ import annotations

import importlib
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.clock import freeze
from tests.helpers.legacy import DATA, legacy

from hrm_memory import adapters
from hrm_memory.adapters import runtime, use_manager
from hrm_memory import CorruptRecord, MemoryManager


import dopejar.core.memory_v2 as dopejar_memory_v2  # noqa: E402  (after `import adapters`)
import the_assist.core.memory_v2 as memory_v2  # noqa: E402
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
from the_assist.core import entities, feedback, integrity  # noqa: E402
from the_assist.core.memory import Memory  # noqa: E402
from the_assist.core.memory_v2 import COACHING_CODES, PATTERN_CODES, CompressedMemory  # noqa: E402
from the_assist.hrm import SessionHistory  # noqa: E402
from the_assist.hrm.history import SessionRecord  # noqa: E402




def is_naive_iso(value: str) -> bool:
    return datetime.fromisoformat(value).tzinfo is None


def damage(root: Path, namespace: str, key: str) -> None:
    """Flip one byte in the value of the newest warm line of ``key`` (checksum now fails)."""
    needle = b'["p",' + orjson.dumps(key) + b","
    for path in (root / "warm" / namespace).glob("*.log"):
        data = bytearray(path.read_bytes())
        pos = data.rfind(needle)
        if pos >= 0:
            tab = data.index(b"\t", pos)
            data[tab + 2] ^= 0x01
            path.write_bytes(bytes(data))
            return
    raise AssertionError(f"no line for {key!r}")


# -- import paths -------------------------------------------------------------------


def test_legacy_import_paths_are_the_adapter_modules() -> None:
    assert memory_v2 is dopejar_memory_v2
    assert memory_v2 is importlib.import_module("hrm_memory.adapters.the_assist.core.memory_v2")
    assert memory_v2.__spec__ is not None and memory_v2.__spec__.name == "hrm_memory.adapters.the_assist.core.memory_v2"
    assert sys.modules["the_assist"] is sys.modules["dopejar"]
    assert importlib.import_module("dopejar.hrm.history") is importlib.import_module("the_assist.hrm.history")
    assert importlib.import_module("the_assist.hrm").SessionHistory is SessionHistory
    assert importlib.import_module("locked_system.memory").FastMemory is FastMemory
    assert not hasattr(importlib.import_module("locked_system.memory"), "ConsentManager")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("the_assist.core.orchestrator")  # LLM code: not adapted
    adapters.install()  # idempotent
    assert sum(type(f).__name__ == "LegacyAliasFinder" for f in sys.meta_path) == 1


def test_runtime_default_manager_and_injection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(runtime, "_current", None)
    monkeypatch.setattr(runtime, "_default", None)
    monkeypatch.setenv("HRM_MEMORY_ROOT", str(tmp_path / "env-root"))
    default = runtime.get_manager()
    try:
        assert default.root == (tmp_path / "env-root").absolute() and default.locking
        assert runtime.get_manager() is default
        with MemoryManager(tmp_path / "a") as a, MemoryManager(tmp_path / "b") as b:
            with use_manager(a):
                assert runtime.get_manager() is a
                with use_manager(b):
                    assert runtime.get_manager() is b
                assert runtime.get_manager() is a
            assert runtime.get_manager() is default
    finally:
        default.close()


# -- the_assist: CompressedMemory ---------------------------------------------------------


def test_compressed_memory_session(store: MemoryManager) -> None:
    cm = CompressedMemory()
    state = cm.get_state()
    assert list(state) == [
        "north_stars", "priorities", "active", "commits", "people", "patterns", "coaching",
        "last_update", "session_count",
    ]  # fmt: skip
    assert is_naive_iso(state["last_update"]) and state["session_count"] == 0
    assert store.read("altitude.compressed", "state") == state  # the layout's record

    cm.set_north_stars(["tech_products", "family_present", "fin_indep", "health", "craft", "extra"])
    cm.set_priorities(["patent_file", "work_balance"])

    # add_active: substring eviction on the normalized topic, asymmetric
    cm.add_active("patent_file:drafting:claims")
    cm.add_active("hvac_patent:paused:longer_timeline")
    cm.add_active("sim-racing:validating:calls")
    cm.add_active("patent_file:reviewing:new claims")
    assert cm.get_state()["active"] == [
        "hvac_patent:paused:longer_timeline",
        "sim-racing:validating:calls",
        "patent_file:reviewing:new claims",
    ]
    cm.add_active("Patent:all:review")  # evicts hvac_patent and patent_file
    cm.add_active("patent_file:filed:done")  # does not evict Patent
    cm.add_active("sim_racing:pricing:preorders")  # simracing == simracing
    assert cm.get_state()["active"] == [
        "Patent:all:review",
        "patent_file:filed:done",
        "sim_racing:pricing:preorders",
    ]

    # commits: same eviction; clear_commit is a raw, case-sensitive prefix
    cm.add_commit("call_gaurav:monday:q1 scope")
    cm.add_commit("file_patent:sunday:claims")
    cm.add_commit("Call-Gaurav:tuesday:moved")
    assert cm.get_state()["commits"] == ["file_patent:sunday:claims", "Call-Gaurav:tuesday:moved"]
    cm.clear_commit("call")
    assert len(cm.get_state()["commits"]) == 2
    cm.clear_commit("Call")
    assert cm.get_state()["commits"] == ["file_patent:sunday:claims"]
    for i in range(12):
        cm.add_commit(f"c{i:02d}:when:ctx")
    assert cm.get_state()["commits"] == [f"c{i:02d}:when:ctx" for i in range(2, 12)]  # last 10
    cm.clear_commit("")
    assert cm.get_state()["commits"] == []
    cm.add_commit("file_patent:sunday:claims")
    cm.add_commit("call_gaurav:monday:q1 scope")

    # people: n = previous tag count + 1; tags replaced; unknown relationship -> 3 chars
    cm.add_person("Gaurav", "work_colleague", ["q1_planning"])
    cm.add_person("Bella", "family", ["competition_winner"])
    cm.add_person("Claude", "ai_assistant", ["pepper_potts_style"])
    assert cm.get_state()["people"]["gaurav"] == {"r": "wk", "t": ["q1_planning"], "n": 1}
    cm.add_person("Gaurav", "work_colleague", ["aws", "q1_scope"])
    assert cm.get_state()["people"]["gaurav"] == {"r": "wk", "t": ["aws", "q1_scope"], "n": 2}
    cm.add_person("Gaurav", "friend", ["a", "b", "c", "d", "e", "f"])
    cm.add_person("Zoi", "family", [])
    cm.add_person("Pepper", "assistant", ["cognitive_partner"])
    people = cm.get_state()["people"]
    assert people["gaurav"] == {"r": "fr", "t": ["a", "b", "c", "d", "e"], "n": 3}
    assert people["claude"]["r"] == "ai_" and people["pepper"]["r"] == "ass"
    assert list(people) == ["gaurav", "bella", "claude", "zoi", "pepper"]

    # patterns: +0.1 from 0.5, confidence ignored, unknown codes ignored
    steps = []
    for _ in range(6):
        cm.add_pattern("timeboxing", confidence=0.1)
        steps.append(cm.get_state()["patterns"]["timeboxing"])
    assert steps == [0.6, 0.7, 0.7999999999999999, 0.8999999999999999, 0.9999999999999999, 1.0]
    cm.add_pattern("direct_feedback", confidence=0.99)
    before = cm.get_state()
    cm.add_pattern("not_a_code")
    assert cm.get_state() == before
    cm.add_pattern("risk_id")
    cm.add_pattern("risk_id")

    # coaching: same rule; the key is re-created (at the end) when missing
    state = cm.get_state()
    del state["coaching"]
    cm._save(state)
    cm.add_coaching("ask_impact")
    cm.add_coaching("ask_impact")
    cm.add_coaching("anticipate_conflicts")
    for _ in range(3):
        cm.add_coaching("more_concise")
    cm.add_coaching("bogus")
    state = cm.get_state()
    assert list(state)[-1] == "coaching"
    assert state["coaching"] == {"ask_impact": 0.7, "anticipate_conflicts": 0.6, "more_concise": 0.7999999999999999}

    assert cm.dedupe_all() == 0
    assert cm.build_context() == (
        "NORTH:tech_products,family_present,fin_indep,health,craft\n"
        "PRIO:patent_file,work_balance\n"
        "ACTIVE:Patent:all:review|patent_file:filed:done|sim_racing:pricing:preorders\n"
        "COMMITS:file_patent:sunday:claims|call_gaurav:monday:q1 scope\n"
        "PEOPLE:gaurav(fr):a,b,c,d,e|bella(fam):competition_winner|claude(ai_):pepper_potts_style"
        "|zoi(fam):|pepper(ass):cognitive_partner\n"
        "PATTERNS:timeboxing,risk_id\n"
        "COACHING:ask_impact:Ask how tasks connect to strategies and |more_concise:Be more concise, less explanation"
    )
    assert memory_v2.estimate_tokens(cm.build_context()) == len(cm.build_context()) // 4


def test_compressed_memory_caps_dedupe_and_private_helpers(store: MemoryManager) -> None:
    cm = CompressedMemory()
    assert cm.build_context() == ""
    for i in range(20):
        cm.add_active(f"topic{i:02d}:open:x")
    assert cm.get_state()["active"] == [f"topic{i:02d}:open:x" for i in range(5, 20)]  # last 15
    cm.add_active(":wipe:all")  # an empty topic matches everything
    assert cm.get_state()["active"] == [":wipe:all"]

    # the curator and main.py mutate get_state() and call _save directly
    state = cm.get_state()
    state["active"] = ["a_b:1:x", "c:1:x", "ab:2:y", "C-:2:y", "d:1:z"]
    state["commits"] = ["w:1:x", "W:2:y"]
    state["people"] = {"anon": {"t": ["x"]}}
    state["preferences"] = {"concise_responses": "Avoid over-explaining, be direct and actionable"}
    state["last_update"] = None
    cm._save(state)
    assert is_naive_iso(state["last_update"])  # _save stamps the dict it was given
    assert cm.dedupe_all() == 3
    state = cm.get_state()
    assert state["active"] == ["ab:2:y", "C-:2:y", "d:1:z"] and state["commits"] == ["W:2:y"]
    assert cm.build_context() == (
        "ACTIVE:ab:2:y|C-:2:y|d:1:z\nCOMMITS:W:2:y\nPEOPLE:anon(?):x\n"
        "PREFS:concise_responses:Avoid over-explaining, be dire"
    )

    assert cm._default_state()["last_update"] is None
    del state["people"]
    cm._save(state)
    with pytest.raises(KeyError):
        cm.build_context()  # missing keys raise, as in legacy
    store.delete("altitude.compressed", "state")
    with pytest.raises(FileNotFoundError):
        cm._load()


def test_legacy_values_that_look_like_codes_come_back_unchanged(store: MemoryManager, tmp_path: Path) -> None:
    """The manager stores compact codes; the adapters must see exactly what they wrote."""
    cm = CompressedMemory()
    cm.add_person("Zoi", "family", ["fam", "wk", "~x", "family"])
    assert cm.get_state()["people"]["zoi"] == {"r": "fam", "t": ["fam", "wk", "~x", "family"], "n": 1}
    cm.add_person("Zoi", "family", ["r"])  # read-modify-write of a compact-looking value
    assert cm.get_state()["people"]["zoi"] == {"r": "fam", "t": ["r"], "n": 5}
    mem = Memory()
    mem.update_context({"r": "wk", "t": ["~fam"], "relationship": "friend"})
    assert {k: mem.get_context()[k] for k in ("r", "t", "relationship")} == {
        "r": "wk", "t": ["~fam"], "relationship": "friend",
    }  # fmt: skip
    fast = FastMemory(tmp_path)
    fast.record_interaction(InteractionSignals(stance_used="sm", altitude_used="sensemaking"))
    entry = store.read("focus.interactions", "interactions")[0]
    assert (entry["stance_used"], entry["altitude_used"]) == ("sm", "sensemaking")


def test_build_context_on_the_legacy_state(store: MemoryManager) -> None:
    state = legacy("the_assist/memory/store/compressed/state.json")
    store.write("altitude.compressed", "state", state, imported=True)
    context = CompressedMemory().build_context()
    lines = context.split("\n")
    assert len(lines) == 8
    assert lines[0] == "NORTH:tech_products,family_present,fin_indep"
    assert lines[1] == "PRIO:patent_file,work_balance,family_balance"
    assert [line.split(":", 1)[0] for line in lines] == [
        "NORTH", "PRIO", "ACTIVE", "COMMITS", "PEOPLE", "PATTERNS", "COACHING", "PREFS",
    ]  # fmt: skip
    assert lines[2] == "ACTIVE:" + "|".join(state["active"]) and len(state["active"]) == 15
    assert lines[3] == "COMMITS:" + "|".join(state["commits"]) and len(state["commits"]) == 10
    people = lines[4].removeprefix("PEOPLE:").split("|")
    assert len(people) == 13
    assert people[:2] == ["gaurav(wk):q1_planning", "stewart(wk):done,no_reference"]
    assert people[-1] == "zoi(fam):birthday_party_overnight"
    assert sorted(lines[5].removeprefix("PATTERNS:").split(",")) == sorted(PATTERN_CODES)
    coaching = lines[6].removeprefix("COACHING:").split("|")
    codes = [entry.split(":", 1)[0] for entry in coaching]
    assert len(codes) == 11 and "anticipate_conflicts" not in codes
    assert codes == [c for c in state["coaching"] if c != "anticipate_conflicts"]
    assert all(entry == f"{c}:{COACHING_CODES[c][:40]}" for c, entry in zip(codes, coaching))
    assert coaching[0] == "ask_impact:Ask how tasks connect to strategies and "
    assert lines[7] == (
        "PREFS:no_ai_self_awareness:Avoid AI meta-commentary like |concise_responses:Avoid over-explaining, be dire"
    )
    assert store.read("altitude.compressed", "state") == state  # reading wrote nothing


# -- the_assist: Memory v1 ---------------------------------------------------------------


def test_memory_v1_session(store: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = Memory()
    assert mem.build_context_prompt() == "No prior context yet. This is our first conversation."
    assert mem.get_north_stars() == {"north_stars": [], "current_priorities": [], "anti_goals": [], "last_updated": None}
    assert mem.get_context() == {"active_threads": [], "pending_commits": [], "open_questions": [], "last_session": None}

    mem.update_north_stars({"current_priorities": ["patent_file", "work_balance"]})
    assert mem.build_context_prompt() == "\n## Current Priorities\n- patent_file\n- work_balance"
    mem.update_north_stars({"north_stars": ["Be present for family"]})
    mem.update_context({"pending_commits": ["call Gaurav Monday"], "active_threads": ["Q1 planning", "patent filing"]})
    mem.update_context({"open_questions": ["when?"], "seen": datetime(2026, 1, 1)})  # default=str
    assert is_naive_iso(mem.get_north_stars()["last_updated"])
    assert mem.get_context()["seen"] == "2026-01-01 00:00:00"

    freeze(monkeypatch, "hrm_memory.adapters.the_assist.core.memory", datetime(2026, 1, 10, 20, 57, 1, 250000))
    short = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    full = [*short, {"role": "user", "content": "plan Q1 \U0001f3af"}, {"role": "assistant", "content": "ok"}]
    mem.save_conversation(short)
    mem.save_conversation(full, summary="Planned Q1 and the patent filing")  # same second: both kept
    first = {"timestamp": "2026-01-10_20-57-01", "messages": short, "summary": None}
    second = {"timestamp": "2026-01-10_20-57-01", "messages": full, "summary": "Planned Q1 and the patent filing"}
    assert store.read("altitude.conversations", "2026-01-10_20-57-01") == first
    assert store.read("altitude.conversations", "2026-01-10_20-57-01_2") == second
    assert mem.get_recent_conversations() == [second, first]
    assert mem.get_recent_conversations(limit=1) == [second]

    assert mem.build_context_prompt() == (
        "## North Stars (Long-term)\n"
        "- Be present for family\n"
        "\n## Current Priorities\n"
        "- patent_file\n"
        "- work_balance\n"
        "\n## Pending Commitments\n"
        "- call Gaurav Monday\n"
        "\n## Active Threads\n"
        "- Q1 planning\n"
        "- patent filing\n"
        "\n## Recent Context\n"
        "- 2026-01-10_20-57-01: Planned Q1 and the patent filing"
    )

    mem.log_pattern("ai_observed", "prefers numbers")
    mem.log_pattern("ai_observed", "prefers numbers", {"n": 2})
    observations = store.read("altitude.context", "observations")["observations"]
    assert [(o["type"], o["observation"], o["data"]) for o in observations] == [
        ("ai_observed", "prefers numbers", {}),
        ("ai_observed", "prefers numbers", {"n": 2}),
    ]


def test_memory_v1_recent_context_header_without_summaries(store: MemoryManager) -> None:
    mem = Memory()
    mem.save_conversation([{"role": "user", "content": "hi"}])
    assert mem.build_context_prompt() == "\n## Recent Context"


def test_memory_v1_corrupt_record_raises_and_is_not_overwritten(root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm, use_manager(mm):
        Memory().update_context({"active_threads": ["keep me"]})
    damage(root, "altitude.context", "context")
    with MemoryManager(root, durability="flush") as mm, use_manager(mm):
        mem = Memory()  # seeding does not touch an existing (even damaged) record
        with pytest.raises(CorruptRecord):
            mem.get_context()
        with pytest.raises(CorruptRecord):
            mem.update_context({"active_threads": []})  # legacy: read {} and wrote it back
        assert [f.kind for f in mm.check()] == ["corrupt-record"]  # still there, not replaced


# -- the_assist: SessionHistory ---------------------------------------------------------


def test_session_history(store: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> None:
    freeze(monkeypatch, "hrm_memory.adapters.the_assist.hrm.history", datetime(2026, 1, 11, 21, 5, 42))
    h = SessionHistory()
    assert store.read("altitude.sessions", "session_history") == {"sessions": [], "next_index": 1}
    assert h.build_context_for_continuity() == "No previous sessions recorded."
    h.record_exchange(["x"])
    h.end_session("never started")  # no start_session: nothing is stored
    assert h.get_all_sessions() == [] and h.get_last_session() is None

    h.start_session()
    h.record_exchange(["patent", "q1_planning", ""])
    h.record_exchange(["patent", "Patent", "aws"])
    h.record_exchange([f"t{i}" for i in range(8)])  # 12 topics -> the last 10
    h.record_exchange(["patent"])  # fell out above, so it comes back
    summary = 'Discussed: "patent, q1 planning and the AWS timeline for the first quarter of 2026'
    h.end_session(summary)
    h.start_session()
    h.record_exchange([])
    h.end_session("Short one")

    topics = ["aws", *(f"t{i}" for i in range(8)), "patent"]
    s1 = SessionRecord(1, "2026-01-11", "21:05", summary, topics, 4)
    s2 = SessionRecord(2, "2026-01-11", "21:05", "Short one", [], 1)
    assert h.get_all_sessions() == [s1, s2]
    assert h.get_last_session() == s2
    assert h.get_session(1) == s1 and h.get_session(9) is None
    assert h.get_sessions_by_date("2026-01-11") == [s1, s2] and h.get_sessions_by_date("2026-01-12") == []
    assert h.get_recent_sessions(1) == [s2]
    assert h.search_sessions("aws") == [s1] and h.search_sessions("T3") == [s1] and h.search_sessions("SHORT") == [s2]

    assert h.format_session(s1) == (
        "[Session #1] 2026-01-11 21:05\n"
        f"  Summary: {summary}\n"
        "  Topics: aws, t0, t1, t2, t3, t4, t5, t6, t7, patent\n"
        "  Exchanges: 4"
    )
    assert h.format_session(s2) == "[Session #2] 2026-01-11 21:05\n  Summary: Short one\n  Topics: none\n  Exchanges: 1"
    assert h.format_sessions_brief([]) == "No sessions found."
    assert h.format_sessions_brief([s1, s2]) == f"#1 [2026-01-11] {summary[:60]}...\n#2 [2026-01-11] Short one"
    assert h.build_context_for_continuity() == (
        "PREVIOUS SESSIONS:\n"
        f"- Session #1 (2026-01-11): {summary}\n"
        "  Topics: aws, t0, t1, t2, t3, t4, t5, t6, t7, patent\n"
        "- Session #2 (2026-01-11): Short one"
    )

    for i in range(20):
        h.start_session()
        h.end_session(f"session {i}")
    stored = store.read("altitude.sessions", "session_history")
    assert [s["index"] for s in stored["sessions"]] == list(range(3, 23)) and stored["next_index"] == 23
    assert list(stored["sessions"][0]) == ["index", "date", "time", "summary", "topics", "duration_exchanges"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Where were we?", True),
        ("What did we decide last time?", True),
        ("Let's pick up from session #3", True),
        ("remember when we talked about the patent", True),
        ("Show me my Session History", True),
        ("before the crash we were planning Q1", True),
        ("as I said previously", True),
        ("What's the weather like?", False),
        ("Plan my week around the patent", False),
    ],
)
def test_is_continuity_question(text: str, expected: bool) -> None:
    assert SessionHistory.is_continuity_question(text) is expected


def test_session_history_on_legacy_data(store: MemoryManager) -> None:
    data = legacy("the_assist/hrm/memory/session_history.json")
    store.write("altitude.sessions", "session_history", data, imported=True)
    h = SessionHistory()
    assert [s.index for s in h.get_all_sessions()] == [1, 2, 3, 4]
    assert h.get_last_session() == SessionRecord(**data["sessions"][-1])


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


# -- the_assist: feedback, entities, integrity ---------------------------------------------


def test_feedback(store: MemoryManager) -> None:
    start = datetime.now()
    entry = feedback.log_feedback("worked", "good opening question", context="User: hi")
    assert entry["tags"] == [] and is_naive_iso(entry["timestamp"])
    feedback.log_feedback("didnt_work", "too long", tags=["verbosity"])
    feedback.log_feedback("suggestion", "ask about AWS")
    summary = feedback.get_feedback_summary()
    assert (summary["total"], summary["worked"], summary["didnt_work"], summary["suggestions"]) == (3, 1, 1, 1)
    assert summary["recent"][0] == entry
    session = feedback.get_session_feedback(start)
    assert (session["positive_count"], session["negative_count"]) == (1, 1)
    assert session["worked"] == [entry]
    assert feedback.get_session_feedback(datetime(2099, 1, 1))["positive_count"] == 0
    # learning.feedback is gated by "preferences": kept in this process until granted
    assert not store.get_record("learning.feedback", "log").persisted  # type: ignore[union-attr]
    store.consent.grant("preferences")
    assert store.get_record("learning.feedback", "log").persisted  # type: ignore[union-attr]


def test_entities(store: MemoryManager) -> None:
    assert entities.build_entity_context() == ""
    entities.add_or_update_person("Gaurav", {"role": "work colleague"})
    entities.add_or_update_person("gaurav", {"team": "AWS"})
    person = entities.get_people()["gaurav"]
    assert person["name"] == "Gaurav" and person["mentions"] == 2
    assert person["details"] == {"role": "work colleague", "team": "AWS"} and "last_mentioned" in person
    for i in range(52):
        entities.log_behavior_observation(f"obs {i}")
    entities.validate_behavior("timeboxes work")
    entities.set_preference("numbers_over_bullets", True)
    behaviors = entities.get_behaviors()
    assert len(behaviors["observed"]) == 50 and behaviors["observed"][0]["observation"] == "obs 2"
    assert entities.build_entity_context() == (
        "## People You Know\n"
        "- **Gaurav**: role: work colleague, team: AWS\n"
        "\n## Validated Patterns (Long-term)\n"
        "- timeboxes work\n"
        "\n## Learned Preferences\n"
        "- numbers_over_bullets: True"
    )


def test_integrity_boot_and_shutdown(store: MemoryManager) -> None:
    CompressedMemory()
    ok, preflight = integrity.boot()
    assert ok and preflight["status"] == "passed"
    assert preflight["memory_status"] == {
        "compressed/state.json": "valid",
        "curator/state.json": "missing",
        "proactive/state.json": "missing",
    }
    status = integrity.get_status()
    assert status["session_count"] == 1 and status["clean_shutdown"] is False
    assert status["last_boot"].endswith("Z") and status["agents"]["orchestrator"]["status"] == "active"
    clean, result = integrity.shutdown()
    assert clean and result["session"] == 1
    assert integrity.run_preflight()["status"] == "passed"  # clean shutdown, state unchanged

    CompressedMemory().add_pattern("timeboxing")  # changed outside a session
    ok, preflight = integrity.boot()
    assert ok and preflight["warnings"] == ["Memory state changed outside of session"]
    assert integrity.run_preflight()["warnings"] == ["Previous session did not shut down cleanly"]

    checkpoints = integrity.get_recent_checkpoints()
    assert [c["session"] for c in checkpoints] == [2, 1]
    log = store.read("altitude.integrity", "version_log")["version_log"]
    assert [(e["version"], e["status"], e["session"]) for e in log] == [(1, "boot", 1), (2, "shutdown", 1), (3, "boot", 2)]
    assert all(e["timestamp"].endswith("Z") for e in log)


def test_integrity_state_hash_matches_the_legacy_files(store: MemoryManager) -> None:
    import hashlib

    files = ["compressed/state.json", "curator/state.json", "proactive/state.json"]
    raw = [(DATA / "the_assist/memory/store" / f) for f in files]
    if not all(p.is_file() for p in raw):
        pytest.skip("legacy data files are absent")
    for (namespace, key), path in zip(integrity.MEMORY_RECORDS.values(), raw):
        store.write(namespace, key, json.loads(path.read_bytes()), imported=True)
    expected = hashlib.md5("".join(hashlib.md5(p.read_bytes()).hexdigest() for p in raw).encode()).hexdigest()
    assert integrity.state_hash() == expected


def test_llm_parts_are_not_adapted(store: MemoryManager) -> None:
    with pytest.raises(NotImplementedError, match="storage only"):
        memory_v2.migrate_from_v1()
    with pytest.raises(NotImplementedError, match="storage only"):
        integrity.boot_or_warn()
