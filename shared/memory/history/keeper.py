"""Kept history: superseded versions, ``history()`` and ``as_of`` reads.

History is kept above the backend seam, so every backend has it without a
line of its own: the superseded versions of a key of namespace ``ns`` are
records of the store-internal namespace ``_h.<ns>`` (a name no declaration can
take; its changes are never reported to subscribers). Each version is written
once, when it is superseded, and never rewritten: an overwrite costs one
append to ``_h.<ns>`` whatever the number of versions kept. The records of a
key ``K`` (values JSON, entries ``[version, created_us, updated_us, deleted,
value]`` oldest first, ``deleted`` 1 for a deletion whose ``value`` is null,
``value`` the stored (coded) form as written):

- a *slot* ``"\\x00<tag>.<n>"`` per superseded version: ``{"k": K, "by": w,
  "v": [entries]}``, the entries that version ``w`` superseded (one for an
  overwrite; the previous version and the deletion for a write after a
  deletion). ``<tag>`` is a digest of ``K`` (so a tombstone of a slot names no
  key) and ``n`` is ``w`` modulo the ring size, ``2 * versions + 2`` for a
  policy with a count (a slot is reused, its old copy becomes garbage the
  warm tier's compaction reclaims: a key's history never takes more than the
  ring), ``w`` itself for a policy by age only;
- the *head* ``"\\x00<tag>.d"`` while ``K`` is deleted: ``{"k": K, "v":
  [the version deleted, the deletion]}``; the next write of ``K`` copies it
  into its slot (so the versions stay one chain) and takes a version after
  the deletion's;
- the *base* ``K``: ``{"cut": <us>, "v": [entries]}``, versions kept before
  the chain (what compaction trimmed, an import, and every key's history in a
  store written before slots existed, which is read as it is). ``cut`` is the
  time before which this key's history is no longer complete (the end of the
  newest version the policy dropped; 0 when none was).

A key's versions are a chain: from the live record's version ``L``, the slot
``by == L`` holds the version before it, whose own version leads to the slot
before, and so on (a slot whose ``by`` is not the version sought, left over
from an earlier turn of the ring, ends the chain). The record
``"\\x00since"`` of ``_h.<ns>`` says since when the namespace's history is
complete (the first write the keeper saw), so an ``as_of`` read older than
that is refused, not guessed, and whether every key's history is in slots
(``"layout": 2``) or a base may hold a deletion (a store written before).

Writing: before a persisted record of a namespace that keeps history is
replaced or deleted, and with the namespace lock held, :meth:`History.supersede`
appends the current version's slot (or, for a delete, the head), then the
write proceeds. A first write of a key reads only what it needs: whether the
key was deleted (its head). A crash in between leaves a slot of a version
that is still current, which readers never reach (or, retried, is written
again with the same contents).

Trimming to the policy happens at compaction (:meth:`History.expire` drops
the slots holding nothing the policy keeps and records the new ``cut``); a
read trims as compaction would, so an answer does not depend on when
compaction last ran.

Reading: the timeline of a key is its kept versions, trimmed to the policy
as of now, then the current record. ``as_of=T`` answers from the newest
version written at or before ``T``; when ``T`` is older than every kept
version, the key was absent then only if its oldest version created it
(``created == updated``), nothing was dropped, and ``T`` is within the
namespace's kept history; otherwise :class:`HistoryNotKept`.
"""

from __future__ import annotations

import fnmatch
import time
from hashlib import blake2b
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import orjson

from hrm_memory.core import values
from hrm_memory.core.errors import HistoryNotKept, InvalidArgument, NotReplicated
from hrm_memory.core.filters import query_filter
from hrm_memory.core.ops import HistoryOp, QueryAsOfOp, ReadAsOfOp
from hrm_memory.core.records import Record, Stored
from hrm_memory.core.spec import DAY, HISTORY_PREFIX, Keep, NamespaceSpec, check_key
from hrm_memory.core.state import Attrs, Core, Handlers
from hrm_memory.tracing.spans import OpSpan

#: The store-internal namespace holding ``namespace``'s kept versions.
PREFIX = HISTORY_PREFIX
#: The record of a history namespace saying since when its history is complete.
SINCE_KEY = "\x00since"
#: The layout the since record names when every key's history is in slots.
LAYOUT = 2
#: The suffix of a key's head (its tag, then this) while the key is deleted.
HEAD = "d"


def history_namespace(namespace: str) -> str:
    return PREFIX + namespace


def tag_of(key: str) -> str:
    """The prefix of ``key``'s slots and head: a digest, so that no record name
    (nor a tombstone of one) holds the key."""
    return "\x00" + blake2b(key.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest() + "."


def ring_size(policy: Keep) -> int | None:
    """How many slots a key's versions turn over (None: one per version, a
    policy by age only). Twice the versions kept, and two: a gap in the
    version numbers (a session copy moved on a grant, an import) or a slot
    of a write that crashed before its record does not cost a kept version."""
    return None if policy.versions is None else 2 * policy.versions + 2


def slot_name(tag: str, by: int, ring: int | None) -> str:
    return tag + str(by if ring is None else by % ring)


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


class Kept(NamedTuple):
    """What :meth:`History.kept` found of a key's kept versions."""

    cut: int
    entries: list[list[Any]]  # oldest first, each [version, created_us, updated_us, deleted, value]
    records: list[str]  # the slots and head read on the way (the base not included)


class History:
    """Keeps superseded versions and answers ``history`` and ``as_of`` reads. Thread-safe
    (every change happens under the namespace's lock)."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.backend = core.backend
        self._since: dict[str, tuple[int, bool]] = {}  # namespace -> (since, written before slots)
        core.keep_history(self)
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

    def kept(self, spec: NamespaceSpec, key: str, start: int | None, below: int | None, *,
             now_us: int | None = None, until_us: int | None = None) -> Kept:
        """A key's kept versions older than ``below`` (None: all), walking the
        chain from the slot of version ``start`` (None: from the head, the
        key being deleted) and merging the base. With ``now_us``, the walk
        stops once what is older can only be what the policy drops at
        ``now_us`` (reads); without, it goes to the end of the chain
        (compaction, export, import). With ``until_us`` (an ``as_of`` read),
        it stops at the first version written at or before that time: what
        the policy keeps of the versions read is what it keeps of them in
        the whole chain (it drops from the oldest end, by count or by the
        time each was superseded)."""
        assert spec.history is not None
        hidden = PREFIX + spec.name
        get = self.backend.get
        found: dict[int, list[Any]] = {}
        cut = 0
        base = get(hidden, key)
        if base is not None:
            data = orjson.loads(base.value)
            cut = int(data["cut"])
            for e in data["v"]:
                found[int(e[0])] = e
        tag = tag_of(key)
        records: list[str] = []
        cursor = start
        if start is None:
            head = get(hidden, tag + HEAD)
            rec = None if head is None else orjson.loads(head.value)
            if rec is not None and rec.get("k") == key and rec["v"]:
                records.append(tag + HEAD)
                for e in rec["v"]:
                    found[int(e[0])] = e
                cursor = int(rec["v"][0][0])
        policy = spec.history
        want = horizon = None
        if now_us is not None:
            want = None if policy.versions is None else policy.versions + 1
            horizon = None if policy.days is None else now_us - int(policy.days * DAY * 1_000_000)
        ring = ring_size(policy)
        walked = 0
        while cursor is not None and (want is None or walked < want):
            name = slot_name(tag, cursor, ring)
            st = get(hidden, name)
            if st is None:
                break
            rec = orjson.loads(st.value)
            got = rec.get("v")
            if rec.get("by") != cursor or rec.get("k") != key or not got or int(got[0][0]) >= cursor:
                break  # a slot of an earlier turn of the ring (or of another key): the chain ends here
            records.append(name)
            for e in got:
                found[int(e[0])] = e
            walked += len(got)
            if horizon is not None and int(got[0][2]) < horizon:
                break  # every older version ended before the horizon: the policy drops it
            if until_us is not None and int(got[0][2]) <= until_us:
                break  # the version current at until_us is read
            cursor = int(got[0][0])
        entries = [found[v] for v in sorted(found) if below is None or v < below]
        return Kept(cut, entries, records)

    def load(self, spec: NamespaceSpec, key: str) -> tuple[int, list[list[Any]]]:
        """``(cut, entries)`` of a key's kept versions (oldest first), below its
        persisted version (all of them when it is deleted), untrimmed."""
        live = self.backend.get(spec.name, key)
        top = None if live is None else live.version
        found = self.kept(spec, key, top, top)
        return found.cut, found.entries

    def store(self, spec: NamespaceSpec, key: str, cut: int, entries: list[list[Any]], deleted: bool,
              now_us: int) -> None:
        """Replace what is kept of ``key`` by ``entries`` (oldest first, all of
        them below its persisted version) and ``cut`` (an import): one base;
        for a key with no persisted version (``deleted``), a head holding the
        newest, so that the next write of the key takes a version after it."""
        hidden = PREFIX + spec.name
        if entries or cut:
            self.backend.put(hidden, key, values.kept(orjson.dumps({"cut": cut, "v": entries})), now_us)
        elif self.backend.get(hidden, key) is not None:
            self.backend.delete(hidden, key, now_us)
        if deleted and entries:
            self.backend.put(hidden, tag_of(key) + HEAD, values.kept(orjson.dumps({"k": key, "v": entries[-1:]})),
                             now_us)

    def exported(self, spec: NamespaceSpec, key: str, stored: Stored | None) -> tuple[int, list[list[Any]]]:
        """``(cut, entries)``: what an export carries of ``key``'s kept versions
        (``stored`` its persisted record, None when deleted): what a read shows."""
        assert spec.history is not None
        now = time.time_ns() // 1000
        top = None if stored is None else stored.version
        found = self.kept(spec, key, top, top, now_us=now)
        return trim(spec.history, found.cut, found.entries, None if stored is None else stored.updated_us, now)

    def records(self, namespace: str, key: str) -> list[str]:
        """The names of every slot and head of ``key`` in ``_h.<namespace>`` (forget)."""
        tag = tag_of(key)
        return sorted(k for k, _, _ in self.backend.keys(PREFIX + namespace) if k.startswith(tag))

    def keys(self, spec: NamespaceSpec) -> set[str]:
        """The keys with kept history and no slot reachable from a live record:
        the deleted ones (heads) and those of bases."""
        hidden = PREFIX + spec.name
        out: set[str] = set()
        for k, _, _ in self.backend.keys(hidden):
            if not k.startswith("\x00"):
                out.add(k)
            elif k.endswith("." + HEAD):
                st = self.backend.get(hidden, k)
                key = None if st is None else orjson.loads(st.value).get("k")
                if type(key) is str:
                    out.add(key)
        return out

    def since(self, namespace: str) -> int | None:
        """Since when the namespace's history is complete (None: no write kept yet)."""
        found = self._layout(namespace)
        return None if found is None else found[0]

    def _layout(self, namespace: str) -> tuple[int, bool] | None:
        found = self._since.get(namespace)
        if found is None:
            st = self.backend.get(history_namespace(namespace), SINCE_KEY)
            if st is None:
                return None
            data = orjson.loads(st.value)
            found = self._since[namespace] = (int(data["since"]), data.get("layout") != LAYOUT)
        return found

    def set_since(self, namespace: str, since_us: int, unconfirmed: list[NotReplicated] | None = None) -> None:
        """Record since when history is complete (an import may move it back).
        ``unconfirmed``: see :meth:`supersede`."""
        have = self._layout(namespace)
        older = have is not None and have[1]
        data: dict[str, int] = {"since": since_us} if older else {"since": since_us, "layout": LAYOUT}
        self._put(history_namespace(namespace), SINCE_KEY, values.kept(orjson.dumps(data)), since_us, unconfirmed)
        self._since[namespace] = (since_us, older)

    def _put(self, namespace: str, key: str, data: bytes, now_us: int,
             unconfirmed: list[NotReplicated] | None) -> None:  # fmt: skip
        """A write of the keeper's own. ``NotReplicated`` says it is on the
        primary but no replica confirmed it yet: with ``unconfirmed`` given,
        it is noted there and the keeper goes on, so that the record it keeps
        versions for is written too (a caller told ``NotReplicated`` reads its
        write back: docs/redis.md) and the caller raises it after."""
        try:
            self.backend.put(namespace, key, data, now_us)
        except NotReplicated as exc:
            if unconfirmed is None:
                raise
            unconfirmed.append(exc)

    def _purged(self, namespace: str) -> None:
        """The namespace's data was purged: its kept versions go too."""
        self._since.pop(namespace, None)
        self.backend.purge(history_namespace(namespace))

    def forget(self, namespace: str) -> None:
        """Drop what this process remembers of a namespace's history (after an erase)."""
        self._since.pop(namespace, None)

    # -- the keeper ------------------------------------------------------------------

    def supersede(self, spec: NamespaceSpec, key: str, now_us: int, deleting: bool,
                  unconfirmed: list[NotReplicated] | None = None) -> int:  # fmt: skip
        policy = spec.history
        if policy is None:
            return 1
        name = spec.name
        backend = self.backend
        layout = self._since.get(name) or self._layout(name)
        if layout is None:
            self.set_since(name, now_us, unconfirmed)
            layout = self._since[name]
        hidden = PREFIX + name
        tag = tag_of(key)
        prev = backend.get(name, key)
        if prev is None:
            if deleting:
                return 1
            least, carried = 1, None
            head = backend.get(hidden, tag + HEAD)
            if head is not None:
                rec = orjson.loads(head.value)
                if rec.get("k") == key and rec["v"]:
                    carried = rec["v"]
                    least = int(carried[-1][0]) + 1
            if layout[1]:  # written before slots: a base may end with a deletion
                base = backend.get(hidden, key)
                if base is not None:
                    old = orjson.loads(base.value)["v"]
                    if old:
                        least = max(least, int(old[-1][0]) + 1)
            version = self._after_session_copy(spec, key, least)
            if carried is not None:
                self._append(hidden, tag, ring_size(policy), version, key, carried, now_us, unconfirmed)
            return version
        entry = [prev.version, prev.created_us, prev.updated_us, 0, orjson.Fragment(prev.value)]
        if deleting:
            gone = [prev.version + 1, prev.created_us, now_us, 1, None]
            self._put(hidden, tag + HEAD, values.kept(orjson.dumps({"k": key, "v": [entry, gone]})), now_us,
                      unconfirmed)  # fmt: skip
            return prev.version + 1
        version = self._after_session_copy(spec, key, prev.version + 1)
        self._append(hidden, tag, ring_size(policy), version, key, [entry], now_us, unconfirmed)
        return version

    def relink(self, spec: NamespaceSpec, key: str, version: int, now_us: int) -> None:
        """``key``'s live record goes from ``version`` to the next with the
        same value (a key rotation reseals it): the slot that ``version``
        names is written again under the next one, so the chain from the new
        version reaches the same kept versions (and the version it had is no
        kept version: its value did not change). Written before the record,
        as a write's slot is: a crash in between leaves a slot no chain reaches."""
        policy = spec.history
        if policy is None:
            return
        hidden, tag, ring = PREFIX + spec.name, tag_of(key), ring_size(policy)
        slot = self.backend.get(hidden, slot_name(tag, version, ring))
        if slot is None:
            return
        rec = orjson.loads(slot.value)
        if rec.get("k") == key and rec.get("by") == version:
            self._append(hidden, tag, ring, version + 1, key, rec["v"], now_us)

    def _after_session_copy(self, spec: NamespaceSpec, key: str, least: int) -> int:
        """The version the write will take: at least ``least``, and (a gated
        namespace's session copies moving to the backend on a grant) at least
        the session copy's own."""
        if spec.consent is not None:
            shadow = self.core.hot.get(spec.name, key)
            if shadow is not None:
                return max(least, shadow.version)
        return least

    def _append(self, hidden: str, tag: str, ring: int | None, by: int, key: str, entries: list[Any],
                now_us: int, unconfirmed: list[NotReplicated] | None = None) -> None:
        data = values.kept(orjson.dumps({"k": key, "by": by, "v": entries}))
        self._put(hidden, slot_name(tag, by, ring), data, now_us, unconfirmed)

    def expire(self, specs: list[NamespaceSpec], now_us: int) -> int:
        reclaimed = 0
        for spec in specs:
            if spec.history is None or spec.tier == "hot":
                continue
            hidden = history_namespace(spec.name)
            with self.backend.lock(spec.name):
                owners: dict[str, list[str]] = {}  # key -> its slots and head
                for st in list(self.backend.scan(hidden, strict=False)):
                    if st.key == SINCE_KEY:
                        continue
                    if not st.key.startswith("\x00"):
                        owners.setdefault(st.key, [])
                        continue
                    owner = orjson.loads(st.value).get("k")
                    if type(owner) is str and st.key.startswith(tag_of(owner)):
                        owners.setdefault(owner, []).append(st.key)
                    else:
                        self.backend.delete(hidden, st.key, now_us)
                for key in sorted(owners):
                    self._trim_key(spec, key, owners[key], now_us)
                # What the policy dropped and the slots' earlier copies go now.
                reclaimed += self.backend.compact(hidden)
        return reclaimed

    def _trim_key(self, spec: NamespaceSpec, key: str, held: list[str], now_us: int) -> None:
        """Drop from ``key``'s records what ``spec``'s policy no longer keeps
        at ``now_us`` (whole slots; a head or a base rewritten), and the
        slots no chain reaches; record the new cut in the base."""
        assert spec.history is not None
        hidden = PREFIX + spec.name
        live = self.backend.get(spec.name, key)
        top = None if live is None else live.version
        found = self.kept(spec, key, top, None)
        entries = [e for e in found.entries if top is None or int(e[0]) < top]
        cut, keep = trim(spec.history, found.cut, entries, None if live is None else live.updated_us, now_us)
        kept_versions = {int(e[0]) for e in keep}
        reached = set(found.records)
        in_records: set[int] = set()
        for name in held:
            st = self.backend.get(hidden, name)
            if st is None:
                continue
            rec = orjson.loads(st.value)
            if name not in reached:
                self.backend.delete(hidden, name, now_us)
                continue
            still = [e for e in rec["v"] if int(e[0]) in kept_versions]
            in_records.update(int(e[0]) for e in still)
            if not still:
                self.backend.delete(hidden, name, now_us)
            elif len(still) != len(rec["v"]):
                rec["v"] = still
                self.backend.put(hidden, name, values.kept(orjson.dumps(rec)), now_us)
        base = self.backend.get(hidden, key)
        rest = [e for e in keep if int(e[0]) not in in_records]
        if base is None and not rest and cut == 0:
            return
        old = None if base is None else orjson.loads(base.value)
        if old is not None and old["v"] == rest and int(old["cut"]) == cut:
            return
        if rest or cut:
            self.backend.put(hidden, key, values.kept(orjson.dumps({"cut": cut, "v": rest})), now_us)
        else:
            self.backend.delete(hidden, key, now_us)

    # -- reading ---------------------------------------------------------------------

    def timeline(self, spec: NamespaceSpec, key: str, now_us: int | None = None,
                 until_us: int | None = None) -> tuple[int, list[Entry]]:
        """``(cut, versions oldest first)``: the kept ones within the policy, then
        the current one; with ``until_us``, the kept ones from the newest down
        to the first written at or before that time (see :meth:`kept`)."""
        live = self.core.lookup(spec, key)
        persisted: Stored | None = None
        if live is not None and live.tier == "hot" and spec.tier != "hot":
            persisted = self.backend.get(spec.name, key)  # a session-only copy supersedes it
        top = persisted or live
        cut = 0
        raw: list[list[Any]] = []
        if spec.history is not None:
            now = time.time_ns() // 1000 if now_us is None else now_us
            stored = persisted if persisted is not None else (live if live is not None and live.tier != "hot" else None)
            found = self.kept(spec, key, None if stored is None else stored.version,
                              None if top is None else top.version, now_us=now, until_us=until_us)
            end = (top.updated_us if top is not None else None)
            cut, raw = trim(spec.history, found.cut, found.entries, end, now)
        out = [Entry(int(v), int(c), int(u), bool(d), val, "history") for v, c, u, d, val in raw]
        for st in (persisted, live):
            if st is not None and (not out or out[-1].version < st.version or st is live):
                out.append(Entry(st.version, st.created_us, st.updated_us, False, values.loads(st.value), st.tier))
        return cut, out

    def at(self, spec: NamespaceSpec, key: str, when_us: int) -> Entry | None:
        """The version current at ``when_us`` (None: the key was absent then),
        or :class:`HistoryNotKept`."""
        cut, line = self.timeline(spec, key, until_us=when_us)
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
            keys.update(self.keys(spec))
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


__all__ = [
    "HEAD", "LAYOUT", "PREFIX", "SINCE_KEY", "Entry", "History", "Kept", "Version", "as_of_us", "history_namespace",
    "ring_size", "slot_name", "tag_of", "trim",
]
