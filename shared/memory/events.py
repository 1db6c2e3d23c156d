"""Subscriptions: change events within a process and across processes.

In-process, a committed change is queued while the namespace lock is still
held (so the queue is in commit order) and delivered after the lock is
released, on the writing thread, by whichever thread is dispatching at the
time. Callbacks therefore run outside every store lock, in commit order per
key; one that raises is logged and traced and stops neither the write nor
the other callbacks.

Across processes, every persisted change also appends one line to an
append-only signal log, ``events/<nnnnnn>.log`` (the same checksummed line
framing as the warm tier; no values, only op, namespace, key, version, trace
id and origin). A process with cross-process subscriptions runs one thread
that polls the log's size every ``poll_interval`` seconds (5 ms by default)
and delivers new lines in log order, which is commit order per key. Why a log
and not file-system notifications: a log gives every event exactly once and
in order, survives the subscriber's absence (a cursor replays what was
missed), and works where inotify does not (several NFS clients); polling one
``stat`` every 5 ms costs well under 1% of a core.

Segments roll over at ``SEGMENT_BYTES``; the newest ``KEEP_SEGMENTS`` are
kept. A cursor older than that raises :class:`CursorExpired`. Appends hold a
shared ``flock`` on ``events/.lock`` and a roll holds it exclusively, and the
current segment number is a memory-mapped counter (``events/.seg``): so once
segment N+1 exists nothing more lands in N, and a reader never leaves a
segment before it is complete, whichever process writes.
"""

from __future__ import annotations

import fcntl
import fnmatch
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from .errors import MemoryStoreError
from .fsutil import FILE_MODE, NOFOLLOW, SharedCounters, ensure_real_dirs, frame, make_dirs, unframe
from .records import Event

log = logging.getLogger("hrm_memory.events")

SEGMENT_BYTES = 8 * 1024 * 1024
KEEP_SEGMENTS = 8

Callback = Callable[[Event], Any]
_OP_CODE = {"write": "w", "delete": "d", "archive": "a"}
_OP_NAME = {v: k for k, v in _OP_CODE.items()}
_NO_TRACE = "0" * 32


class CursorExpired(MemoryStoreError, LookupError):
    """The cursor points at signal-log segments that were already removed."""


class InvalidCursor(MemoryStoreError, ValueError):
    """The cursor is not one this store handed out."""


class Subscription:
    """A live subscription; ``cancel()`` ends it (also as a context manager)."""

    def __init__(self, bus: EventBus, namespace: str, key: str, callback: Callback, remote: bool) -> None:
        self.bus = bus
        self.namespace = namespace
        self.key = key
        self.callback = callback
        self.remote = remote
        self.active = True
        # While a replay (subscribe(since=...)) is being delivered, live
        # remote events queue here instead of being called at once.
        self.backlog: list[Event] | None = None
        self.backlog_lock = threading.Lock()

    def deliver_remote(self, event: Event, call: Callable[[Subscription, Event], None]) -> None:
        with self.backlog_lock:
            if self.backlog is not None:
                self.backlog.append(event)
                return
        call(self, event)

    def matches(self, event: Event) -> bool:
        return fnmatch.fnmatchcase(event.namespace, self.namespace) and (
            self.key == "*" or fnmatch.fnmatchcase(event.key, self.key)
        )

    def cancel(self) -> None:
        if self.active:
            self.active = False
            self.bus._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return f"Subscription({self.namespace!r}, key={self.key!r}, remote={self.remote}, active={self.active})"


def _parse_cursor(cursor: str) -> tuple[int, int]:
    seg, sep, off = cursor.partition(":") if isinstance(cursor, str) else ("", "", "")
    if not (sep and seg.isdigit() and off.isdigit()):
        raise InvalidCursor(f"not a signal-log cursor: {cursor!r} (expected 'SEGMENT:OFFSET')")
    return int(seg), int(off)


class EventBus:
    """Local dispatch plus the cross-process signal log of one manager."""

    def __init__(
        self,
        root: Path,
        *,
        report_error: Callable[[Subscription, Event, BaseException], None],
        poll_interval: float = 0.005,
        log_events: bool = True,
    ) -> None:
        self.dir = root / "events"
        # One field names the writer: "<pid>.<random>" (the random part tells
        # two managers of one process apart).
        self._pid = os.getpid()
        self.token = f"{self._pid}.{secrets.token_hex(3)}"
        self.poll_interval = poll_interval
        self.log_events = log_events
        self._report_error = report_error
        self._subs: list[Subscription] = []
        self._remote: list[Subscription] = []
        self._queue: deque[tuple[Event, list[Subscription]]] = deque()
        self._dispatching = threading.Lock()
        self._dispatch_owner: int | None = None
        self._guard = threading.Lock()
        self._fd: int | None = None
        self._seg = 0
        self._lock_fd: int | None = None
        self._counter: SharedCounters | None = None
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._pos: tuple[int, int] | None = None
        self._read_lock = threading.Lock()
        self.gaps = 0  # signals that could not be logged (disk full, read-only root)

    # -- subscribing ---------------------------------------------------------------

    def subscribe(
        self, namespace: str, callback: Callback, key: str = "*", remote: bool = True, since: str | None = None
    ) -> Subscription:
        sub = Subscription(self, namespace, key, callback, remote)
        replay: list[Event] = []
        with self._guard:
            self._subs = [*self._subs, sub]
            if remote:
                with self._read_lock:
                    if self._pos is None:
                        self._pos = _parse_cursor(self.cursor())
                    if since is not None:
                        # What was missed, up to where the watcher is; live
                        # events after that wait in the backlog until the
                        # replay is delivered, so nothing is skipped, doubled
                        # or reordered at the seam.
                        replay, _ = self._read(_parse_cursor(since), upto=self._pos)
                        sub.backlog = []
                    self._remote = [*self._remote, sub]
                self._ensure_watcher()
        if since is not None:
            # Callbacks run outside every lock (one may write to the store).
            for ev in replay:
                if sub.matches(ev):
                    self._call(sub, ev)
            while True:
                with sub.backlog_lock:
                    pending, sub.backlog = sub.backlog or [], ([] if sub.backlog else None)
                    if not pending:
                        sub.backlog = None
                        break
                for ev in pending:
                    self._call(sub, ev)
        return sub

    def _remove(self, sub: Subscription) -> None:
        with self._guard:
            self._subs = [s for s in self._subs if s is not sub]
            self._remote = [s for s in self._remote if s is not sub]
            stop = not self._remote and self._watcher is not None
        if stop:
            self._stop_watcher()

    # -- publishing ----------------------------------------------------------------

    def record(self, op: str, namespace: str, key: str, version: int, trace_id: str, persisted: bool) -> None:
        """Called with the namespace lock held, right after the commit: queue
        the local event and append the signal line (commit order)."""
        if persisted and self.log_events:
            self._append(op, namespace, key, version, trace_id)
        subs = self._subs
        if subs:
            event = Event(op, namespace, key, version, trace_id, "local")
            matched = [s for s in subs if s.matches(event)]
            if matched:
                self._queue.append((event, matched))

    def dispatch(self) -> None:
        """Deliver queued events; called after the namespace lock is released.

        One thread at a time delivers, in queue order; a callback that writes
        to the store only queues (the outer loop delivers it next)."""
        me = threading.get_ident()
        while self._queue:
            if self._dispatch_owner == me or not self._dispatching.acquire(blocking=False):
                return
            self._dispatch_owner = me
            try:
                while self._queue:
                    event, subs = self._queue.popleft()
                    for sub in subs:
                        if sub.active:
                            self._call(sub, event)
            finally:
                self._dispatch_owner = None
                self._dispatching.release()

    def _call(self, sub: Subscription, event: Event) -> None:
        try:
            sub.callback(event)
        except Exception as exc:  # noqa: BLE001 - a subscriber's failure is its own
            log.exception("subscriber %r failed on %s %s/%s", sub, event.op, event.namespace, event.key)
            self._report_error(sub, event, exc)

    # -- the signal log ----------------------------------------------------------

    def _segments(self) -> list[int]:
        try:
            return sorted(int(n[:-4]) for n in os.listdir(self.dir) if n.endswith(".log") and n[:-4].isdigit())
        except FileNotFoundError:
            return []

    def _path(self, seg: int) -> Path:
        return self.dir / f"{seg:06d}.log"

    def _append(self, op: str, namespace: str, key: str, version: int, trace_id: str) -> None:
        # Compact on purpose: the log is part of the store's footprint. An
        # all-zero trace id (tracing off) is written as "".
        tid = "" if trace_id == _NO_TRACE else trace_id
        if self._pid != os.getpid():
            # A forked child is another writer: its own name, its own fds.
            self._pid = os.getpid()
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
        return self._lock_fd

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
            for old in self._segments()[:-KEEP_SEGMENTS]:
                self._path(old).unlink(missing_ok=True)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def cursor(self) -> str:
        """The position just after the last logged event, as ``"SEG:OFFSET"``."""
        segs = self._segments()
        if not segs:
            return "1:0"
        try:
            return f"{segs[-1]}:{os.stat(self._path(segs[-1])).st_size}"
        except FileNotFoundError:
            return f"{segs[-1]}:0"

    def since(self, cursor: str, namespace: str = "*", key: str = "*") -> tuple[list[Event], str]:
        """Events logged after ``cursor`` (every origin, this one included)
        matching the globs, and the cursor to resume from."""
        events, end = self._read(_parse_cursor(cursor), upto=None, skip_own=False)
        probe = Subscription(self, namespace, key, lambda e: None, True)
        return [e for e in events if probe.matches(e)], f"{end[0]}:{end[1]}"

    def _read(
        self, start: tuple[int, int], upto: tuple[int, int] | None, skip_own: bool = True
    ) -> tuple[list[Event], tuple[int, int]]:
        segs = self._segments()
        seg, off = start
        if segs and seg < segs[0] and not (seg == segs[0] - 1 and off == 0):
            raise CursorExpired(
                f"cursor {seg}:{off} is older than the oldest kept signal segment {segs[0]}; "
                "re-read the state with query() and take a new cursor"
            )
        events: list[Event] = []
        while True:
            if upto is not None and seg > upto[0]:
                break
            limit = None if upto is None or seg < upto[0] else upto[1]
            off = self._read_segment(seg, off, limit, skip_own, events)
            if limit is not None or not self._path(seg + 1).exists():
                break
            # The next segment exists, so nothing more is appended to this one
            # (rolls wait for every appender): take what landed since, move on.
            off = self._read_segment(seg, off, None, skip_own, events)
            seg, off = seg + 1, 0
        return events, (seg, off)

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

    # -- the watcher thread ---------------------------------------------------------

    def _ensure_watcher(self) -> None:
        if self._watcher is None:
            self._stop.clear()
            self._watcher = threading.Thread(target=self._watch, name="hrm-memory-events", daemon=True)
            self._watcher.start()

    def _stop_watcher(self) -> None:
        thread = self._watcher
        if thread is not None:
            self._stop.set()
            if thread is not threading.current_thread():
                thread.join(timeout=5)
            self._watcher = None

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - a dead watcher would lose every later event
                log.exception("signal log watcher: poll failed; retrying")

    def _poll(self) -> None:
        pos = self._pos
        if pos is None:
            return
        try:
            size = os.stat(self._path(pos[0])).st_size
        except FileNotFoundError:
            segs = self._segments()
            if segs and segs[0] > pos[0]:
                # We fell behind the kept segments (a long pause): say so and
                # go on from the oldest one there is.
                log.warning(
                    "signal log: segments %d..%d were removed before this process read them; "
                    "events in them were missed", pos[0], segs[0] - 1,
                )
                with self._read_lock:
                    self._pos = (segs[0], 0)
            return
        if size <= pos[1] and not self._path(pos[0] + 1).exists():
            return
        with self._read_lock:
            events, self._pos = self._read(self._pos or pos, upto=None)
            remote = self._remote
        for ev in events:
            for sub in remote:
                if sub.active and sub.matches(ev):
                    sub.deliver_remote(ev, self._call)

    def close(self) -> None:
        self._stop_watcher()
        with self._guard:
            for sub in self._subs:
                sub.active = False
            self._subs = []
            self._remote = []
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            if self._counter is not None:
                self._counter.close()
                self._counter = None
