"""The legacy migration (migration/): lossless import, byte-identical export,
idempotent and crash-safe apply, rollback, anomaly flags, CLI exit codes.

Two legacy trees:
- the real data in ``shared/legacy/data`` next to the repo (tests skip with a
  reason when it is absent);
- the synthetic tree ``tests/fixtures/legacy`` (every kind of layout.RULES,
  every anomaly of DATA_NOTES.md section 3, plus files that force the raw
  fallback: a lone surrogate, upper-case escapes with a duplicate key, NaN
  and a 100-bit integer, truncated JSON, a Latin-1 note, an unmapped binary).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hrm_memory.migration import engine, manifest
from hrm_memory.migration.__main__ import main as migrate_main
from hrm_memory.migration.doc import layout_table
from hrm_memory.migration.formats import unvis
from hrm_memory.migration.layout import RULES, place_of
from hrm_memory import MemoryManager
from tests.helpers.layout import digests
from tests.helpers.legacy import DATA

REPO = Path(__file__).resolve().parents[2]
REAL = DATA
SUMS = REAL.parent / "SHA256SUMS"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"

needs_real = pytest.mark.skipif(
    not (REAL.is_dir() and SUMS.is_file()),
    reason=f"real legacy data not found at {REAL} (with {SUMS}); the synthetic fixture tests still run",
)


# -- helpers ----------------------------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def real_sums() -> dict[str, str]:
    """SHA256SUMS as {path relative to data/: sha256}."""
    out = {}
    for line in SUMS.read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        out[path.lstrip("*").removeprefix("data/")] = digest
    return out


def versions(mm: MemoryManager) -> dict[tuple[str, str], int]:
    return {(r.namespace, r.key): r.version for r in mm.query("*", "*", include_cold=True)}


@contextlib.contextmanager
def store(root: Path) -> Iterator[MemoryManager]:
    with MemoryManager(root, durability="flush") as mm:
        yield mm


def cli(*argv: str) -> tuple[int, str]:
    """Run ``python -m migration`` in-process; (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = migrate_main(list(argv))
    return code, out.getvalue()


def legacy_records_left(mm: MemoryManager, entries: dict[str, manifest.Entry]) -> list[str]:
    return [e.path for e in entries.values() if e.namespace and e.key and mm.get_record(e.namespace, e.key) is not None]


def round_trip(legacy: Path, root: Path, out: Path) -> dict[str, Any]:
    """apply, verify, export, re-apply: the common checks for both trees."""
    before = digests(legacy)
    with store(root) as mm:
        applied = engine.apply(mm, legacy)
        assert applied.ok, applied.failures
        assert {r.action for r in applied.rows} == {"import"}
        entries = manifest.entries(mm)
        assert set(entries) == set(before), "every legacy file has a manifest entry"
        assert (manifest.marker(mm) or {})["state"] == "complete"
        verified = engine.verify(mm, legacy)
        assert verified.ok, verified.failures
        exported = engine.export(mm, out)
        assert exported.ok, exported.failures
        snapshot = versions(mm)
        again = engine.apply(mm, legacy)
        assert again.ok and {r.action for r in again.rows} == {"unchanged"}
        assert versions(mm) == snapshot, "re-apply wrote nothing"
    assert digests(out / legacy.name) == before, "export is byte-identical"
    assert digests(legacy) == before, "legacy files untouched"
    return {"entries": entries, "applied": applied}


# -- the real data ------------------------------------------------------------------------


@needs_real
def test_real_data_lossless_idempotent_and_rollback(tmp_path: Path) -> None:
    sums = real_sums()
    assert digests(REAL) == sums, "legacy data differs from SHA256SUMS before the test"
    root, out = tmp_path / "store", tmp_path / "out"
    result = round_trip(REAL, root, out)
    assert len(result["entries"]) == 105
    assert result["applied"].by_kind()[-1]["records"] == 105
    exported = {p: sha((out / "data" / p).read_bytes()) for p in sums}
    assert exported == sums, "export matches SHA256SUMS (as `cd OUT && sha256sum -c SHA256SUMS` would)"

    with store(root) as mm:
        for path, e in result["entries"].items():
            data = (REAL / path).read_bytes()
            value = mm.read(e.namespace, e.key)
            if path.endswith(".json"):
                assert value == json.loads(data), path
            else:
                assert value["raw"] == data.decode("utf-8"), path
        state = mm.read("altitude.compressed", "state")
        assert repr(state["patterns"]["calendar_desync"]) == "0.8999999999999999"
        assert isinstance(mm.read("altitude.context", "entities_people")["people"]["donna"]["details"], str)
        assert mm.check() == []

        rolled = engine.rollback(mm)
        assert rolled.ok, rolled.failures
        assert legacy_records_left(mm, result["entries"]) == []
        assert manifest.entries(mm) == {} and manifest.marker(mm) is None
        assert engine.rollback(mm).ok, "rollback is idempotent"

        again = engine.apply(mm, REAL)
        assert again.ok and len(manifest.entries(mm)) == 105
        assert engine.verify(mm, REAL).ok
        shutil.rmtree(out)
        assert engine.export(mm, out).ok
    assert digests(out / "data") == sums
    assert digests(REAL) == sums, "legacy data unmodified"


@needs_real
def test_real_data_anomaly_counts_match_data_notes() -> None:
    """The figures of DATA_NOTES.md section 3, found by the detectors."""
    report = engine.plan(REAL)
    assert report.ok
    counts = {c["code"]: (c["files"], c["count"]) for c in report.by_code()}
    expected = {
        "naive-timestamp": 452,  # 1. two clocks
        "utc-timestamp": 56,
        "other-time-format": 81,  # 2. 25 stems + 25 file names + 21 checkpoint names + 6 dates + 4 HH:MM
        "wrong-year": 1,  # 3.
        "off-year-date-in-text": 47,  # 3. 45 + 2
        "predates-consent": 85,  # 4. 77 interactions + 8 gate transitions
        "duplicate-session-id": 18,  # 5. + 8. (files involved)
        "counter-mismatch": 3,  # 6. trends, ai_trends, conversation turn_count
        "test-data": 5,  # 7. session 99 (+2 trends learnings), "Tested ...", test_topic
        "orphan-checkpoint": 5,  # 8.
        "boot-without-shutdown": 2,  # 8. sessions 13 and 16
        "duplicate-heading": 1,  # 9.
        "duplicate-entries": 36,  # 9. 145 entries, 109 distinct
        "mixed-types": 1,  # 10. people.donna.details
        "top-level-array": 2,  # 11.
        "unknown-key": 2,  # 12. preferences, archived_commits
        "off-code-value": 5,  # 13. ai_ x2, ass x2, ent
        "enum-drift": 2,  # 14. neuroticism "elevated"
        "mixed-key-style": 2,  # 14. recurring_topics, blocked topic with spaces
        "unbalanced-quote": 5,  # 15.
        "float-noise": 5,  # 16. 1 + 2 + 2
        "null-value": 22,  # 17.
        "empty-container": 86,  # 17.
        "inconsistent-state": 3,  # 18.
        "at-cap": 5,  # 19. messages, interactions, active, commits, improvement_areas
        "trailing-newline": 1,  # 20.
        "unicode-escape": 56,  # 21.
        "libedit-escape": 1231,  # 22.
        "bracketed-paste": 3,  # 22. 00~ x2, 01~
        "truncated-entry": 1,  # 23.
    }
    assert {code: counts.get(code, (0, 0))[1] for code in expected} == expected
    assert "raw-fallback" not in counts, "all 105 real files re-serialize exactly"


# -- the synthetic fixture ------------------------------------------------------------------


def test_fixture_covers_every_layout_rule() -> None:
    kinds = {p.kind for p in (place_of(rel) for rel in digests(FIXTURE)) if p}
    assert kinds == {kind for _, kind, _, _ in RULES}


def test_fixture_round_trip(tmp_path: Path) -> None:
    result = round_trip(FIXTURE, tmp_path / "store", tmp_path / "out")
    entries = result["entries"]
    raw_kept = {p for p, e in entries.items() if e.raw_base64 is not None}
    assert raw_kept == {
        "locked_system/memory/.DS_Store",  # unmapped: manifest only
        "the_assist/memory/store/conversations/2026-01-12_08-00-00.json",  # lone surrogate
        "the_assist/memory/store/conversations/2026-01-12_09-00-00.json",  # odd spacing, \uD83C, dup key, NaN, big int
        "the_assist/memory/store/conversations/2026-01-12_10-00-00.json",  # invalid JSON
    }


def test_fixture_values_are_lossless(tmp_path: Path) -> None:
    with store(tmp_path / "store") as mm:
        assert engine.apply(mm, FIXTURE).ok
        conv = mm.read("altitude.conversations", "2026-01-09_21-11-37")
        assert "\U0001F3AF" in conv["messages"][0]["content"]  # \ud83c\udfaf pair -> one emoji
        assert "\U0001F468\u200d\U0001F469\u200d\U0001F467" in conv["messages"][0]["content"]
        assert "\u2192" in conv["messages"][1]["content"]
        assert mm.read("altitude.conversations", "2026-01-10_16-01-57")["summary"] is None
        state = mm.read("altitude.compressed", "state")
        assert repr(state["patterns"]["calendar_desync"]) == "0.8999999999999999"
        assert repr(state["patterns"]["timeboxing"]) == "0.7999999999999999"
        assert state["people"]["claude"]["r"] == "ai_" and state["preferences"]
        people = mm.read("altitude.context", "entities_people")["people"]
        assert people["donna"]["details"] == "neighbour, waters the plants"
        assert mm.read("altitude.checkpoints", "2026-01-10T03-47-52Z")["timestamp"] == "2026-01-10T03:47:52.123456Z"
        assert mm.read("focus.consent", "legacy")["first_consent_at"] == "2026-01-11T21:35:26.552910"
        assert mm.read("shared.north_stars", "v1")["last_updated"] == "2025-01-09T00:00:00"
        assert mm.read("learning.retrospectives", "2026-01-09_session_99")["session_id"] == 99
        assert mm.read("focus.interactions", "interactions")[0]["timestamp"] == "2026-01-11T20:00:00.000001"
        assert mm.read("focus.bridge", "bridge_signals") == []

        history = mm.read("focus.chat_history", "chat_history")
        assert history["raw"] == (FIXTURE / "locked_system/memory/.chat_history").read_text("utf-8")
        assert history["header"] == "_HiStOrY_V2_"
        assert history["entries"][:3] == ["where were we?", "state", "caf\u00e9 and a back\\slash\ttab"]
        assert history["entries"][3] == "here is the state 00~{"
        assert history["entries"].count(":q") == 2

        notes = mm.read("focus.notes", "personal")
        assert [e["heading"] for e in notes["entries"]] == ["2026-01-11 22:59", "2026-01-11 22:59", "2026-01-11 23:05"]
        assert "## Shopping" in notes["entries"][1]["body"]
        dev = mm.read("focus.notes", "developer")
        assert dev["entries"][-1] == {"heading": "2026-01-11 20:50", "body": "read what is in the s"}

        latin = mm.read("focus.notes", "latin1")
        assert latin["raw_base64"] and "caf\ufffd" in latin["raw"]
        lone = mm.read("altitude.conversations", "2026-01-12_08-00-00")
        assert lone["messages"][0]["content"] == "half an emoji \ufffd here"
        odd = mm.read("altitude.conversations", "2026-01-12_09-00-00")
        assert odd["summary"] == "duplicate key" and odd["score"] == "NaN" and odd["big"] == "123456789012345678901234567890"
        broken = mm.read("altitude.conversations", "2026-01-12_10-00-00")
        assert broken["raw"].endswith('"cut of') and broken["error"].startswith("invalid JSON")


def test_fixture_anomalies_flagged_not_fixed(tmp_path: Path) -> None:
    expected = {
        "the_assist/memory/store/conversations/2026-01-09_21-11-37.json": {"unicode-escape", "surrogate-pair-escape", "other-time-format"},
        "the_assist/memory/store/conversations/2026-01-10_16-01-57.json": {"null-value"},
        "the_assist/memory/store/conversations/2026-01-12_08-00-00.json": {"lone-surrogate", "raw-fallback"},
        "the_assist/memory/store/conversations/2026-01-12_09-00-00.json": {"duplicate-key", "non-finite-number", "big-integer", "raw-fallback"},
        "the_assist/memory/store/conversations/2026-01-12_10-00-00.json": {"invalid-json", "raw-fallback"},
        "the_assist/memory/store/north_stars/current.json": {"trailing-newline", "wrong-year"},
        "the_assist/memory/store/compressed/state.json": {"float-noise", "unknown-key", "off-code-value", "naive-timestamp"},
        "the_assist/memory/store/context/current.json": {"unknown-key", "empty-container"},
        "the_assist/memory/store/entities/people.json": {"mixed-types"},
        "the_assist/memory/store/retrospectives/2026-01-09_session_12.json": {"duplicate-session-id"},
        "the_assist/memory/store/retrospectives/2026-01-10_session_12.json": {"duplicate-session-id", "enum-drift"},
        "the_assist/memory/store/retrospectives/2026-01-09_session_99.json": {"test-data"},
        "the_assist/memory/store/retrospectives/trends.json": {"test-data", "counter-mismatch", "mixed-key-style"},
        "the_assist/memory/store/ai_reflection/ai_trends.json": {"counter-mismatch"},
        "the_assist/memory/store/ai_reflection/2026-01-10_session_12_reflection.json": {"duplicate-session-id", "float-noise"},
        "the_assist/memory/store/hrm/blocked_topics.json": {"mixed-key-style"},
        "the_assist/memory/store/proactive/state.json": {"inconsistent-state"},
        "the_assist/memory/state/checkpoints/2026-01-10T05-45-00Z.json": {"orphan-checkpoint", "duplicate-session-id", "utc-timestamp"},
        "the_assist/memory/state/version_log.json": {"boot-without-shutdown", "utc-timestamp"},
        "the_assist/memory/state/integrity.json": {"inconsistent-state"},
        "the_assist/hrm/memory/session_history.json": {"test-data", "unbalanced-quote", "other-time-format"},
        "the_assist/hrm/memory/plans.json": {"null-value"},
        "locked_system/memory/conversation.json": {"counter-mismatch", "off-year-date-in-text", "float-noise", "surrogate-pair-escape"},
        "locked_system/memory/fast/interactions.json": {"top-level-array", "predates-consent"},
        "locked_system/memory/history/gate_history.json": {"top-level-array", "predates-consent"},
        "locked_system/memory/slow/commitment.json": {"inconsistent-state"},
        "locked_system/memory/notes/developer.md": {"truncated-entry", "off-year-date-in-text"},
        "locked_system/memory/notes/personal.md": {"duplicate-heading"},
        "locked_system/memory/notes/latin1.md": {"invalid-utf8"},
        "locked_system/memory/.chat_history": {"libedit-escape", "bracketed-paste", "non-ascii", "duplicate-entries", "float-noise"},
        "locked_system/memory/.DS_Store": {"unmapped-file"},
    }
    with store(tmp_path / "store") as mm:
        assert engine.apply(mm, FIXTURE).ok
        entries = manifest.entries(mm)
    for path, codes in expected.items():
        found = {a["code"] for a in entries[path].anomalies}
        assert codes <= found, (path, codes - found)


def test_unvis_decodes_libedit_escapes() -> None:
    assert unvis(r"a\040b") == "a b"
    assert unvis("back\\\\slash") == "back\\slash"
    assert unvis(r"caf\303\251") == "caf\u00e9"
    assert unvis(r"tab\011nl\012") == "tab\tnl\n"
    assert unvis(r"\M-a") == "\ufffd"  # 0xE1 alone is not UTF-8: replaced in entries (raw keeps it)
    assert unvis(r"\^A\t") == "\x01\t"
    assert unvis(r"odd\q") == r"odd\q"
    assert unvis("trailing\\") == "trailing\\"


# -- guarantees --------------------------------------------------------------------------------


def read_only_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in sorted(dst.rglob("*"), reverse=True):
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    dst.chmod(dst.stat().st_mode & ~stat.S_IWUSR)
    return dst


def test_legacy_tree_may_be_read_only(tmp_path: Path) -> None:
    legacy = read_only_copy(FIXTURE, tmp_path / "legacy")
    try:
        before = digests(legacy)
        code, _ = cli("--root", str(tmp_path / "store"), "--durability", "flush", "apply", str(legacy), "--no-tokens")
        assert code == 0
        code, _ = cli("--root", str(tmp_path / "store"), "verify", str(legacy), "--no-tokens")
        assert code == 0
        assert digests(legacy) == before
    finally:
        for p in [legacy, *legacy.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_changed_legacy_file_updates_its_record(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    shutil.copytree(FIXTURE, legacy)
    with store(tmp_path / "store") as mm:
        assert engine.apply(mm, legacy).ok
        v1 = versions(mm)[("focus.slow", "commitment")]
        path = legacy / "locked_system/memory/slow/commitment.json"
        data = json.loads(path.read_bytes())
        data["turns_remaining"] = 20
        path.write_text(json.dumps(data, indent=2))
        report = engine.apply(mm, legacy)
        assert report.ok and report.actions() == {"unchanged": 47, "update": 1}
        assert versions(mm)[("focus.slow", "commitment")] == v1 + 1
        assert mm.read("focus.slow", "commitment")["turns_remaining"] == 20
        assert engine.verify(mm, legacy).ok


def test_store_edits_are_kept_and_protected(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with store(root) as mm:
        assert engine.apply(mm, FIXTURE).ok
        mm.write("shared.north_stars", "v1", {"north_stars": ["edited after cut-over"]})
        again = engine.apply(mm, FIXTURE)
        assert again.ok and again.actions()["kept"] == 1, "an edit made in the store is not overwritten"
        assert not engine.verify(mm, FIXTURE).ok
        refused = engine.rollback(mm)
        assert not refused.ok and [r.path for r in refused.rows if r.action == "kept"] == ["the_assist/memory/store/north_stars/current.json"]
        assert mm.read("shared.north_stars", "v1") == {"north_stars": ["edited after cut-over"]}
        forced = engine.rollback(mm, force=True)
        assert forced.ok and manifest.entries(mm) == {} and manifest.marker(mm) is None
        assert mm.read("shared.north_stars", "v1") is None


def test_foreign_record_conflicts_unless_overwrite(tmp_path: Path) -> None:
    with store(tmp_path / "store") as mm:
        mm.write("focus.slow", "commitment", {"frame": "written by an adapter first"})
        report = engine.apply(mm, FIXTURE)
        assert not report.ok and report.actions()["conflict"] == 1
        assert (manifest.marker(mm) or {})["state"] == "incomplete"
        assert mm.read("focus.slow", "commitment") == {"frame": "written by an adapter first"}
        report = engine.apply(mm, FIXTURE, overwrite=True)
        assert report.ok and report.actions()["overwrite"] == 1
        assert engine.verify(mm, FIXTURE).ok


def test_export_writes_records_created_after_import(tmp_path: Path) -> None:
    with store(tmp_path / "store") as mm:
        assert engine.apply(mm, FIXTURE).ok
        new = {"timestamp": "2026-02-01_10-00-00", "messages": [], "summary": "\u2192 new"}
        mm.write("altitude.conversations", "2026-02-01_10-00-00", new)
        report = engine.export(mm, tmp_path / "out")
        assert report.ok and any("created after import" in w for w in report.warnings)
    written = (tmp_path / "out/legacy/the_assist/memory/store/conversations/2026-02-01_10-00-00.json").read_bytes()
    assert written == json.dumps(new, indent=2).encode()


def test_export_refuses_the_legacy_folder(tmp_path: Path) -> None:
    legacy = tmp_path / "data"
    shutil.copytree(FIXTURE, legacy)
    root = str(tmp_path / "store")
    assert cli("--root", root, "--durability", "flush", "apply", str(legacy), "--no-tokens")[0] == 0
    before = digests(legacy)
    assert cli("--root", root, "export", str(tmp_path), "--no-tokens")[0] == 2  # tmp_path/data is the source
    assert cli("--root", root, "export", str(legacy), "--flat", "--no-tokens")[0] == 2
    assert digests(legacy) == before


# -- crash safety --------------------------------------------------------------------------------


def _spawn(root: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hrm_memory.migration", "--root", str(root), *args, "--no-tokens"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _warm_bytes(root: Path) -> int:
    total = 0
    for p in (root / "warm").rglob("*") if (root / "warm").is_dir() else ():
        with contextlib.suppress(OSError):
            total += p.stat().st_size if p.is_file() else 0
    return total


def _kill(proc: subprocess.Popen[bytes], until: Any) -> None:
    """SIGKILL ``proc`` as soon as ``until()`` is true (or it has exited)."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and not until() and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _state(root: Path) -> tuple[str, int]:
    """(run marker state, manifest entries) after a kill; the store is sound."""
    with MemoryManager(root) as mm:
        assert mm.check() == []
        run = manifest.marker(mm)
        return (run["state"] if run else "none"), len(manifest.entries(mm))


@pytest.mark.slow
def test_apply_and_rollback_survive_sigkill(tmp_path: Path) -> None:
    """SIGKILL apply at random points of its writes (the kill fires when the
    store has grown by a random fraction of a full import), six times in a
    row, then once more and rollback three times at random moments: every
    re-run completes, export is byte-identical, nothing is written twice."""
    legacy = REAL if REAL.is_dir() else FIXTURE
    files = len(digests(legacy))
    rng = random.Random(int(os.environ.get("MIGRATION_CRASH_SEED", "20260111")))
    start = time.perf_counter()
    assert _spawn(tmp_path / "calibrate", "apply", str(legacy)).wait() == 0
    full_time, full_bytes = time.perf_counter() - start, _warm_bytes(tmp_path / "calibrate")
    root = tmp_path / "store"

    states = []
    for _ in range(6):
        base = _warm_bytes(root)
        threshold = base + max(1.0, full_bytes - base) * rng.uniform(0.02, 0.98)
        _kill(_spawn(root, "apply", str(legacy)), lambda: _warm_bytes(root) >= threshold)
        states.append(_state(root))
    assert {s for s, _ in states} <= {"none", "applying", "complete"}, states
    assert any(0 < n < files for _, n in states), f"no kill landed mid-import: {states}"
    assert _spawn(root, "apply", str(legacy)).wait() == 0
    with MemoryManager(root) as mm:
        assert engine.verify(mm, legacy).ok
        assert engine.export(mm, tmp_path / "out").ok
        snapshot = versions(mm)
        assert engine.apply(mm, legacy).actions() == {"unchanged": files}
        assert versions(mm) == snapshot
    assert digests(tmp_path / "out" / legacy.name) == digests(legacy)

    for _ in range(3):
        proc = _spawn(root, "rollback")
        moment = time.monotonic() + rng.uniform(0.0, full_time / 2)
        _kill(proc, lambda: time.monotonic() >= moment)
        assert _state(root)[0] in ("none", "complete", "rolling-back")
    assert _spawn(root, "rollback").wait() == 0
    with MemoryManager(root) as mm:
        assert manifest.entries(mm) == {} and manifest.marker(mm) is None
        # rollback leaves the consent decisions apply carried over from consent.json
        kept = {("focus.consent", c) for c in engine.CONSENT_FLAGS.values()}
        assert all(mm.get_record(ns, k) is None for ns, k in snapshot if ns != manifest.NAMESPACE and (ns, k) not in kept)
    assert _spawn(root, "apply", str(legacy)).wait() == 0
    with MemoryManager(root) as mm:
        assert engine.verify(mm, legacy).ok


# -- command line ------------------------------------------------------------------------------------


def test_cli_exit_codes(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    assert cli("plan", str(tmp_path / "missing"))[0] == 2
    assert cli("--root", root, "plan", str(FIXTURE), "--no-tokens")[0] == 0
    assert cli("--root", root, "apply", str(tmp_path / "missing"))[0] == 2
    assert not Path(root).exists(), "plan, and a failed argument check, create no store"
    assert cli("--root", root, "verify", str(FIXTURE), "--no-tokens")[0] == 4  # nothing imported yet
    assert cli("--root", root, "export", str(tmp_path / "out"), "--no-tokens")[0] == 4
    assert cli("--root", root, "rollback", "--no-tokens")[0] == 0  # nothing to roll back is fine

    code, out = cli("--root", root, "--durability", "flush", "apply", str(FIXTURE), "--no-tokens", "--json")
    assert code == 0 and json.loads(out)["actions"] == {"import": 48}
    assert cli("--root", root, "verify", str(FIXTURE), "--no-tokens")[0] == 0
    with MemoryManager(root) as mm:  # tamper with one record
        mm.write("altitude.checkpoints", "2026-01-10T03-47-52Z", {"timestamp": "tampered"})
    code, out = cli("--root", root, "verify", str(FIXTURE), "--no-tokens")
    assert code == 4 and "FAILED: the_assist/memory/state/checkpoints/2026-01-10T03-47-52Z.json" in out


def test_cli_plan_report_with_and_without_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = cli("plan", str(FIXTURE), "--json")
    report = json.loads(out)
    assert code == 0 and report["tokenizer"]["counter"] in ("exact", "estimate")
    total = report["by_kind"][-1]
    assert total["kind"] == "TOTAL" and total["files"] == 48 and total["tokens_before"] > 0 and total["tokens_after"] > 0
    assert all(len(f["sha256"]) == 64 for f in report["files"])
    monkeypatch.setitem(sys.modules, "hrm_memory.core.tokens", None)  # as if the module did not exist
    code, out = cli("plan", str(FIXTURE))
    assert code == 0 and "token columns omitted" in out and "TOKENS_BEFORE" not in out


def test_docs_mapping_table_is_generated_from_layout() -> None:
    doc = (REPO / "docs" / "migration.md").read_text()
    assert layout_table() in doc, "regenerate the table: python -m hrm_memory.migration.doc"
