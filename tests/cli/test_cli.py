"""The ``hrm-memory`` command line: commands, --json output, exit codes.

Exit codes (shared/memory/cli.py): 0 success; 1 not found; 2 bad input;
3 the store failed; 4 ``check`` found problems it did not fix.
Most cases run ``main()`` in-process; a few run the installed console script.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from hrm_memory import MemoryManager
from hrm_memory.cli.main import main
from tests.helpers.damage import flip_value_byte
from tests.helpers.layout import files_bytes

SCRIPT = Path(sys.executable).parent / "hrm-memory"


def script_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["HRM_MEMORY_ROOT"] = str(tmp_path / "env-root")
    env["HOME"] = str(tmp_path / "home")
    env.pop("XDG_DATA_HOME", None)
    return env


# -- demo ------------------------------------------------------------------------------


def test_demo_runs_in_a_temporary_store(cli: Any, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["demo"]) == 0
    out, err = capsys.readouterr()
    assert "no findings" in out
    assert "altitude.patterns/timeboxing" in out
    assert "AccessDenied: HRM 'focus' may not write" in out  # the scope step shows a refused write
    assert err == ""
    assert not root.exists(), "demo without --root must not touch the default store"


def test_demo_on_a_root_leaves_a_sound_store(cli: Any, root: Path) -> None:
    rc, out, _ = cli("demo")
    assert rc == 0 and "no findings" in out and str(root) in out
    assert cli("check") == (0, "store is sound: no findings\n", "")
    rc, out, _ = cli("get", "altitude.patterns", "timeboxing")
    assert rc == 0 and orjson.loads(out) == {"s": 0.9}
    rc, out, _ = cli("get", "focus.gates", "framing-1")
    assert rc == 0 and orjson.loads(out) == {"gate": "framing", "to": "execution"}


# -- put / get / rm ----------------------------------------------------------------------


def test_put_get_rm(cli: Any) -> None:
    value = {"s": 0.5, "tags": ["a", "b"], "n": None, "big": 2**64 - 1, "neg0": -0.0}
    rc, out, err = cli("put", "altitude.patterns", "timeboxing", orjson.dumps(value).decode())
    assert (rc, err) == (0, "") and out.startswith("stored (version 1, trace ")
    rc, out, _ = cli("get", "altitude.patterns", "timeboxing")
    assert rc == 0 and orjson.dumps(orjson.loads(out)) == orjson.dumps(value)

    rc, out, _ = cli("put", "altitude.patterns", "timeboxing", '"second"', json=True)
    doc = orjson.loads(out)
    assert rc == 0 and doc["version"] == 2 and isinstance(doc["trace_id"], str)

    rc, out, _ = cli("get", "altitude.patterns", "timeboxing", json=True)
    doc = orjson.loads(out)
    assert rc == 0
    assert {k: doc[k] for k in ("namespace", "key", "version", "tier", "value")} == {
        "namespace": "altitude.patterns",
        "key": "timeboxing",
        "version": 2,
        "tier": "warm",
        "value": "second",
    }
    created, updated = datetime.fromisoformat(doc["created"]), datetime.fromisoformat(doc["updated"])
    assert created.tzinfo is not None and created <= updated

    assert cli("rm", "altitude.patterns", "timeboxing") == (0, "deleted\n", "")
    rc, out, err = cli("get", "altitude.patterns", "timeboxing")
    assert (rc, out) == (1, "") and "not found" in err and "timeboxing" in err
    rc, out, err = cli("rm", "altitude.patterns", "timeboxing")
    assert (rc, out) == (1, "") and "not found" in err
    rc, out, err = cli("rm", "altitude.patterns", "never", json=True)
    assert (rc, out) == (1, "") and "not found" in err


def test_put_reads_stdin_in_process(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"from": "stdin", "n": [1, 2]}\n'))
    rc, _, _ = cli("put", "shared.people", "gaurav", "-")
    assert rc == 0
    rc, out, _ = cli("get", "shared.people", "gaurav")
    assert orjson.loads(out) == {"from": "stdin", "n": [1, 2]}


def test_hot_namespace_is_per_process(cli: Any) -> None:
    """A hot namespace lives in one process: a later CLI run does not see it."""
    assert cli("put", "focus.fast", "turns", "3")[0] == 0
    rc, _, err = cli("get", "focus.fast", "turns")
    assert rc == 1 and "not found" in err


# -- bad input: exit 2, message on stderr, store unchanged --------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["put", "Altitude.patterns", "k", "1"], "InvalidNamespace"),
        (["put", "../etc", "k", "1"], "InvalidNamespace"),
        (["get", "altitude.nul", "k"], "InvalidNamespace"),
        (["rm", "altitude", "k"], "InvalidNamespace"),
        (["put", "altitude.nothere", "k", "1"], "UndeclaredNamespace"),
        (["put", "altitude.patterns", "", "1"], "InvalidKey"),
        (["put", "altitude.patterns", "a\x01b", "1"], "InvalidKey"),
        (["get", "altitude.patterns", "x" * 2000], "InvalidKey"),
        (["put", "altitude.patterns", "k", "{not json"], "not valid JSON"),
        (["put", "altitude.patterns", "k", "bare words"], "not valid JSON"),
        (["put", "altitude.patterns", "k", ""], "not valid JSON"),
        (["put", "altitude.patterns", "k", "NaN"], "not valid JSON"),
        (["put", "altitude.patterns", "k", "[1, Infinity]"], "not valid JSON"),
        (["put", "altitude.patterns", "k", "1e400"], None),
        (["put", "altitude.patterns", "k", '{"a": [1, -1e999]}'], None),
        (["query", "altitude.*", "--limit", "-1"], "InvalidArgument"),
        (["query", "altitude.*", "--where", "=1"], "--where"),
        (["query", "altitude.*", "--where", "novalue"], "--where"),
    ],
    ids=lambda v: repr(v)[:40] if isinstance(v, list) else "",
)
def test_bad_input_exits_2(cli: Any, root: Path, args: list[str], needle: str | None) -> None:
    assert cli("put", "altitude.patterns", "k", '"original"')[0] == 0
    before = files_bytes(root)
    rc, out, err = cli(*args)
    assert rc == 2, (rc, out, err)
    assert err.startswith("hrm-memory: error: "), err
    if needle:
        assert needle in err
    assert out == ""
    assert files_bytes(root) == before
    rc, out, _ = cli("get", "altitude.patterns", "k")
    assert rc == 0 and orjson.loads(out) == "original"


def test_put_int_beyond_64_bits_is_refused_not_rounded(cli: Any) -> None:
    """The store refuses ints that do not fit in 64 bits; the CLI must not
    quietly turn one into a float (18446744073709551616 -> 1.8446744073709552e19)."""
    for text in (str(2**64), str(-(2**63) - 1), f'{{"n": {2**70}}}'):
        rc, out, err = cli("put", "altitude.patterns", "big", text)
        stored = cli("get", "altitude.patterns", "big")[1]
        assert rc == 2, f"{text} was accepted and stored as {stored.strip()}"
        assert "hrm-memory: error:" in err


def test_usage_errors_exit_2(cli: Any) -> None:
    for args in (["nosuchcommand"], ["get", "altitude.patterns"], ["query", "x", "--limit", "many"], []):
        rc, _, err = cli(*args)
        assert rc == 2 and "usage:" in err


# -- ls / query / stats / archive ------------------------------------------------------------


@pytest.fixture
def filled(cli: Any) -> Any:
    for key, value in [
        ("timeboxing", {"s": 0.9, "kind": "habit", "meta": {"src": "chat"}}),
        ("exit_criteria", {"s": 0.8, "kind": "habit", "meta": {"src": "doc"}}),
        ("risk_id", {"s": 0.9, "kind": "skill", "meta": {"src": "chat"}}),
        ("plain", [1, 2, 3]),
    ]:
        assert cli("put", "altitude.patterns", key, orjson.dumps(value).decode())[0] == 0
    assert cli("put", "altitude.coaching", "tone", '{"kind": "habit"}')[0] == 0
    assert cli("put", "focus.gates", "framing-1", '{"gate": "framing"}')[0] == 0
    return cli


def test_ls(filled: Any) -> None:
    rc, out, _ = filled("ls")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "TIER", "TTL_DAYS", "MAX_KEYS", "KEYS", "ARCHIVED", "DESCRIPTION"]
    row = next(ln for ln in lines if ln.startswith("altitude.patterns "))
    assert row.split()[:6] == ["altitude.patterns", "warm", "-", "-", "4", "0"]

    rc, out, _ = filled("ls", json=True)
    rows = {r["namespace"]: r for r in orjson.loads(out)}
    assert rows["altitude.patterns"]["keys"] == 4 and rows["altitude.coaching"]["keys"] == 1
    assert rows["focus.gates"]["ttl_days"] == 30.0 and rows["altitude.session"]["tier"] == "hot"
    assert set(rows["focus.slow"]) == {"namespace", "tier", "ttl_days", "max_keys", "keys", "archived", "description"}

    rc, out, _ = filled("ls", "altitude.patterns")
    assert rc == 0
    keys = [ln.split()[1] for ln in out.splitlines()[1:]]
    assert keys == sorted(["timeboxing", "exit_criteria", "risk_id", "plain"])

    # A glob that matches no namespace is a mistake, said as one (exit 2), as in the API.
    rc, out, err = filled("ls", "altitude.nothere")
    assert (rc, out) == (2, "") and "UndeclaredNamespace" in err

    rc, out, _ = filled("ls", "altitude.*", json=True)
    rows = orjson.loads(out)
    assert [(r["namespace"], r["key"]) for r in rows] == [
        ("altitude.coaching", "tone"),
        ("altitude.patterns", "exit_criteria"),
        ("altitude.patterns", "plain"),
        ("altitude.patterns", "risk_id"),
        ("altitude.patterns", "timeboxing"),
    ]
    assert all(r["version"] == 1 and r["tier"] == "warm" for r in rows)


def test_query(filled: Any) -> None:
    rc, out, _ = filled("query", "altitude.*", json=True)
    rows = orjson.loads(out)
    assert rc == 0 and len(rows) == 5
    assert set(rows[0]) == {"namespace", "key", "version", "tier", "created", "updated", "value"}

    rc, out, _ = filled("query", "altitude.patterns", "--where", "s=0.9", json=True)
    assert sorted(r["key"] for r in orjson.loads(out)) == ["risk_id", "timeboxing"]
    # A bare word means that string; a dotted field reaches into nested dicts.
    rc, out, _ = filled("query", "altitude.*", "--where", "kind=habit", "--where", "meta.src=chat", json=True)
    assert [r["key"] for r in orjson.loads(out)] == ["timeboxing"]
    rc, out, _ = filled("query", "altitude.*", "--where", 'kind="habit"', json=True)
    assert [(r["namespace"], r["key"]) for r in orjson.loads(out)] == [
        ("altitude.coaching", "tone"),
        ("altitude.patterns", "exit_criteria"),
        ("altitude.patterns", "timeboxing"),
    ]
    # 0.9 is not 1, and a number is not the string "0.9".
    rc, out, _ = filled("query", "altitude.patterns", "--where", "s=1", json=True)
    assert orjson.loads(out) == []
    rc, out, _ = filled("query", "altitude.patterns", "--where", 's="0.9"', json=True)
    assert orjson.loads(out) == []

    rc, out, _ = filled("query", "altitude.*", "*i*", "--limit", "2", json=True)
    assert [r["key"] for r in orjson.loads(out)] == ["exit_criteria", "plain"]
    rc, out, _ = filled("query", "altitude.*", "--limit", "0", json=True)
    assert orjson.loads(out) == []

    rc, out, _ = filled("query", "altitude.patterns", "t*")
    lines = out.splitlines()
    assert rc == 0 and lines[0].split() == ["NAMESPACE", "KEY", "VERSION", "TIER", "UPDATED", "VALUE"]
    assert len(lines) == 2 and "timeboxing" in lines[1]
    rc, out, err = filled("query", "nothing.*")
    assert (rc, out) == (2, "") and "UndeclaredNamespace" in err
    rc, out, _ = filled("query", "altitude.coaching", "zz*")
    assert (rc, out.strip()) == (0, "(none)")


def test_archive_and_cold_reads(filled: Any) -> None:
    rc, out, _ = filled("archive")
    assert (rc, out.strip()) == (0, "nothing to archive: no warm record is past its namespace's TTL")
    later = str(time.time() + 31 * 86400)
    rc, out, _ = filled("archive", "--now", later, json=True)
    assert rc == 0 and orjson.loads(out) == {"focus.gates": 1}
    rc, out, _ = filled("archive", "--now", later)
    assert rc == 0 and "nothing to archive" in out

    rc, out, err = filled("get", "focus.gates", "framing-1")
    assert rc == 0 and orjson.loads(out) == {"gate": "framing"} and "archived" in err
    rc, out, _ = filled("get", "focus.gates", "framing-1", json=True)
    assert orjson.loads(out)["tier"] == "cold"

    rc, out, _ = filled("query", "focus.gates", json=True)
    assert orjson.loads(out) == []
    rc, out, _ = filled("query", "focus.gates", "--cold", json=True)
    assert [(r["key"], r["tier"], r["value"]) for r in orjson.loads(out)] == [("framing-1", "cold", {"gate": "framing"})]
    rc, out, _ = filled("ls", "focus.gates", "--cold", json=True)
    assert [(r["key"], r["tier"]) for r in orjson.loads(out)] == [("framing-1", "cold")]
    rc, out, _ = filled("ls", "focus.gates", json=True)
    assert orjson.loads(out) == []

    rc, out, _ = filled("stats", json=True)
    gates = orjson.loads(out)["namespaces"]["focus.gates"]
    assert gates["keys"] == 0 and gates["archived"] == 1 and gates["cold_bytes"] > 0
    assert filled("check")[0] == 0


def test_stats(filled: Any, root: Path) -> None:
    rc, out, _ = filled("stats", json=True)
    stats = orjson.loads(out)
    assert rc == 0
    assert stats["root"] == str(root) and stats["durability"] == "flush" and stats["locking"] is False
    assert stats["namespaces"]["altitude.patterns"] == {
        "tier": "warm",
        "keys": 4,
        "archived": 0,
        "warm_bytes": stats["namespaces"]["altitude.patterns"]["warm_bytes"],
        "cold_bytes": 0,
    }
    assert stats["namespaces"]["altitude.patterns"]["warm_bytes"] > 0
    assert set(stats["cache"]) == {"entries", "hits", "misses"}
    rc, out, _ = filled("stats")
    lines = out.splitlines()
    assert rc == 0 and lines[0].startswith(f"root: {root}")
    shown = [ln.split()[0] for ln in lines[2:]]
    assert shown == ["altitude.coaching", "altitude.patterns", "focus.gates"]


# -- check ----------------------------------------------------------------------------------------


def test_check_exit_codes(filled: Any, root: Path) -> None:
    assert filled("check") == (0, "store is sound: no findings\n", "")
    rc, out, _ = filled("check", json=True)
    assert (rc, orjson.loads(out)) == (0, [])

    flip_value_byte(root, "altitude.patterns", "risk_id")
    rc, out, _ = filled("check")
    assert rc == 4 and out.startswith("corrupt-record: altitude.patterns: ")
    rc, out, _ = filled("check", json=True)
    (finding,) = orjson.loads(out)
    assert rc == 4
    assert finding["kind"] == "corrupt-record" and finding["namespace"] == "altitude.patterns"
    assert finding["fixed"] is False and Path(finding["path"]).parent == root / "warm" / "altitude.patterns"
    rc, out, err = filled("get", "altitude.patterns", "risk_id")
    assert rc == 3 and "CorruptRecord" in err

    rc, out, _ = filled("check", "--fix", json=True)
    (finding,) = orjson.loads(out)
    assert rc == 0 and finding["fixed"] is True and finding["kind"] == "corrupt-record"
    assert len(list((root / "quarantine").iterdir())) == 1
    assert filled("check") == (0, "store is sound: no findings\n", "")
    rc, out, _ = filled("get", "altitude.patterns", "timeboxing")
    assert rc == 0 and orjson.loads(out)["s"] == 0.9
    assert filled("get", "altitude.patterns", "risk_id")[0] == 1


def test_check_fix_after_archive_damage_exits_0(filled: Any, root: Path) -> None:
    """After `check --fix` has moved a damaged archive frame aside, the store
    is as repaired as it will get: `check --fix` and then `check` exit 0."""
    assert filled("archive", "--now", str(time.time() + 31 * 86400))[0] == 0
    (seg,) = (root / "cold" / "focus.gates").glob("*.seg")
    data = bytearray(seg.read_bytes())
    data[len(data) // 2 + 6] ^= 0xFF
    seg.write_bytes(bytes(data))
    assert filled("check")[0] == 4
    rc, out, _ = filled("check", "--fix")
    assert rc == 0, out
    assert filled("check")[0] == 0


def test_damaged_declarations_exit_3(cli: Any, root: Path) -> None:
    assert cli("put", "altitude.patterns", "k", "1")[0] == 0
    with MemoryManager(root, durability="flush") as mm:
        mm.declare("test.rt")
    (root / "meta" / "namespaces.json").write_bytes(b"{broken")
    rc, out, err = cli("ls")
    assert rc == 3 and out == "" and "namespaces.json" in err


# -- the installed console script ----------------------------------------------------------------


def test_console_script(tmp_path: Path) -> None:
    assert SCRIPT.exists(), SCRIPT
    root = tmp_path / "store"
    env = script_env(tmp_path)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), "--root", str(root), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
        )

    value = {"from": "stdin", "list": [1, 2.5, None], "text": "line1\nline2 \u00e9"}
    p = run("put", "altitude.patterns", "piped", "-", stdin=orjson.dumps(value).decode())
    assert p.returncode == 0, p.stderr
    p = run("--json", "get", "altitude.patterns", "piped")
    assert p.returncode == 0 and orjson.loads(p.stdout)["value"] == value and orjson.loads(p.stdout)["version"] == 1

    p = run("get", "altitude.patterns", "missing")
    assert p.returncode == 1 and p.stdout == "" and "not found" in p.stderr
    p = run("put", "Bad/ns", "k", "1")
    assert p.returncode == 2 and p.stderr.startswith("hrm-memory: error: InvalidNamespace")
    p = run("put", "altitude.patterns", "k", "-", stdin="NaN")
    assert p.returncode == 2 and "not valid JSON" in p.stderr
    p = run("bogus")
    assert p.returncode == 2 and "usage:" in p.stderr
    p = run("check")
    assert p.returncode == 0 and "no findings" in p.stdout
    # Nothing went to the default root from the environment.
    assert not (tmp_path / "env-root").exists() and not (tmp_path / "home").exists()


def test_console_script_default_root_from_env(tmp_path: Path) -> None:
    env = script_env(tmp_path)
    p = subprocess.run(
        [str(SCRIPT), "put", "shared.people", "a", '"b"'], capture_output=True, text=True, env=env, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "env-root" / "warm" / "shared.people").is_dir()
    p = subprocess.run([str(SCRIPT), "get", "shared.people", "a"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and orjson.loads(p.stdout) == "b"


# -- compact, consent, declare / undeclare, --version ---------------------------------------------


def test_version(cli: Any) -> None:
    rc, out, err = cli("--version")
    assert (rc, err) == (0, "")
    assert out == f"hrm-memory {importlib.metadata.version('hrm-memory')}\n"


def test_help_lists_the_new_commands(cli: Any) -> None:
    rc, out, _ = cli("--help")
    assert rc == 0
    for word in ("compact", "consent", "declare", "undeclare", "--version"):
        assert word in out


def test_compact(cli: Any) -> None:
    for i in range(20):
        assert cli("put", "altitude.patterns", "k", f'{{"n": {i}, "pad": "{"x" * 100}"}}')[0] == 0
    rc, out, err = cli("compact")
    assert (rc, err) == (0, "") and out.startswith("reclaimed ") and out.endswith(" bytes\n")
    assert int(out.split()[1]) > 0
    rc, out, _ = cli("compact", "altitude.patterns", json=True)
    assert rc == 0 and orjson.loads(out) == {"namespace": "altitude.patterns", "reclaimed_bytes": 0}
    rc, out, _ = cli("get", "altitude.patterns", "k")
    assert rc == 0 and orjson.loads(out)["n"] == 19
    rc, out, err = cli("compact", "altitude.nothere")
    assert (rc, out) == (2, "") and "UndeclaredNamespace" in err


def test_consent(cli: Any, root: Path) -> None:
    with MemoryManager(root, durability="flush") as mm:
        gated = mm.consent.namespaces("preferences")[0]
    rc, out, _ = cli("consent", "status", json=True)
    assert rc == 0 and orjson.loads(out) == {"conversation": False, "signals": False, "preferences": False}
    rc, out, _ = cli("consent", "status")
    assert rc == 0 and out.splitlines()[0].split() == ["CATEGORY", "GRANTED", "NAMESPACES"] and gated in out

    rc, _, err = cli("put", gated, "k", "1")
    assert rc == 0 and "in memory only" in err
    rc, out, _ = cli("consent", "grant", "preferences", json=True)
    assert rc == 0 and orjson.loads(out) == {"category": "preferences", "granted": True, "persisted": {}}
    rc, _, err = cli("put", gated, "k", "2")
    assert (rc, err) == (0, "")
    assert cli("get", gated, "k")[:2] == (0, "2\n")
    rc, out, _ = cli("consent", "status", json=True)
    assert orjson.loads(out)["preferences"] is True

    rc, out, _ = cli("consent", "revoke", "preferences")
    assert rc == 0 and out.startswith("revoked preferences")
    assert cli("get", gated, "k")[:2] == (0, "2\n")  # revoking alone keeps what is stored
    rc, out, _ = cli("consent", "revoke", "preferences", "--purge", json=True)
    doc = orjson.loads(out)
    assert rc == 0 and doc["category"] == "preferences" and doc["granted"] is False and gated in doc["purged"]
    assert cli("get", gated, "k")[0] == 1

    for bad in (["consent", "grant", "nonsense"], ["consent"], ["consent", "revoke"]):
        rc, out, err = cli(*bad)
        assert (rc, out) == (2, "") and "usage:" in err


def test_declare_and_undeclare(cli: Any) -> None:
    rc, out, err = cli("declare", "test.cli", "--ttl", "3600", "--max-keys", "5", "--description", "from the CLI")
    assert (rc, err) == (0, "") and out == "declared test.cli (tier warm, ttl 3600.0, max keys 5)\n"
    rc, out, _ = cli("declare", "test.cli", "--ttl", "3600", "--max-keys", "5", "--description", "from the CLI",
                     json=True)
    spec = orjson.loads(out)
    assert rc == 0 and spec["name"] == "test.cli" and spec["ttl"] == 3600.0 and spec["max_keys"] == 5
    assert spec["tier"] == "warm" and spec["consent"] is None and spec["description"] == "from the CLI"
    rc, out, err = cli("declare", "test.cli", "--ttl", "7200")
    assert (rc, out) == (2, "") and "NamespaceConflict" in err

    assert cli("put", "test.cli", "k", "1")[0] == 0
    rc, out, _ = cli("ls", json=True)
    assert {r["namespace"]: r for r in orjson.loads(out)}["test.cli"]["keys"] == 1
    rc, out, err = cli("undeclare", "test.cli")
    assert (rc, out) == (2, "") and "NamespaceInUse" in err
    rc, out, _ = cli("undeclare", "test.cli", "--purge", json=True)
    doc = orjson.loads(out)
    assert rc == 0 and doc["namespace"] == "test.cli" and doc["undeclared"] is True and isinstance(doc["purged"], dict)
    rc, _, err = cli("put", "test.cli", "k", "1")
    assert rc == 2 and "UndeclaredNamespace" in err

    rc, out, _ = cli("declare", "test.gated", "--tier", "warm", "--consent", "conversation")
    assert rc == 0 and "consent conversation" in out
    assert cli("undeclare", "test.gated") == (0, "undeclared test.gated\n", "")
    rc, out, err = cli("undeclare", "altitude.patterns")
    assert (rc, out) == (2, "") and "seed namespace" in err
    for bad in (
        ["declare", "test.x", "--ttl", "-1"],
        ["declare", "test.x", "--ttl", "nan"],
        ["declare", "test.x", "--max-keys", "0"],
        ["declare", "test.x", "--tier", "cold"],
        ["declare", "test.x", "--consent", "everything"],
    ):
        rc, out, err = cli(*bad)
        assert (rc, out) == (2, "") and "usage:" in err, bad
    rc, out, err = cli("declare", "Bad/Name")
    assert (rc, out) == (2, "") and "InvalidNamespace" in err
