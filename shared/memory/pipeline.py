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
import time
from collections.abc import Callable, Iterable
from typing import Any

from . import values
from .admin import Admin
from .errors import (
    IndexRebuilt,
    InvalidArgument,
    StoreClosed,
)
from .events import Subscription
from .filters import compile_where
from .ops import (
    OP_TYPES,
    ArchiveOp,
    CheckOp,
    CompactOp,
    ConsentOp,
    ContextOp,
    CursorOp,
    DeclareOp,
    DeleteOp,
    EventsSinceOp,
    ExpandOp,
    GetOp,
    GetRecordOp,
    NamespacesOp,
    Op,
    PutOp,
    QueryOp,
    RecallOp,
    RememberOp,
    StatsOp,
    SubscribeOp,
    UndeclareOp,
    UpdateOp,
)
from .records import MISSING, Event, Record, Stored
from .spec import (
    NamespaceSpec,
    check_key,
)
from .steps import DECLARATIONS_RECHECK, GLOB, Attrs, _monotonic, now_us
from .tracing import OpSpan, current_trace_id, otel_api
from .values import clone, encode_snapshot

_time_ns = time.time_ns
_new = tuple.__new__  # a Stored from a hot entry's fields, without a Python-level __new__

#: A handler: (pipeline, op, scope, span) -> (result, span attributes).
Handler = Callable[["Pipeline", Any, "str | None", "OpSpan | None"], "tuple[Any, Attrs]"]


class Pipeline(Admin):
    """Runs ops against a backend; see the module docstring. Thread-safe."""

    def run(self, op: Op | tuple[Any, ...], kind: type | None = None, scope: str | None = None) -> Any:
        """Run one op (as ``scope``, an HRM name, when given) and return its result.

        ``op`` is an op value, or (with ``kind``, the op's type) a plain tuple
        of its fields in order: the same op, spelled the cheap way."""
        try:
            name, fn, keyed = _HANDLERS[kind or type(op)]  # a plain tuple: unpacked in C
        except KeyError:
            raise InvalidArgument(f"not an operation: {op!r}") from None
        if self.closed:
            raise StoreClosed("the memory manager is closed")
        tracing = self.tracing
        if tracing.idle_when is otel_api._TRACER_PROVIDER:
            span = None  # no SDK: Tracing.start would say so, at the cost of a call
        elif keyed:  # namespace and key are the op's first two fields
            fields: Any = op
            span = tracing.start(name, fields[0], fields[1])
        else:
            span = tracing.start(name, *_target(op))
        try:
            try:
                result, attrs = fn(self, op, scope, span)
            except IndexRebuilt:
                # The recall index was found damaged, set aside and emptied
                # before the op changed anything: run it again (it rebuilds).
                result, attrs = fn(self, op, scope, span)
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end(attrs)
        if self.bus._queue:
            self.bus.dispatch()
        return result

    def _stored(self, namespace: str, key: str, scope: str | None) -> tuple[NamespaceSpec, Stored | None]:
        """Validate, check the scope, find the record. A seed namespace is one
        dict lookup; a usual key is checked in C (check_key says what is wrong)."""
        spec = self._specs.get(namespace) if type(namespace) is str else None
        if spec is None or (namespace in self._runtime and _monotonic() - self._declared_at >= DECLARATIONS_RECHECK):
            spec = self.spec(namespace)
        if not (type(key) is str and 0 < len(key) <= 256 and key.isprintable()):
            check_key(key, namespace)
        if scope is not None:
            self._may_read(scope, namespace)
        return spec, (self.hot.get(namespace, key) if spec.tier == "hot" else self.lookup(spec, key))

    @staticmethod
    def _read_attrs(spec: NamespaceSpec, stored: Stored | None) -> dict[str, Any]:
        return {
            "hrm.memory.hit": stored is not None,
            "hrm.memory.tier": stored.tier if stored is not None else spec.tier,
            "hrm.memory.bytes": len(stored.value) if stored is not None else 0,
        }

    def _get(self, op: GetOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        # The hot path (every turn of every HRM): _stored and decode spelled
        # out, ~15% fewer instructions per read on CPython 3.11.
        namespace, key, default, compact = op
        spec = self._specs.get(namespace) if type(namespace) is str else None
        if spec is None or (namespace in self._runtime and _monotonic() - self._declared_at >= DECLARATIONS_RECHECK):
            spec = self.spec(namespace)
        if not (type(key) is str and 0 < len(key) <= 256 and key.isprintable()):
            check_key(key, namespace)
        if scope is not None:
            self._may_read(scope, namespace)
        stored: Stored | None
        if spec.tier == "hot":
            entry = self.hot.entry(namespace, key)
            if entry is None:
                return default, (None if span is None else self._read_attrs(spec, None))
            obj = entry[6]
            if obj is not MISSING:  # a private copy of the stored form: copy its containers
                plan = entry[7]
                if plan is None:
                    value = obj  # a scalar
                elif plan:
                    value = clone(obj, plan)
                else:  # a container of scalars: one C-level copy, no call of clone
                    value = list(obj) if type(obj) is tuple else obj.copy()
                if not compact and spec.codec is not None:
                    value = self.expanded(spec, value)
                if span is None:
                    return value, None
                # _read_attrs of the entry, spelled out (no Stored made for a span)
                return value, {"hrm.memory.hit": True, "hrm.memory.tier": "hot", "hrm.memory.bytes": len(entry[4])}
            stored = _new(Stored, entry[:6])
        elif spec.consent is None:
            stored = self.backend.get(spec.name, key)  # lookup(), for a namespace without a session-only copy
        else:
            stored = self.lookup(spec, key)
        attrs = None if span is None else self._read_attrs(spec, stored)
        if stored is None:
            return default, attrs
        value = values.loads(stored.value)
        if not compact and spec.codec is not None:
            value = self.expanded(spec, value)
        return value, attrs

    def _get_record(self, op: GetRecordOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        namespace, key, compact = op
        spec, stored = self._stored(namespace, key, scope)
        attrs = None if span is None else self._read_attrs(spec, stored)
        if stored is None:
            return None, attrs
        value = self.decode(spec, stored, compact)
        return Record.from_stored(spec.name, stored, value, stored.tier != "hot"), attrs

    def _put(self, op: PutOp, scope: str | None, span: OpSpan | None) -> tuple[str, Attrs]:
        namespace, key, value, imported = op
        trace_id = span.trace_id if span is not None else current_trace_id(None)
        spec = self._specs.get(namespace) if type(namespace) is str else None
        if spec is None or (namespace in self._runtime and _monotonic() - self._declared_at >= DECLARATIONS_RECHECK):
            spec = self.spec(namespace)
        if not (type(key) is str and 0 < len(key) <= 256 and key.isprintable()):
            check_key(key, namespace)
        if scope is not None:
            self._may_write(scope, spec)
        if spec.tier == "hot" and spec.codec is None:
            # A hot record keeps a private copy of its value for reads (see _get).
            data, obj, plan = encode_snapshot(value, spec.max_value_bytes, spec.name, key)
            if spec.schema is not None:
                self.schemas.validate(spec, key, value)
            saved: Any = 0
            bus = self.bus
            with self.backend.lock(spec.name):
                stored: Any = self.hot.store(spec.name, key, data, _time_ns() // 1000, obj, plan)
                if bus._subs or spec.name in bus.indexed:  # else record() has nothing to do
                    bus.record("write", spec.name, key, stored[1], trace_id, False)
        else:
            data, saved = self._encode(spec, key, value)
            with self.backend.lock(spec.name):
                stored = self._commit(spec, key, data, imported)
                self.bus.record("write", spec.name, key, stored.version, trace_id, stored.tier != "hot")
        # ``stored`` is a Stored or (hot) a hot Entry, whose first six fields
        # are a Stored's: read by position, (key, version, created_us,
        # updated_us, value, tier).
        if spec.max_keys is not None and stored[2] == stored[3]:
            self._enforce_cap(spec, trace_id)  # only a new key can exceed the cap
        attrs = None
        if span is not None:
            attrs = {
                "hrm.memory.tier": stored[5],
                "hrm.memory.bytes": len(data),
                "hrm.memory.version": stored[1],
                "hrm.memory.persisted": stored[5] != "hot",
                "hrm.memory.tokens_saved": saved,
            }
            if imported:
                attrs["hrm.memory.imported"] = True
        return trace_id, attrs

    def _update(self, op: UpdateOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        namespace, key, fn, default = op
        if not callable(fn):
            raise InvalidArgument(f"update() needs a function of the current value, not {type(fn).__name__}")
        trace_id = current_trace_id(span)
        spec = self.spec(namespace)
        check_key(key, namespace)
        if scope is not None:
            self._may_write(scope, spec)
        with self.backend.lock(spec.name):
            current = self.lookup(spec, key)
            new = fn(default if current is None else self.decode(spec, current, False))
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
        namespace, key = op
        trace_id = current_trace_id(span)
        spec = self.spec(namespace)
        check_key(key, namespace)
        if scope is not None:
            self._may_write(scope, spec)
        with self.backend.lock(spec.name):
            old = None
            if spec.tier == "hot" or spec.consent is not None:
                old = self.hot.delete(spec.name, key, now_us())
            if spec.tier != "hot":
                old = self.backend.delete(spec.name, key, now_us()) or old
            if old is not None:
                self.bus.record("delete", spec.name, key, old.version + 1, trace_id, old.tier != "hot")
        attrs = None if span is None else {"hrm.memory.hit": old is not None, "hrm.memory.tier": spec.tier}
        return old is not None, attrs

    def _query(self, op: QueryOp, scope: str | None, span: OpSpan | None) -> tuple[list[Record], Attrs]:
        namespace, key_glob, where, limit, include_cold, compact = op
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidArgument(f"limit must be a non-negative int, not {limit!r}")
        if not isinstance(key_glob, str):
            raise InvalidArgument("the key pattern must be a str glob")
        matches = compile_where(where)
        specs = self._visible(scope, namespace, self.match(namespace))
        match_all = key_glob == "*"
        exact = not match_all and not GLOB.intersection(key_glob)
        if exact:
            check_key(key_glob, namespace)
        out: list[Record] = []
        for spec in specs:
            ns = spec.name
            found: Iterable[Stored]
            if exact:
                stored = self.lookup(spec, key_glob)
                if stored is not None and stored.tier == "cold" and not include_cold:
                    stored = None
                found = [stored] if stored is not None else []
            elif spec.tier == "hot":
                found = self.hot.scan(ns)
            else:
                found = self.backend.scan(ns, include_cold=include_cold)
                if spec.consent is not None and self.hot.count(ns):
                    merged = {st.key: st for st in found}
                    merged.update((st.key, st) for st in self.hot.scan(ns))
                    found = merged.values()
            rows = []
            for st in found:
                if not (match_all or fnmatch.fnmatchcase(st.key, key_glob)):
                    continue
                value = self.decode(spec, st, compact)
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
                "hrm.memory.include_cold": include_cold,
                "hrm.memory.where_fields": sorted(where) if where else [],
            }
        return out, attrs

    def _expand(self, op: ExpandOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        spec = self.spec(op.namespace)
        self._may_read(scope, op.namespace)
        return self.expanded(spec, op.value), None

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





def _target(op: Any) -> tuple[str | None, str | None]:
    """The namespace and key a span of an op that is not keyed names (never a value)."""
    t = type(op)
    if t in _NAMESPACED:
        return op[0], None
    if t is DeclareOp:
        spec = op.spec
        return (spec.name if isinstance(spec, NamespaceSpec) else None), None
    if t is EventsSinceOp:
        return op.namespace, op.key
    if t is RememberOp:
        return op.namespace, op.key
    if t is RecallOp:
        return (op.namespaces if isinstance(op.namespaces, str) else None), None
    return None, None


_NAMESPACED = frozenset({ExpandOp, UndeclareOp, CompactOp})

#: op type -> (span name, handler, keyed): the whole vocabulary of the pipeline, as data.
_HANDLERS: dict[type, tuple[str, Handler, bool]] = {
    GetOp: ("read", Pipeline._get, True),
    GetRecordOp: ("get", Pipeline._get_record, True),
    PutOp: ("write", Pipeline._put, True),
    UpdateOp: ("update", Pipeline._update, True),
    DeleteOp: ("delete", Pipeline._delete, True),
    QueryOp: ("query", Pipeline._query, True),
    ExpandOp: ("expand", Pipeline._expand, False),
    SubscribeOp: ("subscribe", Pipeline._subscribe, True),
    CursorOp: ("cursor", Pipeline._cursor, False),
    EventsSinceOp: ("events_since", Pipeline._events_since, False),
    NamespacesOp: ("namespaces", Pipeline._namespaces, False),
    DeclareOp: ("declare", Pipeline._declare, False),
    UndeclareOp: ("undeclare", Pipeline._undeclare, False),
    ConsentOp: ("consent", Pipeline._consent, False),
    ArchiveOp: ("archive", Pipeline._archive, False),
    CheckOp: ("check", Pipeline._check, False),
    CompactOp: ("compact", Pipeline._compact, False),
    StatsOp: ("stats", Pipeline._stats, False),
    RecallOp: ("recall", Pipeline._recall, False),
    RememberOp: ("remember", Pipeline._remember, False),
    ContextOp: ("context", Pipeline._context, False),
}
assert set(_HANDLERS) == set(OP_TYPES), "every op type has exactly one handler"

__all__ = ["Pipeline"]
