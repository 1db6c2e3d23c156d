"""One OpenTelemetry span per public operation, cheap on the caller's path.

The library depends on the OpenTelemetry API. It takes its tracer provider
from the manager's ``tracer_provider`` argument, else from the global one, and
resolves it on every operation so that a provider configured later is used.

Three paths, chosen per provider:

- **No SDK** (the API's placeholder provider): no span object is made at all;
  the cost is one attribute read and one type check.
- **OpenTelemetry SDK** (``opentelemetry.sdk.trace.TracerProvider``): the
  *deferred* path. On the caller's thread an operation records only what
  differs from one span to the next: its parent (the caller's current span,
  read straight from OpenTelemetry's context variable), start and end times,
  namespace, key and the operation's own attributes, in one record (a
  finished record reused: no allocation) appended to a list. Every 256
  records, the operation that fills the batch turns them into real SDK spans
  (``ReadableSpan``) and hands them to the provider's sampler and span
  processors (``on_end``), the same objects the SDK's own spans go through,
  so exporters see ordinary spans with correct ids, parents, timestamps and
  attributes; the last records of a burst are finished by a drainer thread
  once the operations pause (see :mod:`hrm_memory.tracing.sdk`: where, when
  and why, including the switch to the thread for a slow exporter). The
  spans' time is thus spent on the caller's thread once per batch, not per
  operation (the median operation pays only for its record), and what a
  span of ours does not need is not made (issue 13): the span id, and the
  trace id of a root span, come from the provider's id generator when the
  batch is finished (a trace id on the caller only when ``write`` returns it); the constant attributes are one cached dict per operation;
  attributes are few, short and bounded by construction (keys cut at 256
  characters), so they are not wrapped in ``BoundedAttributes``; the
  ``SpanContext`` and ``ReadableSpan`` are filled in without their
  constructors' argument checks (checked once, at import, to build the same
  objects; else the constructors are used); the provider's multi-processor
  is bypassed (each processor's ``on_end`` is called directly). A sampler
  other than the default is asked per span, with the caller's parent
  (``TraceIdRatioBased``, ``ParentBased``...: its decision, attributes and
  trace state are honoured; ``RECORD_ONLY`` spans reach ``on_end`` not
  sampled). ``provider.force_flush()``, ``shutdown()``, :func:`flush`,
  ``MemoryManager.close()`` and interpreter exit drain what is pending first.
  Processors' ``on_start`` is **not** called for these spans: it would have to
  run on the caller's thread with a mutable span (the SDK's full cost, about
  10x ours). A deployment whose processor needs ``on_start`` (one that adds
  attributes from baggage, say) passes ``deferred_spans=False`` to
  ``MemoryManager``: the SDK's own spans, on the caller's thread.
- **Any other provider**: ordinary ``start_span`` / ``end`` through the API.

Attribute names follow OpenTelemetry's database conventions where one exists
(``db.system.name``, ``db.operation.name``, ``db.collection.name`` for the
namespace, ``db.response.returned_rows``); the rest are ``hrm.memory.*``.
Values are never put into spans: only keys, sizes, tiers and counts.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider, Status, StatusCode

from hrm_memory.tracing.sdk import DrainHook, Recorder, TokensSaved

__all__ = ["INVALID_TRACE_ID", "OpSpan", "TokensSaved", "Tracing", "current_trace_id", "flush", "new_trace_id"]

INVALID_TRACE_ID = "0" * 32


#: The last four hex digits of every trace id, made once.
_LOW_DIGITS = tuple("%04x" % i for i in range(1 << 16))


def _block(high: int) -> Iterator[str]:
    """The 65,536 trace ids whose first 28 hex digits are ``high``'s."""
    return map(("%028x" % high).__add__, _LOW_DIGITS)


def _draw_trace_ids() -> None:
    """Start this process's sequence of trace ids for untraced operations: a
    random 112-bit start (high bit set: never all zeros) counted up by blocks
    of 65,536 ids. Drawn again in a forked child, so no two processes share a
    sequence. The ids come from iterators made in C: taking one costs a
    string concatenation, not a format of a 128-bit number."""
    global new_trace_id
    start = int.from_bytes(os.urandom(14), "big") | 1 << 111
    new_trace_id = itertools.chain.from_iterable(map(_block, itertools.count(start))).__next__


#: A fresh trace id (32 hex digits) for an operation that no span traces:
#: unique across the processes of a store and within one.
new_trace_id: Callable[[], str]
_draw_trace_ids()
os.register_at_fork(after_in_child=_draw_trace_ids)
_NOOP_PROVIDERS = (ProxyTracerProvider, trace.NoOpTracerProvider)
_SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"
_DB_SYSTEM = "hrm-memory"

try:  # the distribution's version, for the instrumentation scope
    from importlib.metadata import version as _version

    _VERSION = _version("hrm-memory")
except Exception:  # noqa: BLE001 - not installed (running from a checkout)
    _VERSION = "0"

try:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
except ImportError:  # pragma: no cover - the SDK is a dependency, but optional in spirit
    SdkTracerProvider = None  # type: ignore[assignment,misc]

try:  # the caller's context, read without the API's three calls
    from opentelemetry.context import _RUNTIME_CONTEXT
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
    from opentelemetry.trace.propagation import _SPAN_KEY

    _context_var_get: Callable[[], Any] | None = (
        _RUNTIME_CONTEXT._current_context.get if type(_RUNTIME_CONTEXT) is ContextVarsRuntimeContext else None
    )
except (ImportError, AttributeError):  # pragma: no cover - another API version
    _context_var_get = None

_current_span = trace.get_current_span
_time_ns = time.time_ns
_OK = Status(StatusCode.UNSET)


def _resolve(attrs: dict[str, Any]) -> dict[str, Any]:
    saved = attrs.get("hrm.memory.tokens_saved")
    if type(saved) is TokensSaved:
        saved.into(attrs)
    return attrs


class OpSpan:
    """The span of one operation, whatever the path. ``end`` exactly once."""

    __slots__ = ()

    @property
    def trace_id(self) -> str:
        """The span's trace id as 32 hex digits."""
        raise NotImplementedError

    def end(self, attrs: dict[str, Any] | None = None, exc: BaseException | None = None) -> None:
        raise NotImplementedError


class _ApiSpan(OpSpan):
    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    @property
    def trace_id(self) -> str:
        ctx = self.span.get_span_context()
        return "%032x" % ctx.trace_id if ctx.is_valid else new_trace_id()

    def end(self, attrs: dict[str, Any] | None = None, exc: BaseException | None = None) -> None:
        if attrs:
            self.span.set_attributes(_resolve(attrs))
        if exc is not None:
            self.span.set_attribute("error.type", type(exc).__qualname__)
            self.span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
        self.span.end()


class _DeferredSpan(OpSpan):
    """What the caller's thread records of one span; the drainer finishes it.

    Made by :meth:`Tracing.start` without a constructor call (its slots are
    stored there directly, or a finished record reused); ``end`` keeps the
    operation's attribute dict, copied into the span's when the batch is
    finished. Nothing may touch a record after ``end``: it goes back to the
    free list once finished."""

    __slots__ = ("rec", "op", "ns", "key", "parent", "tid", "start", "stop", "attrs", "status")

    rec: Recorder
    op: tuple[str, dict[str, Any]]
    ns: str | None
    key: str | None
    parent: trace.SpanContext | None
    tid: int
    start: int
    stop: int
    attrs: dict[str, Any] | None
    status: Status | None

    @property
    def trace_id(self) -> str:
        # A root span's trace id is made when asked for (write() returns it),
        # else on the drainer.
        tid = self.tid
        if not tid:
            bits = self.rec.bits
            tid = self.tid = (bits(128) or 1) if bits is not None else self.rec.new_trace_id()
        return "%032x" % tid  # printf-style: half the time of format(tid, "032x")

    def end(self, attrs: dict[str, Any] | None = None, exc: BaseException | None = None) -> None:
        self.stop = _time_ns()
        if exc is not None:
            attrs = {**attrs} if attrs else {}
            attrs["error.type"] = type(exc).__qualname__
            self.status = Status(StatusCode.ERROR, type(exc).__qualname__)
        else:
            self.status = None
        self.attrs = attrs
        rec = self.rec
        pending = rec.pending
        pending.append(self)  # the span is its own record: one object kept, not two
        if len(pending) >= rec.due:  # a full batch, or no drainer thread yet
            rec.kick()


_new_span = object.__new__


_recorders: weakref.WeakKeyDictionary[Any, Recorder] = weakref.WeakKeyDictionary()
_recorders_lock = threading.Lock()


def _deferred_supported(provider: object) -> bool:
    if SdkTracerProvider is None or type(provider) is not SdkTracerProvider:
        return False
    multi = getattr(provider, "_active_span_processor", None)
    return multi is not None and hasattr(multi, "_span_processors") and hasattr(multi, "_lock")


def flush() -> int:
    """Finish every pending span of every provider now; return how many."""
    with _recorders_lock:
        recorders = list(_recorders.values())
    return sum(r.drain() for r in recorders)


atexit.register(flush)


_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER"


_PROXY = trace.get_tracer_provider() if not os.environ.get(_ENV_PROVIDER) else None
#: The OpenTelemetry API module, whose global provider slot the pipeline reads
#: (a stand-in whose slot never matches, for an API without that slot).
otel_api: Any = trace if hasattr(trace, "_TRACER_PROVIDER") else types.SimpleNamespace(_TRACER_PROVIDER=object())
_NEVER = object()
_ENV_SET = bool(os.environ.get(_ENV_PROVIDER)) or not hasattr(trace, "_TRACER_PROVIDER")


class Tracing:
    """Per-manager access to the right path for the current provider."""

    __slots__ = ("_provider", "_for", "_mode", "_tracer", "_recorder", "_ops", "deferred", "idle_when", "system")

    def __init__(
        self, provider: trace.TracerProvider | None = None, *, deferred: bool = True, system: str | None = None
    ) -> None:
        self._provider = provider
        #: ``db.system.name`` of the spans: the backend's (``"redis"``), or hrm-memory's own.
        self.system = system or _DB_SYSTEM
        self._for: object = None
        self._mode = 0  # 0 off, 1 api, 2 deferred
        self._tracer: trace.Tracer | None = None
        self._recorder: Recorder | None = None
        #: Per operation: the span's name and its constant attributes.
        self._ops: dict[str, tuple[str, dict[str, Any]]] = {}
        self.deferred = deferred
        #: While ``otel_api._TRACER_PROVIDER is idle_when``, :meth:`start`
        #: would return None: the pipeline checks this instead of calling it
        #: (one attribute read against a call, on every operation).
        self.idle_when: object = _NEVER

    def _resolve(self, provider: object) -> None:
        self._for = provider
        self._tracer = None
        self._recorder = None
        if isinstance(provider, _NOOP_PROVIDERS):
            self._mode = 0
        elif self.deferred and _deferred_supported(provider):
            with _recorders_lock:
                rec = _recorders.get(provider)
                if rec is None:
                    rec = _recorders[provider] = Recorder(
                        provider, InstrumentationScope("hrm-memory", _VERSION, _SCHEMA_URL), DrainHook
                    )
            self._recorder = rec
            self._mode = 2
        else:
            self._tracer = provider.get_tracer("hrm-memory", _VERSION, schema_url=_SCHEMA_URL)  # type: ignore[attr-defined]
            self._mode = 1

    def start(self, op: str, namespace: str | None, key: str | None) -> OpSpan | None:
        provider = self._provider
        if provider is None:
            # trace.get_tracer_provider() without its cost on the no-SDK path:
            # while no provider is set, the API looks an environment variable
            # up on every call (~1 us); it was read once, at import.
            if _ENV_SET:
                provider = trace.get_tracer_provider()
            else:
                provider = otel_api._TRACER_PROVIDER
                if provider is None:
                    provider = _PROXY
        if provider is not self._for:
            self._resolve(provider)
            self.idle_when = _NEVER
            if self._mode == 0 and self._provider is None and not _ENV_SET:
                self.idle_when = otel_api._TRACER_PROVIDER
        mode = self._mode
        if mode == 0:
            return None
        if mode == 2:
            # The drainer builds the attributes: here only what varies.
            info = self._ops.get(op)
            if info is None:
                info = self._ops[op] = ("memory." + op, {"db.system.name": self.system, "db.operation.name": op})
            if type(namespace) is not str and namespace is not None:
                namespace = repr(namespace)[:200]
            if type(key) is not str and key is not None:
                key = repr(key)[:200]
            rec = self._recorder
            assert rec is not None
            span: _DeferredSpan
            free = rec.free
            if free:
                try:
                    span = free.pop()  # a finished record, filled in again (no allocation)
                except IndexError:  # another thread took the last one
                    span = _new_span(_DeferredSpan)
            else:
                span = _new_span(_DeferredSpan)
            span.rec = rec
            span.op = info
            span.ns = namespace
            span.key = key
            get = _context_var_get
            current = get().get(_SPAN_KEY) if get is not None else _current_span()
            if current is None:  # nothing current: a root span (the usual case)
                span.parent = None
                span.tid = 0
            else:
                parent = current.get_span_context() if isinstance(current, trace.Span) else None
                if parent is not None and parent.is_valid:
                    span.parent = parent
                    span.tid = parent.trace_id
                else:
                    span.parent = None
                    span.tid = 0
            span.start = _time_ns()
            return span
        attrs: dict[str, Any] = {"db.system.name": self.system, "db.operation.name": op}
        if namespace is not None:
            attrs["db.collection.name"] = namespace if type(namespace) is str else repr(namespace)[:200]
        if key is not None:
            attrs["hrm.memory.key"] = (key if len(key) <= 256 else key[:256] + "...") if type(key) is str else repr(key)[:200]
        assert self._tracer is not None
        return _ApiSpan(self._tracer.start_span("memory." + op, kind=trace.SpanKind.INTERNAL, attributes=attrs))

    def flush(self) -> None:
        if self._recorder is not None:
            self._recorder.drain()


def current_trace_id(span: OpSpan | None) -> str:
    """Hex trace id of ``span``; without one, that of the caller's current
    span; when nothing traces the operation, a fresh id of its own
    (:data:`new_trace_id`): every operation has a real, unique trace id."""
    if span is not None:
        return span.trace_id
    if _context_var_get is not None and _context_var_get().get(_SPAN_KEY) is None:
        return new_trace_id()  # no current span (the no-SDK write): one lookup, not the API's calls
    ctx = _current_span().get_span_context()
    return "%032x" % ctx.trace_id if ctx.is_valid else new_trace_id()

