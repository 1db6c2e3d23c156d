"""The Redis backend: one store shared by processes on several hosts.

``RedisBackend`` implements :class:`hrm_memory.core.backend.Backend` on one Redis
server (``MemoryManager(backend="redis://host:port/db")``) or a Redis Cluster
(``redis+cluster://host:port,host:port/0``: :mod:`.redis_cluster`). docs/redis.md
has the setup, the guarantees per persistence setting and what differs from the
file backend. Keys, all under one prefix (``hrm:`` by default; ``?prefix=``):
:mod:`.redis_keys` (live records, archive, quarantine, lease, change stream,
the set of namespaces, declarations).

Record keys appear only as hash fields and inside values, never in key names.
Every change is one Lua script (:mod:`hrm_memory.storage.redis.scripts`):
version, record and change-log entry in one atomic step.

Locks. ``lock(ns)`` is re-entrant per thread (a ``threading.RLock``) and,
across hosts, a lease taken lazily: a scope that only writes needs none (its
write is one atomic script, which waits while another holder has the lease),
and the first read inside a scope takes the lease and reads in one round
trip. The write that follows checks it still holds the lease (fencing: a
holder that outlived ``lease_ms`` gets :class:`LockTimeout` and changes
nothing) and ends it in the same script; a later read in the scope takes it
again, and the scope's end releases one still held. So ``update()`` is atomic
across hosts in two round trips, and a plain write costs one.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from hrm_memory.core.backend import ARCHIVE, CROSS_PROCESS, PERSISTENT
from hrm_memory.core.errors import CorruptRecord, LockTimeout, NotReplicated
from hrm_memory.core.records import Finding, Stored
from opentelemetry import trace
from redis.exceptions import RedisClusterException, RedisError

from .changes import NO_TRACE
from .cluster import as_redis_error, change_log, fence, side_for, topology, write_command
from .conn import Settings, failure
from .keys import KeyLayout
from ..purge_epochs import RedisPurgeEpochs
from .purge import persist, rewrite_stream
from .scripts import SCRIPTS, decode
from .upkeep import Upkeep, check

log = logging.getLogger("hrm_memory.redis")

_PUT, _DELETE, _ARCHIVE, _ERASE = SCRIPTS["put"], SCRIPTS["delete"], SCRIPTS["archive"], SCRIPTS["erase"]
_ACQUIRE, _RELEASE = SCRIPTS["acquire"], SCRIPTS["release"]
_DECLARE, _UNDECLARE, _DECLARATIONS = SCRIPTS["declare"], SCRIPTS["undeclare"], SCRIPTS["declarations"]
_BATCH = 500
_get_ident = threading.get_ident
_current_span = trace.get_current_span


class _Hold:
    """One namespace in this process: its keys, its re-entrant thread lock
    and the state of its lease. The context manager ``lock()`` returns."""

    __slots__ = ("backend", "namespace", "live", "cold", "quarantine", "lock", "wait", "rlock", "owner", "depth", "leased",
                 "cross", "stream", "nsset", "registered", "release")

    def __init__(self, backend: RedisBackend, namespace: str, registered: bool,
                 release: Callable[[_Hold], None]) -> None:
        self.backend = backend
        self.namespace = namespace
        self.live, self.cold, self.quarantine, self.lock, self.wait, self.stream, self.nsset = backend.layout.of(namespace)
        #: One server: the write script keeps the set of namespaces (a cluster registers each namespace once).
        self.registered = registered
        #: Gives the lease back once the outermost scope ends.
        self.release = release
        self.rlock = threading.RLock()
        self.owner = 0
        self.depth = 0
        self.leased = False
        self.cross = True

    def __enter__(self) -> _Hold:
        if not self.rlock.acquire(timeout=self.backend.lock_timeout):
            raise LockTimeout(f"namespace {self.namespace!r}: lock not acquired within {self.backend.lock_timeout} s",
                              namespace=self.namespace)
        if self.depth == 0:
            self.owner = _get_ident()
            self.leased = False
            self.cross = True
        self.depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        if self.depth == 0:
            if self.leased:
                self.leased = False
                self.release(self)
            self.owner = 0
        self.rlock.release()

    def mine(self) -> bool:
        """This thread is inside a cross-host scope of the namespace."""
        return self.depth > 0 and self.owner == _get_ident() and self.cross


class _ThreadOnly:
    """``lock(ns, cross_process=False)``: the thread lock without a lease."""

    def __init__(self, hold: _Hold) -> None:
        self.hold = hold

    def __enter__(self) -> _Hold:
        first = self.hold.depth == 0 or self.hold.owner != _get_ident()
        self.hold.__enter__()
        if first:
            self.hold.cross = False
        return self.hold

    def __exit__(self, *exc: object) -> None:
        self.hold.__exit__()


class RedisBackend:
    """Records, archive, leases, declarations and the change stream on one
    Redis server; see the module docstring. Thread-safe; fork-safe (a child
    gets its own connections, writer token and lease token)."""

    system = "redis"
    capabilities = frozenset({PERSISTENT, CROSS_PROCESS, ARCHIVE})

    def __init__(
        self, url: str, *, prefix: str | None = None, lock_timeout: float = 10.0, signal_log: bool = True
    ) -> None:
        self.topology = topology(url, prefix=prefix)
        self.settings: Settings = self.topology.settings
        self.prefix = self.settings.prefix
        self.lock_timeout = lock_timeout
        self._shown = self.settings.shown
        self.layout = KeyLayout(self.prefix, self.topology.cluster)
        self._client, self._cmd, self._cluster = side_for(self.topology, self.layout)
        self._wcmd = write_command(self.topology, self._client, self._cmd)  # write scripts (WAIT in wait=N mode)
        lay = self.layout
        self._stream, self._nsset, self._decl, self._declgen = lay.stream, lay.namespaces, lay.decl, lay.declgen
        self.changes = change_log(self.topology, self._client, self._cmd, lay, signal_log)  # one stream, or one per ns
        # On a cluster the two keys of the purge epochs share one hash tag (one slot, one script).
        epochs_prefix = "{" + self.prefix + "purges}" if self.topology.cluster else self.prefix
        self.purges = RedisPurgeEpochs(self._cmd, epochs_prefix, (RedisError,), lambda e, w: failure(e, w, self._shown))
        self._maxlen = self.settings.stream_maxlen if signal_log else 0
        self._holds: dict[str, _Hold] = {}
        self._guard = threading.Lock()
        self._decl_seen = ""
        self._token = ""
        self._new_token()
        renew = weakref.WeakMethod(self._new_token)
        os.register_at_fork(after_in_child=lambda: (fn := renew()) is not None and fn())

    def _new_token(self) -> None:
        self._token = f"{os.getpid()}.{random.getrandbits(64):016x}"
        for h in self._holds.values():
            h.depth, h.leased, h.owner = 0, False, 0
            h.rlock = threading.RLock()

    def _hold(self, namespace: str) -> _Hold:
        h = self._holds.get(namespace)
        if h is None:
            with self._guard:
                h = self._holds.get(namespace)
                if h is None:
                    h = self._holds[namespace] = _Hold(self, namespace, self._cluster is None, self._release)
        return h

    def lock(self, namespace: str, *, cross_process: bool | None = None) -> Any:
        h = self._holds.get(namespace) or self._hold(namespace)
        return _ThreadOnly(h) if cross_process is False else h

    # -- leases ---------------------------------------------------------------------

    def _wait(self, h: _Hold, res: list[Any], deadline: float | None, delay: float) -> tuple[float, float]:
        """After a script said no: raise, or block until the lease may be free."""
        code = res[0]
        if code == -3:
            raise CorruptRecord(f"a record of {h.namespace!r} in Redis is damaged; run check()", namespace=h.namespace)
        if code == -2:
            raise LockTimeout(
                f"the lease on {h.namespace!r} expired while held (longer than {self.settings.lease_ms} ms); "
                "the change was not applied",
                namespace=h.namespace,
            )
        now = time.monotonic()
        if deadline is None:
            deadline = now + self.lock_timeout
        if now >= deadline:
            raise LockTimeout(
                f"namespace {h.namespace!r}: another host held its lease for more than {self.lock_timeout} s",
                namespace=h.namespace,
            )
        # Block until the holder ends its lease (it pushes a token), it
        # expires, or a quarter second passes (then look again).
        pttl = int(res[1]) / 1000 if len(res) > 1 and int(res[1]) > 0 else delay
        timeout = max(0.001, min(pttl, 0.25, deadline - now))
        try:
            self._cmd("BLPOP", h.wait, f"{timeout:.3f}")
        except RedisError as exc:
            raise failure(exc, "waiting for a lease", self._shown, h.namespace) from None
        return deadline, delay

    def _acquire(self, h: _Hold, key: str | None = None) -> bytes | None:
        """Take (or extend) the lease; with ``key``, read that record in the same step."""
        deadline: float | None = None
        delay = 0.0005
        args = (self._token, self.settings.lease_ms) if key is None else (self._token, self.settings.lease_ms, key)
        while True:
            try:
                res = _ACQUIRE(self._cmd, (h.lock, h.live), *args)
            except RedisError as exc:
                raise failure(exc, "taking a lease", self._shown, h.namespace) from None
            if res[0] == 1:
                h.leased = True
                return res[1] if len(res) > 1 else None
            deadline, delay = self._wait(h, [-1, res[1]], deadline, delay)

    def _release(self, h: _Hold) -> None:
        try:
            _RELEASE(self._cmd, (h.lock, h.wait), self._token)
        except RedisError as exc:  # it expires by itself
            log.warning("could not release the lease on %s (%s); it expires in %d ms", h.namespace, exc,
                        self.settings.lease_ms)

    def _lease_for_read(self, h: _Hold) -> None:
        if h.mine() and not h.leased:
            self._acquire(h)

    # -- records --------------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Stored | None:
        h = self._holds.get(namespace) or self._hold(namespace)
        try:
            if h.depth and h.owner == _get_ident() and h.cross and not h.leased:
                blob = self._acquire(h, key)  # read-modify-write: lease and read in one step
            else:
                blob = self._cmd("HGET", h.live, key)
        except RedisError as exc:
            raise failure(exc, "a read", self._shown, namespace) from None
        if blob is None:
            return None
        stored = decode(key, blob, "warm", namespace)
        if stored is not None and stored.tier == "cold":
            return self._fetch_cold(h, key, stored.version)
        return stored

    def _fetch_cold(self, h: _Hold, key: str, version: int) -> Stored:
        try:
            blob = self._cmd("HGET", h.cold, key)
        except RedisError as exc:
            raise failure(exc, "an archive read", self._shown, h.namespace) from None
        found = decode(key, blob, "cold", h.namespace) if blob is not None else None
        if found is None or found.version != version:
            raise CorruptRecord(
                f"archived record {h.namespace}/{key!r}: the archive copy is missing or not version {version}",
                namespace=h.namespace,
                key=key,
            )
        return found

    def _trace_id(self) -> str:
        ctx = _current_span().get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else NO_TRACE

    def put(
        self, namespace: str, key: str, value: bytes, now_us: int, min_version: int = 1, created_us: int | None = None
    ) -> Stored:
        h = self._holds.get(namespace) or self._hold(namespace)
        changes = self.changes
        head, tail = changes.entry_parts("write", namespace, key, self._trace_id()) if changes else (b"", b"")
        keys = (h.live, h.lock, h.stream, h.nsset, h.cold, h.wait)
        unlisted: NotReplicated | None = None
        if not h.registered and self._cluster is not None:
            try:
                h.registered = self._cluster.register(self._wcmd, namespace)
            except NotReplicated as exc:
                # The registry has the namespace on its primary, unconfirmed:
                # the record is written all the same (a caller told
                # NotReplicated reads its write back), then the call says
                # what is not safe yet. The next write registers again.
                unlisted = exc
        body = b"%08x" % zlib.crc32(value) + value
        created = "" if created_us is None else created_us
        deadline: float | None = None
        delay = 0.0005
        while True:
            mode = "2" if h.leased and h.owner == _get_ident() else "1"
            try:
                res = _PUT(self._wcmd, keys, mode, self._token, key, body, now_us, min_version, created,
                           self._maxlen, head, tail, namespace)
            except RedisError as exc:
                raise failure(exc, "a write", self._shown, namespace) from None
            if res[0] > 0:
                break
            deadline, delay = self._wait(h, res, deadline, delay)
        if mode == "2":
            h.leased = False  # the script ended it
        version = res[0]
        if changes is not None:
            changes.logged("write", namespace, key, version)
        if unlisted is not None and self._cluster is not None:
            raise self._cluster.unconfirmed(unlisted, namespace, key)
        return Stored(key, version, int(res[1]), now_us, value, "warm")

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        h = self._holds.get(namespace) or self._hold(namespace)
        changes = self.changes
        head, tail = changes.entry_parts("delete", namespace, key, self._trace_id()) if changes else (b"", b"")
        deadline: float | None = None
        delay = 0.0005
        while True:
            mode = "2" if h.leased and h.owner == _get_ident() else "1"
            try:
                res = _DELETE(self._wcmd, (h.live, h.lock, h.stream, h.cold, h.wait), mode, self._token, key, now_us,
                              self._maxlen, head, tail)
            except RedisError as exc:
                raise failure(exc, "a delete", self._shown, namespace) from None
            if res[0] >= 0:
                break
            deadline, delay = self._wait(h, res, deadline, delay)
        if mode == "2":
            h.leased = False  # the script ended it
        if res[0] == 0:
            return None
        _, version, created, updated, kind = res
        if changes is not None:
            changes.logged("delete", namespace, key, version + 1)
        return Stored(key, version, int(created), int(updated), b"", "cold" if kind == b"a" else "warm")

    def _hscan(self, hkey: str, namespace: str) -> Iterator[tuple[str, bytes]]:
        """Every (field, value) of a hash, in batches (each at most once)."""
        cursor: Any = 0
        seen: set[bytes] | None = None
        while True:
            try:
                cursor, flat = self._cmd("HSCAN", hkey, cursor, "COUNT", _BATCH)
            except RedisError as exc:
                raise failure(exc, "a scan", self._shown, namespace) from None
            last = cursor in (0, b"0")
            if seen is None and not last:
                seen = set()
            # redis-py's reply callback turns HSCAN's flat list into a dict
            for field, value in flat.items():
                if seen is not None:
                    if field in seen:
                        continue
                    seen.add(field)
                yield field.decode(), value
            if last:
                return

    def scan(self, namespace: str, *, include_cold: bool = False, strict: bool = True) -> Iterator[Stored]:
        h = self._holds.get(namespace) or self._hold(namespace)
        self._lease_for_read(h)
        markers: dict[str, int] = {}
        for key, blob in self._hscan(h.live, namespace):
            try:
                st = decode(key, blob, "warm", namespace)
            except CorruptRecord:
                if strict:
                    raise
                continue
            if st is None:
                continue
            if st.tier == "cold":
                markers[key] = st.version
            else:
                yield st
        if include_cold and markers:
            names = list(markers)
            for i in range(0, len(names), _BATCH):
                chunk = names[i : i + _BATCH]
                try:
                    blobs = self._cmd("HMGET", h.cold, *chunk)
                except RedisError as exc:
                    raise failure(exc, "an archive scan", self._shown, namespace) from None
                for key, blob in zip(chunk, blobs):
                    try:
                        st = decode(key, blob, "cold", namespace) if blob is not None else None
                    except CorruptRecord:
                        if strict:
                            raise
                        continue
                    if st is not None and st.version == markers[key]:
                        yield st
                    elif strict:
                        raise CorruptRecord(f"archived record {namespace}/{key!r} is missing from the archive",
                                            namespace=namespace, key=key)

    def keys(self, namespace: str) -> list[tuple[str, int, int]]:
        return [(st.key, st.created_us, st.updated_us) for st in self.scan(namespace, strict=False)]

    # -- tiers ----------------------------------------------------------------------

    def archive(self, namespace: str, records: list[Stored]) -> list[str]:
        if not records:
            return []
        h = self._hold(namespace)
        self._lease_for_read(h)
        changes = self.changes
        tid = self._trace_id()
        versions = {st.key: st.version for st in records}
        moved: list[str] = []
        for i in range(0, len(records), _BATCH):
            args: list[Any] = []
            for st in records[i : i + _BATCH]:
                entry = changes.entry("archive", namespace, st.key, st.version, tid) if changes else b""
                args += [st.key, st.version, entry]
            deadline: float | None = None
            delay = 0.0005
            while True:
                mode = "2" if h.leased and h.owner == _get_ident() else "1"
                try:
                    res = _ARCHIVE(self._wcmd, (h.live, h.lock, h.stream, h.cold, h.wait), mode, self._token,
                                   self._maxlen, *args)
                except RedisError as exc:
                    raise failure(exc, "archiving", self._shown, namespace) from None
                if res[0] > 0:
                    break
                deadline, delay = self._wait(h, res, deadline, delay)
            if mode == "2":
                h.leased = False  # the script ended it; a later batch takes it again
                if i + _BATCH < len(records):
                    self._acquire(h)
            for raw in res[1]:
                key = raw.decode()
                moved.append(key)
                if changes is not None:
                    changes.logged("archive", namespace, key, versions[key])
        return moved

    def purge(self, namespace: str) -> dict[str, int]:
        """Every record, archive copy, quarantined blob and change-log entry
        of the namespace; then asks Redis to rewrite its AOF (and RDB
        snapshot, if it keeps one) so no old copy stays in those files."""
        h = self._hold(namespace)
        with h:
            self._acquire(h)
            try:
                counts = {"warm": 0, "cold": 0, "quarantine": 0}
                for _, blob in self._hscan(h.live, namespace):
                    counts["warm"] += blob[:1] in (b"w", b"a")
                pipe = self._client.pipeline(transaction=True)
                pipe.hlen(h.cold)
                pipe.hlen(h.quarantine)
                pipe.unlink(h.live, h.cold, h.quarantine)
                pipe.srem(h.nsset, namespace)
                cold, quarantined, _, _ = pipe.execute()
            except (RedisError, RedisClusterException) as exc:  # the cluster client's own errors too: typed
                raise failure(as_redis_error(exc), "a purge", self._shown, namespace) from None
            counts["cold"], counts["quarantine"] = int(cold), int(quarantined)
            counts["events"] = self._purge_events(namespace)
            self.purges.bump(namespace)  # after the data went: every host's recall index drops its rows
            fence(self.topology, self._wcmd, h.wait, namespace)  # wait=N: a replica has the purge before it returns
        counts["rewrite"] = self._rewrite_files(namespace)
        return counts

    def erase(self, namespace: str, key: str) -> dict[str, int]:
        """The key's fields in the namespace's live, archive and quarantine
        hashes and its change-log entries, in one script under the lease
        (every key it touches is in the namespace's slot on a cluster: the
        layout's hash tag); then the persistence files redone, as a purge
        does, when something was removed."""
        h = self._hold(namespace)
        with h:
            self._acquire(h)  # other hosts' read-modify-writes of the namespace wait
            keys = (h.live, h.lock, h.cold, h.quarantine, h.stream, h.stream + ":erasing")
            try:
                res = _ERASE(self._wcmd, keys, "2", self._token, namespace, key)
            except RedisError as exc:
                raise failure(exc, "a forget", self._shown, namespace) from None
            if int(res[0]) < 0:
                self._wait(h, res, None, 0.0)  # a key of another type, or the lease lost: typed, nothing changed
        out = dict(zip(("warm", "cold", "quarantine", "events"), (int(n) for n in res)))
        if any(out.values()):
            out["rewrite"] = self._rewrite_files(namespace)
        return out

    def _purge_events(self, namespace: str) -> int:
        """The change log without the namespace's entries: on a cluster its
        own stream goes; on one server the stream is rewritten without them
        (XDEL leaves their bytes): redis_purge.py."""
        if self._cluster is not None:
            return self._cluster.purge_events(namespace)
        try:
            return rewrite_stream(self._cmd, self._stream, namespace)
        except RedisError as exc:
            raise failure(exc, "purging the change log", self._shown, namespace) from None

    def _rewrite_files(self, namespace: str | None = None) -> int:
        """The AOF / RDB files redone from memory as it is now, waited for."""
        if self._cluster is not None:
            return self._cluster.rewrite_files()
        try:
            return persist(self._cmd, lambda name: str(self._client.config_get(name).get(name) or ""))
        except RedisError as exc:
            if "CONFIG" in str(exc) or "unknown command" in str(exc):  # CONFIG disabled on a managed server
                log.warning("purge: could not ask Redis to rewrite its files (%s); old copies stay until it does", exc)
                return 0
            raise failure(exc, "rewriting the persistence files after a purge", self._shown, namespace) from None

    # -- run-time declarations ------------------------------------------------------

    def declarations(self) -> dict[str, dict[str, Any]] | None:
        try:
            res = _DECLARATIONS(self._cmd, (self._decl, self._declgen), self._decl_seen)
        except RedisError as exc:
            raise failure(exc, "reading declarations", self._shown) from None
        if len(res) == 1:
            return None
        declared: dict[str, dict[str, Any]] = {}
        flat = res[1]
        for i in range(0, len(flat), 2):
            declared[flat[i].decode()] = self._spec(flat[i].decode(), flat[i + 1])
        self._decl_seen = res[0].decode()
        return declared

    def _spec(self, name: str, raw: bytes) -> dict[str, Any]:
        try:
            spec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            spec = None
        if type(spec) is not dict:
            raise CorruptRecord(f"run-time declaration {name!r} in Redis ({self._decl}) is damaged; left untouched",
                                namespace=name)
        return spec

    def declare(self, name: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        try:
            found = _DECLARE(self._wcmd, (self._decl, self._declgen), name, orjson.dumps(spec, option=orjson.OPT_SORT_KEYS))
        except RedisError as exc:
            raise failure(exc, "a declaration", self._shown, name) from None
        return None if found is None else self._spec(name, found)

    def undeclare(self, name: str) -> bool:
        try:
            return bool(_UNDECLARE(self._wcmd, (self._decl, self._declgen), name))
        except RedisError as exc:
            raise failure(exc, "an undeclaration", self._shown, name) from None

    # -- maintenance ----------------------------------------------------------------

    def _namespaces(self) -> list[str]:
        if self._cluster is not None:
            return self._cluster.namespaces()
        try:
            return sorted(m.decode() for m in self._cmd("SMEMBERS", self._nsset))
        except RedisError as exc:
            raise failure(exc, "listing namespaces", self._shown) from None

    def check(self, fix: bool = False) -> list[Finding]:
        return check(Upkeep(self.settings, self._client, self._decl, self._namespaces, self._hold, self._acquire,
                            self._hscan), fix)

    def compact(self, namespace: str | None = None) -> int:
        """Nothing to rewrite: Redis frees a record's memory when it is
        replaced (tombstones stay: they keep versions from going back)."""
        return 0

    def stats(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for ns in self._namespaces():
            h = self._hold(ns)
            row = {"keys": 0, "archived": 0, "bytes": 0, "cold_bytes": 0}
            for _, blob in self._hscan(h.live, ns):
                kind = blob[:1]
                if kind == b"w":
                    row["keys"] += 1
                    row["bytes"] += len(blob.split(b":", 3)[-1]) - 8
                elif kind == b"a":
                    row["archived"] += 1
            for _, blob in self._hscan(h.cold, ns):
                row["cold_bytes"] += len(blob)
            out[ns] = row
        return out

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": self._shown,
            "prefix": self.prefix,
            "locking": "lease",
            "lease_ms": self.settings.lease_ms,
            "stream_maxlen": self.settings.stream_maxlen,
            "change_log_gaps": self.changes.gaps if self.changes is not None else 0,
            "cluster": self._cluster is not None, "wait": self.topology.wait,
        }
        try:
            conf = self._client.config_get("append*")
            out["appendonly"], out["appendfsync"] = conf.get("appendonly"), conf.get("appendfsync")
        except RedisError:
            out["appendonly"] = out["appendfsync"] = "unknown"
        return out

    def close(self) -> None:
        self._client.close()
        if self._cluster is None:
            self._client.connection_pool.disconnect()

    def __repr__(self) -> str:
        return f"RedisBackend({self._shown!r}, prefix={self.prefix!r})"


__all__ = ["RedisBackend"]
