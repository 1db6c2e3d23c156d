"""Building the SDK's span objects on the drainer thread, fast.

``SpanContext`` and ``ReadableSpan`` are filled in directly (a tuple and an
object ``__dict__``) instead of through their constructors, which check and
copy what our spans never need. :func:`_check_shortcuts` compares what the
shortcuts build with what the constructors build when this module is
imported, and keeps the constructors if they differ (another SDK version);
:mod:`hrm_memory.tracing` uses whichever was chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

try:
    from opentelemetry.sdk.trace import ReadableSpan
except ImportError:  # pragma: no cover - the SDK is a dependency, but optional in spirit
    ReadableSpan = None  # type: ignore[assignment,misc]

_OK = Status(StatusCode.UNSET)

_tuple_new = tuple.__new__


def _fast_context(tid: int, sid: int, flags: Any, state: Any) -> trace.SpanContext:
    return _tuple_new(trace.SpanContext, (tid, sid, False, flags, state, True))


def _slow_context(tid: int, sid: int, flags: Any, state: Any) -> trace.SpanContext:
    return trace.SpanContext(tid, sid, is_remote=False, trace_flags=flags, trace_state=state)


_SPAN_FIELDS = (
    "_name",
    "_context",
    "_kind",
    "_instrumentation_info",
    "_instrumentation_scope",
    "_parent",
    "_start_time",
    "_end_time",
    "_attributes",
    "_events",
    "_links",
    "_resource",
    "_status",
)


def _fast_span(
    name: str, ctx: Any, parent: Any, resource: Any, attrs: Any, status: Any, start: int, end: int, scope: Any
) -> Any:
    span = _object_new(ReadableSpan)
    span.__dict__ = {
        "_name": name,
        "_context": ctx,
        "_kind": _INTERNAL,
        "_instrumentation_info": None,
        "_instrumentation_scope": scope,
        "_parent": parent,
        "_start_time": start,
        "_end_time": end,
        "_attributes": attrs,
        "_events": (),
        "_links": (),
        "_resource": resource,
        "_status": status,
    }
    return span


def _slow_span(
    name: str, ctx: Any, parent: Any, resource: Any, attrs: Any, status: Any, start: int, end: int, scope: Any
) -> Any:
    return ReadableSpan(
        name=name,
        context=ctx,
        parent=parent,
        resource=resource,
        attributes=attrs,
        kind=trace.SpanKind.INTERNAL,
        status=status,
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,
    )


_object_new = object.__new__
_INTERNAL = trace.SpanKind.INTERNAL
_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_NOT_SAMPLED = trace.TraceFlags(trace.TraceFlags.DEFAULT)
_DEFAULT_STATE = trace.DEFAULT_TRACE_STATE
_make_context: Callable[..., trace.SpanContext] = _slow_context
_make_span: Callable[..., Any] = _slow_span


def _check_shortcuts() -> None:
    """Use the shortcuts only if they build what the constructors build."""
    global _make_context, _make_span
    try:
        a = _fast_context(3, 5, _SAMPLED, _DEFAULT_STATE)
        b = _slow_context(3, 5, _SAMPLED, _DEFAULT_STATE)
        if a == b and type(a) is type(b) and (a.trace_id, a.span_id, a.is_valid, a.is_remote) == (3, 5, True, False):
            _make_context = _fast_context
        args = ("n", b, None, None, {"a": 1}, _OK, 1, 2, None)
        fast, slow = _fast_span(*args), _slow_span(*args)
        if set(vars(fast)) == set(vars(slow)) == set(_SPAN_FIELDS) and all(
            getattr(fast, f) is getattr(slow, f) for f in ("_name", "_context", "_kind", "_attributes", "_status")
        ):
            _make_span = _fast_span
    except Exception:  # noqa: BLE001 - keep the constructors
        pass


if ReadableSpan is not None:
    _check_shortcuts()
