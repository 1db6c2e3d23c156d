"""``trace tail`` and ``trace show`` read a span file with bounds.

Neither reads a file (``--file /dev/zero``) or a line whole: under a 1 GiB
address-space limit they refuse or skip what is too large instead of
failing with a MemoryError. Each case runs the installed console script in a subprocess
under ``RLIMIT_AS`` = 1 GiB.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("hrm-memory")
LIMIT = 1 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HRM_MEMORY_TRACE_FILE": ""}
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, errors="replace", timeout=timeout,
        preexec_fn=_limited, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def spans(tmp_path: Path) -> tuple[Path, str]:
    """A real span file (two spans of one `put`), and the write's trace id."""
    f = tmp_path / "spans.jsonl"
    p = subprocess.run(
        [str(SCRIPT), "--root", str(tmp_path / "s"), "--trace", "jsonl", "--trace-file", str(f), "put",
         "focus.slow", "k", '{"a": 1}'],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return f, p.stdout.split("trace ")[1].strip(" )\n")


@pytest.mark.parametrize("command", [["trace", "tail"], ["trace", "show", "abcd"], ["trace", "tail", "-f"]])
@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "dir", "fifo"])
def test_a_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, command: list[str], target: str) -> None:
    if target == "dir":
        target = str(tmp_path)
    elif target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    p = run(*command, "--file", target)
    assert p.returncode == 2, (p.returncode, p.stderr[-500:])
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr
    assert "regular file" in p.stderr or "directory" in p.stderr


def test_an_overlong_line_is_skipped_without_being_held(tmp_path: Path, spans: tuple[Path, str]) -> None:
    """A 2 GiB line (sparse: no disk used) before the real spans: tail and
    show skip it in bounded memory and still find the spans after it."""
    src, trace_id = spans
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.truncate(2 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + src.read_bytes() + b'{"half": "a line still being written')
    p = run("trace", "tail", "--file", str(big), "-n", "5", timeout=120)
    assert p.returncode == 0, p.stderr[-1000:]
    assert trace_id[:8] in p.stdout and "upsert_memory write" in p.stdout
    p = run("trace", "show", trace_id, "--file", str(big), timeout=120)
    assert p.returncode == 0, p.stderr[-1000:]
    assert f"trace {trace_id}" in p.stdout


def test_span_file_lines_are_bounded_and_exact(tmp_path: Path) -> None:
    from hrm_memory.tracing import span_file

    f = tmp_path / "x"
    long = b"y" * (span_file.MAX_LINE + 10)
    data = b"a\n" + long + b"\n" + b"b" * 70_000 + b"\n" + long + b"\n" + b"c\nunfinished"
    f.write_bytes(data)
    fd = span_file.open_span_file(f)
    try:
        got = list(span_file.lines(fd))
    finally:
        os.close(fd)
    assert [ln if ln is span_file.OVERLONG else ln[:1] for ln, _ in got] == [
        b"a", span_file.OVERLONG, b"b", span_file.OVERLONG, b"c"
    ]
    assert got[-1][1] == len(data) - len(b"unfinished")
    ends = [pos for _, pos in got]
    assert all(data[e - 1 : e] == b"\n" for e in ends)
