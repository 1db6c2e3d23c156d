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
  span of ours does not need is not made: the span id, and the
  trace id of a root span, come from the provider's id generator when the
  batch is finished (a trace id on the caller only when ``write`` returns it); the constant attributes are one cached dict per operation;
  attributes are few, short and bounded by construction (keys cut at 256
  characters), so they are not wrapped in ``BoundedAttributes``; the
  ``SpanContext`` and ``ReadableSpan`` are filled in without their
  constructors' argument checks; the provider's multi-processor is bypassed
  (each processor's ``on_end`` is called directly). These read SDK internals,
  all in :mod:`hrm_memory.tracing.sdk_internals`, checked once (the first
  time a provider is resolved: one span built this way must match one built
  through the public API); if they do not behave, or
  ``HRM_MEMORY_TRACING_FAST=0`` is set, every span takes the API path below. A sampler
  other than the default is asked per span, with the caller's parent
  (``TraceIdRatioBased``, ``ParentBased``...: its decision, attributes and
  trace state are honoured; ``RECORD_ONLY`` spans reach ``on_end`` not
  sampled). ``provider.force_flush()``, ``shutdown()``, :func:`flush`,
  ``MemoryManager.close()`` and interpreter exit drain what is pending first.
  Processors' ``on_start`` is **not** called for these spans: it would have to
  run on the caller's thread with a mutable span (the SDK's full cost, many
  times ours). A deployment whose processor needs ``on_start`` (one that adds
  attributes from baggage, say) passes ``deferred_spans=False`` to
  ``MemoryManager``: the SDK's own spans, on the caller's thread.
- **Any other provider** (or ``deferred_spans=False``, or the fast path off):
  ordinary ``start_span`` / ``end`` through the public API, on the caller's thread.

Every span follows OpenTelemetry's GenAI memory convention: its name is its
``gen_ai.operation.name`` (:data:`GENAI_OPERATIONS` maps each operation to
one), ``gen_ai.memory.store.id`` is the namespace (or the namespace pattern;
``*`` for an operation on the whole store) and ``gen_ai.memory.record.id`` the
key, where the operation names one record. Beside them, OpenTelemetry's
database conventions (``db.system.name``, ``db.operation.name``: the
operation's own name, ``db.collection.name`` for the namespace,
``db.response.returned_rows``) and ``hrm.memory.*`` (``hrm.memory.key``...).

Values are never put into spans: only keys, sizes, tiers and counts. Keys
are left out where they must not be written anywhere (:meth:`Tracing.gate`):
a span of a consent-gated namespace names its key only when the category is
granted and the record was persisted, and a ``forget`` span never names the
key it erased. The query text of a search (``gen_ai.memory.query.text``) and
the records it found (``gen_ai.memory.records``) are recorded only when
asked for (:func:`capture_content`, or ``HRM_MEMORY_TRACE_CONTENT=1``), and
never for a search that reaches a consent-gated namespace.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider, Status, StatusCode

from hrm_memory.tracing import sdk_internals, span_file
from hrm_memory.tracing.keys import (
    GENAI_OPERATIONS,
    ID_NEVER,
    RECORD_IDS,
    WHOLE_STORE,
    ConsentOf,
    capture_content,
    capturing_content,
    strip_content,
    target_attrs,
)
from hrm_memory.tracing.sdk import DrainHook, Recorder, TokensSaved

__all__ = [
    "GENAI_OPERATIONS",
    "INVALID_TRACE_ID",
    "OpSpan",
    "TokensSaved",
    "Tracing",
    "capture_content",
    "capturing_content",
    "current_trace_id",
    "flush",
    "new_trace_id",
]

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
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
except ImportError:  # pragma: no cover - the SDK is a dependency, but optional in spirit
    pass

#: The caller's current span: ``_context_get().get(_SPAN_KEY)`` (None if
#: none), or without the fast path ``trace.get_current_span()``.
_context_get = sdk_internals.context_get
_SPAN_KEY = sdk_internals.SPAN_KEY
_logger = logging.getLogger("hrm_memory.tracing.spans")
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

    def retarget(self, namespace: str, key: str | None) -> None:
        """The namespace and key the operation acted on, when its op did not
        name them (``remember`` chooses both)."""
        raise NotImplementedError


class _ApiSpan(OpSpan):
    """A span through the public API (a provider other than the SDK's, or the
    deferred path not taken): its key
    attributes are set when it ends, once the handler has said whether the
    record was persisted (a gated key is left out, see :meth:`Tracing.gate`)."""

    __slots__ = ("span", "info", "ns", "key")

    def __init__(self, span: trace.Span, info: tuple[Any, ...], ns: str | None, key: str | None) -> None:
        self.span = span
        self.info = info
        self.ns = ns
        self.key = key

    @property
    def trace_id(self) -> str:
        ctx = self.span.get_span_context()
        return "%032x" % ctx.trace_id if ctx.is_valid else new_trace_id()

    def retarget(self, namespace: str, key: str | None) -> None:
        self.ns = namespace
        self.key = key
        self.span.set_attributes({"db.collection.name": namespace, "gen_ai.memory.store.id": namespace})

    def end(self, attrs: dict[str, Any] | None = None, exc: BaseException | None = None) -> None:
        span = self.span
        try:
            if span.is_recording():  # a span the sampler dropped: nothing to count or set
                extra = target_attrs(self.info, self.ns, self.key, attrs, {})
                if attrs:
                    extra.update(_resolve(attrs))
                    strip_content(self.info, self.ns, extra)
                if extra:
                    span.set_attributes(extra)
                if exc is not None:
                    span.set_attribute("error.type", type(exc).__qualname__)
                    span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            span.end()
        except Exception:  # noqa: BLE001 - a span processor's failure never fails the operation
            _logger.exception("hrm-memory: a span processor failed")


class _DeferredSpan(OpSpan):
    """What the caller's thread records of one span; the drainer finishes it.

    Made by :meth:`Tracing.start` without a constructor call (its slots are
    stored there directly, or a finished record reused); ``end`` keeps the
    operation's attribute dict, copied into the span's when the batch is
    finished. Nothing may touch a record after ``end``: it goes back to the
    free list once finished."""

    __slots__ = ("rec", "op", "ns", "key", "parent", "tid", "start", "stop", "attrs", "status")

    rec: Recorder
    op: tuple[Any, ...]
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

    def retarget(self, namespace: str, key: str | None) -> None:
        self.ns = namespace
        self.key = key

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


def flush() -> int:
    """Finish every pending span of every provider now; return how many."""
    with _recorders_lock:
        recorders = list(_recorders.values())
    return sum(r.drain() for r in recorders)


atexit.register(flush)


#: The API's placeholder provider, returned while no provider is set.
_PROXY = trace.get_tracer_provider() if sdk_internals.PROVIDER_SLOT_READ else None
_NEVER = object()
_API_GLOBALS = sdk_internals.API_GLOBALS
_SLOT = sdk_internals.PROVIDER_SLOT
#: The global provider is read from its slot (else through ``get_tracer_provider()``).
_SLOT_READ = sdk_internals.PROVIDER_SLOT_READ


class Tracing:
    """Per-manager access to the right path for the current provider."""

    __slots__ = ("_provider", "_for", "_mode", "_tracer", "_recorder", "_ops", "_consent_of", "_granted",
                 "deferred", "idle_when", "system", "root")  # fmt: skip

    def __init__(
        self,
        provider: trace.TracerProvider | None = None,
        *,
        deferred: bool = True,
        system: str | None = None,
        root: str | os.PathLike[str] | None = None,
    ) -> None:
        self._provider = provider
        #: The store's root: its span files (``ROOT/traces/...``) are scrubbed
        #: of what is forgotten or purged (:meth:`forgotten`, :meth:`purged`).
        self.root = Path(root).absolute() if root is not None else None
        #: ``db.system.name`` of the spans: the backend's (``"redis"``), or hrm-memory's own.
        self.system = system or _DB_SYSTEM
        self._for: object = None
        self._mode = 0  # 0 off, 1 api, 2 deferred
        self._tracer: trace.Tracer | None = None
        self._recorder: Recorder | None = None
        #: Per operation: the span's name, its constant attributes, how its
        #: key becomes a record id, and the consent view (see :meth:`gate`).
        self._ops: dict[str, tuple[Any, ...]] = {}
        self._consent_of: ConsentOf | None = None
        self._granted: Callable[[str], bool] | None = None
        self.deferred = deferred
        #: While ``idle_when`` is the API's global provider slot
        #: (:data:`hrm_memory.tracing.sdk_internals.API_GLOBALS`), :meth:`start`
        #: would return None: the pipeline checks this instead of calling it
        #: (one lookup against a call, on every operation).
        self.idle_when: object = _NEVER

    def gate(self, consent_of: ConsentOf, granted: Callable[[str], bool]) -> None:
        """Give the spans a consent view: ``consent_of(namespace)`` says which
        categories gate a namespace (or pattern) and whether its records are
        persisted; ``granted(category)`` whether one is granted now. A span of
        a gated namespace then names its key only when every category gating
        it is granted and (in a persisted namespace) the record was persisted;
        it is decided when the span is finished, from the operation's
        attributes (``hrm.memory.persisted``, ``hrm.memory.tier``)."""
        self._consent_of = consent_of
        self._granted = granted
        self._ops.clear()

    def _info(self, op: str) -> tuple[Any, ...]:
        name = GENAI_OPERATIONS.get(op) or "hrm_memory." + op
        const = {"db.system.name": self.system, "db.operation.name": op, "gen_ai.operation.name": name,
                 "gen_ai.memory.store.id": WHOLE_STORE}  # fmt: skip
        info = self._ops[op] = (name, const, RECORD_IDS.get(op, ID_NEVER), self._consent_of, self._granted)
        return info

    def _resolve(self, provider: object) -> None:
        self._for = provider
        self._tracer = None
        self._recorder = None
        if isinstance(provider, _NOOP_PROVIDERS):
            self._mode = 0
        elif self.deferred and sdk_internals.deferred_supported(provider):
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
            # up on every call.
            if _SLOT_READ:
                provider = _API_GLOBALS[_SLOT]
                if provider is None:
                    provider = _PROXY
            else:
                provider = trace.get_tracer_provider()
        if provider is not self._for:
            self._resolve(provider)
            self.idle_when = _NEVER
            if self._mode == 0 and self._provider is None and _SLOT_READ:
                self.idle_when = _API_GLOBALS[_SLOT]
        mode = self._mode
        if mode == 0:
            return None
        if mode == 2:
            # The drainer builds the attributes: here only what varies.
            info = self._ops.get(op)
            if info is None:
                info = self._info(op)
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
            get = _context_get
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
        info = self._ops.get(op) or self._info(op)
        if type(namespace) is not str and namespace is not None:
            namespace = repr(namespace)[:200]
        if type(key) is not str and key is not None:
            key = repr(key)[:200]
        attrs: dict[str, Any] = dict(info[1])
        if namespace is not None:
            attrs["db.collection.name"] = attrs["gen_ai.memory.store.id"] = namespace
        assert self._tracer is not None
        span_ = self._tracer.start_span(info[0], kind=trace.SpanKind.INTERNAL, attributes=attrs)
        return _ApiSpan(span_, info, namespace, key)

    def flush(self) -> None:
        if self._recorder is not None:
            self._recorder.drain()

    def _export_pending(self) -> None:
        """Every span this process holds (pending records, spans queued in a
        batch processor) reaches its exporters now."""
        flush()
        with _recorders_lock:
            providers = [r.provider for r in _recorders.values()]
        current = self._for
        if current is not None and not isinstance(current, _NOOP_PROVIDERS) and current not in providers:
            providers.append(current)
        for provider in providers:
            force = getattr(provider, "force_flush", None)
            if force is not None:
                try:
                    force()
                except Exception:  # noqa: BLE001 - an exporter's failure is not the erasure's
                    _logger.exception("hrm-memory: a span processor failed to flush")

    def forgotten(self, namespace: str, key: str) -> int:
        """``key`` of ``namespace`` was forgotten: write the store's span files
        again without the spans that name it, after this process's pending
        spans reach them. Returns the spans removed (0 without a root or span file)."""
        return self._scrub(namespace, key)

    def purged(self, namespace: str) -> int:
        """``namespace``'s data was purged (consent revoked with purge,
        undeclare with purge): remove its spans that name a key from the span files."""
        return self._scrub(namespace, None)

    def _scrub(self, namespace: str, key: str | None) -> int:
        if self.root is None or not span_file.span_files(self.root):
            return 0
        self._export_pending()
        return span_file.scrub_span_files(self.root, namespace, key)


def current_trace_id(span: OpSpan | None) -> str:
    """Hex trace id of ``span``; without one, that of the caller's current
    span; when nothing traces the operation, a fresh id of its own
    (:data:`new_trace_id`): every operation has a real, unique trace id."""
    if span is not None:
        return span.trace_id
    if _context_get is not None and _context_get().get(_SPAN_KEY) is None:
        return new_trace_id()  # no current span (the no-SDK write): one lookup, not the API's calls
    ctx = _current_span().get_span_context()
    return "%032x" % ctx.trace_id if ctx.is_valid else new_trace_id()

