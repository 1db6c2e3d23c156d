"""Import is a batch of checked writes: every record line passes a write's
checks and its own, a bad line is a typed error naming it, and consent stays
the caller's decision, never the file's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory import AccessDenied, BadImportLine, MemoryManager, MemoryStoreError
from tests.helpers.canary import files_holding
from tests.helpers.streams import pipe

HEADER = {"format": "hrm-memory-export", "version": 1}
END = {"t": "end"}


def _file(path: Path, *lines: Any) -> Path:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in (HEADER, *lines, END)))
    return path


def _record(ns: str, key: Any, value: Any = None, *, versions: Any = None, tier: Any = "warm", cut: Any = 0) -> dict[str, Any]:
    if versions is None:
        versions = [[1, 1_700_000_000_000_000, 1_700_000_000_000_000, 0, value]]
    return {"t": "record", "ns": ns, "key": key, "tier": tier, "cut": cut, "versions": versions}


PASSPHRASE = "the passphrase of the gated export"


def _exported_gated(tmp_path: Path, canary: str) -> Path:
    """An export whose store granted conversation and holds a canary in a gated namespace."""
    with MemoryManager(tmp_path / "src") as src:
        src.consent.grant("conversation")
        src.write("focus.conversation", "turn-1", {"text": canary})
        src.export(tmp_path / "gated.jsonl", include_keys=True, passphrase=PASSPHRASE)  # sealed: with its key
    return tmp_path / "gated.jsonl"


# -- consent ---------------------------------------------------------------------------


@pytest.mark.parametrize("before", ["never decided", "revoked"])
def test_an_import_never_grants_consent_and_gated_records_stay_off_disk(tmp_path: Path, before: str) -> None:
    canary = "canary-7f3a9e0c"
    path = _exported_gated(tmp_path, canary)
    with MemoryManager(tmp_path / "dst") as mm:
        if before == "revoked":
            mm.consent.revoke("conversation")
        counts = mm.import_(path, passphrase=PASSPHRASE)
        assert counts["held"] == 1 and counts["consent_skipped"] >= 1
        assert mm.consent.granted("conversation") is False
        # Held as a write of it would be: readable in this process, persisted nowhere.
        record = mm.get_record("focus.conversation", "turn-1")
        assert record is not None and record.value == {"text": canary} and record.persisted is False
        assert files_holding(tmp_path / "dst", canary.encode()) == []
    with MemoryManager(tmp_path / "dst") as again:
        assert again.read("focus.conversation", "turn-1") is None


def test_a_file_that_revokes_is_held_too(tmp_path: Path) -> None:
    """A consent line saying granted: false (the file's own view) grants nothing either."""
    canary = "canary-0b1e2d"
    path = _file(tmp_path / "x.jsonl", {"t": "consent", "category": "conversation", "granted": False},
                 _record("focus.conversation", "t", {"text": canary}))
    with MemoryManager(tmp_path / "dst") as mm:
        assert mm.import_(path)["held"] == 1
        assert files_holding(tmp_path / "dst", canary.encode()) == []


def test_apply_consent_applies_the_files_decisions_first(tmp_path: Path) -> None:
    canary = "canary-apply-51"
    path = _exported_gated(tmp_path, canary)
    with MemoryManager(tmp_path / "dst") as mm:
        counts = mm.import_(path, apply_consent=True, passphrase=PASSPHRASE)
        assert counts["held"] == 0 and counts["consents"] >= 1
        assert mm.consent.granted("conversation") is True
    with MemoryManager(tmp_path / "dst") as again:
        assert again.read("focus.conversation", "turn-1") == {"text": canary}


def test_the_cli_import_holds_gated_records_unless_told(tmp_path: Path) -> None:
    canary = "canary-cli-77"
    path = _exported_gated(tmp_path, canary)
    cli = [sys.executable, "-m", "hrm_memory.cli.main", "--root", str(tmp_path / "dst")]
    (tmp_path / "passphrase").write_text(PASSPHRASE + "\n")
    cli_import = [*cli, "import", "--passphrase-file", str(tmp_path / "passphrase")]
    res = subprocess.run([*cli_import, str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "not persisted: 1 records" in res.stdout
    assert files_holding(tmp_path / "dst", canary.encode()) == []
    res = subprocess.run([*cli_import, "--apply-consent", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert files_holding(tmp_path / "dst", canary.encode()) == []  # persisted sealed
    with MemoryManager(tmp_path / "dst") as mm:
        rec = mm.get_record("focus.conversation", "turn-1")
        assert rec is not None and rec.persisted and rec.value == {"text": canary}


# -- bad lines -------------------------------------------------------------------------

BAD_RECORDS = {
    "key with a newline": _record("shared.people", "ann\nbob", {"n": 1}),
    "created_us not an int": _record("shared.people", "ann", versions=[[1, "x", 1, 0, {"n": 1}]]),
    "updated_us past year 9999": _record("shared.people", "ann", versions=[[1, 1, 2**62, 0, {"n": 1}]]),
    "value over the write limit": _record("shared.people", "ann", {"blob": "x" * (3 << 20)}),
    "version zero": _record("shared.people", "ann", versions=[[0, 1, 1, 0, {"n": 1}]]),
    "versions falling": _record("shared.people", "ann", versions=[[2, 1, 1, 0, {"n": 1}], [1, 2, 2, 0, {"n": 2}]]),
    "created after updated": _record("shared.people", "ann", versions=[[1, 9, 1, 0, {"n": 1}]]),
    "a version of four fields": _record("shared.people", "ann", versions=[[1, 1, 1, 0]]),
    "versions not a list": _record("shared.people", "ann", versions={"1": 1}),
    "no versions": _record("shared.people", "ann", versions=[]),
    "deleted current": _record("shared.people", "ann", versions=[[1, 1, 1, 1, None]]),
    "unknown tier": _record("shared.people", "ann", {"n": 1}, tier="lukewarm"),
    "cut negative": _record("shared.people", "ann", {"n": 1}, cut=-1),
    "bool version": _record("shared.people", "ann", versions=[[True, 1, 1, 0, {"n": 1}]]),
    "undeclared namespace": _record("nowhere.at_all", "ann", {"n": 1}),
    "namespace not a str": _record(["shared.people"], "ann", {"n": 1}),
    "no key field": {"t": "record", "ns": "shared.people", "tier": "warm", "cut": 0, "versions": [[1, 1, 1, 0, 1]]},
    "not an object": [1, 2, 3],
    "unknown line type": {"t": "mystery"},
    "consent of an unknown category": {"t": "consent", "category": "everything", "granted": True},
    "consent granted not a bool": {"t": "consent", "category": "conversation", "granted": "yes"},
    "namespace line with a bad spec": {"t": "namespace", "name": "x.y", "spec": {"name": "x.y", "ttl": "5"}},
}


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_a_bad_line_is_a_typed_error_naming_it_and_nothing_is_applied(tmp_path: Path, name: str) -> None:
    path = _file(tmp_path / "bad.jsonl", _record("shared.people", "before", {"n": 0}), BAD_RECORDS[name],
                 _record("shared.people", "after", {"n": 2}))
    with MemoryManager(tmp_path / "dst") as mm:
        with pytest.raises(BadImportLine) as err:
            mm.import_(path)
        assert isinstance(err.value, ValueError) and err.value.line == 3
        assert f"{path}:3:" in str(err.value)
        assert mm.query("shared.people") == [] and mm.check() == []
        mm.write("shared.people", "later", {"n": 3})  # the store goes on working
        assert [r.key for r in mm.query("shared.people")] == ["later"]


def test_a_stream_is_checked_line_by_line_and_stops_at_the_bad_one(tmp_path: Path) -> None:
    """A stream cannot be read twice: the lines before the bad one are
    imported whole, nothing of it or after it."""
    data = _file(tmp_path / "bad.jsonl", _record("shared.people", "before", {"n": 0}),
                 BAD_RECORDS["key with a newline"], _record("shared.people", "after", {"n": 2})).read_bytes()
    with MemoryManager(tmp_path / "dst") as mm:
        with pytest.raises(BadImportLine):
            mm.import_(pipe(data))
        assert [r.key for r in mm.query("shared.people")] == ["before"]
        assert mm.check() == []


def test_a_consent_record_in_a_file_is_not_a_way_to_grant(tmp_path: Path) -> None:
    path = _file(tmp_path / "x.jsonl", _record("focus.consent", "conversation", {"granted": True}))
    with MemoryManager(tmp_path / "dst") as mm:
        assert mm.import_(path)["consent_skipped"] == 1
        assert mm.consent.granted("conversation") is False
        with pytest.raises(AccessDenied):
            mm.write("focus.consent", "conversation", {"granted": True})


def test_the_cli_says_which_line_is_bad_without_a_traceback(tmp_path: Path) -> None:
    path = _file(tmp_path / "bad.jsonl", BAD_RECORDS["created_us not an int"])
    res = subprocess.run([sys.executable, "-m", "hrm_memory.cli.main", "--root", str(tmp_path / "dst"), "import", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"{path}:2:" in res.stderr and "Traceback" not in res.stderr


# -- any line --------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_time = st.one_of(st.integers(-5, 2**63), st.sampled_from([1_700_000_000_000_000, 0]), _json)
_version = st.lists(st.one_of(st.integers(-1, 3), _time, _json), min_size=3, max_size=6)
_line = st.fixed_dictionaries({
    "t": st.just("record"),
    "ns": st.sampled_from(["shared.people", "focus.slow", "altitude.patterns", "nope.x", 5]),
    "key": st.one_of(st.text(max_size=6), st.integers(-(2**63), 2**63 - 1), st.none()),
    "tier": st.sampled_from(["warm", "cold", None, "hot", 3]),
    "cut": _time,
    "versions": st.one_of(st.lists(_version, max_size=3), _json),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=_line)
def test_any_line_is_imported_whole_or_refused_with_nothing_applied(tmp_path_factory: pytest.TempPathFactory,
                                                                    line: dict[str, Any]) -> None:
    root = tmp_path_factory.mktemp("any")
    path = _file(root / "x.jsonl", line)
    with MemoryManager(root / "store", locking=False, durability="flush") as mm:
        try:
            mm.import_(path)
        except BadImportLine:
            assert mm.query("*") == []
        except MemoryStoreError as exc:  # any other refusal is typed too, and applies nothing
            raise AssertionError(f"untyped refusal {type(exc).__name__}: {exc}") from exc
        # Whatever was imported can be read, queried and found again.
        for record in mm.query("*", include_cold=True):
            assert mm.get_record(record.namespace, record.key) is not None
            mm.forget(record.namespace, record.key)
        assert mm.check() == []
