"""OpenTelemetry's global tracer provider, set the way an application sets it.

A deployment calls ``trace.set_tracer_provider(TracerProvider())`` once at
start-up and builds ``MemoryManager`` without ``tracer_provider=``; the spans
then come from the provider the pipeline finds globally. The API lets a
process set it once, so :func:`global_provider` resets the API's set-once
guard around one test and puts the previous provider back afterwards; the
provider itself is set with the API's own ``set_tracer_provider``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.util._once import Once


@contextmanager
def global_provider(provider: Any) -> Iterator[Any]:
    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    try:
        trace.set_tracer_provider(provider)
        assert trace.get_tracer_provider() is provider
        yield provider
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved
