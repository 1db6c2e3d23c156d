"""The fast span path's SDK internals are checked once and otherwise left alone.

``hrm_memory.tracing.sdk_internals`` builds one span the fast way and one
through the public API on a throwaway provider; what does not match (the
span's fields, the processor list) is replaced by the public API. With
``HRM_MEMORY_TRACING_FAST=0`` nothing private is read at all. Real SDK, real
processors and exporters.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hrm_memory import MemoryManager
from hrm_memory.tracing import sdk_internals
from hrm_memory.tracing.sdk_internals import Probe
from tests.conftest import REPO

CANARY = "canary-value-0c1d"


class Starts(SpanProcessor):
    """Counts ``on_start``: only spans made through the public API call it."""

    def __init__(self) -> None:
        self.started = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started += 1


@pytest.fixture
def fast_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs as it does without HRM_MEMORY_TRACING_FAST=0."""
    monkeypatch.setattr(sdk_internals, "FAST_WANTED", True)


@pytest.mark.skipif(not sdk_internals.FAST_WANTED, reason="the fast path is turned off (HRM_MEMORY_TRACING_FAST=0)")
def test_the_fast_path_passes_its_start_up_check_with_this_sdk() -> None:
    """Against the SDK installed (the CI runs the oldest and the newest
    accepted), every shortcut passes its check."""
    assert sdk_internals.probe() == Probe(deferred=True, fast_spans=True)
    assert sdk_internals.PROVIDER_SLOT_READ
    assert sdk_internals.API_GLOBALS[sdk_internals.PROVIDER_SLOT] in (None, trace.get_tracer_provider())
    get = sdk_internals.context_get
    assert get is not None and get().get(sdk_internals.SPAN_KEY) is None
    current = trace.NonRecordingSpan(trace.SpanContext(1, 2, is_remote=False))
    with trace.use_span(current):
        assert get().get(sdk_internals.SPAN_KEY) is current


def test_span_fields_laid_out_otherwise_fall_back_to_the_constructors(
    fast_wanted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SDK whose ``ReadableSpan`` has a field the shortcut does not fill:
    the deferred path stays, its spans built by the constructors."""
    real = sdk_internals._fast_span

    def missing_a_field(*args: Any) -> Any:
        span = real(*args)
        del span._links
        return span

    monkeypatch.setattr(sdk_internals, "_fast_span", missing_a_field)
    assert sdk_internals._run_probe() == Probe(deferred=True, fast_spans=False)


def test_a_wrong_attribute_in_the_shortcut_is_caught(fast_wanted: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A span the shortcut builds that an exporter would see differently
    (here: its kind) is not used."""
    real = sdk_internals._fast_span

    def other_kind(*args: Any) -> Any:
        span = real(*args)
        span._kind = trace.SpanKind.CLIENT
        return span

    monkeypatch.setattr(sdk_internals, "_fast_span", other_kind)
    assert sdk_internals._run_probe() == Probe(deferred=True, fast_spans=False)


def test_a_processor_list_that_does_not_behave_takes_the_public_path(
    fast_wanted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain hook must come first (it finishes pending spans before the
    other processors flush): a provider where it does not, or without the
    list, sends every span through the public API."""

    def put_last(provider: Any, hook: Any) -> None:
        provider.add_span_processor(hook)

    monkeypatch.setattr(sdk_internals, "put_first", put_last)
    assert sdk_internals._run_probe() == Probe(deferred=False, fast_spans=False)
    monkeypatch.undo()
    monkeypatch.setattr(sdk_internals, "FAST_WANTED", True)
    monkeypatch.setattr(sdk_internals, "_has_processor_list", lambda provider: False)
    assert sdk_internals._run_probe() == Probe(deferred=False, fast_spans=False)


def test_with_the_check_failed_spans_go_through_the_public_api(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's verdict is what the manager follows: spans then start
    and end through the SDK's public calls (processors see ``on_start``),
    with the same convention attributes and no value."""
    monkeypatch.setattr(sdk_internals, "_probe", Probe(deferred=False, fast_spans=False))
    starts = Starts()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(starts)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(root, tracer_provider=provider) as mm:
        mm.write("altitude.patterns", "k", {"v": CANARY})
        assert mm.read("altitude.patterns", "k") == {"v": CANARY}
    spans = exporter.get_finished_spans()
    provider.shutdown()
    assert [s.name for s in spans] == ["upsert_memory", "search_memory"]
    assert starts.started == 2
    for span in spans:
        attrs = span.attributes
        assert attrs["gen_ai.memory.store.id"] == "altitude.patterns" and attrs["gen_ai.memory.record.id"] == "k"
        assert CANARY not in repr(dict(attrs))


SCRIPT = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from hrm_memory import MemoryManager
from hrm_memory.tracing import sdk_internals

class Starts(SpanProcessor):
    started = 0
    def on_start(self, span, parent_context=None):
        Starts.started += 1

assert not sdk_internals.FAST_WANTED and not sdk_internals.PROVIDER_SLOT_READ
assert sdk_internals.context_get is None
with MemoryManager(sys.argv[1] + "/untraced") as mm:  # no provider yet: no span, no private read
    mm.write("altitude.patterns", "k", 1)
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(Starts())
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # the standard deployment: the global provider
with MemoryManager(sys.argv[1] + "/traced") as mm:
    with trace.get_tracer("app").start_as_current_span("turn") as turn:
        mm.write("altitude.patterns", "k", {"v": "secret-value"})
        mm.read("altitude.patterns", "k")
assert not sdk_internals.probe().deferred
spans = [s for s in exporter.get_finished_spans() if s.name != "turn"]
assert [s.name for s in spans] == ["upsert_memory", "search_memory"], spans
assert Starts.started == 3
assert all(s.parent.span_id == turn.get_span_context().span_id for s in spans)
assert all(s.attributes["gen_ai.memory.record.id"] == "k" for s in spans)
assert all("secret-value" not in repr(dict(s.attributes)) for s in spans)
print("public path")
"""


def test_hrm_memory_tracing_fast_0_takes_the_public_path_everywhere(tmp_path: Path) -> None:
    """``HRM_MEMORY_TRACING_FAST=0`` (docs/tracing.md): no shortcut is tried;
    a global provider set after the manager's import is still found, spans
    are the SDK's own (``on_start`` called) and parented to the caller's."""
    env = {**os.environ, "HRM_MEMORY_TRACING_FAST": "0"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "public path"
