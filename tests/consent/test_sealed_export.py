"""Exports of sealed namespaces: ciphertext as stored, keys only when asked
(wrapped under a passphrase), and nothing readable after a shredding revoke.

Real files, real AES-GCM and scrypt, the real CLI in a subprocess; the key
files live under the run's HRM_MEMORY_KEYS folder (tests/conftest.py)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from hrm_memory import (
    EnvKeys,
    InvalidArgument,
    KeyUnavailable,
    MemoryManager,
    Passphrase,
    WrongKey,
)
from hrm_memory.storage.sealed.backend import parse
from hrm_memory.storage.sealed.keys import DataKey, make_keyring
from tests.helpers.canary import files_holding
from tests.helpers.sealed import CANARY, NS, SPEC, fill, store_key_file

PASSPHRASE = "a passphrase for sealed exports"


def _items(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _gated_values(path: Path) -> list[object]:
    """Every value of every version of the gated namespaces' record lines."""
    return [v[4] for i in _items(path) if i.get("t") == "record" and i["ns"] in (NS, "focus.conversation")
            for v in i["versions"] if not v[3]]  # type: ignore[attr-defined, index]


def _exported_store(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """A store with gated records (kept history, archived ones) and its export paths."""
    root = tmp_path / "src"
    with MemoryManager(root) as mm:
        expected = fill(mm)
        mm.delete(NS, "k5")  # a deleted key with kept history
        del expected["k5"]
        assert mm.archive(now=time.time() + 7200)[NS] == 5
        mm.write("shared.people", "ann", {"text": "plain " + CANARY})
        mm.export(tmp_path / "plain.jsonl")
        mm.export(tmp_path / "keys.jsonl", include_keys=True, passphrase=PASSPHRASE)
    return root, expected


def _read_all(mm: MemoryManager, expected: dict[str, object]) -> None:
    for k, v in expected.items():
        assert mm.read("focus.conversation" if k == "turn" else NS, k) == v


def test_an_export_holds_ciphertext_and_the_keys_only_when_asked(tmp_path: Path) -> None:
    root, _ = _exported_store(tmp_path)
    with MemoryManager(root) as mm:
        key_file = store_key_file(mm)
        stored = {st.key: st.value for st in mm.backend.scan(NS, include_cold=True)}
    secrets = [base64.b64decode(s) for s in json.loads(key_file.read_text())["groups"]["conversation"]["keys"].values()]
    (kid,) = json.loads(key_file.read_text())["groups"]["conversation"]["keys"]
    for name in ("plain.jsonl", "keys.jsonl"):
        data = (tmp_path / name).read_bytes()
        assert CANARY.encode() not in data.replace(b"plain " + CANARY.encode(), b"")  # only the ungated record's
        assert b"plain " + CANARY.encode() in data
        values = _gated_values(tmp_path / name)
        assert len(values) == 6 * 2 + 1  # two versions of each key of NS (k5's kept, it is deleted), and the turn
        for value in values:
            sealed = parse(orjson.dumps(value))
            assert sealed is not None and sealed.key_id == kid
        for secret in secrets:  # the key itself, raw or base64, is in neither
            assert secret not in data and base64.b64encode(secret) not in data
        # The current value is the ciphertext as stored, byte for byte.
        current = {i["key"]: orjson.dumps(i["versions"][-1][4]) for i in _items(tmp_path / name)  # type: ignore[index]
                   if i.get("t") == "record" and i["ns"] == NS and i["tier"] is not None}
        assert current == stored
    assert not any(i.get("t") == "keys" for i in _items(tmp_path / "plain.jsonl"))
    (keys,) = [i for i in _items(tmp_path / "keys.jsonl") if i.get("t") == "keys"]
    assert [(k["group"], k["id"], k["current"]) for k in keys["keys"]] == [("conversation", kid, True)]  # type: ignore[index]
    assert keys["kdf"]["name"] == "scrypt" and keys["kdf"]["n"] >= 1 << 15  # type: ignore[index]
    # The same store exports to the same bytes (the keys line aside: its salt and nonces are random).
    with MemoryManager(root) as mm:
        mm.export(tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()


def test_import_with_the_keys_reads_back_and_without_them_is_refused(tmp_path: Path) -> None:
    _, expected = _exported_store(tmp_path)
    dst = tmp_path / "dst"
    with MemoryManager(dst) as mm:
        for path, passphrase, error in ((tmp_path / "plain.jsonl", None, KeyUnavailable),
                                        (tmp_path / "keys.jsonl", None, KeyUnavailable),
                                        (tmp_path / "keys.jsonl", "not the passphrase at all", WrongKey)):
            with pytest.raises(error) as info:
                mm.import_(path, apply_consent=True, passphrase=passphrase)
            assert isinstance(info.value, LookupError)
            assert mm.consent.granted("conversation") is False  # refused before anything was applied
            assert mm.read("shared.people", "ann") is None
        with pytest.raises(KeyUnavailable, match="passphrase"):
            mm.import_(tmp_path / "keys.jsonl", apply_consent=True)
        counts = mm.import_(tmp_path / "keys.jsonl", apply_consent=True, passphrase=PASSPHRASE)
        assert counts["held"] == 0 and counts["records"] >= len(expected)
        _read_all(mm, expected)
        assert [v.value for v in mm.history(NS, "k0")] == [{"text": f"{CANARY} now 0"}, {"text": f"{CANARY} first 0"}]
        assert [v.value for v in mm.history(NS, "k5")][1:] == [{"text": f"{CANARY} now 5"}, {"text": f"{CANARY} first 5"}]
        assert mm.check() == []
        # The export made without keys now imports too: this store holds them.
        assert mm.import_(tmp_path / "plain.jsonl")["existing"] >= len(expected)
        mm.export(tmp_path / "dst.jsonl")
    holding = files_holding(dst, CANARY)
    assert holding and all("shared.people" in str(p) for p in holding)  # the ungated record only
    # The store that imported exports the same bytes as the one exported.
    assert (tmp_path / "dst.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
    with MemoryManager(dst) as mm:  # a later session: the imported key was kept
        _read_all(mm, expected)


def test_an_export_made_before_a_shredding_revoke_yields_nothing_after_it(tmp_path: Path) -> None:
    root, expected = _exported_store(tmp_path)
    with MemoryManager(root) as mm:
        mm.consent.revoke("conversation", purge=True)
        assert mm.keys.ids("conversation") == []
        assert CANARY.encode() not in (tmp_path / "plain.jsonl").read_bytes().replace(b"plain " + CANARY.encode(), b"")
        # Nothing on the machine opens the export any more: not the store it came from...
        mm.consent.grant("conversation")
        with pytest.raises(KeyUnavailable):
            mm.import_(tmp_path / "plain.jsonl")
        for k in expected:
            assert mm.read("focus.conversation" if k == "turn" else NS, k) is None
    # ...nor another one.
    with MemoryManager(tmp_path / "other") as other:
        with pytest.raises(KeyUnavailable):
            other.import_(tmp_path / "plain.jsonl", apply_consent=True)
        assert other.read("focus.conversation", "turn") is None and other.read("shared.people", "ann") is None
    # An export that carries its keys is a key backup: the revoke does not reach it; its passphrase opens it.
    with MemoryManager(tmp_path / "restored") as restored:
        restored.import_(tmp_path / "keys.jsonl", apply_consent=True, passphrase=PASSPHRASE)
        _read_all(restored, expected)


def test_a_sealed_value_altered_in_an_export_is_refused(tmp_path: Path) -> None:
    _exported_store(tmp_path)
    lines = (tmp_path / "keys.jsonl").read_bytes().splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if b'"key":"k1"' in line)
    item = orjson.loads(lines[i])
    other = next(orjson.loads(line) for line in lines if b'"key":"k2"' in line)
    item["versions"][-1][4] = other["versions"][-1][4]  # k2's ciphertext passed off as k1's
    lines[i] = orjson.dumps(item) + b"\n"
    (tmp_path / "bad.jsonl").write_bytes(b"".join(lines))
    with MemoryManager(tmp_path / "dst") as mm:
        with pytest.raises(WrongKey) as info:
            mm.import_(tmp_path / "bad.jsonl", apply_consent=True, passphrase=PASSPHRASE)
        assert info.value.line == i + 1 and info.value.key == "k1"
        assert mm.consent.granted("conversation") is False and mm.read("shared.people", "ann") is None


def test_a_format_1_export_with_plaintext_still_imports_sealed(tmp_path: Path) -> None:
    path = tmp_path / "v1.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in (
        {"format": "hrm-memory-export", "version": 1},
        {"t": "consent", "category": "conversation", "granted": True},
        {"t": "record", "ns": "focus.conversation", "key": "turn", "tier": "warm", "cut": 0,
         "versions": [[1, 1_700_000_000_000_000, 1_700_000_000_000_000, 0, {"text": CANARY}]]},
        {"t": "end"},
    )))
    with MemoryManager(tmp_path / "dst") as mm:
        assert mm.import_(path, apply_consent=True)["records"] == 1
        assert mm.read("focus.conversation", "turn") == {"text": CANARY}
    assert files_holding(tmp_path / "dst", CANARY) == []  # persisted sealed


def test_a_store_with_keys_from_the_environment_reseals_what_it_imports(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _, expected = _exported_store(tmp_path)
    own = DataKey("0e0e0e0e0e0e", os.urandom(32))
    monkeypatch.setenv("HRM_MEMORY_KEYRING", make_keyring({"conversation": [own]}))
    with MemoryManager(tmp_path / "dst", keys=EnvKeys()) as mm:
        mm.import_(tmp_path / "keys.jsonl", apply_consent=True, passphrase=PASSPHRASE)
        _read_all(mm, expected)
        for st in mm.backend.scan(NS, include_cold=True):  # sealed again with the key the application gave
            sealed = parse(st.value)
            assert sealed is not None and sealed.key_id == own.key_id


def test_passphrases_are_checked_and_never_shown(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "s") as mm:
        with pytest.raises(InvalidArgument):
            mm.export(tmp_path / "x.jsonl", include_keys=True)
        with pytest.raises(InvalidArgument):
            mm.export(tmp_path / "x.jsonl", include_keys=True, passphrase="short")
    secret = "a passphrase no log may show"
    assert secret not in repr(Passphrase(secret)) and secret not in str(Passphrase(secret))


def test_the_cli_exports_keys_only_when_asked(tmp_path: Path) -> None:
    root, expected = _exported_store(tmp_path)
    env = {**os.environ, "HRM_MEMORY_PASSPHRASE": PASSPHRASE}
    cli = [sys.executable, "-m", "hrm_memory.cli.main", "--root", str(root)]
    res = subprocess.run([*cli, "export", "--include-keys", str(tmp_path / "cli.jsonl")], capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert PASSPHRASE not in res.stdout + res.stderr
    assert any(i.get("t") == "keys" for i in _items(tmp_path / "cli.jsonl"))
    without = {k: v for k, v in os.environ.items() if k != "HRM_MEMORY_PASSPHRASE"}
    res = subprocess.run([*cli, "export", "--include-keys", str(tmp_path / "no.jsonl")], capture_output=True,
                         text=True, timeout=120, env=without, stdin=subprocess.DEVNULL)
    assert res.returncode != 0 and "passphrase" in res.stderr and not (tmp_path / "no.jsonl").exists()
    (tmp_path / "pass").write_text(PASSPHRASE + "\n")
    dst = [sys.executable, "-m", "hrm_memory.cli.main", "--root", str(tmp_path / "dst")]
    res = subprocess.run([*dst, "import", "--apply-consent", "--passphrase-file", str(tmp_path / "pass"),
                          str(tmp_path / "cli.jsonl")], capture_output=True, text=True, timeout=120, env=without)
    assert res.returncode == 0, res.stderr
    with MemoryManager(tmp_path / "dst") as mm:
        _read_all(mm, expected)


def test_a_store_with_its_own_key_keeps_sealing_with_it_after_an_import(tmp_path: Path) -> None:
    _, expected = _exported_store(tmp_path)
    with MemoryManager(tmp_path / "dst") as mm:
        mm.declare(SPEC)
        mm.consent.grant("conversation")
        mm.write(NS, "mine", {"text": "written here first"})
        (own,) = mm.keys.ids("conversation")
        mm.import_(tmp_path / "keys.jsonl", passphrase=PASSPHRASE)
        _read_all(mm, expected)
        assert own in mm.keys.ids("conversation") and len(mm.keys.ids("conversation")) == 2
        mm.write(NS, "later", {"text": "written after the import"})
        later = mm.backend.get(NS, "later")  # the backend below the sealing: the value as stored
        assert later is not None
        sealed = parse(later.value)
        assert sealed is not None and sealed.key_id == own  # the file's key did not take over
        rotation = mm.rotate_keys("conversation", wait=True)  # one key again, everything readable
        assert len(rotation.destroyed) == 2
        _read_all(mm, expected)
        assert mm.read(NS, "mine") == {"text": "written here first"}
