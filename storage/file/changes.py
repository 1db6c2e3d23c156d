"""The file change log: the cross-process side of subscriptions.

Every persisted change appends one line to an append-only log,
``events/<nnnnnn>.log`` (the same checksummed line framing as the warm tier;
no values, only op, namespace, key, version, trace id and origin). A
subscribing process sleeps until the file system says a segment was written
(:mod:`hrm_memory.storage.file.changes_watch`, or polls its size where that cannot
work: see :class:`hrm_memory.core.events.EventBus`), then reads the new lines in
log order, which is commit order per key. Why a log and not the
notifications alone: a log gives every event exactly once and in order,
survives the subscriber's absence (a cursor replays what was missed), and
works where notifications do not; a notification only says "read again".

The log is bounded by count and by age (it is part of the store's
footprint). Segments roll over at ``SEGMENT_BYTES`` (256 KiB, some 3,000
events); the newest ``KEEP_SEGMENTS`` (4) are kept, so the log never holds
more than about 1 MiB, and a segment that has not been appended to for
``MAX_AGE_SECONDS`` (a day) is removed at the next roll or the next first
append of a process, whatever the count. A cursor older than what is kept
raises :class:`CursorExpired` (re-read the state with ``query()`` and take
a new cursor). Appends
hold a shared ``flock`` on ``events/.lock`` and a roll holds it exclusively,
and the current segment number is a memory-mapped counter (``events/.seg``):
so once segment N+1 exists nothing more lands in N, and a reader never leaves
a segment before it is complete, whichever process writes.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
from hrm_memory.core.backend import Notifications
from hrm_memory.core.errors import CursorExpired, InvalidCursor
from hrm_memory.core.records import Event

from ..fsutil import (
    FILE_MODE,
    NOFOLLOW,
    SharedCounters,
    ensure_real_dirs,
    frame,
    make_dirs,
    this_process,
    unframe,
)

log = logging.getLogger("hrm_memory.core.events")

SEGMENT_BYTES = 256 * 1024
KEEP_SEGMENTS = 4
MAX_AGE_SECONDS = 24 * 3600.0

_OP_CODE = {"write": "w", "delete": "d", "archive": "a", "recover": "r"}
_OP_NAME = {v: k for k, v in _OP_CODE.items()}
_NO_TRACE = "0" * 32

Position = tuple[int, int]


def parse_cursor(cursor: str) -> Position:
    seg, sep, off = cursor.partition(":") if isinstance(cursor, str) else ("", "", "")
    if not (sep and seg.isdigit() and off.isdigit()):
        raise InvalidCursor(f"not a signal-log cursor: {cursor!r} (expected 'SEGMENT:OFFSET')")
    return int(seg), int(off)


def _format(pos: Position) -> str:
    return f"{pos[0]}:{pos[1]}"


class FileChangeLog:
    """The signal log of one store root, as one process writes and reads it.
    Implements :class:`hrm_memory.core.backend.ChangeLog`. Thread-safe."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "events"
        # One field names the writer: "<pid>.<random>" (the random part tells
        # two managers of one process apart).
        self._pid = this_process.pid
        self.token = f"{self._pid}.{secrets.token_hex(3)}"
        self._guard = threading.Lock()
        self._fd: int | None = None
        self._seg = 0
        self._lock_fd: int | None = None
        self._counter: SharedCounters | None = None
        self.gaps = 0  # signals that could not be logged (disk full, read-only root)

    # -- writing -------------------------------------------------------------------

    def _segments(self) -> list[int]:
        try:
            return sorted(int(n[:-4]) for n in os.listdir(self.dir) if n.endswith(".log") and n[:-4].isdigit())
        except FileNotFoundError:
            return []

    def _path(self, seg: int) -> Path:
        return self.dir / f"{seg:06d}.log"

    def append(self, op: str, namespace: str, key: str, version: int, trace_id: str) -> None:
        # Compact on purpose: the log is part of the store's footprint. An
        # all-zero trace id (tracing off) is written as "".
        tid = "" if trace_id == _NO_TRACE else trace_id
        if self._pid != this_process.pid:
            # A forked child is another writer: its own name, its own fds.
            self._pid = this_process.pid
            self.token = f"{self._pid}.{secrets.token_hex(3)}"
            self._fd = self._lock_fd = None
            self._counter = None
        body = orjson.dumps([time.time_ns() // 1000, self.token, _OP_CODE[op], namespace, key, version, tid])
        line = frame(body)
        with self._guard:
            try:
                self._append_shared(line)
            except OSError as exc:
                # The change is committed already; failing the write now
                # would report a committed change as failed. Other processes
                # miss this signal (the framing keeps a partial line from
                # harming the next), and the gap is logged.
                self.gaps += 1
                log.warning(
                    "signal log: could not record %s %s/%s (%s); subscribers in other processes miss it",
                    op, namespace, key, exc,
                )

    @contextmanager
    def exclusively(self) -> Iterator[list[Path]]:
        """The kept segments' paths, oldest first, with the log's lock held
        exclusively while the caller edits them in place (as a roll does:
        no append is in flight meanwhile)."""
        lock_fd = self._lock_fd if self._lock_fd is not None else self._open_shared()
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            yield [self._path(seg) for seg in self._segments()]
        finally:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)

    def _append_shared(self, line: bytes) -> None:
        """Append under a shared flock on ``events/.lock``; a roll to the next
        segment takes it exclusively. So no process ever appends to a segment
        once its successor exists, and a reader may treat a segment as final
        as soon as the next one is there."""
        lock_fd = self._lock_fd if self._lock_fd is not None else self._open_shared()
        fcntl.flock(lock_fd, fcntl.LOCK_SH)
        try:
            assert self._counter is not None
            current = self._counter.get(0) or 1
            if current != self._seg or self._fd is None:
                self._switch(current)
            assert self._fd is not None
            os.write(self._fd, line)
            full = os.lseek(self._fd, 0, os.SEEK_CUR) >= SEGMENT_BYTES
        finally:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
        if full:
            self._roll(current)

    def _open_shared(self) -> int:
        ensure_real_dirs(self.dir.parent, "events")
        make_dirs(self.dir, durable=False)
        self._counter = SharedCounters(self.dir / ".seg", 1)
        self._lock_fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT | NOFOLLOW, FILE_MODE)
        # Once per process: drop what has aged out since the last roll (a
        # quiet store rolls rarely). Never waits: a busy log is pruned by
        # its next roll anyway.
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return self._lock_fd
        try:
            self._prune(self._counter.get(0) or 1)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        return self._lock_fd

    def _prune(self, current: int) -> None:
        """Remove segments beyond the newest ``KEEP_SEGMENTS`` and those not
        appended to for ``MAX_AGE_SECONDS``; never ``current``. Called with
        ``events/.lock`` held exclusively (no append in flight)."""
        segs = [s for s in self._segments() if s < current]
        doomed = set(segs[: max(0, len(segs) + 1 - KEEP_SEGMENTS)])
        cutoff = time.time() - MAX_AGE_SECONDS
        for seg in segs:
            try:
                if os.stat(self._path(seg)).st_mtime < cutoff:
                    doomed.add(seg)
            except FileNotFoundError:
                continue
        for seg in sorted(doomed):
            self._path(seg).unlink(missing_ok=True)

    def _switch(self, seg: int) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self._path(seg), os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, FILE_MODE)
        self._seg = seg

    def _roll(self, seg: int) -> None:
        assert self._lock_fd is not None and self._counter is not None
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            if (self._counter.get(0) or 1) != seg:
                return  # another process rolled first
            nxt = seg + 1
            os.close(os.open(self._path(nxt), os.O_WRONLY | os.O_CREAT | NOFOLLOW, FILE_MODE))
            self._counter.set(0, nxt)
            self._switch(nxt)
            self._prune(nxt)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- reading ---------------------------------------------------------------------

    def cursor(self) -> str:
        """The position just after the last logged event, as ``"SEG:OFFSET"``."""
        segs = self._segments()
        if not segs:
            return "1:0"
        try:
            return f"{segs[-1]}:{os.stat(self._path(segs[-1])).st_size}"
        except FileNotFoundError:
            return f"{segs[-1]}:0"

    def oldest(self) -> str:
        segs = self._segments()
        return f"{segs[0]}:0" if segs else "1:0"

    def changed(self, cursor: str) -> bool:
        seg, off = parse_cursor(cursor)
        try:
            size = os.stat(self._path(seg)).st_size
        except FileNotFoundError:
            segs = self._segments()
            if segs and segs[0] > seg and not (seg == segs[0] - 1 and off == 0):
                raise CursorExpired(f"cursor {cursor} is older than the oldest kept signal segment {segs[0]}")
            return bool(segs) and segs[-1] > seg
        return size > off or self._path(seg + 1).exists()

    def notify(self, wake: Callable[[], None]) -> Notifications:
        """Wake-ups from the file system when a segment is written or created
        (:mod:`hrm_memory.storage.file.changes_watch`: one observer per process).
        Creates ``events/`` if it is not there yet, so a subscriber that
        comes before the first write is woken by it."""
        ensure_real_dirs(self.dir.parent, "events")
        make_dirs(self.dir, durable=False)
        from .changes_watch import listen  # watchdog is imported by the first subscriber, not at open

        return listen(self.dir, wake)

    def read(self, cursor: str, upto: str | None = None, *, skip_own: bool = True) -> tuple[list[Event], str]:
        start = parse_cursor(cursor)
        end = parse_cursor(upto) if upto is not None else None
        segs = self._segments()
        seg, off = start
        if segs and seg < segs[0] and not (seg == segs[0] - 1 and off == 0):
            raise CursorExpired(
                f"cursor {seg}:{off} is older than the oldest kept signal segment {segs[0]}; "
                "re-read the state with query() and take a new cursor"
            )
        events: list[Event] = []
        while True:
            if end is not None and seg > end[0]:
                break
            limit = None if end is None or seg < end[0] else end[1]
            off = self._read_segment(seg, off, limit, skip_own, events)
            if limit is not None or not self._path(seg + 1).exists():
                break
            # The next segment exists, so nothing more is appended to this one
            # (rolls wait for every appender): take what landed since, move on.
            off = self._read_segment(seg, off, None, skip_own, events)
            seg, off = seg + 1, 0
        return events, _format((seg, off))

    def _read_segment(self, seg: int, off: int, limit: int | None, skip_own: bool, out: list[Event]) -> int:
        """Append the complete lines of segment ``seg`` from ``off`` (to
        ``limit``) to ``out``; return the offset after the last one."""
        try:
            with os.fdopen(os.open(self._path(seg), os.O_RDONLY | NOFOLLOW), "rb") as f:
                f.seek(off)
                data = f.read() if limit is None else f.read(max(0, limit - off))
        except FileNotFoundError:
            return off
        consumed = data.rfind(b"\n") + 1
        for line in data[:consumed].split(b"\n"):
            ev = self._parse(line, skip_own)
            if ev is not None:
                out.append(ev)
        return off + consumed

    def _parse(self, line: bytes, skip_own: bool) -> Event | None:
        body = unframe(line)
        if body is None:
            return None
        try:
            ts, token, op, ns, key, version, trace_id = orjson.loads(body)
            op = _OP_NAME[op]
        except (ValueError, KeyError, orjson.JSONDecodeError):
            return None
        if skip_own and token == self.token:
            return None
        origin = "local" if token == self.token else "pid:" + token.split(".", 1)[0]
        return Event(op, ns, key, version, trace_id or _NO_TRACE, origin)

    def close(self) -> None:
        with self._guard:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            if self._counter is not None:
                self._counter.close()
                self._counter = None


__all__ = ["KEEP_SEGMENTS", "MAX_AGE_SECONDS", "SEGMENT_BYTES", "FileChangeLog", "parse_cursor"]
