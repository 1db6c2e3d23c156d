"""The record handlers: read, get, write, update, delete, query, expand,
subscribe and the change-log cursors.

The hot path (``read`` and ``write`` of a record, every turn of every HRM) is
spelled out here rather than composed of :class:`~hrm_memory.core.state.Core`'s
steps, and keeps the core's hot-path state (the namespace table, the hot tier,
the backend, the event bus) as its own attributes: the same objects, one
attribute load away.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Iterable
from typing import Any

from hrm_memory.core import values
from hrm_memory.core.errors import InvalidArgument, NotReplicated
from hrm_memory.core.events import Subscription
from hrm_memory.core.filters import query_filter
from hrm_memory.core.ops import (
    CursorOp,
    DeleteOp,
    EventsSinceOp,
    ExpandOp,
    GetOp,
    GetRecordOp,
    PutOp,
    QueryOp,
    SubscribeOp,
    UpdateOp,
)
from hrm_memory.core.records import MISSING, Event, Record, Stored
from hrm_memory.core.spec import NamespaceSpec, check_key
from hrm_memory.core.state import CONSENT_NAMESPACE, DECLARATIONS_RECHECK, GLOB, Attrs, Core, Handlers, _monotonic, now_us
from hrm_memory.core.values import clone, encode_snapshot
from hrm_memory.tracing.spans import OpSpan, TokensSaved, current_trace_id

_time_ns = time.time_ns
_new = tuple.__new__  # a Stored from a hot entry's fields, without a Python-level __new__
STORED = len(Stored._fields)  # a hot entry's first fields are a Stored's (storage/hot.py, Entry)


class Records:
    """The handlers of the operations on records. Thread-safe."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.specs = core.specs  # read-only view of the registry
        self.runtime = core.runtime  # run-time declared names (updated in place)
        self.hot = core.hot
        self.backend = core.backend
        self.bus = core.bus
        self.schemas = core.schemas

    def handlers(self) -> Handlers:
        return {
            GetOp: ("read", self._get, True),
            GetRecordOp: ("get", self._get_record, True),
            PutOp: ("write", self._put, True),
            UpdateOp: ("update", self._update, True),
            DeleteOp: ("delete", self._delete, True),
            QueryOp: ("query", self._query, True),
            ExpandOp: ("expand", self._expand, False),
            SubscribeOp: ("subscribe", self._subscribe, True),
            CursorOp: ("cursor", self._cursor, False),
            EventsSinceOp: ("events_since", self._events_since, False),
        }

    def close(self) -> None:
        pass

    def _spec_of(self, namespace: str, key: str) -> NamespaceSpec:
        """The spec of ``namespace`` with ``key`` checked: what every record
        operation starts with. A seed namespace is one dict lookup (a
        namespace declared at run time is looked up again once
        DECLARATIONS_RECHECK has passed); a usual key is checked in C
        (check_key says what is wrong with another)."""
        spec = self.specs.get(namespace) if type(namespace) is str else None
        if spec is None or (namespace in self.runtime and _monotonic() - self.core.declared_at >= DECLARATIONS_RECHECK):
            spec = self.core.spec(namespace)
        if not (type(key) is str and 0 < len(key) <= 256 and key.isprintable()):
            check_key(key, namespace)
        return spec

    def _stored(self, namespace: str, key: str, scope: str | None) -> tuple[NamespaceSpec, Stored | None]:
        """Validate, check the scope, find the record."""
        spec = self._spec_of(namespace, key)
        if scope is not None:
            self.core.may_read(scope, namespace)
        return spec, (self.hot.get(namespace, key) if spec.tier == "hot" else self.core.lookup(spec, key))

    def _writable(self, namespace: str, key: str, scope: str | None) -> NamespaceSpec:
        """The spec of a namespace a key is changed in, the key checked and the
        scope allowed to write there (update and delete; put spells it out)."""
        spec = self.core.spec(namespace)
        check_key(key, namespace)
        if scope is not None:
            self.core.may_write(scope, spec)
        self.core.may_change(spec, key)
        return spec

    @staticmethod
    def _read_attrs(spec: NamespaceSpec, stored: Stored | None) -> dict[str, Any]:
        return {
            "hrm.memory.hit": stored is not None,
            "hrm.memory.tier": stored.tier if stored is not None else spec.tier,
            "hrm.memory.bytes": len(stored.value) if stored is not None else 0,
        }

    def _get(self, op: GetOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        # The hot path (every turn of every HRM): _spec_of, the lookup of
        # _stored and Core.decode spelled out for the common cases. Calling
        # _spec_of here instead costs more than 5% of a hot read
        # (BENCHMARKS.md, "Named state: instructions per operation before and
        # after", row "hot read, _spec_of called").
        namespace, key, default, compact = op
        spec = self.specs.get(namespace) if type(namespace) is str else None
        if spec is None or (namespace in self.runtime and _monotonic() - self.core.declared_at >= DECLARATIONS_RECHECK):
            spec = self.core.spec(namespace)
        if not (type(key) is str and 0 < len(key) <= 256 and key.isprintable()):
            check_key(key, namespace)
        if scope is not None:
            self.core.may_read(scope, namespace)
        stored: Stored | None
        if spec.tier == "hot":
            entry = self.hot.entry(namespace, key)
            if entry is None:
                return default, (None if span is None else self._read_attrs(spec, None))
            _, _, _, _, data, _, obj, plan = entry
            if obj is not MISSING and not (compact and spec.codec is not None):
                # A private copy of the value as written: copy its containers.
                # (Coded, asked for: coded from its JSON, below.)
                if plan is None:
                    value = obj  # a scalar
                elif plan:
                    value = clone(obj, plan)
                else:  # a container of scalars: one C-level copy, no call of clone
                    value = list(obj) if type(obj) is tuple else obj.copy()
                if span is None:
                    return value, None
                # _read_attrs of the entry, spelled out (no Stored made for a span)
                return value, {"hrm.memory.hit": True, "hrm.memory.tier": "hot", "hrm.memory.bytes": len(data)}
            stored = _new(Stored, entry[:STORED])
        elif spec.consent is None:
            stored = self.backend.get(spec.name, key)  # lookup(), for a namespace without a session-only copy
        else:
            stored = self.core.lookup(spec, key)
        attrs = None if span is None else self._read_attrs(spec, stored)
        if stored is None:
            return default, attrs
        if spec.codec is None:
            return values.loads(stored.value), attrs
        return self.core.decoded(spec, stored.value, compact), attrs

    def _get_record(self, op: GetRecordOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        namespace, key, compact = op
        spec, stored = self._stored(namespace, key, scope)
        attrs = None if span is None else self._read_attrs(spec, stored)
        if stored is None:
            return None, attrs
        value = self.core.decode(spec, stored, compact)
        return Record.from_stored(spec.name, stored, value, stored.tier != "hot"), attrs

    def _put(self, op: PutOp, scope: str | None, span: OpSpan | None) -> tuple[str, Attrs]:
        namespace, key, value, imported = op
        trace_id = span.trace_id if span is not None else current_trace_id(None)
        spec = self._spec_of(namespace, key)
        if scope is not None:
            self.core.may_write(scope, spec)
        if spec.tier == "hot":
            # A hot record keeps its value as written: its JSON, and a
            # private copy for reads (see _get). Codes are made where they
            # pay, when asked for (compact reads, query, context(): see
            # Core.decoded); a traced write's tokens_saved is counted when
            # its span is finished.
            data, obj, plan = encode_snapshot(value, spec.max_value_bytes, spec.name, key)
            if spec.schema is not None:
                self.schemas.validate(spec, key, value)
            saved: Any = 0
            if span is not None and spec.codec is not None:
                saved = TokensSaved(data, self.core.codec(spec), obj, plan)
            bus = self.bus
            with self.backend.lock(spec.name):
                entry = self.hot.store(spec.name, key, data, _time_ns() // 1000, obj, plan)
                _, version, created_us, updated_us, _, tier, _, _ = entry
                if bus.subscribed or spec.name in bus.followed:  # else record() has nothing to do
                    bus.record("write", spec.name, key, version, trace_id, False)
        else:
            if spec.name == CONSENT_NAMESPACE:
                self.core.may_change(spec, key)
            data, saved = self.core.encode(spec, key, value)
            with self.backend.lock(spec.name):
                stored = self.core.commit(spec, key, data, imported)
                version, created_us, updated_us, tier = stored.version, stored.created_us, stored.updated_us, stored.tier
                self.bus.record("write", spec.name, key, version, trace_id, tier != "hot")
        if spec.max_keys is not None and created_us == updated_us:  # only a new key can exceed the cap
            # A hot namespace is counted first (one dict length, no lock):
            # enforce_cap takes the lock and counts again only when over.
            if spec.tier != "hot" or self.hot.count(spec.name) > spec.max_keys:
                self.core.enforce_cap(spec, trace_id)
        attrs = None
        if span is not None:
            attrs = {
                "hrm.memory.tier": tier,
                "hrm.memory.bytes": len(data),
                "hrm.memory.version": version,
                "hrm.memory.persisted": tier != "hot",
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
        spec = self._writable(namespace, key, scope)
        with self.backend.lock(spec.name):
            current = self.core.lookup(spec, key)
            new = fn(default if current is None else self.core.decode(spec, current, False))
            data, saved = self.core.encode(spec, key, new)
            stored = self.core.commit(spec, key, data)
            self.bus.record("write", spec.name, key, stored.version, trace_id, stored.tier != "hot")
        if spec.max_keys is not None and stored.created_us == stored.updated_us:
            self.core.enforce_cap(spec, trace_id)
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
        spec = self._writable(namespace, key, scope)
        with self.backend.lock(spec.name):
            old = None
            if spec.tier == "hot" or spec.consent is not None:
                old = self.hot.delete(spec.name, key, now_us())
            if spec.tier != "hot":
                now = now_us()
                unconfirmed: list[NotReplicated] = []  # as in Core.commit
                if spec.history is not None:
                    self.core.supersede(spec, key, now, True, unconfirmed)  # the deletion is a kept version
                old = self.backend.delete(spec.name, key, now) or old
                if unconfirmed:
                    raise unconfirmed[0]
            if old is not None:
                self.bus.record("delete", spec.name, key, old.version + 1, trace_id, old.tier != "hot")
        attrs = None if span is None else {"hrm.memory.hit": old is not None, "hrm.memory.tier": spec.tier}
        return old is not None, attrs

    def _query(self, op: QueryOp, scope: str | None, span: OpSpan | None) -> tuple[list[Record], Attrs]:
        namespace, key_glob, where, limit, include_cold, compact = op
        matches = query_filter(key_glob, where, limit)
        specs = self.core.visible(scope, namespace, self.core.match(namespace))
        match_all = key_glob == "*"
        exact = not match_all and not GLOB.intersection(key_glob)
        if exact:
            check_key(key_glob, namespace)
        out: list[Record] = []
        for spec in specs:
            ns = spec.name
            found: Iterable[Stored]
            if exact:
                stored = self.core.lookup(spec, key_glob)
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
                value = self.core.decode(spec, st, compact)
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
        spec = self.core.spec(op.namespace)
        self.core.may_read(scope, op.namespace)
        return self.core.expanded(spec, op.value), None

    def _subscribe(self, op: SubscribeOp, scope: str | None, span: OpSpan | None) -> tuple[Subscription, Attrs]:
        if not isinstance(op.key, str) or not callable(op.callback):
            raise InvalidArgument("subscribe(namespace_glob, callback, key_glob='*')")
        specs = self.core.visible(scope, op.namespace, self.core.match(op.namespace))
        callback = op.callback
        if scope is not None and len(specs) < len(self.core.match(op.namespace)):
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
            self.core.visible(scope, op.namespace, self.core.match(op.namespace))
        events, end = self.bus.since(op.cursor, op.namespace, op.key)
        if scope is not None:
            events = [e for e in events if self.core.readable(scope, e.namespace)]
        return (events, end), (None if span is None else {"db.response.returned_rows": len(events)})


__all__ = ["Records"]
