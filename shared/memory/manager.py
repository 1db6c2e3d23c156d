"""The MemoryManager: the single access point to every HRM's memory.

Every public operation takes the same path: validate namespace, key and value;
check scope; lock (writes); open a span; call the tier; commit; close the
span. Scoped handles and adapters call the same methods, so none of them can
skip a step.
"""

from __future__ import annotations

import fnmatch
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
from opentelemetry import trace

from . import values
from . import fsutil as _fs
from .errors import (
    AccessDenied,
    CorruptRecord,
    InvalidNamespace,
    MemoryStoreError,
    StorageError,
    StoreClosed,
    Unsupported,
)
from .locks import NamespaceLocks
from .records import Event, Finding, Record, Stored
from .spec import NamespaceSpec, Registry, check_key, check_namespace
from .codes import Codec, default_registry
from .consent import Consent
from .events import Callback, EventBus, Subscription
from .schemas import Schemas
from .tiers import ARCHIVE
from .tracing import TokensSaved, Tracing, current_trace_id

DURABILITY = ("fsync", "flush")


class InvalidArgument(MemoryStoreError, ValueError):
    """An argument other than a namespace, key or value is out of range."""


def default_root() -> Path:
    """``$HRM_MEMORY_ROOT``, else ``$XDG_DATA_HOME/hrm-memory`` (``~/.local/share/hrm-memory``)."""
    env = os.environ.get("HRM_MEMORY_ROOT")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "hrm-memory"


def _now_us() -> int:
    return time.time_ns() // 1000


class MemoryManager:
    """Read, write, query and update HRM memory across hot, warm and cold tiers.

    Parameters
    ----------
    root:
        Storage root; default :func:`default_root`. Layout: ``warm/``,
        ``cold/``, ``locks/``, ``meta/``, ``quarantine/`` (damaged bytes kept
        aside), ``run/`` (crash-recovery notes).
    locking:
        ``True`` takes a per-namespace file lock around every write, delete
        and update, so several processes may write one root. ``False``
        (default) assumes one writing process per root (any number of
        readers): writes stay atomic, but concurrent ``update`` calls from
        several processes may lose increments.
    durability:
        ``"fsync"`` (default): once a write returns, the record survives power
        loss. ``"flush"``: it survives a crash of the process, not of the OS.
    lock_timeout:
        Seconds to wait for a file lock before :class:`LockTimeout`.
    namespaces:
        The declared namespaces; default: the seed set of the ``namespaces``
        package. Namespaces declared at run time are added from the store.
    tracer_provider:
        OpenTelemetry provider; default: the global one.
    cache_size:
        Entries of the hot read cache in front of the warm tier.
    deferred_spans:
        With the OpenTelemetry SDK, record spans on the caller's path and
        finish them on a background thread (see :mod:`shared.memory.tracing`).
    signal_log:
        Append every persisted change to the cross-process signal log
        (``events/``), which other processes' subscriptions read.
    poll_interval:
        How often (seconds) a process with cross-process subscriptions
        checks the signal log.

    Thread-safe. Opening reads no stored data, so it costs the same at any size.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        locking: bool = False,
        durability: str = "fsync",
        lock_timeout: float = 10.0,
        namespaces: Iterable[NamespaceSpec] | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        cache_size: int = 100_000,
        deferred_spans: bool = True,
        signal_log: bool = True,
        poll_interval: float = 0.005,
    ) -> None:
        # Imported here, not at module level: ``storage`` depends on this
        # package's contracts, and the manager is the one place that wires
        # the default tiers together.
        from storage import ColdTier, HotTier, ReadCache, WarmTier

        if durability not in DURABILITY:
            raise InvalidArgument(f"durability must be one of {DURABILITY}, not {durability!r}")
        if not lock_timeout >= 0:
            raise InvalidArgument("lock_timeout must be >= 0")
        self.root = Path(root if root is not None else default_root()).absolute()
        self.locking = bool(locking)
        self.durability = durability
        self._closed = False
        try:
            _fs.make_dirs(self.root, durable=durability == "fsync")
        except OSError as exc:
            raise _fs.storage_error(exc, "create the store root", self.root) from None
        if not self.root.is_dir():
            raise StorageError(f"store root {self.root} is not a directory", path=str(self.root))
        if namespaces is None:
            from namespaces import seed

            namespaces = seed()
        self._registry = Registry(namespaces)
        self._declared_stamp: tuple[int, int] | None = None
        self._load_declared()
        self._locks = NamespaceLocks(self.root / "locks", cross_process=self.locking, timeout=lock_timeout)
        self._cache = ReadCache(cache_size)
        self._hot = HotTier()
        self._warm = WarmTier(self.root, locks=self._locks, durability=durability, cache=self._cache)
        self._cold = ColdTier(self.root, durability=durability)
        if ARCHIVE not in self._cold.capabilities:
            # Declared, not probed: archiving needs a tier that takes records.
            raise Unsupported(f"the cold tier {type(self._cold).__name__} cannot archive")
        self._tracing = Tracing(tracer_provider, deferred=deferred_spans)
        self._events = EventBus(
            self.root, report_error=self._callback_failed, poll_interval=poll_interval, log_events=signal_log
        )
        self._specs = self._registry._specs  # read-only fast path for the hot loop
        self.consent = Consent(self)
        self._schemas = Schemas()
        self._codec_registry = default_registry()
        self._codecs: dict[str, Codec | None] = {}

    # -- context management ----------------------------------------------------

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release files and locks. Idempotent. Hot-tier data ends here."""
        if self._closed:
            return
        self._closed = True
        self._events.close()
        self._tracing.flush()
        self._warm.close()
        self._locks.close()
        self._cold.close()
        self._hot.close()
        self._cache.clear()

    def __repr__(self) -> str:
        return f"MemoryManager(root={str(self.root)!r}, locking={self.locking}, durability={self.durability!r})"

    # -- namespaces ----------------------------------------------------------------

    def namespaces(self) -> list[NamespaceSpec]:
        """The declared namespaces (seed and run-time), sorted by name."""
        return list(self._registry)

    def declare(self, spec: NamespaceSpec | str, **fields: Any) -> NamespaceSpec:
        """Declare a namespace at run time (a spec, or a name plus spec fields).

        The declaration is stored under ``meta/`` so that other processes and
        later sessions on this root know it. Re-declaring an identical spec is
        a no-op; a conflicting one raises :class:`InvalidNamespace`."""
        self._check_open()
        if isinstance(spec, str):
            spec = NamespaceSpec(spec, **fields)
        elif not isinstance(spec, NamespaceSpec):
            raise InvalidArgument(f"declare() takes a NamespaceSpec or a namespace name, not {type(spec).__name__}")
        elif fields:
            raise InvalidArgument("pass either a NamespaceSpec or a name with fields, not both")
        self._registry.declare(spec)
        with self._locks.hold("meta.namespaces", cross_process=True):
            declared = self._read_declared()
            stored = declared.get(spec.name)
            if stored is not None and stored != spec.to_dict():
                # Declared differently by another process: never overwrite a
                # declaration (it may carry a consent gate) from here.
                raise InvalidNamespace(
                    f"namespace {spec.name!r} is already declared differently in this store", namespace=spec.name
                )
            if stored is None:
                declared[spec.name] = spec.to_dict()
                path = self.root / "meta" / "namespaces.json"
                _fs.make_dirs(path.parent, durable=True)
                _fs.atomic_write(path, orjson.dumps(declared, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        return spec

    def _read_declared(self) -> dict[str, Any]:
        try:
            data = (self.root / "meta" / "namespaces.json").read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise _fs.storage_error(exc, "read", self.root / "meta" / "namespaces.json") from None
        path = self.root / "meta" / "namespaces.json"
        try:
            declared = orjson.loads(data)
        except orjson.JSONDecodeError:
            declared = None
        if type(declared) is not dict or not all(type(v) is dict for v in declared.values()):
            # Never reset: the file is left as it is for a person to repair.
            raise CorruptRecord(
                f"{path} is damaged (expected an object of namespace specs); run-time declarations "
                "cannot be read and the file was left untouched",
                path=str(path),
            )
        return declared

    def _load_declared(self) -> None:
        """Add run-time declarations made (by any process) since the last look;
        the file is parsed again only when its size or mtime changed."""
        try:
            st = os.stat(self.root / "meta" / "namespaces.json")
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        except OSError as exc:
            raise _fs.storage_error(exc, "read", self.root / "meta" / "namespaces.json") from None
        if stamp is not None and stamp == self._declared_stamp:
            return
        self._declared_stamp = stamp
        for name, data in self._read_declared().items():
            try:
                spec = NamespaceSpec.from_dict(data)
            except (MemoryStoreError, TypeError) as exc:
                raise CorruptRecord(
                    f"{self.root / 'meta' / 'namespaces.json'}: entry {name!r} is not a valid namespace spec ({exc})",
                    path=str(self.root / "meta" / "namespaces.json"),
                ) from None
            if spec.name not in self._registry:
                self._registry.declare(spec)

    def _spec(self, namespace: str) -> NamespaceSpec:
        try:
            spec = self._specs.get(namespace)
        except TypeError:  # unhashable: certainly not a namespace
            check_namespace(namespace)
            raise
        if spec is not None:
            return spec
        if self._closed:
            raise StoreClosed("the memory manager is closed")
        if isinstance(namespace, str) and namespace not in self._registry:
            check_namespace(namespace)
            self._load_declared()  # another process may have declared it since
        return self._registry.get(namespace)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the memory manager is closed")

    # -- the operations -------------------------------------------------------------

    def read(self, namespace: str, key: str, default: Any = None, *, expand: bool = False) -> Any:
        """The stored value of ``key``, or ``default`` if there is none.

        Finds archived keys in the cold tier too (the span says
        ``tier=cold``; :meth:`get_record` gives the tier). Raises
        :class:`InvalidNamespace`, :class:`InvalidKey`, :class:`CorruptRecord`."""
        stored = self._get("read", namespace, key)
        if stored is None:
            return default
        value = values.loads(stored.value)
        return self._expand(namespace, value) if expand else value

    def get_record(self, namespace: str, key: str, *, expand: bool = False) -> Record | None:
        """The :class:`Record` of ``key`` (value with version, times and tier), or None."""
        stored = self._get("get", namespace, key)
        if stored is None:
            return None
        value = values.loads(stored.value)
        if expand:
            value = self._expand(namespace, value)
        return Record.from_stored(namespace, stored, value, stored.tier != "hot")

    def expand(self, namespace: str, value: Any) -> Any:
        """The readable form of a stored (compact) ``value`` of ``namespace``:
        field aliases and value codes replaced by what they stand for."""
        self._spec(namespace)
        return self._expand(namespace, value)

    def _codec(self, spec: NamespaceSpec) -> Codec | None:
        try:
            return self._codecs[spec.name]
        except KeyError:
            codec = self._codecs[spec.name] = self._codec_registry.for_spec(spec.codec)
            return codec

    def _expand(self, namespace: str, value: Any) -> Any:
        codec = self._codec(self._specs[namespace])
        return value if codec is None else codec.expand(value)

    def _encode(self, spec: NamespaceSpec, key: str, value: Any) -> tuple[bytes, Any]:
        """Validate ``value`` (JSON, schema) and return ``(stored bytes,
        tokens_saved attribute)``: the compact form when the namespace has a
        codec. Token counting is deferred to span finishing (it costs a few
        microseconds per kilobyte)."""
        data = values.encode(value, limit=spec.max_value_bytes, namespace=spec.name, key=key)
        if spec.schema is not None:
            self._schemas.validate(spec, key, value)
        codec = self._codec(spec)
        if codec is None:
            return data, 0
        # The compact form of checked JSON is JSON (the codec only renames
        # keys and strings): a plain dump, without a second exactness check.
        compact = orjson.dumps(codec.compact(value))
        if len(compact) > spec.max_value_bytes:
            compact = values.encode(codec.compact(value), limit=spec.max_value_bytes, namespace=spec.name, key=key)
        return compact, TokensSaved(data, compact)

    def _get(self, op: str, namespace: str, key: str) -> Stored | None:
        self._check_open()
        span = self._tracing.start(op, namespace, key)
        try:
            spec = self._spec(namespace)
            check_key(key, namespace)
            stored = self._lookup(spec, key)
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end(
                {
                    "hrm.memory.hit": stored is not None,
                    "hrm.memory.tier": stored.tier if stored is not None else spec.tier,
                    "hrm.memory.bytes": len(stored.value) if stored is not None else 0,
                },
            )
        return stored

    def write(self, namespace: str, key: str, value: Any, *, imported: bool = False) -> str:
        """Store ``value`` under ``key``; return the operation's trace id (hex).

        The value must be plain JSON data; anything else raises
        :class:`InvalidValue` and changes nothing. With ``durability="fsync"``
        the record is on stable storage when this returns. In a consent-gated
        namespace whose category is not granted the value stays in this
        process only (``get_record(...).persisted`` is False), unless
        ``imported=True``: data that existed before this store (a migration
        of legacy files) is persisted whatever the consent, and the span
        records ``hrm.memory.imported``."""
        self._check_open()
        span = self._tracing.start("write", namespace, key)
        trace_id = current_trace_id(span)
        try:
            spec = self._spec(namespace)
            check_key(key, namespace)
            data, saved = self._encode(spec, key, value)
            with self._locks.hold(namespace):
                stored = self._put(spec, key, data, imported)
                self._events.record("write", namespace, key, stored.version, trace_id, stored.tier != "hot")
            if spec.max_keys is not None and stored.created_us == stored.updated_us:
                self._enforce_cap(spec, trace_id)  # only a new key can exceed the cap
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            attrs = {
                "hrm.memory.tier": stored.tier,
                "hrm.memory.bytes": len(data),
                "hrm.memory.version": stored.version,
                "hrm.memory.persisted": stored.tier != "hot",
                "hrm.memory.tokens_saved": saved,
            }
            if imported:
                attrs["hrm.memory.imported"] = True
            span.end(attrs)
        if self._events._queue:
            self._events.dispatch()
        return trace_id

    def _put(self, spec: NamespaceSpec, key: str, data: bytes, imported: bool = False) -> Stored:
        """Commit to the namespace's home tier; the caller holds the namespace lock.

        A consent-gated namespace whose category is not granted is committed
        to the hot tier instead (this process only): nothing reaches disk."""
        if spec.tier == "hot":
            return self._hot.put(spec.name, key, data, _now_us())
        if spec.consent is not None:
            if not imported and not self.consent.granted(spec.consent):
                base = self._lookup(spec, key)
                return self._hot.put(spec.name, key, data, _now_us(), base_version=base.version if base else 0)
            self._hot.delete(spec.name, key, _now_us())  # a session-only copy is superseded
        return self._warm.put(spec.name, key, data, _now_us())

    def _lookup(self, spec: NamespaceSpec, key: str) -> Stored | None:
        """The current record: hot tier, else (for a gated namespace) the
        session-only copy, else warm, else the cold archive."""
        if spec.tier == "hot":
            return self._hot.get(spec.name, key)
        if spec.consent is not None:
            shadow = self._hot.get(spec.name, key)
            if shadow is not None:
                return shadow
        stored = self._warm.get(spec.name, key)
        if stored is not None and stored.tier == "cold":
            stored = self._fetch_cold(spec.name, key, stored)
        return stored

    def _fetch_cold(self, namespace: str, key: str, marker: Stored) -> Stored:
        """The archived copy a warm marker points at, checked to be the
        version the marker names (a cached frame may be out of date if
        another process purged and re-archived)."""
        found = self._cold.fetch(namespace, key, marker.value)
        if found.version != marker.version:
            self._cold.forget(namespace, marker.value)
            found = self._cold.fetch(namespace, key, marker.value)
            if found.version != marker.version:
                raise CorruptRecord(
                    f"archived record {namespace}/{key!r}: version {found.version} where the marker says "
                    f"{marker.version}",
                    namespace=namespace,
                    key=key,
                )
        return found

    def update(self, namespace: str, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """Atomically replace the value of ``key`` by ``fn(current)`` and return it.

        ``fn`` gets the current value in its readable (expanded) form, or
        ``default`` when there is none, and returns the new readable value,
        which is stored (compacted) and returned. The read and the write happen under the namespace's
        lock (across processes when ``locking=True``), so concurrent updates
        never lose one another. If ``fn`` raises, nothing is stored and the
        exception propagates."""
        self._check_open()
        if not callable(fn):
            raise InvalidArgument(f"update() needs a function of the current value, not {type(fn).__name__}")
        span = self._tracing.start("update", namespace, key)
        trace_id = current_trace_id(span)
        try:
            spec = self._spec(namespace)
            check_key(key, namespace)
            with self._locks.hold(namespace):
                current = self._lookup(spec, key)
                new = fn(default if current is None else self._expand(namespace, values.loads(current.value)))
                data, saved = self._encode(spec, key, new)
                stored = self._put(spec, key, data)
                self._events.record("write", namespace, key, stored.version, trace_id, stored.tier != "hot")
            if spec.max_keys is not None and stored.created_us == stored.updated_us:
                self._enforce_cap(spec, trace_id)  # only a new key can exceed the cap
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end(
                {
                    "hrm.memory.tier": stored.tier,
                    "hrm.memory.hit": current is not None,
                    "hrm.memory.bytes": len(data),
                    "hrm.memory.version": stored.version,
                    "hrm.memory.persisted": stored.tier != "hot",
                    "hrm.memory.tokens_saved": saved,
                },
            )
        if self._events._queue:
            self._events.dispatch()
        return new

    def delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; return True if it existed. An archived key is
        removed from view (the cold copy stays until a purge)."""
        self._check_open()
        span = self._tracing.start("delete", namespace, key)
        trace_id = current_trace_id(span)
        try:
            spec = self._spec(namespace)
            check_key(key, namespace)
            with self._locks.hold(namespace):
                old = None
                if spec.tier == "hot" or spec.consent is not None:
                    old = self._hot.delete(namespace, key, _now_us())
                if spec.tier != "hot":
                    old = self._warm.delete(namespace, key, _now_us()) or old
                    self._cache.discard((namespace, key))
                if old is not None:
                    self._events.record("delete", namespace, key, old.version + 1, trace_id, old.tier != "hot")
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end({"hrm.memory.hit": old is not None, "hrm.memory.tier": spec.tier})
        if self._events._queue:
            self._events.dispatch()
        return old is not None

    def query(
        self,
        namespace: str = "*",
        key: str = "*",
        *,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
        include_cold: bool = False,
        expand: bool = False,
    ) -> list[Record]:
        """Records whose namespace and key match the globs, ordered by
        (namespace, key).

        ``where`` keeps records whose value is a dict with each given field
        (a dotted path reaches into nested dicts) equal to the given value.
        ``limit`` caps the number returned. Archived records are included
        only with ``include_cold=True`` (their ``tier`` is ``"cold"``)."""
        return self._run_query(namespace, key, where, limit, include_cold, None, expand)

    def _run_query(
        self,
        namespace: str,
        key: str,
        where: dict[str, Any] | None,
        limit: int | None,
        include_cold: bool,
        scope: Scope | None,
        expand: bool = False,
    ) -> list[Record]:
        self._check_open()
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidArgument(f"limit must be a non-negative int, not {limit!r}")
        if not isinstance(namespace, str) or not isinstance(key, str):
            raise InvalidArgument("namespace and key patterns must be str globs")
        if where is not None and (not isinstance(where, dict) or not all(type(f) is str for f in where)):
            raise InvalidArgument("where must be a dict of field name (str, dots for nesting) -> value")
        span = self._tracing.start("query", namespace, key)
        try:
            specs = self._match_namespaces(namespace)
            if scope is not None:
                specs = scope._filter(namespace, specs)
            out = self._query(specs, key, where, limit, include_cold, expand)
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end(
                {
                    "db.response.returned_rows": len(out),
                    "hrm.memory.include_cold": include_cold,
                    "hrm.memory.where_fields": sorted(where) if where else [],
                },
            )
        return out

    def _match_namespaces(self, pattern: str) -> list[NamespaceSpec]:
        if pattern in self._specs:
            return [self._specs[pattern]]
        self._load_declared()
        return [s for s in self._registry if fnmatch.fnmatchcase(s.name, pattern)]

    def _query(
        self,
        specs: list[NamespaceSpec],
        key_glob: str,
        where: dict[str, Any] | None,
        limit: int | None,
        include_cold: bool,
        expand: bool = False,
    ) -> list[Record]:
        match_all = key_glob == "*"
        exact = not match_all and not any(c in key_glob for c in "*?[")
        out: list[Record] = []
        for spec in specs:
            ns = spec.name
            if exact:
                stored = self._lookup(spec, key_glob)
                if stored is not None and stored.tier == "cold" and not include_cold:
                    stored = None
                found: Iterable[Stored] = [stored] if stored is not None else []
            elif spec.tier == "hot":
                found = self._hot.scan(ns)
            else:
                found = self._warm.scan(ns)
                if include_cold:
                    found = [*found, *self._cold_current(ns)]
                if spec.consent is not None and self._hot.count(ns):
                    merged = {st.key: st for st in found}
                    merged.update((st.key, st) for st in self._hot.scan(ns))
                    found = merged.values()
            rows = []
            for st in found:
                if not (match_all or fnmatch.fnmatchcase(st.key, key_glob)):
                    continue
                value = values.loads(st.value)
                readable = self._expand(ns, value) if (expand or where) else value
                if where and not _matches(readable, where):
                    continue
                if expand:
                    value = readable
                rows.append(Record.from_stored(ns, st, value, st.tier != "hot"))
            rows.sort(key=lambda r: r.key)
            out.extend(rows)
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    def _cold_current(self, namespace: str) -> Iterator[Stored]:
        """The archived copies that are still current (their warm marker
        names that version), each once, streamed frame by frame."""
        markers = {s.key: s.version for s in self._warm.scan(namespace, archived=True) if s.tier == "cold"}
        if not markers:
            return
        for st in self._cold.scan(namespace):
            if markers.get(st.key) == st.version:
                del markers[st.key]
                yield st

    # -- subscriptions --------------------------------------------------------------

    def subscribe(
        self,
        namespace: str,
        callback: Callback,
        key: str = "*",
        *,
        remote: bool = True,
        since: str | None = None,
    ) -> Subscription:
        """Call ``callback(Event)`` for every change to a namespace matching
        the glob ``namespace`` (and key glob ``key``).

        Changes made through this manager are delivered after they commit,
        outside every store lock, in commit order per key, on the writing
        thread. With ``remote=True`` (default) changes made by other
        processes on the same root (persisted namespaces only) are delivered
        too, from a background thread, in commit order per key; ``since`` (a
        cursor from :meth:`cursor`) first replays those logged after it. A
        callback that raises is logged and traced; it breaks neither the
        write nor other callbacks. Returns a :class:`Subscription`; call
        ``cancel()`` or use it as a context manager."""
        self._check_open()
        if not isinstance(namespace, str) or not isinstance(key, str) or not callable(callback):
            raise InvalidArgument("subscribe(namespace_glob, callback, key_glob='*')")
        span = self._tracing.start("subscribe", namespace, key)
        try:
            sub = self._events.subscribe(namespace, callback, key, remote, since)
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end({"hrm.memory.remote": remote, "hrm.memory.replay": since is not None})
        return sub

    def cursor(self) -> str:
        """A position in the cross-process signal log: keep it, and later
        :meth:`events_since` (or ``subscribe(..., since=...)``) gives what
        happened after it."""
        self._check_open()
        return self._events.cursor()

    def events_since(self, cursor: str, namespace: str = "*", key: str = "*") -> tuple[list[Event], str]:
        """Persisted changes logged after ``cursor`` (by any process) matching
        the globs, oldest first, and the cursor to resume from. Raises
        :class:`CursorExpired` when the log no longer reaches back that far."""
        self._check_open()
        span = self._tracing.start("events_since", namespace, key)
        try:
            out = self._events.since(cursor, namespace, key)
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end({"db.response.returned_rows": len(out[0])})
        return out

    def _callback_failed(self, sub: Subscription, event: Event, exc: BaseException) -> None:
        span = self._tracing.start("notify", event.namespace, event.key)
        if span is not None:
            span.end({"hrm.memory.subscription": sub.namespace, "hrm.memory.event": event.op}, exc)

    # -- consent ------------------------------------------------------------------

    def _persist_session_data(self, namespace: str) -> int:
        """Move this session's hot copies of a gated namespace to warm (on grant)."""
        n = 0
        with self._locks.hold(namespace):
            for st in list(self._hot.scan(namespace)):
                stored = self._warm.put(namespace, st.key, st.value, _now_us(), min_version=st.version)
                self._hot.delete(namespace, st.key, _now_us())
                self._events.record("write", namespace, st.key, stored.version, current_trace_id(None), True)
                n += 1
        if self._events._queue:
            self._events.dispatch()
        return n

    def _purge_namespace(self, namespace: str) -> dict[str, int]:
        """Remove every value of ``namespace`` from disk (consent revoked with purge)."""
        with self._locks.hold(namespace):
            keys = [st.key for st in self._warm.scan(namespace, archived=True)]
            for key in keys:
                self._warm.delete(namespace, key, _now_us())
                self._cache.discard((namespace, key))
            self._warm.compact(namespace)
            # A compaction cut short by a crash may have left a copy behind.
            for temp in (self.root / "warm" / namespace).glob(".*.compact"):
                temp.unlink(missing_ok=True)
            cold = self._cold.purge(namespace)
            quarantined = 0
            qdir = self.root / "quarantine"
            if qdir.is_dir():
                for path in qdir.iterdir():
                    if path.name.startswith((f"warm__{namespace}__", f"cold__{namespace}__")):
                        path.unlink()
                        quarantined += 1
        return {"warm": len(keys), "cold": cold, "quarantine": quarantined}

    # -- scopes ------------------------------------------------------------------

    def scope(self, hrm: str) -> Scope:
        """A handle for one HRM: writes only namespaces it owns (``hrm.*``),
        reads those and ``shared.*``; anything else raises :class:`AccessDenied`."""
        if not isinstance(hrm, str) or not hrm.isidentifier() or not hrm.islower():
            raise InvalidArgument(f"invalid HRM name {hrm!r}")
        return Scope(self, hrm)

    # -- tiers: archive and caps ----------------------------------------------------

    def archive(self, now: float | None = None) -> dict[str, int]:
        """Move warm records older than their namespace's TTL (by last update)
        to the cold tier. Returns the count moved per namespace.

        Records are written to cold (and fsynced) before the warm tier marks
        them archived, so a crash in between leaves a record in both tiers,
        never in neither; nothing is deleted."""
        self._check_open()
        if now is not None and (type(now) not in (int, float) or not math.isfinite(now) or abs(now) > 1e11):
            raise InvalidArgument(f"now must be a finite number of epoch seconds, not {now!r}")
        span = self._tracing.start("archive", None, None)
        now_us = int((time.time() if now is None else now) * 1_000_000)
        moved: dict[str, int] = {}
        try:
            for spec in self._registry:
                if spec.tier == "hot" or spec.ttl is None:
                    continue
                cutoff = now_us - int(spec.ttl * 1_000_000)
                with self._locks.hold(spec.name):
                    old = [s for s in self._warm.scan(spec.name) if s.updated_us < cutoff]
                    n = self._move_to_cold(spec.name, old, current_trace_id(span))
                if n:
                    moved[spec.name] = n
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end({"hrm.memory.archived": sum(moved.values()), "db.response.returned_rows": len(moved)})
        if self._events._queue:
            self._events.dispatch()
        return moved

    def _move_to_cold(self, namespace: str, records: list[Stored], trace_id: str) -> int:
        """Archive ``records``; the caller holds the namespace lock."""
        if not records:
            return 0
        locations = self._cold.archive(namespace, records)
        versions = {st.key: st.version for st in records}
        marked = self._warm.mark_archived(
            namespace, [(st.key, st.version, loc) for st, loc in zip(records, locations)]
        )
        for key in marked:
            self._cache.discard((namespace, key))
            self._events.record("archive", namespace, key, versions[key], trace_id, True)
        return len(marked)

    def _enforce_cap(self, spec: NamespaceSpec, trace_id: str) -> None:
        """Keep at most ``max_keys``: the oldest (by creation) move to cold
        (warm namespaces) or are dropped (hot namespaces, which have no cold)."""
        assert spec.max_keys is not None
        with self._locks.hold(spec.name):
            if spec.tier == "hot":
                excess = self._hot.count(spec.name) - spec.max_keys
                if excess > 0:
                    for st in self._hot.oldest(spec.name, excess):
                        self._hot.delete(spec.name, st.key, _now_us())
                        self._events.record("delete", spec.name, st.key, st.version + 1, trace_id, False)
                return
            keys = self._warm.keys(spec.name)
            excess = len(keys) - spec.max_keys
            if excess <= 0:
                return
            keys.sort(key=lambda k: (k[2], k[0]))
            victims = {k for k, _, _ in keys[:excess]}
            old = [s for s in self._warm.scan(spec.name) if s.key in victims]
            self._move_to_cold(spec.name, old, trace_id)

    # -- maintenance ------------------------------------------------------------------

    def check(self, fix: bool = False) -> list[Finding]:
        """Walk the whole store and return every inconsistency found (empty
        when sound): damaged records and archive frames, torn tails, loose
        permissions, archive markers whose cold copy is missing, stray files.

        With ``fix=True`` damaged bytes are copied to ``quarantine/`` and then
        removed from the live files, so every other record reads again; the
        findings say ``fixed``. Never drops a readable record."""
        self._check_open()
        span = self._tracing.start("check", None, None)
        try:
            findings = (
                self._check_symlinks(fix)
                + self._warm.check(fix)
                + self._cold.check(fix)
                + self._check_markers(fix)
                + self._check_root(fix)
            )
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end({"hrm.memory.findings": len(findings), "hrm.memory.fix": fix})
        return findings

    def _check_symlinks(self, fix: bool) -> list[Finding]:
        findings = []
        for link in _fs.symlinks_under(self.root):
            try:
                target = os.readlink(link)
            except OSError:
                target = "?"
            findings.append(Finding("symlink", str(link), f"symbolic link to {target!r} (never followed)", fixed=fix))
            if fix:
                try:
                    link.unlink()
                except OSError as exc:
                    raise _fs.storage_error(exc, "remove the link", link) from None
        return findings

    def _check_markers(self, fix: bool) -> list[Finding]:
        """Archive markers whose cold copy cannot be read. With ``fix`` the
        marker is replaced by a deletion: the damaged frame's bytes are in
        quarantine already, and the key no longer claims a value it cannot give."""
        findings = []
        for ns in self._warm.namespaces():
            if (self._warm.root / ns).is_symlink() or not (self._warm.root / ns).is_dir():
                continue
            for st in self._warm.scan(ns, archived=True):
                if st.tier != "cold":
                    continue
                try:
                    self._cold.fetch(ns, st.key, st.value)
                except MemoryStoreError as exc:
                    findings.append(
                        Finding("dangling-archive-marker", str(self.root / "cold" / ns), str(exc), ns, fixed=fix)
                    )
                    if fix:
                        with self._locks.hold(ns):
                            self._warm.delete(ns, st.key, _now_us())
                            self._cache.discard((ns, st.key))
        return findings

    def _check_root(self, fix: bool) -> list[Finding]:
        findings = []
        for sub in ("", "warm", "cold", "locks", "meta", "run", "quarantine", "events"):
            path = self.root / sub
            if path.is_dir() and not path.is_symlink():
                mode = path.stat().st_mode & 0o777
                if mode & 0o077:
                    findings.append(Finding("bad-permissions", str(path), f"mode {mode:o}, expected 700", fixed=fix))
                    if fix:
                        try:
                            os.chmod(path, _fs.DIR_MODE)
                        except OSError as exc:
                            raise _fs.storage_error(exc, "chmod", path) from None
        return findings

    def stats(self) -> dict[str, Any]:
        """Counts and sizes per namespace and tier, and the read cache's hit rate."""
        self._check_open()
        warm = self._warm.stats()
        cold = self._cold.stats()
        per_ns = {}
        for spec in self._registry:
            w = warm.get(spec.name, {})
            per_ns[spec.name] = {
                "tier": spec.tier,
                "keys": self._hot.count(spec.name) if spec.tier == "hot" else w.get("keys", 0),
                "archived": w.get("archived", 0),
                "warm_bytes": w.get("bytes", 0),
                "cold_bytes": cold.get(spec.name, {}).get("bytes", 0),
            }
        return {
            "root": str(self.root),
            "durability": self.durability,
            "locking": self.locking,
            "namespaces": per_ns,
            "cache": {"entries": len(self._cache), "hits": self._cache.hits, "misses": self._cache.misses},
        }

    def compact(self, namespace: str | None = None) -> int:
        """Rewrite warm logs without superseded lines; return bytes reclaimed."""
        self._check_open()
        return self._warm.compact(namespace)


def _matches(value: Any, where: dict[str, Any]) -> bool:
    if type(value) is not dict:
        return False
    for field, expected in where.items():
        node: Any = value
        for part in field.split("."):
            if type(node) is not dict or part not in node:
                return False
            node = node[part]
        if node != expected or type(node) is not type(expected):
            return False
    return True


class Scope:
    """A :class:`MemoryManager` seen by one HRM (see :meth:`MemoryManager.scope`)."""

    def __init__(self, manager: MemoryManager, hrm: str) -> None:
        self.manager = manager
        self.hrm = hrm

    def __repr__(self) -> str:
        return f"Scope({self.hrm!r})"

    def _readable(self, namespace: str) -> bool:
        head = namespace.split(".", 1)[0]
        if head == self.hrm or head == "shared":
            return True
        spec = self.manager._specs.get(namespace)
        return spec is not None and spec.owner == self.hrm

    def _check_read(self, namespace: str) -> None:
        if not (isinstance(namespace, str) and self._readable(namespace)):
            raise AccessDenied(
                f"HRM {self.hrm!r} may not read namespace {namespace!r}", namespace=namespace, hrm=self.hrm
            )

    def _check_write(self, namespace: str) -> None:
        spec = self.manager._spec(namespace)
        if spec.owner != self.hrm:
            raise AccessDenied(
                f"HRM {self.hrm!r} may not write namespace {namespace!r} (owner: {spec.owner})",
                namespace=namespace,
                hrm=self.hrm,
            )

    def read(self, namespace: str, key: str, default: Any = None, *, expand: bool = False) -> Any:
        self._check_read(namespace)
        return self.manager.read(namespace, key, default, expand=expand)

    def get_record(self, namespace: str, key: str, *, expand: bool = False) -> Record | None:
        self._check_read(namespace)
        return self.manager.get_record(namespace, key, expand=expand)

    def write(self, namespace: str, key: str, value: Any) -> str:
        self._check_write(namespace)
        return self.manager.write(namespace, key, value)

    def update(self, namespace: str, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        self._check_write(namespace)
        return self.manager.update(namespace, key, fn, default)

    def delete(self, namespace: str, key: str) -> bool:
        self._check_write(namespace)
        return self.manager.delete(namespace, key)

    def query(
        self,
        namespace: str = "*",
        key: str = "*",
        *,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
        include_cold: bool = False,
        expand: bool = False,
    ) -> list[Record]:
        return self.manager._run_query(namespace, key, where, limit, include_cold, self, expand)

    def _filter(self, pattern: str, specs: list[NamespaceSpec]) -> list[NamespaceSpec]:
        allowed = [s for s in specs if self._readable(s.name)]
        if specs and not allowed:
            raise AccessDenied(
                f"HRM {self.hrm!r} may not read namespaces matching {pattern!r}", namespace=pattern, hrm=self.hrm
            )
        return allowed

    def namespaces(self) -> list[NamespaceSpec]:
        return [s for s in self.manager.namespaces() if self._readable(s.name)]


__all__ = ["InvalidArgument", "MemoryManager", "Scope", "default_root"]
