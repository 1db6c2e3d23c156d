"""``check()`` of the Redis backend: walk every namespace's hashes and report
(and with ``fix``, repair) what does not add up.

Findings: ``corrupt-record`` (a blob with a bad header or checksum; fixed by
moving it to the namespace's quarantine hash, ``<prefix>q:<namespace>``),
``dangling-archive-marker`` (an archived record whose archive copy is
missing or of another version; fixed by a tombstone, as the file backend
does), ``orphan-archive-copy`` (an archive copy no marker points at; fixed by
removing it), ``foreign-key`` (one of this store's keys holds another Redis
type: reported only), ``corrupt-declaration`` (reported only) and
``eviction-possible`` (the server may evict keys when full: reported only).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import orjson
from hrm_memory.core.errors import CorruptRecord
from hrm_memory.core.records import Finding
from redis.exceptions import RedisError, ResponseError

from .conn import Settings, failure
from .scripts import decode


class _Hold(Protocol):
    live: str
    cold: str
    quarantine: str

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


class Upkeep(NamedTuple):
    """What check() needs of :class:`hrm_memory.storage.redis.backend.RedisBackend`,
    handed over by the backend itself."""

    settings: Settings
    client: Any
    #: the hash of run-time declarations
    decl: str
    namespaces: Callable[[], list[str]]
    #: the namespace's hold: its keys, and its lock as a context manager
    hold: Callable[[str], Any]
    #: take the namespace's lease across hosts (inside its hold)
    acquire: Callable[[Any], bytes | None]
    #: ``(key, blob)`` of a hash of the namespace
    hscan: Callable[[str, str], Iterator[tuple[str, bytes]]]


def check(backend: Upkeep, fix: bool) -> list[Finding]:
    findings: list[Finding] = []
    client = backend.client
    where = backend.settings.shown
    for ns in backend.namespaces():
        h: _Hold = backend.hold(ns)
        markers: dict[str, int] = {}
        with h:
            if fix:
                backend.acquire(h)
            try:
                live = list(backend.hscan(h.live, ns))
                cold = dict(backend.hscan(h.cold, ns))
            except CorruptRecord as exc:  # WRONGTYPE: not our hash
                findings.append(Finding("foreign-key", f"{where}/{h.live}", str(exc), ns))
                continue
            try:
                for key, blob in live:
                    try:
                        st = decode(key, blob, "warm", ns)
                    except CorruptRecord as exc:
                        findings.append(Finding("corrupt-record", f"{where}/{h.live}", str(exc), ns, fixed=fix))
                        if fix:
                            client.hset(h.quarantine, key, blob)
                            client.hdel(h.live, key)
                        continue
                    if st is None or st.tier != "cold":
                        continue
                    copy = cold.get(key)
                    ok = False
                    if copy is not None:
                        try:
                            found = decode(key, copy, "cold", ns)
                            ok = found is not None and found.version == st.version
                        except CorruptRecord:
                            ok = False
                    if ok:
                        markers[key] = st.version
                        continue
                    findings.append(
                        Finding("dangling-archive-marker", f"{where}/{h.cold}",
                                f"archived record {ns}/{key!r}: no readable archive copy of version {st.version}",
                                ns, fixed=fix)
                    )
                    if fix:
                        now = time.time_ns() // 1000
                        client.hset(h.live, key, b"t%d:%d:%d:" % (st.version + 1, st.created_us, now))
                        if copy is not None:
                            client.hset(h.quarantine, key, copy)
                            client.hdel(h.cold, key)
                for key in cold.keys() - markers.keys():
                    if any(f.kind == "dangling-archive-marker" and f"{key!r}" in f.detail for f in findings):
                        continue
                    findings.append(
                        Finding("orphan-archive-copy", f"{where}/{h.cold}",
                                f"archive copy of {ns}/{key!r} that no record points at", ns, fixed=fix)
                    )
                    if fix:
                        client.hdel(h.cold, key)
            except RedisError as exc:
                raise failure(exc, "check", where, ns) from None
    try:
        conf = client.config_get("maxmemory*")
        policy, limit = conf.get("maxmemory-policy", "noeviction"), int(conf.get("maxmemory", 0) or 0)
        if limit and policy != "noeviction":
            findings.append(Finding("eviction-possible", where,
                                    f"maxmemory {limit} with maxmemory-policy {policy}: Redis may drop records "
                                    "silently when full; use noeviction (writes then fail with StorageError)"))
    except RedisError:
        pass  # CONFIG disabled (a managed server): not ours to judge
    try:
        declared = client.hgetall(backend.decl)
    except ResponseError as exc:
        findings.append(Finding("foreign-key", f"{where}/{backend.decl}", str(exc)))
        declared = {}
    except RedisError as exc:
        raise failure(exc, "check", where) from None
    for name, raw in declared.items():
        try:
            ok = type(orjson.loads(raw)) is dict
        except orjson.JSONDecodeError:
            ok = False
        if not ok:
            findings.append(Finding("corrupt-declaration", f"{where}/{backend.decl}",
                                    f"run-time declaration {name.decode()!r} is not a JSON object"))
    return findings


__all__ = ["Upkeep", "check"]
