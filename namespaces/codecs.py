"""The seed codecs, as data: one per HRM, named after it.

Tables copied from the legacy ``the_assist.core.memory_v2`` code tables
(PATTERN_CODES, COACHING_CODES, RELATIONSHIP_CODES; see
shared/legacy/LEGACY_API.md section 2), so legacy compressed data is already in
compact form: a person ``{"r": "wk", "t": [...], "n": 2}`` expands to
``{"relationship": "work_colleague", "tags": [...], "n": 2}`` and compacts back
byte for byte. The reasoning, learning and focus tables are new.

Aliases and value codes are chosen to save *tokens*, not characters: o200k_base
reads ``timestamp`` or ``summary`` as one token already, so such fields keep
their names; an alias is declared only where the field costs two or more
tokens and the alias one (tests/context/test_tokens.py checks that no alias or code
costs more tokens than what it replaces).

``NAMESPACE_CODECS`` says which namespace uses which codec.
"""

from __future__ import annotations

from hrm_memory.core.codes import Codec

# -- legacy tables (facts: LEGACY_API.md section 2) --------------------------------

PATTERN_CODES = {
    "timeboxing": "Uses timeboxing to prevent analysis paralysis",
    "exit_criteria": "Sets clear exit criteria (time OR outcome)",
    "buffer_planning": "Builds buffers into schedules",
    "risk_id": "Proactively identifies risks/bottlenecks",
    "schedule_underest": "Underestimates how packed schedule is",
    "calendar_desync": "Mental and actual calendar often desync",
    "forgot_commit": "Discovers forgotten commitments",
    "multi_horizon": "Juggles multiple time horizons simultaneously",
    "struct_prefer": "Prefers structured breakdowns",
    "numbers_not_bullets": "Prefers numbers over bullets",
    "proactive_ok": "Open to being pushed/managed proactively",
    "direct_feedback": "Gives direct, honest feedback",
    "fast_context_switch": "Fast context switching, high ADHD",
    "multi_project": "Multiple concurrent projects",
    "bottleneck_recurring": "Has recurring bottlenecks (people/processes)",
}

COACHING_CODES = {
    "ask_impact": "Ask how tasks connect to strategies and north stars",
    "surface_why": "Surface the 'why' behind tasks, not just status",
    "strategic_questions": "Ask bigger picture questions, not just tactical",
    "connect_layers": "Connect L2 tasks to L3 strategy to L4 identity",
    "challenge_alignment": "Challenge when tasks don't align to priorities",
    "spot_overload": "Proactively spot schedule overload",
    "suggest_drops": "Recommend what to drop, not just what to add",
    "anticipate_conflicts": "Anticipate conflicts before they arise",
    "match_altitude": "Match user's altitude (strategic vs tactical)",
    "less_questions": "Lead with observations, fewer questions",
    "push_harder": "User wants more direct pushback",
    "more_concise": "Be more concise, less explanation",
    "cap_with_question": "End entry statements with an important open-ended question",
}

#: relationship -> code stored in ``people[*].r``. Legacy code stored the first
#: three characters of any other relationship (``ai_``, ``ass``, ``ent``); those
#: are not codes and pass through unchanged.
RELATIONSHIP_CODES = {
    "work_colleague": "wk",
    "family": "fam",
    "friend": "fr",
    "service": "svc",
}
_RELATIONSHIP_TABLE = {code: name for name, code in RELATIONSHIP_CODES.items()}
_PEOPLE_ALIASES = {"relationship": "r", "tags": "t"}

# -- new tables -----------------------------------------------------------------
# Keyed by the readable name; where a name has a shorter value code, the code is
# what is stored and Codec.describe accepts either.

ALTITUDES = {
    "L1": "moment: the current turn and its immediate ask",
    "L2": "tasks: schedules, commitments, operational detail",
    "L3": "strategy: projects and how they connect",
    "L4": "identity: north stars and long-term direction",
}

STANCES = {
    "sensemaking": "work out what is going on before acting",
    "discovery": "explore options and open questions",
    "execution": "carry out the committed plan",
    "evaluation": "judge outcomes against the commitment",
}
_STANCE_CODES = {"sensemaking": "sm", "discovery": "dc", "execution": "ex", "evaluation": "ev"}

GATES = {
    "framing": "enter or change the frame of the conversation",
    "commitment": "take on, renew or drop a commitment lease",
    "evaluation": "review progress against a commitment",
}

STRATEGIES = {
    "decompose": "split the problem into smaller parts",
    "analogize": "reuse the solution of a similar problem",
    "first_principles": "rebuild the answer from basic facts",
    "work_backwards": "start from the desired outcome",
    "timebox": "bound the effort, then decide",
    "clarify": "ask the user a clarifying question",
    "defer": "park the topic until it is ripe",
}
_STRATEGY_CODES = {"decompose": "dcp", "analogize": "ana", "first_principles": "fpr", "work_backwards": "wbk"}

#: Escalation levels, lowest first; the names are single tokens, so uncoded.
ESCALATIONS = {
    "stay": "handle it at the current altitude",
    "note": "record it for the next reflection",
    "raise": "move the question one altitude up",
    "interrupt": "stop and ask the user now",
    "halt": "stop acting until the user decides",
}

#: Routing targets (single tokens, uncoded).
ROUTES = {
    "altitude": "altitude HRM: strategy and identity",
    "focus": "focus HRM: fast and slow loops, gates",
    "reasoning": "reasoning HRM: strategy choice, escalation",
    "learning": "learning HRM: patterns and feedback",
    "user": "the user",
}

#: Failure modes and tendencies the learning HRM tracks (names as they appear
#: in the legacy reflections and plans).
LEARNED_PATTERNS = {
    "sycophancy": "agreeing instead of partnering",
    "endless_analysis": "analysis without a decision",
    "feature_stacking": "adding scope instead of finishing",
    "tactical_without_strategic": "tasks discussed without their strategy",
    "compliance_over_partnership": "obeying instead of thinking along",
    "negative_spiral": "a self-reinforcing loss of trust",
}
_LEARNED_CODES = {
    "sycophancy": "syc",
    "endless_analysis": "ea",
    "feature_stacking": "fst",
    "tactical_without_strategic": "tws",
    "compliance_over_partnership": "cop",
    "negative_spiral": "nsp",
}

# -- the codecs -----------------------------------------------------------------

ALTITUDE = Codec(
    "altitude",
    description="the_assist's compressed memory, context, agents' state, sessions and integrity logs",
    aliases={
        **_PEOPLE_ALIASES,
        "duration_exchanges": "dx",
        "preflight_status": "pf",
        "verified_files": "vf",
        "checkpoint_file": "cf",
        "state_hash": "sh",
        "observation": "obs",
        "first_mentioned": "fm",
    },
    values={**RELATIONSHIP_CODES, "ai_observed": "aio"},
    tables={"patterns": PATTERN_CODES, "coaching": COACHING_CODES, "relationships": _RELATIONSHIP_TABLE},
)

FOCUS = Codec(
    "focus",
    description="locked_system's fast and slow loops: interactions, gates, commitment, consent",
    aliases={
        "user_input_length": "uin",
        "response_length": "rsp",
        "altitude_used": "alt",
        "stance_used": "st",
        "had_commitment": "hc",
        "from_stance": "fst",
        "to_stance": "tst",
        "first_consent_at": "fca",
    },
    values=_STANCE_CODES,
    tables={"altitudes": ALTITUDES, "stances": STANCES, "gates": GATES},
)

REASONING = Codec(
    "reasoning",
    description="strategy choice, evaluation of plans, escalation and routing",
    aliases={
        "escalate_to_intent": "esc",
        "matched_intent": "mi",
        "outcome_summary": "osum",
        "revision_reason": "rr",
        "revision_needed": "rn",
        "blocked_topics": "bt",
        "recommendation": "rec",
    },
    values={**_STRATEGY_CODES, **_LEARNED_CODES},
    tables={"strategies": STRATEGIES, "escalations": ESCALATIONS, "routes": ROUTES, "patterns": LEARNED_PATTERNS},
)

LEARNING = Codec(
    "learning",
    description="retrospectives, self-reflections, observed patterns and feedback",
    aliases={
        # retrospective schema
        "mbti_signals": "mb",
        "observed_type": "ot",
        "dimension_shifts": "ds",
        "shift_explanation": "sx",
        "big5_signals": "b5",
        "conscientiousness": "con",
        "extraversion": "ext",
        "agreeableness": "agr",
        "neuroticism": "neu",
        "session_quality": "sq",
        "session_dynamics": "sd",
        "corrections_given": "cg",
        "progress_made": "pm",
        "blockers_identified": "bi",
        "decisions_made": "dm",
        "meta_observations": "mo",
        "assistant_verbosity": "av",
        "intuition_accuracy": "ia",
        "trust_signals": "tsig",
        "stress_signals": "ssig",
        "what_worked": "ww",
        "what_didnt": "wd",
        "session_id": "sid",
        "turn_count": "tc",
        "observation": "obs",
        # self-reflection schema
        "quality_scores": "qs",
        "conciseness": "cnc",
        "trust_building": "tb",
        "memory_relevance": "mr",
        "intuition_quality": "iq",
        "outcome_analysis": "oa",
        "overall_effectiveness": "oe",
        "friction_points": "frp",
        "smooth_moments": "sm",
        "self_critique": "sc",
        "missed_opportunities": "mop",
        "overcorrections": "oc",
        "ai_tendencies_shown": "ats",
        "user_corrections_analysis": "uca",
        "trust_trajectory": "tt",
        "improvement_actions": "imp",
        "outcome_attribution": "oat",
        "positive_outcomes_from_ai": "pos",
        "negative_outcomes_from_ai": "neg",
        "neutral_ai_impact": "nai",
    },
    values={**_LEARNED_CODES, "ai_observed": "aio"},
    tables={"patterns": LEARNED_PATTERNS},
)

SHARED = Codec(
    "shared",
    description="north stars, priorities and people every HRM reads",
    aliases={**_PEOPLE_ALIASES, "first_mentioned": "fm"},
    values=RELATIONSHIP_CODES,
    tables={"relationships": _RELATIONSHIP_TABLE},
)

CODECS: dict[str, Codec] = {c.name: c for c in (ALTITUDE, FOCUS, REASONING, LEARNING, SHARED)}

#: Seed namespaces left uncoded: consent state is read by people auditing it;
#: the legacy compressed state is already in the altitude codes by its own
#: design (people ``{r, t, n}``), so compacting it again would only add escapes.
UNCODED = frozenset(
    {"focus.consent", "altitude.compressed"}
    # typed memories (remember()): free text, nothing to code
    | {f"{hrm}.memories" for hrm in ("altitude", "focus", "reasoning", "learning", "shared")}
)

#: namespace -> codec name (for ``NamespaceSpec.codec``): every namespace of an
#: HRM uses that HRM's codec, except those in ``UNCODED``.
NAMESPACE_CODECS: dict[str, str] = {
    **{
        f"altitude.{n}": "altitude"
        for n in (
            "session", "history", "patterns", "coaching", "conversations",
            "context", "agents", "integrity", "checkpoints", "sessions",
        )
    },
    **{
        f"focus.{n}": "focus"
        for n in ("fast", "slow", "lanes", "gates", "conversation", "interactions", "bridge", "notes", "chat_history")
    },
    **{f"reasoning.{n}": "reasoning" for n in ("strategies", "escalations", "routing", "hrm")},
    **{
        f"learning.{n}": "learning"
        for n in ("patterns", "feedback", "generalizations", "retrospectives", "reflections")
    },
    **{f"shared.{n}": "shared" for n in ("north_stars", "priorities", "people")},
}

__all__ = [
    "ALTITUDES",
    "CODECS",
    "COACHING_CODES",
    "ESCALATIONS",
    "GATES",
    "LEARNED_PATTERNS",
    "NAMESPACE_CODECS",
    "PATTERN_CODES",
    "RELATIONSHIP_CODES",
    "ROUTES",
    "STANCES",
    "STRATEGIES",
    "UNCODED",
]
