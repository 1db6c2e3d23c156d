"""Legacy-parity regressions: call sequences whose results differed from the
real legacy modules (rabruni/AI_ARCH, 2026-01-22 snapshot:
``locked_system/memory/consent.py``, ``locked_system/memory/slow.py``,
``dopejar/hrm/history.py`` = ``the_assist/hrm/history.py``).
The item numbers are those of the parity report.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers.clock import freeze

from hrm_memory import adapters  # noqa: F401  (installs the legacy import paths)
from hrm_memory import MemoryManager

import locked_system.memory.consent as consent_module  # noqa: E402
from locked_system.memory import SlowMemory  # noqa: E402
from locked_system.memory.consent import ConsentManager, format_consent_prompt  # noqa: E402
from locked_system.memory.slow import BootstrapSnapshot  # noqa: E402
from the_assist.hrm import SessionHistory  # noqa: E402

ALL_GRANTED = {"conversation": True, "signals": True, "preferences": True}


# -- 14: one consent document per legacy directory -----------------------------------------


def test_14_consent_of_another_directory_does_not_touch_the_main_consent(
    store: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    main = ConsentManager(Path("memory"))  # legacy default: ./memory
    main.grant_consent(conversation_history=True, interaction_signals=True, learned_preferences=True)
    assert store.consent.status() == ALL_GRANTED

    other = ConsentManager(tmp_path / "elsewhere")
    # legacy: no consent.json in that directory, so consent was never given there
    assert other.needs_consent() and other.get_preferences() is None
    assert other.get_summary() == {"status": "not_configured", "message": "No consent preferences set"}
    assert not other.can_persist("conversation")
    other.revoke_all()  # nothing to revoke there
    assert other.needs_consent() and ConsentManager(tmp_path / "elsewhere").needs_consent()

    # the main user's consent is untouched, store-wide and in the main directory
    assert store.consent.status() == ALL_GRANTED
    assert main.can_persist("conversation") and not main.needs_consent()
    again = ConsentManager(tmp_path / "memory")  # the same directory, spelled absolute
    assert again.can_persist("conversation") and again.get_summary()["learned_preferences"] is True

    # what is decided in the other directory stays there
    other.grant_consent(conversation_history=False, interaction_signals=True, learned_preferences=False)
    other.revoke_all()
    reopened = ConsentManager(tmp_path / "elsewhere")
    assert not reopened.needs_consent()
    assert reopened.get_summary()["interaction_signals"] is False
    assert store.consent.status() == ALL_GRANTED
    assert store.read("focus.consent", "legacy")["conversation_history"] is True
    assert ConsentManager(tmp_path / "memory").can_persist("preferences")

    # the main directory still drives the store-wide consent
    main.revoke_all()
    assert store.consent.status() == {"conversation": False, "signals": False, "preferences": False}
    assert reopened.get_preferences() is not None  # the other directory keeps its own document


# -- 15: ConsentManager.CONSENT_FILE --------------------------------------------------------


def test_15_consent_file_class_attribute(store: MemoryManager, tmp_path: Path) -> None:
    assert ConsentManager.CONSENT_FILE == "consent.json"
    assert consent_module.CONSENT_FILE == "consent.json"
    cm = ConsentManager(tmp_path)
    assert cm.CONSENT_FILE == "consent.json"
    assert cm.consent_file == tmp_path / "consent.json"


# -- 16: format_consent_prompt() ----------------------------------------------------------------

LEGACY_PROMPT = "\n".join(
    [
        "",
        "┌─────────────────────────────────────────────────────────────┐",
        "│  MEMORY CONSENT                                             │",
        "├─────────────────────────────────────────────────────────────┤",
        "│                                                             │",
        "│  Locked System can remember context across sessions.        │",
        "│  This helps continuity but means storing data locally.      │",
        "│                                                             │",
        "│  What should I remember?                                    │",
        "│                                                             │",
        "│  [1] Conversation history  - What we discussed              │",
        "│  [2] Interaction signals   - How our sessions went          │",
        "│  [3] Learned preferences   - Patterns in your style         │",
        "│                                                             │",
        "│  You can change these anytime with :memory                  │",
        "│  You can see stored data with :memory show                  │",
        "│  You can clear everything with :memory clear                │",
        "│                                                             │",
        "└─────────────────────────────────────────────────────────────┘",
        "",
        "Enter choices (e.g., '12' for options 1 and 2, 'all', or 'none'):",
    ]
)


def test_16_consent_prompt_is_the_legacy_text() -> None:
    assert format_consent_prompt() == LEGACY_PROMPT


# -- 17: BootstrapSnapshot.from_dict of the old format without a timestamp -------------------


def test_17_old_bootstrap_without_timestamp(
    store: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime(2026, 1, 11, 21, 0, 5, 123456)
    freeze(monkeypatch, "hrm_memory.adapters.locked_system.memory.slow", now)
    old = {"ladder_position": 1, "consent_state": "listen_only"}
    assert BootstrapSnapshot.from_dict(old) == BootstrapSnapshot(now, "intro", "", "", False)
    # no consent_state at all is not "listen_only": complete, as in legacy
    assert BootstrapSnapshot.from_dict({"ladder_position": 3}) == BootstrapSnapshot(now, "complete", "", "", True)
    # and through SlowMemory, from a stored old-format document
    store.write("focus.slow", "bootstrap", {**old, "user_state_summary": "Ravi"})
    snap = SlowMemory(tmp_path / "slow").get_bootstrap()
    assert snap == BootstrapSnapshot(now, "intro", "Ravi", "", False)
    # a timestamp, when present, is still read
    dated = BootstrapSnapshot.from_dict({**old, "bootstrap_timestamp": "2026-01-10T08:00:00"})
    assert dated.bootstrap_timestamp == datetime(2026, 1, 10, 8, 0)


# -- 18: SessionHistory.is_continuity_question ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Where were we?", True),
        ("what were we doing", True),
        ("What did we decide LAST TIME?", True),
        ("as we discussed previously", True),
        ("can we continue from yesterday", True),
        ("pick up where we left off", True),
        ("before the crash we were planning Q1", True),
        ("before session 2 ended", True),
        ("remember when we talked about the patent", True),
        ("we worked on the deck", True),
        ("show me session #3", True),
        ("what happened in session 3", True),
        ("open my session history", True),
        # legacy patterns end at a word boundary: none of these match
        ("what were weekends like", False),
        ("pick upstairs", False),
        ("the previousness of it", False),
        ("in the last sessions", False),
        ("remember whenever you can", False),
        ("what did weekly planning say", False),
        ("before sessions start", False),
        ("notes from session 12", False),  # \d matches one digit, then \b fails
        ("session #", False),
        ("What's the weather like?", False),
        ("Plan my week around the patent", False),
    ],
)
def test_18_continuity_question_matches_the_legacy_patterns(text: str, expected: bool) -> None:
    assert SessionHistory.is_continuity_question(text) is expected
