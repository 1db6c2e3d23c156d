"""The Redis change log: one stream per store, the cross-host side of subscriptions.

Every committed change is one stream entry (field ``e``: the JSON array
``[writer token, op code, namespace, key, version, trace id]``; never a
value). The backend's write scripts append the entry themselves, in the same
atomic step as the change (:mod:`hrm_memory.storage.redis.scripts`), so the
stream is in commit order, per key and overall, whichever host wrote; the
pipeline's later :meth:`RedisChangeLog.append` for that change finds it
logged already and costs nothing.

A cursor is a stream id (``"<ms>-<seq>"``); :meth:`read` returns the entries
after it. Retention is bounded: the scripts trim with ``XADD ... MAXLEN ~``
(``stream_maxlen`` entries, approximately). A cursor older than the oldest
entry kept, once entries were trimmed, raises :class:`CursorExpired` (the
entries trimmed are the oldest, so a cursor from before the first entry kept
may have missed some; :meth:`RedisChangeLog.oldest` is the cursor just before
that entry, which never expires); a string that is not a stream id raises
:class:`InvalidCursor`.

Trace ids: an entry carries the trace id current when the change was made
(the caller's span, of which the operation's span is a child: the same trace
id). An operation that starts a trace of its own has a trace id the backend
cannot know before the write; its entry carries the zero id.
"""

from __future__ import annotations

import logging
import re
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

import orjson
import redis
from hrm_memory.core.errors import BackendUnavailable, CursorExpired, InvalidCursor
from hrm_memory.core.records import Event
from redis.exceptions import RedisError

from ..fsutil import this_process
from .conn import command, failure
from .scripts import SCRIPTS

log = logging.getLogger("hrm_memory.core.events")

OP_CODE = {"write": "w", "delete": "d", "archive": "a"}
_OP_NAME = {v: k for k, v in OP_CODE.items()}
NO_TRACE = "0" * 32
_ID = re.compile(r"\A(\d{1,20})-(\d{1,20})\Z")
_READ = SCRIPTS["read"]
_BATCH = 1000


def parse_id(cursor: str) -> tuple[int, int]:
    m = _ID.match(cursor) if isinstance(cursor, str) else None
    if m is None:
        raise InvalidCursor(f"not a Redis change-log cursor: {str(cursor)[:60]!r} (expected '<ms>-<seq>')")
    return int(m.group(1)), int(m.group(2))


def _before(entry_id: str) -> str:
    """The id just before ``entry_id``."""
    ms, seq = parse_id(entry_id)
    return f"{ms}-{seq - 1}" if seq else f"{ms - 1}-{2**64 - 1}" if ms else "0-0"


def check_kept(start: str, removed: Any, first: Any, cursor: str) -> None:
    """Raise :class:`CursorExpired` if entries just after ``start`` were
    trimmed: the stream has lost entries (``removed``) and the first it
    keeps (``first``, bytes) comes later than the one right after ``start``.
    ``cursor`` names the cursor in the message."""
    if removed and first:
        first_id = first.decode()
        if parse_id(start) < parse_id(first_id) and start != _before(first_id):
            raise CursorExpired(
                f"change-log {cursor} is older than the oldest entry kept ({first_id}); entries after "
                "it were trimmed: re-read the state with query() and take a new cursor"
            )


class Outage:
    """What a polled change log says about Redis going away and coming back:
    one warning when a poll first finds it unavailable, one when a poll finds
    it back, nothing on the polls between (subscribers poll every few
    milliseconds). ``where`` names the server as shown to people (no password)."""

    def __init__(self, where: str) -> None:
        self._where = where
        self.down = False  # the last poll found Redis unavailable

    def poll(self, probe: Callable[[], bool]) -> bool:
        """``probe()``, or False while Redis is unavailable."""
        try:
            found = probe()
        except BackendUnavailable as exc:
            if not self.down:
                self.down = True
                log.warning("change log: %s; events from other processes resume when it is back", exc)
            return False
        if self.down:
            self.down = False
            log.warning("change log: %s is back; delivering what was missed", self._where)
        return found


class RedisChangeLog:
    """Implements :class:`hrm_memory.core.backend.ChangeLog` on a Redis stream. Thread-safe."""

    def __init__(self, client: redis.Redis, key: str, maxlen: int, shown: str) -> None:
        self._cmd = command(client)
        self.key = key
        self.maxlen = maxlen
        self._shown = shown
        self._host = socket.gethostname()
        self._pid = 0
        self.token = ""
        self._rename()
        self._pending = threading.local()
        self.gaps = 0  # changes that could not be logged
        self._outage = Outage(f"Redis at {shown}")

    def _rename(self) -> None:
        self._pid = this_process.pid
        self.token = f"{self._pid}.{secrets.token_hex(3)}@{self._host}"

    # -- writing -------------------------------------------------------------------

    def entry_parts(self, op: str, namespace: str, key: str, trace_id: str) -> tuple[bytes, bytes]:
        """The entry around its version, which the write script fills in."""
        if self._pid != this_process.pid:
            self._rename()  # a forked child is another writer
        head = orjson.dumps([self.token, OP_CODE[op], namespace, key])[:-1] + b","
        tid = "" if trace_id == NO_TRACE else trace_id
        return head, b',"' + tid.encode() + b'"]'

    def entry(self, op: str, namespace: str, key: str, version: int, trace_id: str) -> bytes:
        head, tail = self.entry_parts(op, namespace, key, trace_id)
        return head + b"%d" % version + tail

    def logged(self, op: str, namespace: str, key: str, version: int) -> None:
        """A script appended this change already (called on the writing thread)."""
        pending: set[tuple[str, str, str, int]] | None = getattr(self._pending, "set", None)
        if pending is None or len(pending) > 256:  # never called back: do not grow
            pending = self._pending.set = set()
        pending.add((op, namespace, key, version))

    def already_logged(self, op: str, namespace: str, key: str, version: int) -> bool:
        """True if a script appended this change already (:meth:`logged`, on
        this thread): it is forgotten then, and not to be appended again."""
        pending: set[tuple[str, str, str, int]] | None = getattr(self._pending, "set", None)
        if pending:
            item = (op, namespace, key, version)
            if item in pending:
                pending.discard(item)
                return True
        return False

    def append(self, op: str, namespace: str, key: str, version: int, trace_id: str) -> None:
        if self.already_logged(op, namespace, key, version):
            return
        try:
            self._cmd(
                "XADD", self.key, "MAXLEN", "~", self.maxlen, "*", "e", self.entry(op, namespace, key, version, trace_id)
            )
        except RedisError as exc:
            # The change is committed already: count and log the gap.
            self.gaps += 1
            log.warning("change log: could not record %s %s/%s (%s); other hosts miss it", op, namespace, key, exc)

    # -- reading ---------------------------------------------------------------------

    def _run_read(self, start: str, end: str, count: int) -> list[Any]:
        try:
            removed, first, entries = _READ(self._cmd, (self.key,), "(" + start, end, count)
        except RedisError as exc:
            raise failure(exc, "a change-log read", self._shown) from None
        check_kept(start, removed, first, f"cursor {start}")
        return entries  # type: ignore[no-any-return]

    def cursor(self) -> str:
        try:
            last = self._cmd("XREVRANGE", self.key, "+", "-", "COUNT", 1)
        except RedisError as exc:
            raise failure(exc, "reading the change-log cursor", self._shown) from None
        return last[0][0].decode() if last else "0-0"

    def oldest(self) -> str:
        try:
            first = self._cmd("XRANGE", self.key, "-", "+", "COUNT", 1)
        except RedisError as exc:
            raise failure(exc, "reading the change log", self._shown) from None
        return _before(first[0][0].decode()) if first else self.cursor()

    def changed(self, cursor: str) -> bool:
        """Polled every few milliseconds by each subscribing process. While
        Redis is unavailable it answers False (logged once per outage, not
        every poll); the next poll after the server is back finds what was
        added meanwhile."""
        parse_id(cursor)
        return self._outage.poll(lambda: bool(self._run_read(cursor, "+", 1)))

    def notify(self, wake: Callable[[], None]) -> None:
        """None: a subscriber polls the stream (:meth:`changed`) every
        ``poll_interval``, one round trip each (docs/redis.md)."""
        return None

    def read(self, cursor: str, upto: str | None = None, *, skip_own: bool = True) -> tuple[list[Event], str]:
        parse_id(cursor)
        end = "+"
        if upto is not None:
            parse_id(upto)
            end = upto
        events: list[Event] = []
        pos = cursor
        while True:
            entries: list[Any] = self._run_read(pos, end, _BATCH)
            for entry_id, fields in entries:
                pos = entry_id.decode()
                ev = self.parse(fields, skip_own)
                if ev is not None:
                    events.append(ev)
            if len(entries) < _BATCH:
                return events, pos

    def parse(self, fields: list[bytes], skip_own: bool) -> Event | None:
        """The event of a stream entry's fields (None: not an event, or this writer's own when ``skip_own``)."""
        try:
            token, op, ns, key, version, trace_id = orjson.loads(fields[fields.index(b"e") + 1])
            op = _OP_NAME[op]
        except (ValueError, KeyError, TypeError, IndexError, orjson.JSONDecodeError):
            log.warning("change log: skipped an entry that is not this store's format")
            return None
        own = token == self.token
        if own and skip_own:
            return None
        if own:
            origin = "local"
        else:
            pid, _, rest = str(token).partition(".")
            origin = f"pid:{pid}@{rest.partition('@')[2]}"
        return Event(op, ns, key, version, trace_id or NO_TRACE, origin)

    def close(self) -> None:
        """The client belongs to the backend, which closes it."""


__all__ = ["NO_TRACE", "OP_CODE", "RedisChangeLog", "parse_id"]
