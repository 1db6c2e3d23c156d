"""Export and import: one versioned line format, across backends.

The round trip: a store with a record in every persisted seed namespace,
kept history, deletions, archived records, consent decisions and a run-time
declaration is exported from the file backend, imported into Redis (a real
server) and exported again: the two files are byte-identical. Then import is
idempotent, refuses a newer format, and the CLI does the same.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from hrm_memory import Keep, MemoryManager, NamespaceConflict, NamespaceSpec, UnsupportedFormat
from hrm_memory.core.errors import BadInput
from hrm_memory.history import portable
from hrm_memory.namespaces import seed
from tests.helpers.redis_server import fresh_url, require_redis
from tests.helpers.streams import pipe


PASSPHRASE = "export passphrase for the round trip"


def _populate(mm: MemoryManager) -> None:
    mm.consent.grant("preferences")
    mm.consent.grant("conversation")
    mm.consent.revoke("signals")
    mm.declare(NamespaceSpec("extra.facts", ttl=10.0, history=Keep(versions=4, days=30), index=("$",)))
    for spec in seed():
        if spec.tier == "hot":
            continue
        for i in range(3):
            mm.write(spec.name, f"key-{i}", {"text": f"{spec.name} fact {i}", "n": i, "f": 0.1 * i})
        if spec.history is not None:
            mm.write(spec.name, "key-0", {"text": "revised", "n": 10})
            mm.write(spec.name, "key-0", {"text": "revised again", "n": 11})
            mm.delete(spec.name, "key-2")  # a deletion with kept history
    for i in range(5):
        mm.write("extra.facts", f"fact-{i}", {"text": f"fact {i}"})
    mm.write("extra.facts", "fact-0", {"text": "fact 0, corrected"})
    mm.write("extra.facts", "unicode ✓ key", {"text": "ünïcödé", "emoji": "🙂"})
    # Records of TTL namespaces to the cold tier, 100 days on: the history of
    # focus.notes (kept 90 days) goes, the others' (180 and 365) stays.
    mm.archive(now=time.time() + 100 * 86400)


def _export(mm: MemoryManager, path: Path, **kw: str) -> bytes:
    mm.export(path, **kw)
    return path.read_bytes()


def test_round_trip_file_to_redis_is_byte_identical(tmp_path: Path) -> None:
    require_redis()
    with MemoryManager(tmp_path / "a", durability="flush") as src:
        _populate(src)
        first = _export(src, tmp_path / "one.jsonl")
        # The gated namespaces' values travel sealed: another store opens them with the keys, carried wrapped.
        src.export(tmp_path / "keys.jsonl", include_keys=True, passphrase=PASSPHRASE)
        want = {r.namespace + "/" + r.key: (r.value, r.version, r.tier) for r in src.query("*", include_cold=True)}
        want_history = src.history("shared.people", "key-0")
    lines = first.splitlines()
    assert orjson.loads(lines[0]) == {"format": "hrm-memory-export", "version": 2}
    kinds = [orjson.loads(line)["t"] for line in lines[1:]]
    assert kinds[-1] == "end" and {"namespace", "consent", "record"} <= set(kinds)
    records = [orjson.loads(line) for line in lines[1:] if b'"t":"record"' in line]
    assert any(r["tier"] == "cold" for r in records) and any(r["tier"] is None for r in records)
    assert any(len(r["versions"]) > 1 for r in records) and any(r["cut"] > 0 for r in records)
    assert {r["ns"] for r in records} >= {s.name for s in seed() if s.tier != "hot"}
    consents = {c["category"]: c["granted"] for c in map(orjson.loads, lines[1:]) if c["t"] == "consent"}
    assert consents == {"conversation": True, "signals": False, "preferences": True}

    url = fresh_url()
    with MemoryManager(tmp_path / "b", backend=url) as dst:
        counts = dst.import_(tmp_path / "keys.jsonl", apply_consent=True, passphrase=PASSPHRASE)
        assert counts["records"] == len(records) and counts["existing"] == 0 and counts["declared"] == 1
        second = _export(dst, tmp_path / "two.jsonl")
        assert second == first
        got = {r.namespace + "/" + r.key: (r.value, r.version, r.tier) for r in dst.query("*", include_cold=True)}
        assert got == want
        assert dst.history("shared.people", "key-0") == want_history
        assert dst.consent.status() == {"conversation": True, "signals": False, "preferences": True}
        assert dst.recall("revised again", namespaces="shared.people")  # the index learnt of the imported records
        again = dst.import_(tmp_path / "one.jsonl", apply_consent=True)  # idempotent
        assert again["existing"] == again["records"] and _export(dst, tmp_path / "three.jsonl") == first
    with MemoryManager(tmp_path / "c") as back:  # and back to files, through a stream
        back.import_(io.BytesIO((tmp_path / "keys.jsonl").read_bytes()), apply_consent=True, passphrase=PASSPHRASE)
        assert _export(back, tmp_path / "four.jsonl") == first


def test_export_streams_in_sorted_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past RUN_LINES records the sort goes through temporary runs: same bytes."""
    with MemoryManager(tmp_path / "a", durability="flush") as mm:
        for i in range(250):
            mm.write("focus.slow", f"k{i:04d}", {"i": i})
            mm.write("shared.people", f"p{i % 7}", {"i": i})
        whole = _export(mm, tmp_path / "whole.jsonl")
        monkeypatch.setattr(portable, "RUN_LINES", 16)
        seen: list[int] = []
        monkeypatch.setattr(portable, "PROGRESS_EVERY", 100)
        mm.export(tmp_path / "runs.jsonl", progress=seen.append)
        assert (tmp_path / "runs.jsonl").read_bytes() == whole
        assert seen == [100, 200, 257]
        assert os.stat(tmp_path / "runs.jsonl").st_mode & 0o777 == 0o600


def test_export_of_a_namespace_glob(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "a") as mm:
        mm.write("shared.people", "ann", {"n": "Ann"})
        mm.write("focus.slow", "x", 1)
        data = _export(mm, tmp_path / "x.jsonl", namespaces="shared.*")
    items = [orjson.loads(line) for line in data.splitlines()[1:]]
    assert {i["ns"] for i in items if i["t"] == "record"} == {"shared.people"}
    assert {i["name"] for i in items if i["t"] == "namespace"} == {s.name for s in seed() if s.name.startswith("shared.")}


def test_import_refuses_a_newer_format_and_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "new.jsonl"
    path.write_bytes(
        b'{"format":"hrm-memory-export","version":3}\n'
        b'{"t":"record","ns":"shared.people","key":"ann","tier":"warm","cut":0,"versions":[[1,1,1,0,{"n":1}]]}\n'
    )
    with MemoryManager(tmp_path / "a") as mm:
        with pytest.raises(UnsupportedFormat) as err:
            mm.import_(path)
        assert isinstance(err.value, ValueError) and err.value.found == 3
        assert "upgrade" in str(err.value)
        assert mm.read("shared.people", "ann") is None
        (tmp_path / "junk").write_bytes(b"hello\n")
        with pytest.raises(UnsupportedFormat):
            mm.import_(tmp_path / "junk")


def test_import_refuses_a_conflicting_declaration_before_any_record(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "a") as src:
        src.declare("extra.things", ttl=5.0)
        src.write("extra.things", "k", 1)
        src.export(tmp_path / "x.jsonl")
    with MemoryManager(tmp_path / "b") as dst:
        dst.declare("extra.things", ttl=9.0)
        with pytest.raises(NamespaceConflict):
            dst.import_(tmp_path / "x.jsonl")
        assert dst.read("extra.things", "k") is None


def test_a_truncated_export_says_so(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "a") as src:
        src.write("shared.people", "ann", {"n": "Ann"})
        data = _export(src, tmp_path / "x.jsonl")
    (tmp_path / "cut.jsonl").write_bytes(data.rsplit(b"\n", 2)[0] + b"\n")  # the end line is gone
    with MemoryManager(tmp_path / "b") as dst:
        with pytest.raises(BadInput, match="truncated"):
            dst.import_(tmp_path / "cut.jsonl")
        assert dst.read("shared.people", "ann") is None  # a file read twice is checked whole: nothing applied
        with pytest.raises(BadInput, match="truncated"):
            dst.import_(pipe((tmp_path / "cut.jsonl").read_bytes()))
        assert dst.read("shared.people", "ann") == {"n": "Ann"}  # a stream: what came before the cut is imported



def test_cli_export_and_import(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "a") as mm:
        mm.write("shared.people", "ann", {"n": "Ann"})
        mm.write("shared.people", "ann", {"n": "Ann B."})
    cli = [sys.executable, "-m", "hrm_memory.cli.main"]
    out = tmp_path / "x.jsonl"
    res = subprocess.run([*cli, "--root", str(tmp_path / "a"), "export", "--ns", "shared.*", str(out)],
                         capture_output=True, text=True, check=True)
    assert "exported 1 records (2 versions)" in res.stdout and res.stderr == ""  # no progress off a terminal
    subprocess.run([*cli, "--root", str(tmp_path / "b"), "import", str(out)], capture_output=True, check=True)
    res = subprocess.run([*cli, "--root", str(tmp_path / "b"), "--json", "history", "shared.people", "ann"],
                         capture_output=True, check=True)
    assert [v["value"] for v in orjson.loads(res.stdout)] == [{"n": "Ann B."}, {"n": "Ann"}]
    subprocess.run([*cli, "--root", str(tmp_path / "b"), "forget", "shared.people", "ann"], capture_output=True,
                   check=True)
    res = subprocess.run([*cli, "--root", str(tmp_path / "b"), "get", "shared.people", "ann"], capture_output=True)
    assert res.returncode == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"format":"hrm-memory-export","version":99}\n')
    res = subprocess.run([*cli, "--root", str(tmp_path / "b"), "import", str(bad)], capture_output=True, text=True)
    assert res.returncode == 2 and "UnsupportedFormat" in res.stderr
