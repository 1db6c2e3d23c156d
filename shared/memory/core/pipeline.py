"""The one pipeline every operation passes through.

:meth:`Pipeline.run` takes an op value (:mod:`hrm_memory.core.ops`) and a scope
(the HRM a handle is restricted to, or None) and runs it in this order:

    validate -> scope and consent -> lock -> span -> backend -> events -> dispatch

The span opens first, so an operation refused at validation is traced too;
the handler for the op's type does the op's own part (validation, the access
check, the lock, the backend calls, queuing events); ``run`` ends the span and
delivers queued events after every lock is released. ``MemoryManager``,
``Scope``, ``AsyncMemoryManager``, ``batch()`` and the CLI only build ops, so
none of them can skip a step.

The pipeline knows no feature: it is given the shared
:class:`~hrm_memory.core.state.Core` and a list of components (the record
handlers, the administrative ones, recall, remember, context, ...), each of
which contributes the handlers of its ops to one table. A new capability is
one op and one component (or one more handler of an existing one); the
composition root (:class:`hrm_memory.MemoryManager`) decides which are wired.

What lives above the backend: the hot tier (session namespaces, and values of
consent-gated namespaces while consent is not granted, so no backend ever
receives them), codes, schemas, scope, consent and in-process event dispatch.
Everything on disk (or on a server) is behind :class:`hrm_memory.core.backend.Backend`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hrm_memory.core.errors import IndexRebuilt, InvalidArgument, StoreClosed
from hrm_memory.core.ops import (
    OP_TYPES,
    CompactOp,
    DeclareOp,
    EventsSinceOp,
    ExpandOp,
    Op,
    RecallOp,
    RememberOp,
    UndeclareOp,
)
from hrm_memory.core.spec import NamespaceSpec
from hrm_memory.core.state import Component, Core, Handlers
from hrm_memory.tracing.sdk_internals import API_GLOBALS, PROVIDER_SLOT


class Pipeline:
    """Runs ops through the handlers its components contribute. Thread-safe."""

    def __init__(self, core: Core, components: Iterable[Component]) -> None:
        self.core = core
        self.components = tuple(components)
        self.tracing = core.tracing
        self.bus = core.bus
        self.queue = core.bus.queue
        table: Handlers = {}
        for component in self.components:
            for kind, entry in component.handlers().items():
                if kind in table:
                    raise InvalidArgument(f"two components handle {kind.__name__}")
                table[kind] = entry
        self._handlers = table
        missing = set(OP_TYPES) - set(table)
        if missing:
            raise InvalidArgument(f"no component handles {sorted(t.__name__ for t in missing)}")
        self.closed = False

    def close(self) -> None:
        """Close each component (the recall index catches up with purges made
        elsewhere while the store is still open), then the core (event bus,
        tracing, backend, hot tier)."""
        if self.closed:
            return
        self.closed = True
        try:
            for component in self.components:
                component.close()
        finally:
            self.core.close()

    def run(self, op: Op | tuple[Any, ...], kind: type | None = None, scope: str | None = None) -> Any:
        """Run one op (as ``scope``, an HRM name, when given) and return its result.

        ``op`` is an op value, or (with ``kind``, the op's type) a plain tuple
        of its fields in order: the same op, spelled the cheap way."""
        try:
            name, fn, keyed = self._handlers[kind or type(op)]  # a plain tuple: unpacked in C
        except KeyError:
            raise InvalidArgument(f"not an operation: {op!r}") from None
        if self.closed:
            raise StoreClosed("the memory manager is closed")
        tracing = self.tracing
        if tracing.idle_when is API_GLOBALS[PROVIDER_SLOT]:
            span = None  # no SDK: Tracing.start would say so, at the cost of a call
        elif keyed:  # namespace and key are the op's first two fields
            fields: Any = op
            span = tracing.start(name, fields[0], fields[1])
        else:
            span = tracing.start(name, *_target(op))
        try:
            try:
                result, attrs = fn(op, scope, span)
            except IndexRebuilt:
                # The recall index was found damaged, set aside and emptied
                # before the op changed anything: run it again (it rebuilds).
                result, attrs = fn(op, scope, span)
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end(attrs)
        if self.queue:
            self.bus.dispatch()
        return result


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

__all__ = ["Pipeline"]
