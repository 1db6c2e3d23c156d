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
  namespace, key and the operation's own attributes, as one tuple appended to
  a list. A drainer thread later turns each record into a real SDK span
  (``ReadableSpan``) and hands it to the provider's sampler and span
  processors (``on_end``), the same objects the SDK's own spans go through,
  so exporters see ordinary spans with correct ids, parents, timestamps and
  attributes. What a span of ours does not need is not made (issue 13): the
  span id, and the trace id of a root span, come from the provider's id
  generator on the drainer (a trace id on the caller only when ``write``
  returns it); the constant attributes are one cached dict per operation;
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
import os
import threading
import time
import types
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider, Status, StatusCode

from .tracing_sdk import (
    _DEFAULT_STATE,
    _INTERNAL,
    _NOT_SAMPLED,
    _SAMPLED,
    _fast_context,
    _fast_span,
    _make_context,
    _make_span,
    _object_new,
    _tuple_new,
)

INVALID_TRACE_ID = "0" * 32
_NOOP_PROVIDERS = (ProxyTracerProvider, trace.NoOpTracerProvider)
_SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"
_DB_SYSTEM = "hrm-memory"

try:  # the distribution's version, for the instrumentation scope
    from importlib.metadata import version as _version

    _VERSION = _version("hrm-memory")
except Exception:  # noqa: BLE001 - not installed (running from a checkout)
    _VERSION = "0"

try:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.sdk.trace.sampling import DEFAULT_ON

    _DEFAULT_SAMPLER = DEFAULT_ON.get_description()  # type: ignore[no-untyped-call]
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


class TokensSaved:
    """A span attribute computed when the span is finished, not when the
    operation runs: tokens of the readable form minus tokens of the stored
    compact form, counted with the real tokenizer (:mod:`hrm_memory.tokens`)."""

    __slots__ = ("readable", "stored")

    def __init__(self, readable: bytes, stored: bytes) -> None:
        self.readable = readable
        self.stored = stored

    def value(self) -> int:
        from . import tokens

        return tokens.count(self.readable.decode()) - tokens.count(self.stored.decode())


def _resolve(attrs: dict[str, Any]) -> dict[str, Any]:
    saved = attrs.get("hrm.memory.tokens_saved")
    if type(saved) is TokensSaved:
        attrs["hrm.memory.tokens_saved"] = saved.value()
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
        return format(ctx.trace_id, "032x") if ctx.is_valid else INVALID_TRACE_ID

    def end(self, attrs: dict[str, Any] | None = None, exc: BaseException | None = None) -> None:
        if attrs:
            self.span.set_attributes(_resolve(attrs))
        if exc is not None:
            self.span.set_attribute("error.type", type(exc).__qualname__)
            self.span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
        self.span.end()


def _caller_parent() -> trace.SpanContext | None:
    """The caller's current span context if valid, else None (a root span)."""
    ctx = _current_span().get_span_context()
    return ctx if ctx.is_valid else None


class _DeferredSpan(OpSpan):
    """What the caller's thread records of one span; the drainer finishes it."""

    __slots__ = ("rec", "op", "ns", "key", "parent", "tid", "start", "stop", "attrs", "status")

    def __init__(self, rec: _Recorder, op: tuple[str, dict[str, Any]], ns: str | None, key: str | None) -> None:
        self.rec = rec
        self.op = op
        self.ns = ns
        self.key = key
        get = _context_var_get
        if get is not None:
            current = get().get(_SPAN_KEY)
            if current is None:  # nothing current: a root span (the usual case)
                self.parent = None
                self.tid = 0
            else:
                parent = current.get_span_context() if isinstance(current, trace.Span) else None
                ok = parent is not None and parent.is_valid
                self.parent = parent if ok else None
                self.tid = parent.trace_id if ok else 0  # type: ignore[union-attr]
        else:
            self.parent = _caller_parent()
            self.tid = 0 if self.parent is None else self.parent.trace_id
        self.start = _time_ns()

    @property
    def trace_id(self) -> str:
        # A root span's trace id is made when asked for (write() returns it),
        # else on the drainer.
        tid = self.tid
        if not tid:
            bits = self.rec.bits
            tid = self.tid = (bits(128) or 1) if bits is not None else self.rec.new_trace_id()
        return format(tid, "032x")

    def end(self, attrs: dict[str, Any] | None = None, exc: BaseException | None = None) -> None:
        end = _time_ns()
        status = None
        if exc is not None:
            attrs = {**attrs} if attrs else {}
            attrs["error.type"] = type(exc).__qualname__
            status = Status(StatusCode.ERROR, type(exc).__qualname__)
        self.stop = end
        self.attrs = attrs
        self.status = status
        rec = self.rec
        rec.pending.append(self)  # the span is its own record: one object kept, not two
        if rec.thread is None:
            rec.wake()


# -- filling in SDK objects without their constructors' checks -------------------------
#
# A SpanContext is a tuple (trace id, span id, remote, flags, state, valid);
# a ReadableSpan is its __init__'s thirteen attributes. Ours are valid by
# construction, so the checks and the keyword-argument call (about 17,000
# instructions a span, of ~30,000 for the drainer's whole work on a span) are
# skipped. Both shortcuts are checked against the constructors at import; if
# an SDK version lays them out differently, the constructors are used.

class _Recorder:
    """Pending span records of one SDK provider, and the thread that finishes them."""

    CHUNK = 512
    IDLE_EXIT = 1.0  # seconds without records before the drainer thread exits
    TICK = 0.02

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.pending: list[_DeferredSpan] = []
        self.lock = threading.Lock()
        self.draining = threading.RLock()  # re-entrant: a processor may force_flush from on_end
        self.thread: threading.Thread | None = None
        self.scope = InstrumentationScope("hrm-memory", _VERSION, _SCHEMA_URL)
        gen = provider.id_generator
        self.new_trace_id: Callable[[], int]
        self.new_span_id: Callable[[], int]
        self.bits: Callable[[int], int] | None = None
        if type(gen) is RandomIdGenerator:
            import random

            bits = self.bits = random.getrandbits
            self.new_trace_id = lambda: bits(128) or 1
            self.new_span_id = lambda: bits(64) or 1
        else:
            self.new_trace_id = gen.generate_trace_id
            self.new_span_id = gen.generate_span_id
        _install_drain_hook(provider, self)

    def wake(self) -> None:
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self._run, name="hrm-memory-spans", daemon=True)
                    self.thread.start()

    def _run(self) -> None:
        idle_since = time.monotonic()
        last = -1
        while True:
            time.sleep(self.TICK)
            n = len(self.pending)
            if n == 0:
                if time.monotonic() - idle_since > self.IDLE_EXIT:
                    with self.lock:
                        if not self.pending:
                            self.thread = None
                            return
                continue
            idle_since = time.monotonic()
            # Finish spans when the caller pauses (the count stopped moving)
            # or when many are pending, so a busy loop is not slowed by it.
            if n == last or n >= 50_000:
                self.drain()
                last = -1
            else:
                last = n

    def drain(self) -> int:
        """Turn every pending record into an SDK span; return how many.

        One drain at a time, start to finish: a flush (``close()``,
        ``force_flush()``) that finds the drainer thread part-way through a
        batch waits for it, so every span has reached the processors when it
        returns (issue 14, item 10: spans were lost when a process closed the
        manager and shut the provider down while the thread held a batch)."""
        with self.draining:
            return self._drain()

    def _drain(self) -> int:
        with self.lock:
            # The list is never replaced: a caller may have loaded
            # ``rec.pending`` just before this runs and append right after;
            # its record then stays for the next drain instead of being lost.
            pending = self.pending
            batch = pending[:]
            del pending[: len(batch)]
        if not batch:
            return 0
        provider = self.provider
        downstream = [p for p in provider._active_span_processor._span_processors if not isinstance(p, _DrainHook)]
        on_ends = [p.on_end for p in downstream]
        only = on_ends[0] if len(on_ends) == 1 else None
        sampler = provider.sampler
        resource = provider.resource
        scope = self.scope
        new_trace_id = self.new_trace_id
        new_span_id = self.new_span_id
        bits = self.bits  # random.getrandbits for the SDK's RandomIdGenerator: called inline
        make_context = _make_context
        make_span = _make_span
        # The shortcuts spelled out in the loop below (two calls fewer a span).
        fast = make_context is _fast_context and make_span is _fast_span
        span_context = trace.SpanContext
        tuple_new = _tuple_new
        object_new = _object_new
        # The SDK's default sampler decides from the parent alone; skip the
        # call (and the context it needs) in that case.
        default_sampler = sampler.get_description() == _DEFAULT_SAMPLER
        last_parent: Any = None
        parent_ctx: Any = None
        for i in range(0, len(batch), self.CHUNK):
            for rec in batch[i : i + self.CHUNK]:
                name, const = rec.op
                ns = rec.ns
                key = rec.key
                attrs = rec.attrs
                parent = rec.parent
                tid = rec.tid
                a = const.copy()
                if ns is not None:
                    a["db.collection.name"] = ns
                if key is not None:
                    a["hrm.memory.key"] = key if len(key) <= 256 else key[:256] + "..."
                if attrs:
                    a.update(attrs)
                    saved = a.get("hrm.memory.tokens_saved")
                    if type(saved) is TokensSaved:
                        a["hrm.memory.tokens_saved"] = saved.value()
                if not tid:
                    tid = (bits(128) or 1) if bits is not None else new_trace_id()
                flags = _SAMPLED
                if default_sampler:
                    if parent is None:
                        state = _DEFAULT_STATE
                    elif parent.trace_flags.sampled:
                        state = parent.trace_state
                    else:
                        continue
                else:
                    if parent is not last_parent:
                        last_parent = parent
                        parent_ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent else None
                    result = sampler.should_sample(parent_ctx, tid, name, _INTERNAL, a)
                    decision = result.decision
                    if not decision.is_recording():
                        continue
                    if not decision.is_sampled():
                        flags = _NOT_SAMPLED
                    if result.attributes:
                        a.update(result.attributes)
                    state = result.trace_state or _DEFAULT_STATE
                sid = (bits(64) or 1) if bits is not None else new_span_id()
                if fast:
                    span = object_new(ReadableSpan)
                    span.__dict__ = {
                        "_name": name,
                        "_context": tuple_new(span_context, (tid, sid, False, flags, state, True)),
                        "_kind": _INTERNAL,
                        "_instrumentation_info": None,
                        "_instrumentation_scope": scope,
                        "_parent": parent,
                        "_start_time": rec.start,
                        "_end_time": rec.stop,
                        "_attributes": a,
                        "_events": (),
                        "_links": (),
                        "_resource": resource,
                        "_status": rec.status or _OK,
                    }
                else:
                    span = make_span(
                        name, make_context(tid, sid, flags, state), parent, resource, a,
                        rec.status or _OK, rec.start, rec.stop, scope,
                    )  # fmt: skip
                if only is not None:
                    only(span)
                else:
                    for on_end in on_ends:
                        on_end(span)
            # Hand each chunk on before taking the next: a batch processor
            # has a bounded queue and would drop what it cannot hold.
            for p in downstream:
                p.force_flush()
        return len(batch)


class _DrainHook:
    """A span processor placed first in the provider's pipeline: its only job
    is to finish our pending spans before the others flush or shut down."""

    def __init__(self, recorder: _Recorder) -> None:
        self._recorder = weakref.ref(recorder)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def _on_ending(self, span: Any) -> None:
        return None

    def on_end(self, span: Any) -> None:
        return None

    def shutdown(self) -> None:
        self.force_flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        rec = self._recorder()
        if rec is not None:
            rec.drain()
        return True


def _install_drain_hook(provider: Any, recorder: _Recorder) -> None:
    multi = provider._active_span_processor
    hook = _DrainHook(recorder)
    with multi._lock:
        multi._span_processors = (hook, *multi._span_processors)


_recorders: weakref.WeakKeyDictionary[Any, _Recorder] = weakref.WeakKeyDictionary()
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
        self._recorder: _Recorder | None = None
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
                    rec = _recorders[provider] = _Recorder(provider)
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
            assert self._recorder is not None
            return _DeferredSpan(self._recorder, info, namespace, key)
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
    span, or 32 zeros (OpenTelemetry's invalid id) when nothing is traced."""
    if span is not None:
        return span.trace_id
    if _context_var_get is not None and _context_var_get().get(_SPAN_KEY) is None:
        return INVALID_TRACE_ID  # no current span (the no-SDK write): one lookup, not the API's calls
    ctx = _current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else INVALID_TRACE_ID

