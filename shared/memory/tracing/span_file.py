"""JSONL span files: reading one with bounds, appending to one, and scrubbing keys out of them.

**Reading.** ``trace tail`` and ``trace show`` never read without limit.

A span file is a regular file of lines; ``open_span_file`` refuses anything
else (``/dev/zero``, a FIFO, a directory: ``BadInput``, exit 2), and
``lines`` reads it in chunks, handing out complete lines of at most
``MAX_LINE`` bytes: a longer line (no span is near that size) is skipped as
it streams by, never held whole. Memory is then bounded by the spans kept,
not by the file's bytes (``trace tail -n N`` keeps N).

**Appending and scrubbing.** A writer (``append``) and a scrubber
(``scrub_span_files``) take the same exclusive ``flock`` on the file they
work on. The scrubber writes the file again without the spans that name an
erased key, in a new file (mode 0600) that replaces the old one atomically;
a writer that held (or waited for) the lock of the replaced file sees, once
it has the lock, that the path now names another file, opens that one and
appends there: no span is appended to a replaced file, none is lost, and a
reader sees the old file or the new, whole. A writer that does not take the
lock (another program) can lose what it appends while a scrub runs.

**Which files.** The span files of a store's root are every regular file
under ``ROOT/traces/`` (where ``--trace jsonl`` writes by default), the file
named by ``HRM_MEMORY_TRACE_FILE`` when it is under the root, and the file of
every JSONL exporter of this process that writes under the root.
"""

from __future__ import annotations

import fcntl
import fnmatch
import os
import stat
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

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


FILE_MODE = 0o600
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

#: The paths this process's JSONL exporters write to (see ``register``).
_live: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def register(writer: Any) -> None:
    """Count ``writer.path`` among the span files of the root it is under,
    while ``writer`` lives (the JSONL exporter registers itself)."""
    _live[id(writer)] = writer


def open_for_append(path: Path) -> int:
    """An append-only fd of ``path`` (created 0600; a symlink is refused)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC, FILE_MODE)


def append(fd: int, path: Path, data: bytes) -> int:
    """Append ``data`` to the span file at ``path`` under its lock; return the
    fd to use next time (a new one if a scrub replaced the file: the old is
    closed). See the module's doc."""
    while True:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            mine = os.fstat(fd)
            if now is None or (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
                replaced = True
            else:
                replaced = False
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        if not replaced:
            return fd
        new = open_for_append(path)  # raises with the old fd still the caller's
        os.close(fd)
        fd = new


def span_files(root: Path) -> list[Path]:
    """The span files of the store at ``root`` (see the module's doc), existing now."""
    root = Path(root).absolute()
    found: dict[Path, None] = {}
    traces = root / "traces"
    if traces.is_dir() and not traces.is_symlink():
        for dirpath, dirnames, filenames in os.walk(traces, followlinks=False):
            for name in filenames:
                p = Path(dirpath) / name
                if name.startswith(".") and name.endswith(".tmp"):
                    continue  # a scrub's file being written
                if stat.S_ISREG(os.lstat(p).st_mode):
                    found[p] = None
    named = [os.environ.get("HRM_MEMORY_TRACE_FILE")] + [getattr(w, "path", None) for w in list(_live.values())]
    for path in named:
        if not path:
            continue
        p = Path(path).absolute()
        if p.is_relative_to(root) and p.is_file() and not p.is_symlink():
            found[p] = None
    return list(found)


def _names(span: Any, namespace: str, key: str | None) -> bool:
    """True if the span ``span`` (a parsed line) names ``key`` of ``namespace``
    (any key of it, ``key`` None): a key attribute equal to it, on a span of
    that namespace or of a pattern that matches it."""
    if not isinstance(span, dict):
        return False
    attrs = span.get("attributes")
    if not isinstance(attrs, dict):
        return False
    store = attrs.get("gen_ai.memory.store.id", attrs.get("db.collection.name"))
    if store != namespace and not (isinstance(store, str) and fnmatch.fnmatchcase(namespace, store)):
        return False
    for name in ("hrm.memory.key", "gen_ai.memory.record.id"):
        value = attrs.get(name)
        if value is not None and (key is None or value == key or (isinstance(value, str) and value.endswith("...")
                                                                  and key.startswith(value[:-3]))):  # fmt: skip
            return True
    return False


def _scrub_one(path: Path, namespace: str, key: str | None) -> int:
    try:
        fd = os.open(path, os.O_RDWR | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        fcntl.flock(fd, fcntl.LOCK_EX)  # writers wait (see append)
        now = os.stat(path, follow_symlinks=False)
        mine = os.fstat(fd)
        if (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
            return _scrub_one(path, namespace, key)  # replaced meanwhile: scrub the new one
        kept: list[bytes] = []
        dropped = 0
        needle = key.encode() if key is not None else None
        for line, _ in lines(fd, 0, mine.st_size):
            if line is OVERLONG:
                dropped += 1  # not read whole: it may name the key, and no span is that long
                continue
            if needle is None or needle in line or b"\\" in line:
                try:
                    span = orjson.loads(line)
                except orjson.JSONDecodeError:
                    span = None
                if _names(span, namespace, key) or (span is None and needle is not None and needle in line):
                    dropped += 1
                    continue
            kept.append(line)
        tail = os.pread(fd, MAX_LINE + 1, _end_of_lines(fd, mine.st_size))
        if tail and needle is not None and needle in tail:
            dropped += 1
            tail = b""
        if not dropped:
            return 0
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC, FILE_MODE)
        try:
            data = b"".join(kept) + tail
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
            os.fsync(out)
        except BaseException:
            os.close(out)
            os.unlink(tmp)
            raise
        os.close(out)
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return dropped
    finally:
        os.close(fd)  # releases the lock: a waiting writer finds the new file


def _end_of_lines(fd: int, size: int) -> int:
    """The offset after the last newline of the first ``size`` bytes of ``fd``."""
    pos = size
    while pos > 0:
        start = max(0, pos - CHUNK)
        chunk = os.pread(fd, pos - start, start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0


def scrub_span_files(root: Path, namespace: str, key: str | None = None) -> int:
    """Write every span file of the store at ``root`` again without the
    spans that name ``key`` of ``namespace`` (every span of ``namespace``
    that names a key, when ``key`` is None: a purge); return how many spans
    were removed. A file with none is left as it is. Spans still pending in
    this or another process are not in the files yet: flush them first
    (:meth:`hrm_memory.tracing.spans.Tracing.forgotten` does, for this process)."""
    return sum(_scrub_one(p, namespace, key) for p in span_files(Path(root)))


__all__ = [
    "CHUNK",
    "FILE_MODE",
    "MAX_LINE",
    "OVERLONG",
    "append",
    "lines",
    "open_for_append",
    "open_span_file",
    "register",
    "scrub_span_files",
    "span_files",
]
