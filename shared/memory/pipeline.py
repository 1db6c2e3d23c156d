"""The one pipeline every operation passes through.

:meth:`Pipeline.run` takes an op value (:mod:`hrm_memory.ops`) and a scope
(the HRM a handle is restricted to, or None) and runs it in this order:

    validate -> scope and consent -> lock -> span -> backend -> events -> dispatch

The span opens first, so an operation refused at validation is traced too;
the handler for the op's type does the op's own part (validation, the access
check, the lock, the backend calls, queuing events); ``run`` ends the span and
delivers queued events after every lock is released. ``MemoryManager``,
``Scope``, ``AsyncMemoryManager``, ``batch()`` and the CLI only build ops, so
none of them can skip a step. A new capability is one op and one handler in
``_HANDLERS``.

What lives here and not in a backend: the hot tier (session namespaces, and
values of consent-gated namespaces while consent is not granted, so no
backend ever receives them), codes, schemas, scope, consent and in-process
event dispatch. Everything on disk (or on a server) is behind
:class:`hrm_memory.backend.Backend`.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import orjson

from . import values
from .backend import ARCHIVE, Backend, HotStore
from .codes import Codec, CodecRegistry
from .errors import (
    AccessDenied,
    CorruptRecord,
    InvalidArgument,
    InvalidSpec,
    MemoryStoreError,
    NamespaceInUse,
    StoreClosed,
    UndeclaredNamespace,
    UnknownConsentCategory,
    Unsupported,
)
from .events import EventBus, Subscription
from .filters import compile_where
from .ops import (
    OP_TYPES,
    ArchiveOp,
    CheckOp,
    CompactOp,
    ConsentOp,
    CursorOp,
    DeclareOp,
    DeleteOp,
    EventsSinceOp,
    ExpandOp,
    GetOp,
    NamespacesOp,
    Op,
    PutOp,
    QueryOp,
    StatsOp,
    SubscribeOp,
    UndeclareOp,
    UpdateOp,
)
from .records import Event, Finding, Record, Stored
from .schemas import Schemas
from .spec import CONSENT_CATEGORIES, NamespaceSpec, Registry, check_key, check_namespace, conflict
from .tracing import OpSpan, TokensSaved, Tracing, current_trace_id

#: The ``focus.consent`` namespace holds one record per consent category.
CONSENT_NAMESPACE = "focus.consent"
_GLOB = frozenset("*?[")

Attrs = dict[str, Any] | None


def _now_us() -> int:
    return time.time_ns() // 1000


class _Handler(NamedTuple):
    span: str  # memory.<span>
    fn: Callable[[Pipeline, Any, str | None, OpSpan | None], tuple[Any, Attrs]]


class Pipeline:
    """Runs ops against a backend; see the module docstring. Thread-safe."""

    def __init__(
        self,
        backend: Backend,
        hot: HotStore,
        registry: Registry,
        codecs: CodecRegistry,
        tracing: Tracing,
        *,
        poll_interval: float = 0.005,
    ) -> None:
        self.backend = backend
        self.hot = hot
        self.registry = registry
        self.codecs = codecs
        self.tracing = tracing
        self.schemas = Schemas()
        self.closed = False
        self.bus = EventBus(backend.changes, report_error=self._callback_failed, poll_interval=poll_interval)
        self._specs = registry.specs  # read-only view for the hot path
        self._codec_of: dict[str, Codec | None] = {}
        self._seeded = frozenset(self._specs)
        self._runtime: set[str] = set()
        self._load_declared()

    # -- the one path ----------------------------------------------------------------

    def run(self, op: Op, scope: str | None = None) -> Any:
        """Run one op (as ``scope``, an HRM name, when given) and return its result."""
        try:
            handler = _HANDLERS[type(op)]
        except KeyError:
            raise InvalidArgument(f"not an operation: {op!r}") from None
        if self.closed:
            raise StoreClosed("the memory manager is closed")
        name = handler.span
        if name == "read" and op.record:  # type: ignore[union-attr]
            name = "get"
        span = self.tracing.start(name, *_target(op))
        try:
            result, attrs = handler.fn(self, op, scope, span)
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end(attrs)
        if self.bus._queue:
            self.bus.dispatch()
        return result

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.bus.close()
        self.tracing.flush()
        self.backend.close()
        self.hot.close()

    # -- namespaces ------------------------------------------------------------------

    def spec(self, namespace: str) -> NamespaceSpec:
        """The declared spec; raises :class:`InvalidNamespace` or
        :class:`UndeclaredNamespace` (after looking for run-time declarations
        made by other processes since)."""
        try:
            spec = self._specs.get(namespace)
        except TypeError:  # unhashable: certainly not a namespace
            check_namespace(namespace)
            raise
        if spec is not None:
            return spec
        check_namespace(namespace)
        self._load_declared()
        return self.registry.get(namespace)

    def match(self, pattern: str) -> list[NamespaceSpec]:
        """The declared namespaces matching a glob; an exact name that is not
        declared, or a glob that matches nothing, raises :class:`UndeclaredNamespace`."""
        if not isinstance(pattern, str):
            raise InvalidArgument(f"a namespace pattern is a str glob, not {type(pattern).__name__}")
        spec = self._specs.get(pattern)
        if spec is not None:
            return [spec]
        if not _GLOB.intersection(pattern):
            return [self.spec(pattern)]
        self._load_declared()
        found = [s for s in self.registry if fnmatch.fnmatchcase(s.name, pattern)]
        if not found:
            raise UndeclaredNamespace(f"no declared namespace matches {pattern!r}", namespace=pattern)
        return found

    def _load_declared(self) -> None:
        """Bring run-time declarations (made by any process) into the registry."""
        declared = self.backend.declarations()
        if declared is None:
            return
        for name, data in declared.items():
            try:
                spec = NamespaceSpec.from_dict(data)
            except (MemoryStoreError, TypeError) as exc:
                raise CorruptRecord(
                    f"run-time declaration {name!r} is not a valid namespace spec ({exc})", namespace=name
                ) from None
            if spec.name not in self.registry:
                self.registry.declare(spec)
                self._runtime.add(spec.name)
        for name in self._runtime - set(declared):
            self.registry.remove(name)  # undeclared by another process
            self._runtime.discard(name)

    def codec(self, spec: NamespaceSpec) -> Codec | None:
        try:
            return self._codec_of[spec.name]
        except KeyError:
            codec = self._codec_of[spec.name] = self.codecs.for_spec(spec.codec)
            return codec

    # -- access ----------------------------------------------------------------------

    def readable(self, scope: str, namespace: str) -> bool:
        head = namespace.split(".", 1)[0]
        if head == scope or head == "shared":
            return True
        spec = self._specs.get(namespace)
        return spec is not None and spec.owner == scope

    def check_scope(self, scope: str) -> None:
        """A scope must own or share at least one declared namespace."""
        if not isinstance(scope, str) or not scope.isidentifier() or not scope.islower():
            raise InvalidArgument(f"invalid HRM name {scope!r}")
        self._load_declared()
        if not any(s.hrm == scope or s.owner == scope for s in self.registry):
            raise UndeclaredNamespace(
                f"no declared namespace belongs to HRM {scope!r}; declare one first", namespace=f"{scope}.*"
            )

    def _may_read(self, scope: str | None, namespace: str) -> None:
        if scope is not None and not self.readable(scope, namespace):
            raise AccessDenied(f"HRM {scope!r} may not read namespace {namespace!r}", namespace=namespace, hrm=scope)

    def _may_write(self, scope: str | None, spec: NamespaceSpec) -> None:
        if scope is not None and spec.owner != scope:
            raise AccessDenied(
                f"HRM {scope!r} may not write namespace {spec.name!r} (owner: {spec.owner})",
                namespace=spec.name,
                hrm=scope,
            )

    def _visible(self, scope: str | None, pattern: str, specs: list[NamespaceSpec]) -> list[NamespaceSpec]:
        if scope is None:
            return specs
        allowed = [s for s in specs if self.readable(scope, s.name)]
        if not allowed:
            raise AccessDenied(f"HRM {scope!r} may not read namespaces matching {pattern!r}", namespace=pattern, hrm=scope)
        return allowed

    @staticmethod
    def _admin(scope: str | None, what: str) -> None:
        if scope is not None:
            raise AccessDenied(f"HRM {scope!r} may not {what}: that is the manager's, not a scope's", hrm=scope)

    # -- records: where a namespace's values live -----------------------------------

    def granted(self, category: str) -> bool:
        """True if consent ``category`` was granted and not revoked since."""
        stored = self.backend.get(CONSENT_NAMESPACE, category)
        if stored is None or stored.tier == "cold":
            return False
        value = orjson.loads(stored.value)
        return type(value) is dict and value.get("granted") is True

    def lookup(self, spec: NamespaceSpec, key: str) -> Stored | None:
        """The current record: hot tier, else (for a gated namespace) the
        session-only copy, else the backend (archived records included)."""
        if spec.tier == "hot":
            return self.hot.get(spec.name, key)
        if spec.consent is not None:
            shadow = self.hot.get(spec.name, key)
            if shadow is not None:
                return shadow
        return self.backend.get(spec.name, key)

    def _commit(self, spec: NamespaceSpec, key: str, data: bytes, imported: bool = False) -> Stored:
        """Commit to the namespace's home; the caller holds the namespace lock.
        A consent-gated namespace whose category is not granted is committed
        to the hot tier instead (this process only): nothing reaches the backend."""
        if spec.tier == "hot":
            return self.hot.put(spec.name, key, data, _now_us())
        if spec.consent is not None:
            if not imported and not self.granted(spec.consent):
                base = self.lookup(spec, key)
                return self.hot.put(spec.name, key, data, _now_us(), base_version=base.version if base else 0)
            self.hot.delete(spec.name, key, _now_us())  # a session-only copy is superseded
        return self.backend.put(spec.name, key, data, _now_us())

    def _encode(self, spec: NamespaceSpec, key: str, value: Any) -> tuple[bytes, Any]:
        """Validate ``value`` (JSON, schema) and return ``(stored bytes,
        tokens_saved attribute)``: the compact form when the namespace has a
        codec. Token counting is deferred to span finishing."""
        data = values.encode(value, limit=spec.max_value_bytes, namespace=spec.name, key=key)
        if spec.schema is not None:
            self.schemas.validate(spec, key, value)
        codec = self.codec(spec)
        if codec is None:
            return data, 0
        # The compact form of checked JSON is JSON (the codec only renames
        # keys and strings): a plain dump, without a second exactness check.
        compact = orjson.dumps(codec.compact(value))
        if len(compact) > spec.max_value_bytes:
            compact = values.encode(codec.compact(value), limit=spec.max_value_bytes, namespace=spec.name, key=key)
        return compact, TokensSaved(data, compact)

    def decode(self, spec: NamespaceSpec, stored: Stored, compact: bool) -> Any:
        """A stored value as the caller asked for it: as written (readable), or coded."""
        value = values.loads(stored.value)
        if compact:
            return value
        codec = self.codec(spec)
        return value if codec is None else codec.expand(value)

    # -- handlers: records -----------------------------------------------------------

    def _get(self, op: GetOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        spec = self.spec(op.namespace)
        check_key(op.key, op.namespace)
        self._may_read(scope, op.namespace)
        stored = self.lookup(spec, op.key)
        attrs = None
        if span is not None:
            attrs = {
                "hrm.memory.hit": stored is not None,
                "hrm.memory.tier": stored.tier if stored is not None else spec.tier,
                "hrm.memory.bytes": len(stored.value) if stored is not None else 0,
            }
        if stored is None:
            return (None if op.record else op.default), attrs
        value = self.decode(spec, stored, op.compact)
        if op.record:
            return Record.from_stored(spec.name, stored, value, stored.tier != "hot"), attrs
        return value, attrs

    def _put(self, op: PutOp, scope: str | None, span: OpSpan | None) -> tuple[str, Attrs]:
        trace_id = current_trace_id(span)
        spec = self.spec(op.namespace)
        key = check_key(op.key, op.namespace)
        self._may_write(scope, spec)
        data, saved = self._encode(spec, key, op.value)
        with self.backend.lock(spec.name):
            stored = self._commit(spec, key, data, op.imported)
            self.bus.record("write", spec.name, key, stored.version, trace_id, stored.tier != "hot")
        if spec.max_keys is not None and stored.created_us == stored.updated_us:
            self._enforce_cap(spec, trace_id)  # only a new key can exceed the cap
        attrs = None
        if span is not None:
            attrs = {
                "hrm.memory.tier": stored.tier,
                "hrm.memory.bytes": len(data),
                "hrm.memory.version": stored.version,
                "hrm.memory.persisted": stored.tier != "hot",
                "hrm.memory.tokens_saved": saved,
            }
            if op.imported:
                attrs["hrm.memory.imported"] = True
        return trace_id, attrs

    def _update(self, op: UpdateOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        if not callable(op.fn):
            raise InvalidArgument(f"update() needs a function of the current value, not {type(op.fn).__name__}")
        trace_id = current_trace_id(span)
        spec = self.spec(op.namespace)
        key = check_key(op.key, op.namespace)
        self._may_write(scope, spec)
        with self.backend.lock(spec.name):
            current = self.lookup(spec, key)
            new = op.fn(op.default if current is None else self.decode(spec, current, False))
            data, saved = self._encode(spec, key, new)
            stored = self._commit(spec, key, data)
            self.bus.record("write", spec.name, key, stored.version, trace_id, stored.tier != "hot")
        if spec.max_keys is not None and stored.created_us == stored.updated_us:
            self._enforce_cap(spec, trace_id)
        attrs = None
        if span is not None:
            attrs = {
                "hrm.memory.tier": stored.tier,
                "hrm.memory.hit": current is not None,
                "hrm.memory.bytes": len(data),
                "hrm.memory.version": stored.version,
                "hrm.memory.persisted": stored.tier != "hot",
                "hrm.memory.tokens_saved": saved,
            }
        return new, attrs

    def _delete(self, op: DeleteOp, scope: str | None, span: OpSpan | None) -> tuple[bool, Attrs]:
        trace_id = current_trace_id(span)
        spec = self.spec(op.namespace)
        key = check_key(op.key, op.namespace)
        self._may_write(scope, spec)
        with self.backend.lock(spec.name):
            old = None
            if spec.tier == "hot" or spec.consent is not None:
                old = self.hot.delete(spec.name, key, _now_us())
            if spec.tier != "hot":
                old = self.backend.delete(spec.name, key, _now_us()) or old
            if old is not None:
                self.bus.record("delete", spec.name, key, old.version + 1, trace_id, old.tier != "hot")
        attrs = None if span is None else {"hrm.memory.hit": old is not None, "hrm.memory.tier": spec.tier}
        return old is not None, attrs

    def _query(self, op: QueryOp, scope: str | None, span: OpSpan | None) -> tuple[list[Record], Attrs]:
        limit = op.limit
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidArgument(f"limit must be a non-negative int, not {limit!r}")
        if not isinstance(op.key, str):
            raise InvalidArgument("the key pattern must be a str glob")
        matches = compile_where(op.where)
        specs = self._visible(scope, op.namespace, self.match(op.namespace))
        key_glob = op.key
        match_all = key_glob == "*"
        exact = not match_all and not _GLOB.intersection(key_glob)
        if exact:
            check_key(key_glob, op.namespace)
        out: list[Record] = []
        for spec in specs:
            ns = spec.name
            found: Iterable[Stored]
            if exact:
                stored = self.lookup(spec, key_glob)
                if stored is not None and stored.tier == "cold" and not op.include_cold:
                    stored = None
                found = [stored] if stored is not None else []
            elif spec.tier == "hot":
                found = self.hot.scan(ns)
            else:
                found = self.backend.scan(ns, include_cold=op.include_cold)
                if spec.consent is not None and self.hot.count(ns):
                    merged = {st.key: st for st in found}
                    merged.update((st.key, st) for st in self.hot.scan(ns))
                    found = merged.values()
            rows = []
            for st in found:
                if not (match_all or fnmatch.fnmatchcase(st.key, key_glob)):
                    continue
                value = self.decode(spec, st, op.compact)
                if matches is not None and not matches(value):
                    continue
                rows.append(Record.from_stored(ns, st, value, st.tier != "hot"))
            rows.sort(key=lambda r: r.key)
            out.extend(rows)
            if limit is not None and len(out) >= limit:
                out = out[:limit]
                break
        attrs = None
        if span is not None:
            attrs = {
                "db.response.returned_rows": len(out),
                "hrm.memory.include_cold": op.include_cold,
                "hrm.memory.where_fields": sorted(op.where) if op.where else [],
            }
        return out, attrs

    def _expand(self, op: ExpandOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        spec = self.spec(op.namespace)
        self._may_read(scope, op.namespace)
        codec = self.codec(spec)
        return (op.value if codec is None else codec.expand(op.value)), None

    # -- handlers: subscriptions -----------------------------------------------------

    def _subscribe(self, op: SubscribeOp, scope: str | None, span: OpSpan | None) -> tuple[Subscription, Attrs]:
        if not isinstance(op.key, str) or not callable(op.callback):
            raise InvalidArgument("subscribe(namespace_glob, callback, key_glob='*')")
        specs = self._visible(scope, op.namespace, self.match(op.namespace))
        callback = op.callback
        if scope is not None and len(specs) < len(self.match(op.namespace)):
            # The glob reaches namespaces this scope may not read: deliver
            # only the readable ones.
            allowed = frozenset(s.name for s in specs)
            inner = callback

            def callback(event: Event) -> Any:
                return inner(event) if event.namespace in allowed else None

        sub = self.bus.subscribe(op.namespace, callback, op.key, op.remote, op.since)
        attrs = None if span is None else {"hrm.memory.remote": op.remote, "hrm.memory.replay": op.since is not None}
        return sub, attrs

    def _cursor(self, op: CursorOp, scope: str | None, span: OpSpan | None) -> tuple[str, Attrs]:
        return self.bus.cursor(), None

    def _events_since(self, op: EventsSinceOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        if op.namespace != "*":
            self._visible(scope, op.namespace, self.match(op.namespace))
        events, end = self.bus.since(op.cursor, op.namespace, op.key)
        if scope is not None:
            events = [e for e in events if self.readable(scope, e.namespace)]
        return (events, end), (None if span is None else {"db.response.returned_rows": len(events)})

    def _callback_failed(self, sub: Subscription, event: Event, exc: BaseException) -> None:
        span = self.tracing.start("notify", event.namespace, event.key)
        if span is not None:
            span.end({"hrm.memory.subscription": sub.namespace, "hrm.memory.event": event.op}, exc)

    # -- handlers: declarations ------------------------------------------------------

    def _namespaces(self, op: NamespacesOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        self._load_declared()
        specs = list(self.registry)
        if scope is not None:
            specs = [s for s in specs if self.readable(scope, s.name)]
        return specs, None

    def _declare(self, op: DeclareOp, scope: str | None, span: OpSpan | None) -> tuple[NamespaceSpec, Attrs]:
        self._admin(scope, "declare namespaces")
        spec = op.spec
        if not isinstance(spec, NamespaceSpec):
            raise InvalidSpec(f"declare() takes a NamespaceSpec, not {type(spec).__name__}", namespace=None)
        # Every part resolves before anything is registered or stored.
        self.codecs.for_spec(spec.codec)
        if spec.schema is not None:
            self.schemas.model(spec)
        self._load_declared()
        self.registry.check(spec)
        stored = self.backend.declare(spec.name, spec.to_dict())
        if stored is not None and stored != spec.to_dict():
            # Declared differently by another process: never overwrite a
            # declaration (it may carry a consent gate) from here.
            raise conflict(spec, NamespaceSpec.from_dict(stored), where="in this store")
        if spec.name not in self._seeded:
            self._runtime.add(spec.name)
        self.registry.declare(spec)
        return spec, None

    def _undeclare(self, op: UndeclareOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self._admin(scope, "undeclare namespaces")
        spec = self.spec(op.namespace)
        if spec.name in self._seeded:
            raise InvalidArgument(f"{spec.name!r} is a seed namespace; only run-time declarations can be undeclared")
        purged: dict[str, int] = {}
        with self.backend.lock(spec.name, cross_process=True):
            held = self.hot.count(spec.name) + (0 if spec.tier == "hot" else _holds(self.backend, spec.name))
            if held and not op.purge:
                raise NamespaceInUse(
                    f"namespace {spec.name!r} still holds {held} record(s); undeclare(..., purge=True) removes them",
                    namespace=spec.name,
                )
            for st in list(self.hot.scan(spec.name)):
                self.hot.delete(spec.name, st.key, _now_us())
            if spec.tier != "hot":
                purged = self.backend.purge(spec.name)
            self.backend.undeclare(spec.name)
            self.registry.remove(spec.name)
            self._runtime.discard(spec.name)
            self._codec_of.pop(spec.name, None)
        return purged, None

    # -- handlers: consent -----------------------------------------------------------

    def _consent(self, op: ConsentOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, Any], Attrs]:
        self._admin(scope, "change consent")
        category = op.category
        if not isinstance(category, str) or category not in CONSENT_CATEGORIES:
            raise UnknownConsentCategory(
                f"unknown consent category {category!r}; expected one of {CONSENT_CATEGORIES}", category=category
            )
        trace_id = current_trace_id(span)
        spec = self.spec(CONSENT_NAMESPACE)
        data, _ = self._encode(spec, category, {"granted": op.grant})
        with self.backend.lock(spec.name):
            stored = self._commit(spec, category, data)
            self.bus.record("write", spec.name, category, stored.version, trace_id, True)
        gated = [s for s in self.registry if s.consent == category and s.tier != "hot"]
        if op.grant:
            persisted = {s.name: n for s in gated if (n := self._persist_session(s, trace_id))}
            result: dict[str, Any] = {"category": category, "granted": True, "persisted": persisted}
        else:
            purged = {s.name: self.backend.purge(s.name) for s in gated} if op.purge else {}
            result = {"category": category, "granted": False, "purged": purged}
        attrs = None if span is None else {"hrm.memory.consent": category, "hrm.memory.granted": op.grant}
        return result, attrs

    def _persist_session(self, spec: NamespaceSpec, trace_id: str) -> int:
        """Move this session's copies of a gated namespace to the backend (on grant)."""
        n = 0
        with self.backend.lock(spec.name):
            for st in list(self.hot.scan(spec.name)):
                stored = self.backend.put(spec.name, st.key, st.value, _now_us(), min_version=st.version)
                self.hot.delete(spec.name, st.key, _now_us())
                self.bus.record("write", spec.name, st.key, stored.version, trace_id, True)
                n += 1
        return n

    # -- handlers: tiers and maintenance ---------------------------------------------

    def _archive(self, op: ArchiveOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self._admin(scope, "archive")
        now = op.now
        if now is not None and (type(now) not in (int, float) or not math.isfinite(now) or abs(now) > 1e11):
            raise InvalidArgument(f"now must be a finite number of epoch seconds, not {now!r}")
        if ARCHIVE not in self.backend.capabilities:
            raise Unsupported(f"the backend {self.backend.system} cannot archive")
        trace_id = current_trace_id(span)
        now_us = int((time.time() if now is None else now) * 1_000_000)
        moved: dict[str, int] = {}
        for spec in self.registry:
            if spec.tier == "hot" or spec.ttl is None:
                continue
            cutoff = now_us - int(spec.ttl * 1_000_000)
            with self.backend.lock(spec.name):
                old = [s for s in self.backend.scan(spec.name) if s.updated_us < cutoff]
                n = self._move_to_cold(spec.name, old, trace_id)
            if n:
                moved[spec.name] = n
        attrs = None
        if span is not None:
            attrs = {"hrm.memory.archived": sum(moved.values()), "db.response.returned_rows": len(moved)}
        return moved, attrs

    def _move_to_cold(self, namespace: str, records: list[Stored], trace_id: str) -> int:
        """Archive ``records``; the caller holds the namespace lock."""
        if not records:
            return 0
        versions = {st.key: st.version for st in records}
        marked = self.backend.archive(namespace, records)
        for key in marked:
            self.bus.record("archive", namespace, key, versions[key], trace_id, True)
        return len(marked)

    def _enforce_cap(self, spec: NamespaceSpec, trace_id: str) -> None:
        """Keep at most ``max_keys``: the oldest (by creation) move to cold
        (persisted namespaces) or are dropped (hot ones, which have no cold)."""
        assert spec.max_keys is not None
        with self.backend.lock(spec.name):
            if spec.tier == "hot":
                excess = self.hot.count(spec.name) - spec.max_keys
                if excess > 0:
                    for st in self.hot.oldest(spec.name, excess):
                        self.hot.delete(spec.name, st.key, _now_us())
                        self.bus.record("delete", spec.name, st.key, st.version + 1, trace_id, False)
                return
            keys = self.backend.keys(spec.name)
            excess = len(keys) - spec.max_keys
            if excess <= 0:
                return
            keys.sort(key=lambda k: (k[2], k[0]))
            victims = {k for k, _, _ in keys[:excess]}
            old = [s for s in self.backend.scan(spec.name) if s.key in victims]
            self._move_to_cold(spec.name, old, trace_id)

    def _check(self, op: CheckOp, scope: str | None, span: OpSpan | None) -> tuple[list[Finding], Attrs]:
        self._admin(scope, "check the store")
        findings = self.backend.check(bool(op.fix))
        attrs = None if span is None else {"hrm.memory.findings": len(findings), "hrm.memory.fix": bool(op.fix)}
        return findings, attrs

    def _compact(self, op: CompactOp, scope: str | None, span: OpSpan | None) -> tuple[int, Attrs]:
        self._admin(scope, "compact the store")
        if op.namespace is not None:
            self.spec(op.namespace)
        reclaimed = self.backend.compact(op.namespace)
        return reclaimed, (None if span is None else {"hrm.memory.bytes": reclaimed})

    def _stats(self, op: StatsOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, Any], Attrs]:
        self._admin(scope, "read store statistics")
        backend = self.backend.stats()
        per_ns = {}
        for spec in self.registry:
            b = backend.get(spec.name, {})
            per_ns[spec.name] = {
                "tier": spec.tier,
                "keys": self.hot.count(spec.name) if spec.tier == "hot" else b.get("keys", 0),
                "archived": b.get("archived", 0),
                "warm_bytes": b.get("bytes", 0),
                "cold_bytes": b.get("cold_bytes", 0),
            }
        return {**self.backend.info(), "backend": self.backend.system, "namespaces": per_ns}, None


def _holds(backend: Backend, namespace: str) -> int:
    """Live plus archived records of ``namespace`` in the backend."""
    stats = backend.stats().get(namespace, {})
    return int(stats.get("keys", 0)) + int(stats.get("archived", 0))


def _target(op: Any) -> tuple[str | None, str | None]:
    """The namespace and key a span names (attributes only; never a value)."""
    t = type(op)
    if t in _KEYED:
        return op[0], op[1]
    if t in _NAMESPACED:
        return op[0], None
    if t is DeclareOp:
        spec = op.spec
        return (spec.name if isinstance(spec, NamespaceSpec) else None), None
    if t is EventsSinceOp:
        return op.namespace, op.key
    return None, None


_KEYED = frozenset({GetOp, PutOp, UpdateOp, DeleteOp, QueryOp, SubscribeOp})
_NAMESPACED = frozenset({ExpandOp, UndeclareOp, CompactOp})

#: op type -> (span name, handler): the whole vocabulary of the pipeline, as data.
_HANDLERS: dict[type, _Handler] = {
    GetOp: _Handler("read", Pipeline._get),
    PutOp: _Handler("write", Pipeline._put),
    UpdateOp: _Handler("update", Pipeline._update),
    DeleteOp: _Handler("delete", Pipeline._delete),
    QueryOp: _Handler("query", Pipeline._query),
    ExpandOp: _Handler("expand", Pipeline._expand),
    SubscribeOp: _Handler("subscribe", Pipeline._subscribe),
    CursorOp: _Handler("cursor", Pipeline._cursor),
    EventsSinceOp: _Handler("events_since", Pipeline._events_since),
    NamespacesOp: _Handler("namespaces", Pipeline._namespaces),
    DeclareOp: _Handler("declare", Pipeline._declare),
    UndeclareOp: _Handler("undeclare", Pipeline._undeclare),
    ConsentOp: _Handler("consent", Pipeline._consent),
    ArchiveOp: _Handler("archive", Pipeline._archive),
    CheckOp: _Handler("check", Pipeline._check),
    CompactOp: _Handler("compact", Pipeline._compact),
    StatsOp: _Handler("stats", Pipeline._stats),
}
assert set(_HANDLERS) == set(OP_TYPES), "every op type has exactly one handler"

__all__ = ["CONSENT_NAMESPACE", "Pipeline"]
