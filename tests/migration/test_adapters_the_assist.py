"""The_assist's legacy APIs over the MemoryManager (adapters/): CompressedMemory,
Memory v1, SessionHistory, intent, retrospectives, AI reflection, curator,
proactive engine, HRM agent blocks, feedback, entities and integrity. Each
gets the call sequences a real HRM makes, with the exact legacy return values
and context text (shared/legacy/LEGACY_API.md), the records they land in
(migration/layout.py), a run on the real legacy file where the data ships
it, and the cases where the adapters refuse to lose data.
"""

from __future__ import annotations

import importlib
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.clock import freeze
from tests.helpers.damage import flip_value_byte
from tests.helpers.legacy import DATA, legacy

from hrm_memory import adapters
from hrm_memory.adapters import runtime, use_manager
from hrm_memory import CorruptRecord, MemoryManager


import dopejar.core.memory_v2 as dopejar_memory_v2  # noqa: E402  (after `import adapters`)
import the_assist.core.memory_v2 as memory_v2  # noqa: E402
from locked_system.memory import FastMemory, History, InteractionSignals  # noqa: E402
from locked_system.memory.consent import ConsentManager  # noqa: E402
from the_assist.core import entities, feedback, integrity  # noqa: E402
from the_assist.core.ai_reflection import AIReflection, get_combined_insights, outcome_pattern  # noqa: E402
from the_assist.core.curator import MemoryCurator  # noqa: E402
from the_assist.core.hrm_agent import HRMAgent  # noqa: E402
from the_assist.core.memory import Memory  # noqa: E402
from the_assist.core.memory_v2 import COACHING_CODES, PATTERN_CODES, CompressedMemory  # noqa: E402
from the_assist.core.proactive import ProactiveEngine  # noqa: E402
from the_assist.core.retrospective import DEFAULT_BASELINE, SessionRetrospective  # noqa: E402
from the_assist.hrm import SessionHistory  # noqa: E402
from the_assist.hrm.history import SessionRecord  # noqa: E402
from the_assist.hrm.intent import IntentStore  # noqa: E402


def is_naive_iso(value: str) -> bool:
    return datetime.fromisoformat(value).tzinfo is None


STORE = "the_assist/memory/store/"


def rd(mm: MemoryManager, namespace: str, key: str) -> Any:
    """The record in its legacy (expanded) shape, None if absent."""
    return mm.read(namespace, key, None)


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
    flip_value_byte(root, "altitude.context", "context")
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
# -- the_assist.hrm.intent -------------------------------------------------------------------


def test_intent_store(store: MemoryManager) -> None:
    intent = IntentStore()
    assert rd(store, "reasoning.hrm", "intent") == {
        "north_stars": [], "current_success": "", "non_goals": [], "stop_conditions": [], "stance": "partner",
    }
    stars = ["family_present", "meaningful_tech", "health", "craft", "friends", "travel"]
    intent.set_north_stars(stars)
    assert intent.get_north_stars() == stars[:5]
    intent.set_success("ship the adapter")
    assert intent.get_success() == intent.get_current_success() == "ship the adapter"
    intent.add_non_goal("feature_stacking")
    intent.add_non_goal("feature_stacking")
    intent.add_non_goal("sycophancy")
    assert intent.get_non_goals() == ["feature_stacking", "sycophancy"]
    assert intent.is_non_goal("this is Feature Stacking again")
    assert intent.is_non_goal("pure feature_stacking")
    assert not intent.is_non_goal("a focused plan")
    with pytest.raises(ValueError):
        intent.set_stance("boss")
    intent.set_stance("challenge")
    assert intent.get_stance() == "challenge"
    alignment = intent.check_alignment("more feature stacking for meaningful tech")
    assert alignment["aligned"] is False and alignment["violated_non_goals"] == ["feature_stacking"]
    assert alignment["north_stars_served"] == ["meaningful_tech"]
    planner = intent.build_context_for_planner()
    assert "ship the adapter" in planner and "feature_stacking" in planner and "challenge" in planner
    assert "sycophancy" in intent.build_context_for_evaluator()
    # a second store over the same record sees the same intent (nothing reseeded)
    assert IntentStore().get_stance() == "challenge"


def test_intent_store_on_legacy_file(store: MemoryManager) -> None:
    data = legacy("the_assist/hrm/memory/intent.json")
    store.write("reasoning.hrm", "intent", data, imported=True)
    intent = IntentStore()
    assert intent.get_intent() == data
    assert intent.should_stop("the user says stop now")
    assert intent.should_stop("stuck_in_loop")
    assert not intent.should_stop("keep going")
    assert intent.is_non_goal("that is compliance over partnership")


def test_intent_store_corrupt(store: MemoryManager) -> None:
    store.write("reasoning.hrm", "intent", ["not", "an", "object"], imported=True)
    intent = IntentStore()
    with pytest.raises(CorruptRecord):
        intent.get_stance()
    with pytest.raises(CorruptRecord):
        intent.set_stance("support")
    assert rd(store, "reasoning.hrm", "intent") == ["not", "an", "object"]


# -- the_assist.core.retrospective -------------------------------------------------------------


def analysis(corrections: int, topics: list[str], shifts: dict[str, float], learnings: list[str]) -> dict[str, Any]:
    return {
        "session_quality": "productive",
        "mbti_signals": {"observed_type": "ENTP", "dimension_shifts": shifts},
        "behavioral": {"energy": "high", "stress_signals": "none"},
        "session_dynamics": {"corrections_given": corrections, "topics": topics},
        "learnings": learnings,
    }


def test_retrospective(store: MemoryManager) -> None:
    retro = SessionRetrospective()
    baseline = retro.get_baseline()
    assert {k: v for k, v in baseline.items() if k != "last_updated"} == DEFAULT_BASELINE
    assert baseline["mbti"]["dimensions"] == {"E_I": 0.7, "N_S": 0.8, "T_F": 0.6, "J_P": 0.3}
    summary = retro.get_trends_summary()
    assert summary == {
        "sessions_analyzed": 0,
        "avg_corrections_per_session": 0,
        "correction_trend": "insufficient_data",
        "top_topics": [],
        "recent_learnings": [],
        "mbti_baseline": DEFAULT_BASELINE["mbti"],
        "recent_mbti_shifts": [],
    }
    assert retro.analyze_session([{"role": "user", "content": "hi"}], 1) == {
        "skipped": True, "reason": "conversation_too_short",
    }
    with pytest.raises(NotImplementedError, match="LLM"):
        retro.analyze_session([{"role": "user", "content": "hi"}] * 2, 1)

    stored = retro.record_retrospective(analysis(4, ["aws", "q1"], {"T_F": 0.2, "J_P": 0.1}, ["likes numbers"]), 7, 6)
    assert (stored["session_id"], stored["turn_count"]) == (7, 6)
    key = f"{datetime.now():%Y-%m-%d}_session_7"
    assert rd(store, "learning.retrospectives", key) == stored
    # the same session id on the same day does not overwrite the first one
    retro.record_retrospective(analysis(2, ["aws"], {"N_S": -0.3}, []), 7, 2)
    assert rd(store, "learning.retrospectives", key + "_2")["turn_count"] == 2
    assert retro.record_retrospective({"skipped": True, "reason": "x"}, 8) == {"skipped": True, "reason": "x"}
    for corrections in (3, 3, 3):
        retro.record_retrospective(analysis(corrections, [], {}, []), 9)
    summary = retro.get_trends_summary()
    assert summary["sessions_analyzed"] == 5
    assert summary["avg_corrections_per_session"] == 3.0
    assert summary["correction_trend"] == "stable"  # 5 values: the last 5 against the first 5
    assert summary["top_topics"] == [("aws", 2), ("q1", 1)]
    assert [item["learning"] for item in summary["recent_learnings"]] == ["likes numbers"]
    assert [s["shifts"] for s in summary["recent_mbti_shifts"]] == [{"T_F": 0.2}, {"N_S": -0.3}]
    for corrections in (0, 0, 0, 0, 0):
        retro.record_retrospective(analysis(corrections, [], {}, []), 10)
    assert retro.get_trends_summary()["correction_trend"] == "improving"

    before = retro.get_baseline()["last_updated"]
    retro.update_baseline_preference("concise_responses", False)
    after = retro.get_baseline()
    assert after["preferences"]["concise_responses"] is False and after["last_updated"] >= before


def test_retrospective_trend_rules(store: MemoryManager) -> None:
    retro = SessionRetrospective()

    def trend(rates: list[int]) -> tuple[Any, Any]:
        store.write("learning.retrospectives", "trends", {"correction_rates": rates}, imported=True)
        s = retro.get_trends_summary()
        return s["avg_corrections_per_session"], s["correction_trend"]

    assert trend([1, 2, 3, 4]) == (2.5, "insufficient_data")
    assert trend([1, 1, 1, 1, 1, 2, 2]) == (1.29, "declining")  # last 5 (1.6) vs first 5 (1.0)
    assert trend([5, 5, 5, 5, 5, 4, 4, 4, 4, 4]) == (4.5, "stable")  # 4.0 vs 5.0 is exactly 0.8x
    assert trend([5, 5, 5, 5, 5, 4, 4, 4, 4, 3]) == (4.4, "improving")


def test_retrospective_on_legacy_files(store: MemoryManager) -> None:
    trends = legacy(STORE + "retrospectives/trends.json")
    baseline = legacy(STORE + "retrospectives/baseline.json")
    store.write("learning.retrospectives", "trends", trends, imported=True)
    store.write("learning.retrospectives", "baseline", baseline, imported=True)
    retro = SessionRetrospective()  # seeds nothing over imported records
    summary = retro.get_trends_summary()
    assert summary["sessions_analyzed"] == 18
    assert summary["avg_corrections_per_session"] == 2.0  # 36 / 18
    assert summary["correction_trend"] == "improving"  # last 5 mean 1.2 vs 3.0 before
    assert summary["top_topics"] == [
        ("decision_frameworks", 3),
        ("cognitive_partnership", 2),
        ("strategic priorities", 2),
        ("investment strategy", 2),
        ("Austin trip", 1),
    ]
    assert summary["recent_learnings"] == trends["learnings"][-5:]
    assert summary["recent_mbti_shifts"] == trends["mbti_shifts"][-3:]
    assert summary["mbti_baseline"] == baseline["mbti"]
    assert rd(store, "learning.retrospectives", "baseline") == baseline


# -- the_assist.core.ai_reflection -------------------------------------------------------------


def reflection(scores: dict[str, Any], effectiveness: str, trust: str, failed: str = "", worked: str = "") -> dict[str, Any]:
    return {
        "quality_scores": scores,
        "outcome_analysis": {"overall_effectiveness": effectiveness},
        "self_critique": {"what_worked": worked, "what_failed": failed},
        "pattern_detection": {"trust_trajectory": trust},
        "improvement_actions": ["ask first", "be brief"],
    }


def test_outcome_pattern_rule() -> None:
    assert outcome_pattern("effective", "building", "high") == "positive_reinforcement"
    assert outcome_pattern("ineffective", "eroding", "none") == "negative_spiral"
    assert outcome_pattern("effective", "stable", "elevated") == "stress_support_success"
    assert outcome_pattern("mixed", "stable", "high") == "stress_support_failure"
    assert outcome_pattern("mixed", "eroding", "mild") == "neutral"


def test_ai_reflection(store: MemoryManager) -> None:
    ai = AIReflection()
    assert rd(store, "learning.reflections", "outcome_log") == {"outcomes": []}
    with pytest.raises(NotImplementedError):
        ai.reflect_on_session([{"role": "user", "content": "x"}] * 3, 1)
    user = analysis(1, [], {}, [])
    user["behavioral"]["stress_signals"] = "high"
    scores = {"conciseness": 0.3, "accuracy": 0.6, "trust_building": 0.4, "made_up": 0.9, "note": "n/a"}
    ai.record_reflection(reflection(scores, "effective", "stable", failed="cut off", worked="good link"), 4, user)
    ai.record_reflection(reflection({"trust_building": 0.8}, "effective", "building"), 5, {"skipped": True})
    ai.record_reflection(reflection({}, "mixed", "stable"), 6)

    outcomes = rd(store, "learning.reflections", "outcome_log")["outcomes"]
    assert [o["avg_quality"] for o in outcomes] == [0.55, 0.8, 0.0]  # (0.3+0.6+0.4+0.9)/4
    assert outcomes[0]["user_state"] == {"session_quality": "productive", "energy": "high", "stress": "high", "corrections": 1}
    assert outcomes[0]["pattern"] == "stress_support_success"
    assert "pattern" not in outcomes[1] and "user_state" not in outcomes[1]

    trends = rd(store, "learning.reflections", "ai_trends")
    assert trends["quality_scores"]["trust_building"] == [0.4, 0.8]
    assert "made_up" not in trends["quality_scores"]
    assert [f["failure"] for f in trends["failure_modes"]] == ["cut off"]
    assert [s["strength"] for s in trends["strengths"]] == ["good link"]
    assert len(trends["improvement_areas"]) == 6

    summary = ai.get_ai_performance_summary()
    assert summary["sessions_reflected"] == 3
    assert summary["avg_quality_scores"]["trust_building"] == 0.6
    assert summary["avg_quality_scores"]["value_add"] is None
    assert summary["overall_avg"] == 0.5  # (0.3 + 0.6 + 0.6) / 3
    assert summary["outcome_patterns"] == {"stress_support_success": 1}
    assert summary["trend_direction"] == "insufficient_data"
    assert [a["action"] for a in summary["improvement_actions"]] == ["be brief", "ask first", "be brief", "ask first", "be brief"]


def test_ai_reflection_caps(store: MemoryManager) -> None:
    ai = AIReflection()
    for i in range(55):
        ai.record_reflection(reflection({"trust_building": i / 100}, "mixed", "stable", failed=f"f{i}", worked=f"w{i}"), i)
    trends = rd(store, "learning.reflections", "ai_trends")
    assert len(trends["quality_scores"]["trust_building"]) == 50
    assert len(trends["improvement_areas"]) == 30
    assert trends["failure_modes"][0]["failure"] == "f35" and len(trends["strengths"]) == 20
    assert ai.get_ai_performance_summary()["trend_direction"] == "stable"  # +0.05 per 5 sessions


def test_ai_reflection_on_legacy_files(store: MemoryManager) -> None:
    trends = legacy(STORE + "ai_reflection/ai_trends.json")
    outcomes = legacy(STORE + "ai_reflection/outcome_log.json")
    store.write("learning.reflections", "ai_trends", trends, imported=True)
    store.write("learning.reflections", "outcome_log", outcomes, imported=True)
    summary = AIReflection().get_ai_performance_summary()
    assert summary["sessions_reflected"] == 16
    # trust_building: last 5 mean 0.56 against 0.3 for the 5 before
    assert summary["trend_direction"] == "improving"
    patterns: dict[str, int] = {}
    for o in outcomes["outcomes"][-20:]:
        if "pattern" in o:
            patterns[o["pattern"]] = patterns.get(o["pattern"], 0) + 1
    assert summary["outcome_patterns"] == patterns
    assert summary["recent_failures"] == trends["failure_modes"][-3:]
    # every stored pattern follows the legacy rule
    for o in outcomes["outcomes"]:
        if "pattern" in o:
            assert o["pattern"] == outcome_pattern(o["effectiveness"], o["trust_trajectory"], o["user_state"]["stress"])


def test_combined_insights(store: MemoryManager) -> None:
    insights = get_combined_insights()
    assert insights["alignment"] == {
        "alignment_strength": "moderate",
        "user_corrections_trending": "insufficient_data",
        "ai_performance_trending": "insufficient_data",
    }


# -- the_assist.core.curator -------------------------------------------------------------------


def test_curator(store: MemoryManager, monkeypatch: pytest.MonkeyPatch) -> None:
    curator = MemoryCurator()
    assert curator.needs_daily() and curator.needs_weekly()
    assert rd(store, "altitude.agents", "curator") == {
        "last_daily": None, "last_weekly": None, "daily_summaries": [], "weekly_themes": [], "insights": [],
    }
    with pytest.raises(NotImplementedError):
        curator.run_if_needed()
    last = datetime(2026, 1, 10, 8, 0)
    state = curator.get_state()
    state.update(last_daily=last.isoformat(), last_weekly=last.isoformat())
    state["insights"] = [
        {"timestamp": last.isoformat(), "insight": "one", "surfaced": False},
        {"timestamp": last.isoformat(), "insight": "two", "surfaced": True},
        {"timestamp": last.isoformat(), "insight": "three", "surfaced": False},
    ]
    store.write("altitude.agents", "curator", state)
    freeze(monkeypatch, "hrm_memory.adapters.the_assist.core.curator", last + timedelta(hours=20))
    assert not curator.needs_daily()
    assert curator.run_if_needed() == []
    freeze(monkeypatch, "hrm_memory.adapters.the_assist.core.curator", last + timedelta(hours=20, seconds=1))
    assert curator.needs_daily() and not curator.needs_weekly()
    freeze(monkeypatch, "hrm_memory.adapters.the_assist.core.curator", last + timedelta(days=6, seconds=1))
    assert curator.needs_weekly()
    assert curator.get_unsurfaced_insights() == ["one", "three"]
    assert curator.get_unsurfaced_insights() == []
    assert all(i["surfaced"] for i in rd(store, "altitude.agents", "curator")["insights"])


def test_curator_on_legacy_file(store: MemoryManager) -> None:
    state = legacy(STORE + "curator/state.json")
    store.write("altitude.agents", "curator", state, imported=True)
    curator = MemoryCurator()
    expected = [i["insight"] for i in state["insights"] if not i["surfaced"]]
    assert curator.get_unsurfaced_insights() == expected
    assert curator.needs_daily() and curator.needs_weekly()  # the data is from January 2026


# -- the_assist.core.proactive -------------------------------------------------------------------


def nudge(target: str) -> dict[str, Any]:
    return {"timestamp": datetime.now().isoformat(), "target": target, "confidence": 0.8, "resolved": False}


def test_proactive(store: MemoryManager) -> None:
    engine = ProactiveEngine()
    assert engine.get_hit_rate() == 0.5 and engine.get_directness_level() == 0
    engine.record_reaction("confirmed")  # no nudge yet: nothing happens
    assert rd(store, "altitude.agents", "proactive")["intuition_history"] == []
    assert engine.analyze_response_for_reaction("sure") == "ignored"

    state = engine.get_state()
    state["last_nudge"] = nudge("AWS Q1 plan")
    state["session_nudges"] = [nudge("AWS Q1 plan")]
    store.write("altitude.agents", "proactive", state)
    with pytest.raises(NotImplementedError):
        engine.analyze_response_for_reaction("yes, that")
    for reaction in ("corrected", "pivoted"):
        engine.record_reaction(reaction)
    assert engine.get_directness_level() == 0
    engine.record_reaction("corrected")  # third miss
    assert engine.get_directness_level() == 1
    engine.record_reaction("pivoted")
    engine.record_reaction("corrected")
    assert engine.get_directness_level() == 2  # ceiling
    engine.record_reaction("ignored")
    state = engine.get_state()
    assert (state["consecutive_misses"], state["directness_level"]) == (5, 2)
    engine.record_reaction("confirmed")
    state = engine.get_state()
    assert (state["consecutive_misses"], state["directness_level"]) == (0, 1)
    assert state["last_nudge"]["resolved"] is True and state["last_nudge"]["reaction"] == "confirmed"
    assert state["session_nudges"][0]["resolved"] is False  # the copy is not touched
    assert [h["reaction"] for h in state["intuition_history"]] == [
        "corrected", "pivoted", "corrected", "pivoted", "corrected", "ignored", "confirmed",
    ]
    assert state["intuition_history"][0]["target"] == "AWS Q1 plan"
    assert engine.get_hit_rate() == 1 / 7
    assert engine.analyze_response_for_reaction("ok") == "ignored"  # resolved
    engine.reset_session()
    state = engine.get_state()
    assert state["last_nudge"] is None and state["session_nudges"] == []
    assert len(state["intuition_history"]) == 7

    for _ in range(60):
        state["last_nudge"] = nudge("x")
        store.write("altitude.agents", "proactive", state)
        engine.record_reaction("confirmed")
        state = engine.get_state()
    assert len(state["intuition_history"]) == 50 and state["directness_level"] == 0


def test_proactive_on_legacy_file(store: MemoryManager) -> None:
    state = legacy(STORE + "proactive/state.json")
    store.write("altitude.agents", "proactive", state, imported=True)
    engine = ProactiveEngine()
    confirmed = sum(1 for h in state["intuition_history"] if h["reaction"] == "confirmed")
    assert (confirmed, len(state["intuition_history"])) == (6, 21)
    assert engine.get_hit_rate() == 6 / 21
    assert engine.get_directness_level() == state["directness_level"]
    assert engine.generate_mid_conversation_nudge("...") is None  # 25 session nudges
    engine.record_reaction("corrected")  # acts on the already-resolved last nudge
    after = engine.get_state()
    assert after["consecutive_misses"] == state["consecutive_misses"] + 1
    assert after["directness_level"] == min(2, state["directness_level"] + 1)
    assert after["last_nudge"]["reaction"] == "corrected"


def test_proactive_corrupt(store: MemoryManager) -> None:
    store.write("altitude.agents", "proactive", "{truncated", imported=True)
    engine = ProactiveEngine()
    with pytest.raises(CorruptRecord):
        engine.record_reaction("confirmed")
    assert rd(store, "altitude.agents", "proactive") == "{truncated"


# -- the_assist.core.hrm_agent -------------------------------------------------------------------


def test_hrm_agent(store: MemoryManager) -> None:
    agent = HRMAgent()
    assert agent.get_active_blocks() == {"blocked": [], "cooldowns": {}}
    assert agent.build_orchestrator_injection({}) == ""
    agent.add_blocked_topic("AWS Job")
    agent.add_blocked_topic("aws job", "request")  # overwrites (downgrades) the strength
    agent.add_blocked_topic("taxes", "request")
    blocks = agent.get_active_blocks()
    assert [(b["topic"], b["strength"]) for b in blocks["blocked"]] == [("AWS Job", "request"), ("taxes", "request")]
    agent.add_cooldown("Project_Validation", 2)
    agent.add_cooldown("sales play")
    agent.add_cooldown("project_validation", 2)  # replaced, not added
    assert set(agent.get_active_blocks()["cooldowns"]) == {"project_validation", "sales play"}
    agent.decrement_cooldowns()
    assert {t: c["remaining"] for t, c in agent.get_active_blocks()["cooldowns"].items()} == {
        "project_validation": 1, "sales play": 4,
    }
    agent.decrement_cooldowns()
    assert list(agent.get_active_blocks()["cooldowns"]) == ["sales play"]
    text = agent.build_orchestrator_injection({"altitude": "L2", "avoid": ["lists"]})
    assert text.startswith("\n# HRM Guidance (follow strictly)\n")
    assert "L2" in text and "AWS Job" in text and "sales play" in text
    with pytest.raises(NotImplementedError):
        agent.adjust_prompt({}, {})


def test_hrm_agent_on_legacy_file(store: MemoryManager) -> None:
    data = legacy(STORE + "hrm/blocked_topics.json")
    store.write("altitude.agents", "blocked_topics", data, imported=True)
    agent = HRMAgent()
    assert agent.get_active_blocks() == data
    first = data["blocked"][0]
    agent.add_blocked_topic(first["topic"].upper(), "request")
    after = agent.get_active_blocks()
    assert len(after["blocked"]) == len(data["blocked"])
    assert after["blocked"][0] == {**first, "strength": "request"}
    agent.decrement_cooldowns()
    assert {t: c["remaining"] for t, c in agent.get_active_blocks()["cooldowns"].items()} == {
        t: c["remaining"] - 1 for t, c in data["cooldowns"].items() if c["remaining"] > 1
    }
