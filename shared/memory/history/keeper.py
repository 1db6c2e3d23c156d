"""Kept history: superseded versions, ``history()`` and ``as_of`` reads.

History is kept above the backend seam, so every backend has it without a
line of its own: the superseded versions of a key of namespace ``ns`` are one
record, under the same key, of the store-internal namespace ``_h.<ns>`` (a
name no declaration can take; its changes are never reported to
subscribers). That record's value is JSON::

    {"cut": <us>, "v": [[version, created_us, updated_us, deleted, value], ...]}

oldest first; ``deleted`` is 1 for a deletion (``value`` null), ``value`` the
stored (coded) form as written. ``cut`` is the time before which this key's
history is no longer complete (the end of the newest version the policy
dropped; 0 when none was). The record ``"\\x00since"`` of ``_h.<ns>`` says
since when the namespace's history is complete (the first write the keeper
saw), so an ``as_of`` read older than that is refused, not guessed.

Writing: before a persisted record of a namespace that keeps history is
replaced or deleted, and with the namespace lock held, :meth:`History.supersede`
appends the current version (and, for a delete, the deletion) to the key's
record, trimmed to the policy, then the write proceeds. A crash in between
leaves a kept copy of a version that is still current, which readers drop
(a kept version is never at or above the live one).

Reading: the timeline of a key is its kept versions, trimmed to the policy
as of now (what compaction would keep, so an answer does not depend on when
compaction last ran), then the current record. ``as_of=T`` answers from the
newest version written at or before ``T``; when ``T`` is older than every
kept version, the key was absent then only if its oldest version created it
(``created == updated``), nothing was dropped, and ``T`` is within the
namespace's kept history; otherwise :class:`HistoryNotKept`.
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import orjson

from hrm_memory.core import values
from hrm_memory.core.errors import HistoryNotKept, InvalidArgument
from hrm_memory.core.filters import query_filter
from hrm_memory.core.ops import HistoryOp, QueryAsOfOp, ReadAsOfOp
from hrm_memory.core.records import Record, Stored
from hrm_memory.core.spec import DAY, Keep, NamespaceSpec, check_key
from hrm_memory.core.state import Attrs, Core, Handlers
from hrm_memory.tracing.spans import OpSpan

#: The store-internal namespace holding ``namespace``'s kept versions.
PREFIX = "_h."
#: The record of a history namespace saying since when its history is complete.
SINCE_KEY = "\x00since"


def history_namespace(namespace: str) -> str:
    return PREFIX + namespace


class Entry(NamedTuple):
    """One version on a key's timeline (times in epoch microseconds)."""

    version: int
    created_us: int
    updated_us: int
    deleted: bool
    value: Any  # the stored (coded) form, parsed; None for a deletion
    tier: str  # "history" for a kept version, else where the current one lives


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a key (:meth:`MemoryManager.history`).

    ``deleted`` is True for a deletion (``value`` None, ``updated_at`` when
    it was deleted); ``current`` marks the version that holds now (the live
    record, or the deletion when the key is deleted)."""

    namespace: str
    key: str
    version: int
    value: Any
    created_at: datetime
    updated_at: datetime
    deleted: bool
    current: bool


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
#: The range of ``as_of`` a datetime can say (years 1 to 9999), in epoch microseconds.
_AS_OF_MIN = (datetime.min.replace(tzinfo=timezone.utc) - _EPOCH) // _MICROSECOND
_AS_OF_MAX = (datetime.max.replace(tzinfo=timezone.utc) - _EPOCH) // _MICROSECOND


def _utc(us: int) -> datetime:
    # Integer arithmetic: a float timestamp of the last microsecond of 9999
    # rounds up into a year no datetime can hold.
    return _EPOCH + us * _MICROSECOND


def as_of_us(when: Any) -> int:
    """``as_of`` (epoch seconds, or a timezone-aware datetime) in microseconds."""
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise InvalidArgument("as_of must be a timezone-aware datetime (or epoch seconds), not a naive one")
        try:
            us = (when - _EPOCH) // _MICROSECOND  # exact, where timestamp() rounds
        except OverflowError:
            us = _AS_OF_MIN - 1  # past either end: refused below
        if _AS_OF_MIN <= us <= _AS_OF_MAX:
            return us
        raise InvalidArgument(f"as_of {when!r} is outside the years 1 to 9999 in UTC")
    if type(when) in (int, float) and when == when and abs(when) < 1e11:
        return int(when * 1_000_000)
    raise InvalidArgument(f"as_of must be epoch seconds or a timezone-aware datetime, not {when!r}")


def trim(policy: Keep, cut: int, entries: list[list[Any]], end_of_last: int | None, now_us: int) -> tuple[int, list[list[Any]]]:
    """What ``policy`` keeps of ``entries`` (oldest first) at ``now_us``.

    Entry ``i`` was superseded at ``entries[i + 1]``'s update time, the last
    one at ``end_of_last`` (None: the last entry is the current state, a
    deletion, and always stays). Drops from the oldest end only, so what is
    kept is contiguous; returns the new ``cut`` and the kept entries."""
    n = len(entries) if end_of_last is not None else len(entries) - 1  # superseded ones
    if n <= 0:
        return cut, entries

    def end(i: int) -> int:
        return int(entries[i + 1][2]) if i + 1 < len(entries) else int(end_of_last or 0)

    drop = 0
    if policy.versions is not None and n > policy.versions:
        drop = n - policy.versions
    if policy.days is not None:
        horizon = now_us - int(policy.days * DAY * 1_000_000)
        while drop < n and end(drop) < horizon:
            drop += 1
    if not drop:
        return cut, entries
    return max(cut, end(drop - 1)), entries[drop:]


class History:
    """Keeps superseded versions and answers ``history`` and ``as_of`` reads. Thread-safe
    (every change happens under the namespace's lock)."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.backend = core.backend
        self._since: dict[str, int] = {}
        core.keeper = self
        core.on_purge(self._purged)

    def handlers(self) -> Handlers:
        return {
            HistoryOp: ("history", self._history, True),
            ReadAsOfOp: ("read_as_of", self._read_as_of, True),
            QueryAsOfOp: ("query_as_of", self._query_as_of, True),
        }

    def close(self) -> None:
        pass

    # -- the stored form ------------------------------------------------------------

    def load(self, namespace: str, key: str) -> tuple[int, list[list[Any]]]:
        """``(cut, entries)`` of a key's kept versions (oldest first)."""
        st = self.backend.get(history_namespace(namespace), key)
        if st is None:
            return 0, []
        data = orjson.loads(st.value)
        return int(data["cut"]), data["v"]

    def store(self, namespace: str, key: str, cut: int, entries: list[list[Any]], now_us: int) -> None:
        hidden = history_namespace(namespace)
        if not entries and not cut:
            if self.backend.get(hidden, key) is not None:
                self.backend.delete(hidden, key, now_us)
            return
        self.backend.put(hidden, key, values.kept(orjson.dumps({"cut": cut, "v": entries})), now_us)

    def since(self, namespace: str) -> int | None:
        """Since when the namespace's history is complete (None: no write kept yet)."""
        found = self._since.get(namespace)
        if found is None:
            st = self.backend.get(history_namespace(namespace), SINCE_KEY)
            if st is None:
                return None
            found = self._since[namespace] = int(orjson.loads(st.value)["since"])
        return found

    def set_since(self, namespace: str, since_us: int) -> None:
        """Record since when history is complete (an import may move it back)."""
        self.backend.put(history_namespace(namespace), SINCE_KEY, values.kept(orjson.dumps({"since": since_us})),
                         since_us)
        self._since[namespace] = since_us

    def _purged(self, namespace: str) -> None:
        """The namespace's data was purged: its kept versions go too."""
        self._since.pop(namespace, None)
        self.backend.purge(history_namespace(namespace))

    def forget(self, namespace: str) -> None:
        """Drop what this process remembers of a namespace's history (after an erase)."""
        self._since.pop(namespace, None)

    # -- the keeper ------------------------------------------------------------------

    def supersede(self, spec: NamespaceSpec, key: str, now_us: int, deleting: bool) -> int:
        policy = spec.history
        if policy is None:
            return 1
        name = spec.name
        if self.since(name) is None:
            self.set_since(name, now_us)
        prev = self.backend.get(name, key)
        cut, entries = self.load(name, key)
        changed = False
        if prev is not None and (not entries or int(entries[-1][0]) < prev.version):
            entries.append([prev.version, prev.created_us, prev.updated_us, 0, orjson.Fragment(prev.value)])
            changed = True
        if prev is not None and deleting:
            entries.append([prev.version + 1, prev.created_us, now_us, 1, None])
            changed = True
        if changed:
            cut, entries = trim(policy, cut, entries, None if deleting else now_us, now_us)
            self.store(name, key, cut, entries, now_us)
        top = int(entries[-1][0]) if entries else 0
        return max(top + 1, prev.version + 1 if prev is not None else 1)

    def expire(self, specs: list[NamespaceSpec], now_us: int) -> int:
        reclaimed = 0
        for spec in specs:
            if spec.history is None or spec.tier == "hot":
                continue
            hidden = history_namespace(spec.name)
            with self.backend.lock(spec.name):
                for st in list(self.backend.scan(hidden, strict=False)):
                    if st.key == SINCE_KEY:
                        continue
                    data = orjson.loads(st.value)
                    live = self.backend.get(spec.name, st.key)
                    entries = data["v"]
                    if live is not None:
                        entries = [e for e in entries if int(e[0]) < live.version]
                    cut, kept = trim(spec.history, int(data["cut"]), entries,
                                     live.updated_us if live is not None else None, now_us)
                    if kept != data["v"] or cut != data["cut"]:
                        self.store(spec.name, st.key, cut, kept, now_us)
                # Superseded copies of the kept records (every update rewrites
                # its key's record) go now, with what the policy dropped.
                reclaimed += self.backend.compact(hidden)
        return reclaimed

    # -- reading ---------------------------------------------------------------------

    def timeline(self, spec: NamespaceSpec, key: str, now_us: int | None = None) -> tuple[int, list[Entry]]:
        """``(cut, versions oldest first)``: the kept ones within the policy, then the current one."""
        live = self.core.lookup(spec, key)
        persisted: Stored | None = None
        if live is not None and live.tier == "hot" and spec.tier != "hot":
            persisted = self.backend.get(spec.name, key)  # a session-only copy supersedes it
        cut, raw = (0, []) if spec.history is None else self.load(spec.name, key)
        top = persisted or live
        if top is not None:
            raw = [e for e in raw if int(e[0]) < top.version]
        if spec.history is not None:
            now = time.time_ns() // 1000 if now_us is None else now_us
            end = (top.updated_us if top is not None else None)
            cut, raw = trim(spec.history, cut, raw, end, now)
        out = [Entry(int(v), int(c), int(u), bool(d), val, "history") for v, c, u, d, val in raw]
        for st in (persisted, live):
            if st is not None and (not out or out[-1].version < st.version or st is live):
                out.append(Entry(st.version, st.created_us, st.updated_us, False, values.loads(st.value), st.tier))
        return cut, out

    def at(self, spec: NamespaceSpec, key: str, when_us: int) -> Entry | None:
        """The version current at ``when_us`` (None: the key was absent then),
        or :class:`HistoryNotKept`."""
        cut, line = self.timeline(spec, key)
        for entry in reversed(line):
            if entry.updated_us <= when_us:
                return None if entry.deleted else entry
        since = self.since(spec.name) if spec.history is not None else None
        first = line[0] if line else None
        if (
            since is not None
            and when_us >= since
            and cut == 0
            and (first is None or (not first.deleted and first.created_us == first.updated_us))
        ):
            return None  # before its first version, within complete history: absent
        raise HistoryNotKept(
            f"{spec.name}/{key!r} as of {_utc(when_us).isoformat()}: "
            + ("the namespace keeps no history" if spec.history is None else "history that old was not kept"),
            namespace=spec.name,
            key=key,
            as_of_us=when_us,
        )

    def _history(self, op: HistoryOp, scope: str | None, span: OpSpan | None) -> tuple[list[Version], Attrs]:
        namespace, key, compact = op
        spec = self.core.spec(namespace)
        check_key(key, namespace)
        self.core.may_read(scope, namespace)
        _, line = self.timeline(spec, key)
        out = [
            Version(spec.name, key, e.version, None if e.deleted else self._value(spec, e.value, compact),
                    _utc(e.created_us), _utc(e.updated_us), e.deleted, i == len(line) - 1)
            for i, e in enumerate(line)
        ]
        out.reverse()
        return out, (None if span is None else {"db.response.returned_rows": len(out)})

    def _value(self, spec: NamespaceSpec, value: Any, compact: bool) -> Any:
        return value if compact else self.core.expanded(spec, value)

    def _record(self, spec: NamespaceSpec, key: str, e: Entry, compact: bool) -> Record:
        return Record(spec.name, key, self._value(spec, e.value, compact), e.version, _utc(e.created_us),
                      _utc(e.updated_us), e.tier, e.tier != "hot")

    def _read_as_of(self, op: ReadAsOfOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        namespace, key, as_of, default, compact, record = op
        when = as_of_us(as_of)
        spec = self.core.spec(namespace)
        check_key(key, namespace)
        self.core.may_read(scope, namespace)
        entry = self.at(spec, key, when)
        attrs = None if span is None else {"hrm.memory.hit": entry is not None, "hrm.memory.as_of": when // 1_000_000}
        if entry is None:
            return (None if record else default), attrs
        if record:
            return self._record(spec, key, entry, compact), attrs
        return self._value(spec, entry.value, compact), attrs

    def _query_as_of(self, op: QueryAsOfOp, scope: str | None, span: OpSpan | None) -> tuple[list[Record], Attrs]:
        namespace, key_glob, where, limit, as_of, compact = op
        when = as_of_us(as_of)
        matches = query_filter(key_glob, where, limit)
        specs = self.core.visible(scope, namespace, self.core.match(namespace))
        out: list[Record] = []
        for spec in specs:
            since = self.since(spec.name) if spec.history is not None else None
            if since is None or when < since:
                raise HistoryNotKept(
                    f"query of {spec.name} as of {_utc(when).isoformat()}: "
                    + ("the namespace keeps no history" if spec.history is None else "history that old was not kept"),
                    namespace=spec.name,
                    as_of_us=when,
                )
            keys = {st.key for st in self.backend.scan(spec.name, include_cold=True, strict=False)}
            if spec.consent is not None:
                keys.update(st.key for st in self.core.hot.scan(spec.name))
            keys.update(k for k, _, _ in self.backend.keys(history_namespace(spec.name)) if k != SINCE_KEY)
            rows = []
            for key in sorted(keys):
                if key_glob != "*" and not fnmatch.fnmatchcase(key, key_glob):
                    continue
                entry = self.at(spec, key, when)
                if entry is None:
                    continue
                rec = self._record(spec, key, entry, compact)
                if matches is not None and not matches(rec.value):
                    continue
                rows.append(rec)
            out.extend(rows)
            if limit is not None and len(out) >= limit:
                out = out[:limit]
                break
        attrs = None if span is None else {"db.response.returned_rows": len(out), "hrm.memory.as_of": when // 1_000_000}
        return out, attrs


__all__ = ["PREFIX", "SINCE_KEY", "Entry", "History", "Version", "as_of_us", "history_namespace", "trim"]
