"""What the migration promises beyond the copy itself.

-   A consent purge removes every byte of migrated conversation text, raw
    copies in the migration manifest included.
-   Migration UX: progress on stderr, a summary (not one line per file) from
    ``plan``, a folder one level too high refused with the folder to pass,
    memory bounded on a big tree.
-   ``apply`` carries the legacy ``consent.json`` over to ``mm.consent``.

The real legacy data is read in place (read-only) from ``shared/legacy/data``;
trees built from it live under pytest's tmp_path only.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import io
import json
import shutil
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hrm_memory import MemoryManager
from hrm_memory.adapters.locked_system.memory.consent import CATEGORIES as ADAPTER_CATEGORIES
from hrm_memory.migration import engine, manifest
from hrm_memory.migration.__main__ import main as migrate_main
from tests.helpers.canary import files_holding
from tests.helpers.layout import digests
from tests.helpers.legacy import DATA

TESTS = Path(__file__).resolve().parents[1]
FIXTURE = TESTS / "fixtures" / "legacy"
REAL = DATA
CONVERSATION = "locked_system/memory/conversation.json"
CONSENT = "locked_system/memory/consent.json"
CANARY = "CANARY-conversation-9d41c7"

needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real legacy data not found at {REAL}")


# -- helpers ------------------------------------------------------------------------------


@contextlib.contextmanager
def store(root: Path) -> Iterator[MemoryManager]:
    with MemoryManager(root, durability="flush") as mm:
        yield mm


def run(*argv: str) -> tuple[int, str, str]:
    """``python -m hrm_memory.migration ARGV`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = migrate_main(list(argv))
    return code, out.getvalue(), err.getvalue()


def needles(text: str) -> list[bytes]:
    """``text`` as it could sit in a file: plain, JSON-escaped, and inside
    base64 at each of the three alignments (a raw copy is kept base64)."""
    raw = text.encode()
    found = [raw, json.dumps(text)[1:-1].encode()]
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw)
        # drop the characters that depend on the bytes around the needle
        found.append(enc[(shift * 4 + 2) // 3 + 1 : -4])
    return found


def files_containing(root: Path, text: str) -> list[str]:
    """Every file under the store ``root`` holding ``text`` in any of the
    forms of :func:`needles`, cold-archive frames inflated."""
    return files_holding(root, *needles(text))


def crashed_conversation(text: str) -> bytes:
    """A legacy LockedLoop ``conversation.json`` cut off mid-file (as a writer
    killed mid-write leaves it), holding ``text`` in its first message."""
    doc = {
        "messages": [
            {"role": "user", "content": f"remember this: {text}"},
            {"role": "assistant", "content": "Noted. I will keep it in mind for the next session."},
            {"role": "user", "content": "and what about the lease on the sales play?"},
        ],
        "turn_count": 3,
        "last_saved": "2026-01-11T22:00:00.000001",
    }
    data = json.dumps(doc, indent=2).encode()
    cut = data[: int(len(data) * 0.7)]
    assert text.encode() in cut
    return cut


def legacy_with(tmp_path: Path, files: dict[str, bytes], base: Path = FIXTURE) -> Path:
    """A copy of the (small, synthetic) fixture tree with ``files`` replaced."""
    legacy = tmp_path / "legacy"
    shutil.copytree(base, legacy)
    for rel, data in files.items():
        (legacy / rel).parent.mkdir(parents=True, exist_ok=True)
        (legacy / rel).write_bytes(data)
    return legacy


def consent_doc(**flags: bool) -> bytes:
    doc: dict[str, Any] = {
        "conversation_history": True,
        "interaction_signals": True,
        "learned_preferences": True,
        "first_consent_at": "2026-01-11T21:35:26.552910",
        "last_updated_at": "2026-01-11T21:35:26.552910",
        "consent_version": 1,
    }
    doc.update(flags)
    return json.dumps(doc, indent=2).encode()


# -- a consent purge removes migrated conversation text everywhere --------------------


def test_purge_removes_a_crashed_conversation_and_its_raw_copy(tmp_path: Path) -> None:
    legacy = legacy_with(tmp_path, {CONVERSATION: crashed_conversation(CANARY)})
    root = tmp_path / "store"
    with store(root) as mm:
        applied = engine.apply(mm, legacy)
        assert applied.ok, applied.failures
        assert engine.verify(mm, legacy).ok
        assert engine.export(mm, tmp_path / "out").ok
        entry = manifest.entries(mm)[CONVERSATION]
        assert entry.raw is not None and CANARY.encode() in entry.raw, "the raw copy is still there before the purge"
    assert digests(tmp_path / "out" / legacy.name) == digests(legacy), "export stays byte-identical"
    assert files_containing(root, CANARY) == [], "the imported text is persisted sealed: ciphertext only"

    # a later session, which never ran the migration, revokes with purge
    with store(root) as mm:
        mm.consent.revoke("conversation", purge=True)
        assert mm.check() == []
    assert files_containing(root, CANARY) == []

    with store(root) as mm:
        entry = manifest.entries(mm)[CONVERSATION]
        assert entry.raw is None
        # documented: paths, namespaces and key names stay in the manifest
        assert (entry.namespace, entry.key) == ("focus.conversation", "conversation")
        verified = engine.verify(mm, legacy)
        assert not verified.ok and any(CONVERSATION in f and "purge" in f for f in verified.failures)
        assert engine.rollback(mm).ok
        assert manifest.entries(mm) == {}


@needs_real
def test_purge_removes_real_conversation_text_when_the_file_was_cut_off(tmp_path: Path) -> None:
    """The real conversation.json, cut off mid-file (in a tmp tree)."""
    data = (REAL / CONVERSATION).read_bytes()
    cut = data[: len(data) // 2]
    messages = [m["content"] for m in json.loads(data)["messages"] if m.get("role") == "assistant"]
    others = b"".join(p.read_bytes() for p in REAL.rglob("*") if p.is_file() and p != REAL / CONVERSATION)
    canary = next(
        m[i : i + 40] for m in messages for i in range(0, max(1, len(m) - 40), 20)
        if len(m) >= 40 and m[i : i + 40].encode() in cut and not any(n in others for n in needles(m[i : i + 40]))
    )
    legacy = tmp_path / "data"
    (legacy / "locked_system/memory").mkdir(parents=True)
    (legacy / CONSENT).write_bytes((REAL / CONSENT).read_bytes())
    (legacy / CONVERSATION).write_bytes(cut)
    root = tmp_path / "store"
    with store(root) as mm:
        assert engine.apply(mm, legacy).ok
        assert engine.verify(mm, legacy).ok
        assert engine.export(mm, tmp_path / "out").ok  # the text is in the store: it exports back
    assert canary.encode() in (tmp_path / "out" / legacy.name / CONVERSATION).read_bytes()
    assert files_containing(root, canary) == [], "the imported text is persisted sealed: ciphertext only"
    with store(root) as mm:
        mm.consent.revoke("conversation", purge=True)
    assert files_containing(root, canary) == []


def test_a_store_migrated_before_the_fix_is_cleaned_by_the_next_apply(tmp_path: Path) -> None:
    """An entry that holds a gated raw copy inline (written by the old code)
    moves it to the gated namespace on the next apply; the old log lines go."""
    legacy = legacy_with(tmp_path, {CONVERSATION: crashed_conversation(CANARY)})
    root = tmp_path / "store"
    with store(root) as mm:
        assert engine.apply(mm, legacy).ok
        entry = manifest.entries(mm)[CONVERSATION]
        old = entry.to_dict() | {"private": None}  # the old, all-in-one entry
        mm.write(manifest.NAMESPACE, manifest.FILE_PREFIX + CONVERSATION, old, imported=True)
        again = engine.apply(mm, legacy)
        assert again.ok and again.actions().get("adopt") == 1
        assert engine.verify(mm, legacy).ok
    with store(root) as mm:
        mm.consent.revoke("conversation", purge=True)
    assert files_containing(root, CANARY) == []


# -- progress, a summary, the wrong folder, bounded memory ------------------------------


def test_plan_prints_a_summary_and_progress_on_stderr() -> None:
    code, out, err = run("plan", str(FIXTURE), "--no-tokens")
    assert code == 0 and "result: OK" in out
    assert CONSENT not in out, "plan without -v lists no file"
    assert len(out.splitlines()) < 90
    assert "48/48" in err, "progress (files done / total) goes to stderr"
    code, out, _ = run("plan", str(FIXTURE), "--no-tokens", "-v")
    assert code == 0 and CONSENT in out, "-v lists every file"


def test_quiet_and_json_print_no_progress(tmp_path: Path) -> None:
    code, _, err = run("plan", str(FIXTURE), "--no-tokens", "--quiet")
    assert code == 0 and err == ""
    code, out, err = run("plan", str(FIXTURE), "--no-tokens", "--json")
    assert code == 0 and err == "" and json.loads(out)["ok"] is True
    code, _, err = run("--root", str(tmp_path / "s"), "--durability", "flush", "apply", str(FIXTURE), "--no-tokens")
    assert code == 0 and "48/48" in err


def test_progress_starts_at_once_and_ends_at_the_total() -> None:
    seen: list[tuple[str, int, int]] = []
    report = engine.plan(FIXTURE, progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert report.ok
    assert seen[0][1] == 0 and seen[0][2] == 48, "the first report comes before any file is read"
    assert seen[-1][1:] == (48, 48)


def test_a_folder_one_level_too_high_is_refused_and_the_child_named(tmp_path: Path) -> None:
    up = tmp_path / "up"
    shutil.copytree(FIXTURE, up / "data")
    root = tmp_path / "store"
    for argv in (("plan", str(up)), ("--root", str(root), "apply", str(up)), ("--root", str(root), "verify", str(up))):
        code, out, err = run(*argv, "--no-tokens")
        assert code == 2, argv
        assert "result: OK" not in out
        assert "no legacy file recognised" in err and str(up / "data") in err, err
    assert not root.exists(), "nothing is written for a folder that holds no legacy file"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    code, _, err = run("plan", str(tmp_path / "empty"))
    assert code == 2 and "no legacy file recognised" in err


@needs_real
def test_the_real_parent_folder_names_data() -> None:
    code, out, err = run("plan", str(REAL.parent), "--no-tokens")
    assert code == 2 and "result: OK" not in out and str(REAL) in err


def peak_of(command: Any) -> int:
    """Bytes allocated at the peak of ``command()`` (a report that must be
    ok) above what was allocated before it (tracemalloc running)."""
    gc.collect()
    tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    assert command().ok
    return tracemalloc.get_traced_memory()[1] - before


def test_memory_stays_bounded_on_a_big_tree(tmp_path: Path) -> None:
    """64 conversations of ~100 KB (6.5 MB): plan, apply and verify never
    hold the whole tree (the peak stays near what one file needs, ~2 MB;
    holding every file's bytes, value and report bytes took ~4x the tree).

    Each is measured twice, on a fresh store each time, and the lower peak
    counts: what the migration holds comes back in every run, while the
    process's own tables grow once in a while and then not again for long
    (the interned-string dict, which ``pathlib`` feeds, is reallocated when
    it doubles: in a worker that has run hundreds of tests, a few MB that
    land in whichever run is going on)."""
    legacy = tmp_path / "big"
    folder = legacy / "the_assist/memory/store/conversations"
    folder.mkdir(parents=True)
    for i in range(64):
        doc = {"timestamp": f"2026-01-{i % 28 + 1:02d}_10-00-00", "messages": [
            {"role": "user", "content": f"file {i} message {j} " + "x" * 2500} for j in range(40)
        ]}
        (folder / f"2026-01-{i % 28 + 1:02d}_10-00-{i:02d}.json").write_text(json.dumps(doc, indent=2))
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size > 6_000_000
    with store(tmp_path / "warm-up") as mm:  # lazy imports and caches, before measuring
        assert engine.plan(FIXTURE).ok and engine.apply(mm, FIXTURE).ok and engine.verify(mm, FIXTURE).ok
    plans, applies, verifies = [], [], []
    tracemalloc.start()
    try:
        for run in range(2):
            plans.append(peak_of(lambda: engine.plan(legacy)))
            with MemoryManager(tmp_path / f"store{run}", durability="flush", cache_size=0) as mm:  # no read cache
                applies.append(peak_of(lambda: engine.apply(mm, legacy)))
                verifies.append(peak_of(lambda: engine.verify(mm, legacy)))
    finally:
        tracemalloc.stop()
    plan_peak, apply_peak, verify_peak = min(plans), min(applies), min(verifies)
    assert plan_peak < size / 2, f"plan peaked at {plan_peak} bytes for a {size}-byte tree"
    assert apply_peak < size / 2, f"apply peaked at {apply_peak} bytes for a {size}-byte tree"
    assert verify_peak < size / 2, f"verify peaked at {verify_peak} bytes for a {size}-byte tree"


# -- apply carries the legacy consent over ----------------------------------------------


def test_apply_grants_what_the_legacy_consent_granted(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with store(root) as mm:
        assert mm.consent.status() == {"conversation": False, "signals": False, "preferences": False}
        report = engine.apply(mm, FIXTURE)
        assert report.ok
        assert mm.consent.status() == {"conversation": True, "signals": True, "preferences": True}
        assert {c["category"]: c["action"] for c in report.to_json()["consent"]} == {
            "conversation": "granted", "signals": "granted", "preferences": "granted",
        }
        assert "consent: granted conversation" in report.to_text()
    with store(root) as mm:  # a later session: the decision is in the store
        assert mm.consent.granted("conversation")
        mm.write("focus.conversation", "live", {"messages": [], "turn_count": 0})
        assert mm.get_record("focus.conversation", "live").persisted, "new writes reach disk"  # type: ignore[union-attr]
        snapshot = {(r.namespace, r.key): r.version for r in mm.query("*", "*")}
        again = engine.apply(mm, FIXTURE)
        assert again.ok and {c["action"] for c in again.to_json()["consent"]} == {"unchanged"}
        assert {(r.namespace, r.key): r.version for r in mm.query("*", "*")} == snapshot, "re-apply writes nothing"


def test_the_mapping_is_the_adapters(tmp_path: Path) -> None:
    from hrm_memory.migration.engine import CONSENT_FLAGS

    assert CONSENT_FLAGS == ADAPTER_CATEGORIES


def test_apply_respects_false_flags_and_decisions_taken_in_the_store(tmp_path: Path) -> None:
    legacy = legacy_with(tmp_path, {CONSENT: consent_doc(learned_preferences=False)})
    with store(tmp_path / "store") as mm:
        mm.consent.revoke("conversation")  # decided in the store before the migration
        mm.consent.grant("preferences")
        report = engine.apply(mm, legacy)
        assert report.ok
        assert mm.consent.status() == {"conversation": False, "signals": True, "preferences": True}
        actions = {c["category"]: c["action"] for c in report.to_json()["consent"]}
        assert actions == {"conversation": "kept", "signals": "granted", "preferences": "kept"}
        assert any("conversation" in w and "kept" in w for w in report.warnings)


def test_a_legacy_revoke_after_apply_is_carried_over(tmp_path: Path) -> None:
    legacy = legacy_with(tmp_path, {})
    with store(tmp_path / "store") as mm:
        assert engine.apply(mm, legacy).ok and mm.consent.granted("preferences")
        (legacy / CONSENT).write_bytes(consent_doc(learned_preferences=False))
        report = engine.apply(mm, legacy)
        assert report.ok and not mm.consent.granted("preferences")
        assert {c["category"]: c["action"] for c in report.to_json()["consent"]}["preferences"] == "revoked"
        assert mm.read("learning.feedback", "log") is not None, "imported data is not purged by the carry-over"
        # a grant made in the store afterwards wins over the (older) legacy file
        mm.consent.grant("preferences")
        again = engine.apply(mm, legacy)
        assert again.ok and mm.consent.granted("preferences")
        assert {c["category"]: c["action"] for c in again.to_json()["consent"]}["preferences"] == "kept"


def test_a_tree_without_consent_json_changes_no_consent(tmp_path: Path) -> None:
    legacy = legacy_with(tmp_path, {})
    (legacy / CONSENT).unlink()
    with store(tmp_path / "store") as mm:
        report = engine.apply(mm, legacy)
        assert report.ok and report.to_json()["consent"] == []
        assert mm.consent.status() == {"conversation": False, "signals": False, "preferences": False}
