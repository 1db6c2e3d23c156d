"""Reading a JSONL span file with bounds: ``trace tail`` and ``trace show`` never read without limit.

A span file is a regular file of lines; ``open_span_file`` refuses anything
else (``/dev/zero``, a FIFO, a directory: ``BadInput``, exit 2), and
``lines`` reads it in chunks, handing out complete lines of at most
``MAX_LINE`` bytes: a longer line (no span is near that size) is skipped as
it streams by, never held whole. Memory is then bounded by the spans kept,
not by the file's bytes (``trace tail -n N`` keeps N).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from hrm_memory.core.errors import BadInput

MAX_LINE = 1 << 20  # bytes; a span line is ~1 KiB
CHUNK = 1 << 16
#: what ``lines`` yields for a skipped overlong line (counted as "not a span")
OVERLONG = b"\x00overlong"


def open_span_file(path: Path) -> int:
    """A read-only fd of ``path``, a regular file (symlinks followed: a span
    file may be one), else ``BadInput``. FileNotFoundError passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise BadInput(f"{path} is a directory, not a span file") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BadInput(f"{path} is not a regular file (a span file is one): refused, not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def lines(fd: int, start: int = 0, end: int | None = None) -> Iterator[tuple[bytes, int]]:
    """``(line, offset after it)`` for the complete lines (with their
    newline) of ``fd`` from ``start`` up to ``end`` (default: its size now),
    each at most ``MAX_LINE`` bytes; ``OVERLONG`` stands for a longer one. A
    last line without its newline is left out (being written): a follower
    resumes at the last offset given. Reads ``CHUNK`` bytes at a time."""
    if end is None:
        end = os.fstat(fd).st_size
    pos = start  # of the end of what was read
    buf = b""  # read but not yet handed out (or the unfinished tail of an overlong line)
    skipping = False
    while pos < end:
        chunk = os.pread(fd, min(CHUNK, end - pos), pos)
        if not chunk:
            break
        pos += len(chunk)
        if skipping:  # inside an overlong line: drop bytes up to its newline, keep nothing
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            skipping = False
            yield OVERLONG, pos - len(chunk) + nl + 1
            chunk = chunk[nl + 1 :]
        buf += chunk
        at = pos - len(buf)  # file offset of buf[0]
        cut = 0
        while True:
            nl = buf.find(b"\n", cut)
            if nl < 0:
                break
            line = buf[cut : nl + 1]
            cut = nl + 1
            if len(line) > MAX_LINE:
                yield OVERLONG, at + cut
            else:
                yield line, at + cut
        buf = buf[cut:]
        if len(buf) > MAX_LINE:
            buf = b""
            skipping = True


__all__ = ["CHUNK", "MAX_LINE", "OVERLONG", "lines", "open_span_file"]
