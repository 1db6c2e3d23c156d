"""Every private OpenTelemetry name the fast span path reads, and the check that it still behaves.

The rest of the package uses only OpenTelemetry's public API. The fast path
reads five things the API and SDK do not publish, each to skip work a span of
ours never needs:

- ``opentelemetry.trace._TRACER_PROVIDER``, the global provider slot, read
  as :data:`API_GLOBALS` ``[`` :data:`PROVIDER_SLOT` ``]``: one dict lookup
  where ``trace.get_tracer_provider()`` is a call that also looks an
  environment variable up while no provider is set. The pipeline compares it
  with what it saw last to skip the span machinery when nothing traces.
- ``opentelemetry.context._RUNTIME_CONTEXT._current_context`` and
  ``opentelemetry.trace.propagation._SPAN_KEY``: the caller's current span in
  one context-variable read (:data:`context_get`, :data:`SPAN_KEY`) instead
  of the API's three calls.
- ``TracerProvider._active_span_processor`` (its ``_span_processors`` tuple
  and ``_lock``): the deferred path puts its drain hook first in the
  provider's pipeline (:func:`put_first`: pending spans are finished before a
  flush or shutdown reaches the other processors), and hands each finished
  span to the processors' ``on_end`` directly (:func:`processors`).
- ``ReadableSpan``'s fields and ``SpanContext`` as a tuple: a finished span
  is filled in directly (:func:`make_span`), not through the constructors'
  argument checks and copies.

Each is checked once: the first three when this module is imported (they
exist, and agree with the public calls they stand in for), the last two the
first time a provider asks for the deferred path (:func:`deferred_supported`):
one span is built the fast way and one through the public API
(``tracer.start_span`` and ``end``) on a throwaway provider, and they must be
alike field by field and reach the exporter the same way. Whatever fails is
replaced by its public counterpart (the constructors; ``start_span`` / ``end``
on the caller's thread), for the life of the process.

``HRM_MEMORY_TRACING_FAST=0`` in the environment (read at import) takes the
public path everywhere without trying the shortcuts.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace

try:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
except ImportError:  # pragma: no cover - the SDK is a dependency, but optional in spirit
    ReadableSpan = None  # type: ignore[assignment,misc]
    TracerProvider = None  # type: ignore[assignment,misc]

FAST_ENV = "HRM_MEMORY_TRACING_FAST"
_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER"
_logger = logging.getLogger("hrm_memory.tracing")


def _fast_wanted() -> bool:
    return os.environ.get(FAST_ENV, "").strip().lower() not in ("0", "false", "no", "off")


#: False when ``HRM_MEMORY_TRACING_FAST=0`` was set at import: no shortcut is tried.
FAST_WANTED = _fast_wanted()

_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_INTERNAL = trace.SpanKind.INTERNAL
_tuple_new = tuple.__new__
_object_new = object.__new__


# -- the global provider slot ------------------------------------------------------

PROVIDER_SLOT = "_TRACER_PROVIDER"


def _provider_slot_behaves() -> bool:
    """The API keeps its global provider in a module global that is None
    until one is set, and is what ``get_tracer_provider()`` returns after."""
    if _ENV_PROVIDER in os.environ:  # the API loads the provider on its first call: use that call
        return False
    names = vars(trace)
    if PROVIDER_SLOT not in names:
        return False
    slot = names[PROVIDER_SLOT]
    public = trace.get_tracer_provider()
    if slot is None:
        return isinstance(public, trace.ProxyTracerProvider)
    return public is slot


#: The mapping whose :data:`PROVIDER_SLOT` entry is the API's global provider
#: (None while none is set): ``API_GLOBALS[PROVIDER_SLOT]``. Without the fast
#: path, a stand-in whose entry is never a provider: a reader then takes
#: ``trace.get_tracer_provider()``.
API_GLOBALS: dict[str, Any]
#: True if :data:`API_GLOBALS` is the API's own.
PROVIDER_SLOT_READ = FAST_WANTED and _provider_slot_behaves()
API_GLOBALS = vars(trace) if PROVIDER_SLOT_READ else {PROVIDER_SLOT: object()}


# -- the caller's current span -----------------------------------------------------


def _context_reader() -> tuple[Callable[[], Any] | None, object]:
    """The context variable's ``get`` and the span's key in it, if reading
    them gives what ``trace.get_current_span()`` gives (with and without a span)."""
    try:
        otel_context.get_current()  # some API versions make the runtime context on first use
        from opentelemetry.context import _RUNTIME_CONTEXT
        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
        from opentelemetry.trace.propagation import _SPAN_KEY

        if type(_RUNTIME_CONTEXT) is not ContextVarsRuntimeContext:
            return None, None
        get: Callable[[], Any] = _RUNTIME_CONTEXT._current_context.get
        if get().get(_SPAN_KEY) not in (None, trace.get_current_span()):
            return None, None
        probe = trace.NonRecordingSpan(trace.SpanContext(7, 11, is_remote=False, trace_flags=_SAMPLED))
        token = otel_context.attach(trace.set_span_in_context(probe))
        try:
            ok = get().get(_SPAN_KEY) is probe and trace.get_current_span() is probe
        finally:
            otel_context.detach(token)
        return (get, _SPAN_KEY) if ok and get().get(_SPAN_KEY) is not probe else (None, None)
    except Exception:  # noqa: BLE001 - another API version: the public call
        return None, None


#: ``context_get().get(SPAN_KEY)`` is the caller's current span (None if
#: none); :data:`context_get` is None without the fast path: then
#: ``trace.get_current_span()``.
context_get: Callable[[], Any] | None
SPAN_KEY: object
context_get, SPAN_KEY = _context_reader() if FAST_WANTED else (None, None)


# -- the provider's span processors --------------------------------------------------


def processors(provider: Any) -> tuple[Any, ...]:
    """The span processors of an SDK provider, in order (the drain hook first)."""
    return tuple(provider._active_span_processor._span_processors)


def put_first(provider: Any, hook: Any) -> None:
    """Make ``hook`` the first of the provider's span processors."""
    multi = provider._active_span_processor
    with multi._lock:
        multi._span_processors = (hook, *multi._span_processors)


def _has_processor_list(provider: Any) -> bool:
    multi = getattr(provider, "_active_span_processor", None)
    return (
        multi is not None
        and isinstance(getattr(multi, "_span_processors", None), tuple)
        and hasattr(getattr(multi, "_lock", None), "__enter__")
    )


# -- finished spans ------------------------------------------------------------------


def _fast_span(name: str, tid: int, sid: int, flags: Any, state: Any, parent: Any, resource: Any,
               attrs: Any, status: Any, start: int, end: int, scope: Any) -> Any:  # fmt: skip
    # The fields in the constructor's order: the instance then shares its
    # class's key layout (no dict of its own).
    span = _object_new(ReadableSpan)
    span._name = name
    span._context = _tuple_new(trace.SpanContext, (tid, sid, False, flags, state, True))
    span._kind = _INTERNAL
    span._instrumentation_info = None
    span._instrumentation_scope = scope
    span._parent = parent
    span._start_time = start
    span._end_time = end
    span._attributes = attrs
    span._events = ()
    span._links = ()
    span._resource = resource
    span._status = status
    return span


def _constructed_span(name: str, tid: int, sid: int, flags: Any, state: Any, parent: Any, resource: Any,
                      attrs: Any, status: Any, start: int, end: int, scope: Any) -> Any:  # fmt: skip
    ctx = trace.SpanContext(tid, sid, is_remote=False, trace_flags=flags, trace_state=state)
    return ReadableSpan(
        name=name, context=ctx, parent=parent, resource=resource, attributes=attrs, kind=_INTERNAL,
        status=status, start_time=start, end_time=end, instrumentation_scope=scope,
    )  # fmt: skip


#: Builds a finished span from its fields: the fast way once checked, else the constructors.
make_span: Callable[..., Any] = _constructed_span
#: True once :func:`make_span` fills the span in directly.
FAST_SPANS = False


class Probe(NamedTuple):
    """What the start-up check found: the deferred path may run (the
    processor list is there and behaves), and finished spans are filled in
    directly (else through the constructors)."""

    deferred: bool
    fast_spans: bool


_probe: Probe | None = None
_probe_lock = threading.Lock()


def _alike(a: Any, b: Any) -> bool:
    """Two finished spans an exporter cannot tell apart."""
    ca, cb = a.context, b.context
    return (
        type(a) is type(b)
        and type(ca) is type(cb)
        and ca == cb
        and (ca.trace_id, ca.span_id, ca.is_remote, ca.is_valid) == (cb.trace_id, cb.span_id, cb.is_remote, cb.is_valid)
        and ca.trace_flags == cb.trace_flags
        and a.name == b.name
        and a.kind == b.kind
        and a.parent == b.parent
        and (a.start_time, a.end_time) == (b.start_time, b.end_time)
        and dict(a.attributes or {}) == dict(b.attributes or {})
        and tuple(a.events) == tuple(b.events)
        and tuple(a.links) == tuple(b.links)
        and a.resource is b.resource
        and a.instrumentation_scope == b.instrumentation_scope
        and a.status.status_code == b.status.status_code
        and (a.dropped_attributes, a.dropped_events, a.dropped_links) == (0, 0, 0)
        and set(vars(a)) == set(vars(b))
        and a.to_json() == b.to_json()
    )


def _run_probe() -> Probe:
    """Build one span through the public API and the same span each way the
    fast path can, on a throwaway provider, and compare what its exporter got."""
    if not FAST_WANTED or TracerProvider is None:
        return Probe(False, False)
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    order: list[str] = []

    class Flushes(SpanProcessor):
        """Notes when the provider's force_flush reaches it."""

        def __init__(self, name: str) -> None:
            self.name = name

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            order.append(self.name)
            return True

    provider = TracerProvider(shutdown_on_exit=False)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tail = Flushes("tail")
    provider.add_span_processor(tail)
    try:
        if not _has_processor_list(provider):
            return Probe(False, False)
        hook = Flushes("hook")
        put_first(provider, hook)
        found = processors(provider)
        if len(found) != 3 or found[0] is not hook or found[2] is not tail:
            return Probe(False, False)
        provider.force_flush()
        if order != ["hook", "tail"]:  # the hook must finish our spans before the others flush
            return Probe(False, False)
        tracer = provider.get_tracer("hrm-memory-probe", "0")
        parent = trace.SpanContext(0x1234, 0x5678, is_remote=False, trace_flags=_SAMPLED)
        public = tracer.start_span(
            "probe", context=trace.set_span_in_context(trace.NonRecordingSpan(parent)), kind=_INTERNAL,
            attributes={"a": 1, "b": "x"}, start_time=1_000,
        )  # fmt: skip
        public.end(end_time=2_000)
        (made,) = exporter.get_finished_spans()
        exporter.clear()
        ctx = made.context
        status = made.status
        for build in (_fast_span, _constructed_span):
            try:
                span = build("probe", ctx.trace_id, ctx.span_id, ctx.trace_flags, ctx.trace_state, parent,
                             made.resource, {"a": 1, "b": "x"}, status, 1_000, 2_000, made.instrumentation_scope)  # fmt: skip
                for p in processors(provider)[1:]:
                    p.on_end(span)
                got = exporter.get_finished_spans()
                if len(got) == 1 and got[0] is span and _alike(span, made):
                    return Probe(True, build is _fast_span)
            except Exception:  # noqa: BLE001 - this way does not build the same span: the next one
                _logger.debug("hrm-memory: %s does not build the SDK's span", build.__name__, exc_info=True)
            exporter.clear()
        return Probe(False, False)
    except Exception:  # noqa: BLE001 - any surprise: the public path
        _logger.debug("hrm-memory: the SDK's internals differ; spans take the public API path", exc_info=True)
        return Probe(False, False)
    finally:
        provider.shutdown()


def probe() -> Probe:
    """The start-up check's result (run on the first call, then remembered)."""
    global _probe, make_span, FAST_SPANS
    found = _probe
    if found is None:
        with _probe_lock:
            found = _probe
            if found is None:
                found = _run_probe()
                FAST_SPANS = found.fast_spans
                make_span = _fast_span if found.fast_spans else _constructed_span
                _probe = found
                if FAST_WANTED and not found.deferred:
                    _logger.info("hrm-memory: this OpenTelemetry SDK's internals differ from the ones checked; "
                                 "spans take the public API path")  # fmt: skip
    return found


def deferred_supported(provider: object) -> bool:
    """True if spans of ``provider`` may take the deferred path: it is the
    SDK's own ``TracerProvider`` and the start-up check passed."""
    if TracerProvider is None or type(provider) is not TracerProvider:
        return False
    return probe().deferred and _has_processor_list(provider)


__all__ = [
    "API_GLOBALS",
    "FAST_ENV",
    "FAST_WANTED",
    "PROVIDER_SLOT",
    "PROVIDER_SLOT_READ",
    "SPAN_KEY",
    "Probe",
    "context_get",
    "deferred_supported",
    "make_span",
    "probe",
    "processors",
    "put_first",
]
