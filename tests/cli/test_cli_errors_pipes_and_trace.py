"""The ``hrm-memory`` command line as a process: bad input, a closed stdout, trace files.

- Hostile input (very deep JSON, huge integers, non-UTF-8 stdin or legacy
  files, a garbage span file) is a clear error, never a traceback.
- A closed stdout (``... | head -1``) ends the command quietly: exit 141, as a
  process ended by SIGPIPE, with nothing on stderr.
- ``trace`` reads ``--trace-file``, accepts the trace-id prefixes ``trace tail``
  prints, and never creates a store; ``--trace console`` writes to stderr, so
  ``--json`` output stays JSON; ``--trace otlp`` without the extra says how to
  install it (exit 2).

Process-level behaviour (tracebacks, broken pipes, where spans are printed)
runs the installed console script; the rest runs ``main()`` in-process.
HOME and HRM_MEMORY_ROOT point into the test's tmp dir, so nothing touches the
real home directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from hrm_memory import MemoryManager
from hrm_memory.cli.main import main

SCRIPT = Path(sys.executable).parent / "hrm-memory"
DEEP = "[" * 3000 + "]" * 3000
#: The exit status of a command whose stdout reader went away (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 141


@pytest.fixture(autouse=True)
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME and the default root inside tmp_path, for this process and its children."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HRM_MEMORY_ROOT", str(tmp_path / "env-root"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("HRM_MEMORY_TRACE_FILE", raising=False)


def script(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, output decoded leniently."""
    p = subprocess.run(
        [str(SCRIPT), *args], input=stdin if stdin is not None else b"", capture_output=True, timeout=120,
        env=dict(os.environ),
    )
    return subprocess.CompletedProcess(
        p.args, p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    )


def no_traceback(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr[-2000:]


def span(trace_id: str, span_id: str, name: str = "memory.write", parent: str | None = None, start: int = 1) -> bytes:
    return orjson.dumps({
        "name": name, "trace_id": trace_id, "span_id": span_id, "parent_span_id": parent,
        "start_ns": start, "end_ns": start + 5000, "duration_us": 5.0, "status": "UNSET",
        "attributes": {"db.collection.name": "altitude.patterns", "hrm.memory.key": "k"}, "service": "hrm-memory",
    }) + b"\n"  # fmt: skip


# -- hostile input: a clear error and exit 2, no traceback --------------------------------------


@pytest.mark.parametrize("source", ["argument", "stdin"])
def test_put_deeply_nested_value_is_bad_input(root: Path, source: str) -> None:
    """3,000 nested lists are bad input (exit 2), not a RecursionError out of json.loads."""
    args = ["--root", str(root), "put", "altitude.patterns", "k"]
    p = script(*args, DEEP) if source == "argument" else script(*args, "-", stdin=DEEP.encode())
    no_traceback(p)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("hrm-memory: error: ") and "nested too deeply" in p.stderr
    assert p.stdout == ""


def test_other_hostile_values_are_bad_input(root: Path) -> None:
    """An integer too long for int() (ValueError), non-UTF-8 bytes on stdin
    (UnicodeDecodeError) and a deep --where operand (RecursionError)."""
    put = ["--root", str(root), "put", "altitude.patterns", "k"]
    for p in (
        script(*put, "1" * 5000),
        script(*put, "-", stdin=b'{"a": "\xff\xfe"}'),
        script("--root", str(root), "query", "altitude.*", "--where", "s=" + DEEP),
    ):
        no_traceback(p)
        assert p.returncode == 2 and p.stderr.startswith("hrm-memory: error: "), p.stderr
    # Deep, but within what json.loads can read: the store refuses it (InvalidValue).
    p = script(*put, "[" * 900 + "]" * 900)
    no_traceback(p)
    assert p.returncode == 2 and "InvalidValue" in p.stderr


def test_tokens_legacy_reports_a_file_it_cannot_read(tmp_path: Path) -> None:
    """Decision: a legacy file that is not UTF-8 (or a .json file that is not
    JSON) is reported by name and the command exits 2; --help says so."""
    legacy = tmp_path / "legacy"
    (legacy / "the_assist" / "feedback").mkdir(parents=True)
    (legacy / "the_assist" / "feedback" / "log.json").write_bytes(b'{"a": 1}')  # a legacy file: the folder is accepted
    (legacy / "the_assist" / "bad.json").write_bytes(b'{"a": "\xff\xfe"}')
    p = script("--root", str(tmp_path / "store"), "tokens", "--legacy", str(legacy))
    no_traceback(p)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr.startswith("hrm-memory: error: the_assist/bad.json: not UTF-8"), p.stderr

    (legacy / "the_assist" / "bad.json").write_bytes(b"{not json")
    p = script("--json", "tokens", "--legacy", str(legacy))
    no_traceback(p)
    assert p.returncode == 2 and "the_assist/bad.json: not valid JSON" in p.stderr, p.stderr

    p = script("tokens", "--help")
    assert p.returncode == 0 and "UTF-8" in p.stdout and "exits 2" in p.stdout
    assert not (tmp_path / "home").exists() and not (tmp_path / "env-root").exists()


def test_trace_commands_survive_a_garbage_span_file(tmp_path: Path) -> None:
    """Lines that are not spans are skipped; parent cycles and a chain 3,000
    spans deep are shown without recursing; a directory is a clear error."""
    deep = "d" * 32
    chain = b"".join(span(deep, f"c{i}", parent=f"c{i - 1}" if i else None, start=i) for i in range(3000))
    spans_file = tmp_path / "spans.jsonl"
    spans_file.write_bytes(
        b"\xff\xfe\x00 not json at all\n1\n\"text\"\n[]\n{}\nnull\n"
        b'{"name": null, "trace_id": 5, "span_id": 1}\n'
        b'{"name": "odd", "trace_id": "abc", "span_id": "s1", "parent_span_id": "s1", "start_ns": "x",'
        b' "duration_us": "slow", "attributes": [1], "status": 7}\n'
        + span("abc", "s2", parent="s3")
        + span("abc", "s3", parent="s2")
        + chain
        + span("e" * 32, "ok", name="memory.get")
        + b'{"trace_id": "ab'
    )
    base = ["--root", str(tmp_path / "store")]
    spans_file_arg = ["--file", str(spans_file)]
    p = script(*base, "trace", "tail", "-n", "5000", *spans_file_arg)
    no_traceback(p)
    assert p.returncode == 0 and "memory.get" in p.stdout and "odd" in p.stdout
    p = script(*base, "trace", "show", "abc", *spans_file_arg)
    no_traceback(p)
    assert p.returncode == 0 and p.stdout.count("\n") == 4  # the header and its 3 spans, each once
    p = script(*base, "trace", "show", "d" * 32, *spans_file_arg)
    no_traceback(p)
    assert p.returncode == 0 and p.stdout.count("memory.write") == 3000
    p = script(*base, "--json", "trace", "show", "abc", *spans_file_arg)
    no_traceback(p)
    assert p.returncode == 0 and len(orjson.loads(p.stdout)) == 3
    p = script(*base, "trace", "show", "0123", *spans_file_arg)
    no_traceback(p)
    assert p.returncode == 1 and "not found" in p.stderr

    p = script("trace", "tail", "--file", str(tmp_path))
    no_traceback(p)
    assert p.returncode in (2, 3) and p.stderr.startswith("hrm-memory: error: "), p.stderr
    assert not (tmp_path / "store").exists()


# -- a closed stdout ends the command quietly ------------------------------------------------------


@pytest.fixture
def filled_root(root: Path) -> Path:
    with MemoryManager(root, durability="flush") as mm:
        # Well over a pipe's buffer (64 KiB) in either form, so the writer is still writing when the reader goes.
        for i in range(1500):
            mm.write("altitude.patterns", f"key-{i:04d}", {"s": 0.5, "text": "x" * 200})
    return root


def buffering_env(buffering: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    if buffering == "unbuffered":
        env["PYTHONUNBUFFERED"] = "1"
    return env


CLOSED_STDOUT_CASES = [
    pytest.param(args, buffering, id=f"{' '.join(args)}-{buffering}")
    for args in (
        ["query", "altitude.*"],
        ["--json", "tokens"],
        ["get", "altitude.patterns", "key-0001"],
        ["ls"],
        ["--help"],
        ["--version"],
    )
    for buffering in ("buffered", "unbuffered")
    # argparse swallows the error of an unbuffered --help itself (exit 0, quiet already).
    if not (args == ["--help"] and buffering == "unbuffered")
]


@pytest.mark.parametrize(("args", "buffering"), CLOSED_STDOUT_CASES)
def test_closed_stdout_ends_quietly(filled_root: Path, args: list[str], buffering: str) -> None:
    """The reader is gone before the first write: exit 141 and nothing on
    stderr (no 'Broken pipe' and exit 3, no traceback, no 'Exception ignored'
    and exit 120 from a small output flushed at interpreter exit)."""
    p = subprocess.Popen(
        [str(SCRIPT), "--root", str(filled_root), *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=buffering_env(buffering),
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    rc = p.wait(timeout=120)
    assert (rc, err) == (EXIT_BROKEN_PIPE, "")


@pytest.mark.parametrize("buffering", ["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [["query", "altitude.*"], ["--json", "query", "altitude.*"]], ids=["table", "json"])
def test_query_piped_into_head_1(filled_root: Path, args: list[str], buffering: str) -> None:
    """`hrm-memory query ... | head -1`: the reader takes a line and goes."""
    p = subprocess.Popen(
        [str(SCRIPT), "--root", str(filled_root), *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=buffering_env(buffering),
    )
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    rc = p.wait(timeout=120)
    assert (rc, err) == (EXIT_BROKEN_PIPE, "")


# -- tracing -------------------------------------------------------------------------------------


def test_trace_tail_and_show_read_the_trace_file_option(cli: Any, tmp_path: Path) -> None:
    spans_file = tmp_path / "elsewhere" / "spans.jsonl"
    spans_file.parent.mkdir()
    spans_file.write_bytes(span("f" * 32, "a1"))
    rc, out, _ = cli("--trace-file", str(spans_file), "trace", "tail")
    assert rc == 0 and out.startswith("ffffffff memory.write")
    rc, out, _ = cli("--trace-file", str(spans_file), "trace", "show", "f" * 32)
    assert rc == 0 and "memory.write" in out
    # trace's own --file is the more specific and wins.
    other = tmp_path / "other.jsonl"
    other.write_bytes(span("1" * 32, "b1", name="memory.get"))
    rc, out, _ = cli("--trace-file", str(spans_file), "trace", "tail", "--file", str(other))
    assert rc == 0 and out.startswith("11111111 memory.get")


def test_trace_show_accepts_the_prefix_tail_prints(cli: Any, root: Path) -> None:
    for key in ("a", "b"):
        assert cli("--trace", "jsonl", "put", "altitude.patterns", key, "1")[0] == 0
    rc, out, _ = cli("trace", "tail", "-n", "1")
    prefix = out.split()[0]
    assert rc == 0 and len(prefix) == 8
    rc, out, err = cli("trace", "show", prefix)
    assert rc == 0, err
    header, *tree = out.splitlines()
    assert header.startswith(f"trace {prefix}") and len(header) == len("trace ") + 32
    assert any("search_memory get" in line for line in tree)
    rc, out, _ = cli("trace", "show", prefix.upper(), json=True)
    assert rc == 0 and {s["trace_id"][:8] for s in orjson.loads(out)} == {prefix}


def test_trace_show_ambiguous_unknown_and_malformed_prefixes(cli: Any, tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    spans_file.write_bytes(
        span("deadbeef" + "0" * 24, "a") + span("deadbeef" + "1" * 24, "b") + span("cafef00d" + "2" * 24, "c")
    )
    base = ("--trace-file", str(spans_file), "trace", "show")
    rc, out, _ = cli(*base, "cafef00d")
    assert rc == 0 and out.startswith("trace cafef00d" + "2" * 24)
    rc, out, _ = cli(*base, "deadbeef1")
    assert rc == 0 and out.startswith("trace deadbeef" + "1" * 24)
    rc, out, err = cli(*base, "deadbeef")
    assert (rc, out) == (2, "") and "ambiguous" in err and "2 traces" in err
    rc, out, err = cli(*base, "abcdef01")
    assert (rc, out) == (1, "") and "not found" in err
    for bad in ("xyz", "", "0" * 33):
        rc, out, err = cli(*base, bad)
        assert (rc, out) == (2, "") and err.startswith("hrm-memory: error: ") and "hexadecimal" in err


def test_console_spans_do_not_mix_into_json_stdout(root: Path) -> None:
    """Decision: console spans always go to stderr; stdout is the command's output."""
    p = script("--root", str(root), "--json", "--trace", "console", "put", "altitude.patterns", "k", "1")
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert orjson.loads(p.stdout)["version"] == 1
    assert '"db.operation.name": "write"' in p.stderr
    p = script("--root", str(root), "--trace", "console", "get", "altitude.patterns", "k")
    assert p.returncode == 0 and p.stdout == "1\n" and '"db.operation.name": "get"' in p.stderr


def test_trace_commands_create_no_store_directory(cli: Any, root: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["trace", "tail"],
        ["trace", "show", "abcd"],
        ["--trace", "jsonl", "trace", "tail"],
        ["--trace", "jsonl", "trace", "show", "abcd"],
    ):
        assert main(argv) in (0, 1), argv
        assert cli(*argv)[0] in (0, 1), argv
    capsys.readouterr()
    assert not (tmp_path / "env-root").exists()
    assert not (tmp_path / "home").exists()
    assert not root.exists()


def test_trace_otlp_without_the_extra_says_how_to_install(cli: Any, root: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Whether or not the extra is installed here, make its import fail.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    rc, out, err = cli("--trace", "otlp", "ls")
    assert (rc, out) == (2, "")
    assert err.startswith("hrm-memory: error: ") and "pip install 'hrm-memory[otlp]'" in err
    assert "Unsupported" not in err and "Traceback" not in err
