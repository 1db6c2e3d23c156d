"""The remaining legacy stores over the MemoryManager (adapters/): intent,
retrospectives, AI reflection, curator, proactive engine, HRM agent blocks,
LockedLoop's conversation and note capture. Each store gets a realistic call
sequence with the legacy return values (shared/legacy/LEGACY_API.md sections
9 and 10) and, where the legacy data ships the file, a run on the real file
imported into its record (migration/layout.py).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.clock import freeze
from tests.helpers.legacy import DATA, legacy

from hrm_memory import adapters  # noqa: F401  (installs the legacy import paths)
from hrm_memory import CorruptRecord, MemoryManager

from the_assist.core.ai_reflection import AIReflection, get_combined_insights, outcome_pattern  # noqa: E402
from the_assist.core.curator import MemoryCurator  # noqa: E402
from the_assist.core.hrm_agent import HRMAgent  # noqa: E402
from the_assist.core.proactive import ProactiveEngine  # noqa: E402
from the_assist.core.retrospective import DEFAULT_BASELINE, SessionRetrospective  # noqa: E402
from the_assist.hrm.intent import IntentStore  # noqa: E402
from locked_system.capabilities.note_capture import NoteCaptureCapability, NoteType  # noqa: E402
from locked_system.loop import ConversationStore  # noqa: E402
from locked_system.memory.consent import ConsentManager  # noqa: E402

STORE = "the_assist/memory/store/"




def rd(mm: MemoryManager, namespace: str, key: str) -> Any:
    """The record in its legacy (expanded) shape, None if absent."""
    return mm.read(namespace, key, None)


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
