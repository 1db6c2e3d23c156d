"""One OpenTelemetry span per public operation, and nearly nothing without an SDK.

The library depends on the OpenTelemetry API only. It takes its tracer from
the provider passed to the manager, else from the global provider. While the
global provider is still the API's placeholder (no SDK configured) no span
object is created at all: the cost is one attribute read and one type check.

Attribute names follow OpenTelemetry's database conventions where one exists
(``db.system.name``, ``db.operation.name``, ``db.collection.name`` for the
namespace, ``db.response.returned_rows``); the rest live under
``hrm.memory.*``. Values are never put into spans: only keys, sizes, tiers
and counts.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider, Span, Status, StatusCode

INVALID_TRACE_ID = "0" * 32
_NOOP_PROVIDERS = (ProxyTracerProvider, trace.NoOpTracerProvider)

try:  # the distribution's version, for the instrumentation scope
    from importlib.metadata import version as _version

    _VERSION = _version("hrm-memory")
except Exception:  # noqa: BLE001 - not installed (running from a checkout)
    _VERSION = "0"


class Tracing:
    """Resolves the tracer lazily so that a provider set after the manager
    was opened is still picked up."""

    __slots__ = ("_provider", "_for", "_tracer")

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._provider = provider
        self._for: object = None
        self._tracer: trace.Tracer | None = None

    def tracer(self) -> trace.Tracer | None:
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        if provider is not self._for:
            self._for = provider
            self._tracer = (
                None
                if isinstance(provider, _NOOP_PROVIDERS)
                else provider.get_tracer("hrm-memory", _VERSION, schema_url="https://opentelemetry.io/schemas/1.26.0")
            )
        return self._tracer

    def start(self, op: str, namespace: str | None, key: str | None) -> Span | None:
        tracer = self.tracer()
        if tracer is None:
            return None
        attrs: dict[str, Any] = {"db.system.name": "hrm-memory", "db.operation.name": op}
        if namespace is not None:
            attrs["db.collection.name"] = namespace
        if key is not None:
            attrs["hrm.memory.key"] = key
        return tracer.start_span(f"memory.{op}", kind=trace.SpanKind.INTERNAL, attributes=attrs)


def finish(span: Span, attrs: dict[str, Any] | None, exc: BaseException | None = None) -> None:
    if attrs:
        span.set_attributes(attrs)
    if exc is not None:
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
    span.end()


def trace_id_of(span: Span | None) -> str:
    """Hex trace id of ``span``; without one, that of the caller's current
    span, or 32 zeros (OpenTelemetry's invalid id) when nothing is traced."""
    ctx = span.get_span_context() if span is not None else trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else INVALID_TRACE_ID
