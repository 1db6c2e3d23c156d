"""Where and when the deferred path finishes its spans.

Batches of ``Recorder.BATCH`` records are finished on the thread of the
operation that fills them; the tail of a burst by the drainer thread, with no
flush; a slow exporter moves batches to the drainer thread; a failing
processor loses no other span and fails no operation. Real OpenTelemetry SDK,
no mocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.core.codes import Codec
from hrm_memory.tracing import sdk_internals
from hrm_memory.tracing import spans as tracing
from hrm_memory.tracing.sdk import Recorder
from tests.helpers.global_tracing import global_provider
from tests.helpers.span_names import op_name

HOT = [NamespaceSpec("t.hot", tier="hot")]
#: For the tests of the deferred path's batches: with the fast path off
#: (``HRM_MEMORY_TRACING_FAST=0``, or an SDK whose internals differ) every span
#: goes through the public API on the caller's thread, and there is no batch.
deferred_only = pytest.mark.skipif(
    not sdk_internals.probe().deferred, reason="the deferred path is off (HRM_MEMORY_TRACING_FAST=0 or another SDK)"
)


@pytest.fixture(params=["explicit", "global"])
def open_manager(request: pytest.FixtureRequest) -> Any:
    """A manager traced by ``provider``: passed as ``tracer_provider=``, or
    set as OpenTelemetry's global provider with
    ``trace.set_tracer_provider``, the manager built without it: the standard
    deployment, which must behave the same."""

    @contextmanager
    def open_(root: Path, provider: TracerProvider) -> Iterator[MemoryManager]:
        if request.param == "explicit":
            with MemoryManager(root, tracer_provider=provider, namespaces=HOT) as mm:
                yield mm
        else:
            with global_provider(provider), MemoryManager(root, namespaces=HOT) as mm:
                yield mm

    return open_


class Threads(SpanProcessor):
    """Records the thread each span reached ``on_end`` on."""

    def __init__(self) -> None:
        self.ended: list[tuple[int, Any]] = []

    def on_end(self, span: Any) -> None:
        self.ended.append((threading.get_ident(), span))


def _wait_for(cond: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


@deferred_only
def test_a_full_batch_is_finished_on_the_callers_thread_and_the_tail_by_the_drainer(
    open_manager: Any, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Recorder, "TICK", 0.3)  # the drainer does not step in while the loop runs
    seen = Threads()
    provider = TracerProvider()
    provider.add_span_processor(seen)
    me = threading.get_ident()
    n = Recorder.BATCH + 44
    with open_manager(root, provider) as mm:
        for i in range(n):
            mm.write("t.hot", f"k{i}", i)
        # No flush: the batch was finished by the operation that filled it.
        assert len(seen.ended) == Recorder.BATCH
        assert {t for t, _ in seen.ended} == {me}
        # The tail: the drainer thread, once the operations pause.
        assert _wait_for(lambda: len(seen.ended) == n)
        assert all(t != me for t, _ in seen.ended[Recorder.BATCH :])
    keys = [s.attributes["hrm.memory.key"] for _, s in seen.ended]
    assert keys == [f"k{i}" for i in range(n)]
    assert len({s.context.span_id for _, s in seen.ended}) == n
    provider.shutdown()


class SlowExporter(SpanExporter):
    """Waits as a network exporter does, per export call."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def export(self, spans: Any) -> SpanExportResult:
        time.sleep(0.0002)
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@deferred_only
def test_a_slow_exporter_moves_the_batches_to_the_drainer_thread(
    open_manager: Any, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Recorder, "TICK", 0.3)
    exporter = SlowExporter()
    seen = Threads()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # exports each span as it ends
    provider.add_span_processor(seen)
    me = threading.get_ident()
    n = 8 * Recorder.BATCH
    with open_manager(root, provider) as mm:
        for i in range(n):
            mm.write("t.hot", f"k{i}", i)
        rec = tracing._recorders[provider]
        assert not rec.inline  # three slow batches in a row: the drainer thread's from then on
        # The drainer was woken; on a loaded machine it may not have run yet:
        # give it the time (else force_flush below drains on this thread).
        assert _wait_for(lambda: not rec.pending, timeout=30.0)
        provider.force_flush()
    assert len(exporter.spans) == n
    callers = [t for t, _ in seen.ended]
    assert callers[: 3 * Recorder.BATCH] == [me] * (3 * Recorder.BATCH)
    assert any(t != me for t in callers[3 * Recorder.BATCH :])
    assert sorted(s.attributes["hrm.memory.key"] for s in exporter.spans) == sorted(f"k{i}" for i in range(n))
    provider.shutdown()


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred spans", "spans made at once"])
def test_a_count_that_fails_loses_no_span_and_fails_no_operation(
    root: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, deferred: bool
) -> None:
    """``hrm.memory.tokens_saved`` is counted when a span is finished, in
    its batch, often on the thread of a later operation. A count that
    raises (a defect of ours) is logged and the attribute left out: no
    operation raises, every span reaches the exporter with its other
    attributes, and no wrong number is exported."""
    from hrm_memory.tracing.sdk import TokensSaved

    def broken(self: TokensSaved) -> int:
        raise TypeError("a defect in the count")

    monkeypatch.setattr(TokensSaved, "value", broken)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    coded = [NamespaceSpec("t.coded", tier="hot", codec="altitude")]  # tags is coded t: a count to make
    n = 2 * Recorder.BATCH + 5
    with global_provider(provider), MemoryManager(root, namespaces=coded, deferred_spans=deferred) as mm:
        for i in range(n):
            mm.write("t.coded", f"k{i}", {"tags": ["a"], "n": i})  # never raises
            assert mm.read("t.coded", f"k{i}") == {"tags": ["a"], "n": i}
        tracing.flush()
    writes = [s for s in exporter.get_finished_spans() if op_name(s) == "memory.write"]
    assert len(writes) == n
    assert all("hrm.memory.tokens_saved" not in s.attributes for s in writes)
    assert all(s.attributes["hrm.memory.version"] == 1 and s.attributes["hrm.memory.tier"] == "hot" for s in writes)
    assert "tokens_saved could not be counted" in caplog.text
    provider.shutdown()


@deferred_only
def test_a_failing_processor_loses_no_other_span_and_fails_no_operation(
    open_manager: Any, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Failing(SpanProcessor):
        def __init__(self) -> None:
            self.calls = 0

        def on_end(self, span: Any) -> None:
            self.calls += 1
            if self.calls % 3 == 0:
                raise RuntimeError("on_end failed")

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            raise RuntimeError("force_flush failed")

    failing = Failing()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(failing)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    n = 3 * Recorder.BATCH + 7
    with open_manager(root, provider) as mm:
        for i in range(n):
            mm.write("t.hot", f"k{i}", i)  # never raises
            assert mm.read("t.hot", f"k{i}") == i
        tracing.flush()
    assert failing.calls == 2 * n
    assert len(exporter.get_finished_spans()) == 2 * n
    assert "a span processor failed" in caplog.text
    provider.shutdown()


@deferred_only
def test_a_batch_processor_drops_nothing(
    open_manager: Any, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue of ``Recorder.CHUNK`` spans, bursts whose tails the drainer
    finishes: the spans are handed on (force_flush) every ``Recorder.CHUNK``,
    tails included, so the queue never overflows; and the records reused
    from the free list never mix spans up."""
    monkeypatch.setattr(Recorder, "TICK", 0.01)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(
        exporter, max_queue_size=Recorder.CHUNK, max_export_batch_size=Recorder.CHUNK, schedule_delay_millis=60_000
    ))  # fmt: skip
    n = 6_000
    with open_manager(root, provider) as mm:
        for i in range(n):
            if i % 2:
                mm.write("t.hot", f"k{i % 500}", i)
            else:
                mm.read("t.hot", f"k{(i + 1) % 500}")
            if i % 300 == 299:
                time.sleep(0.06)  # a pause: the drainer finishes the tail
        assert tracing._recorders[provider].free  # finished records, kept for reuse
    provider.force_flush()
    spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time)
    assert len(spans) == n
    assert len({s.context.span_id for s in spans}) == n
    for i, s in enumerate(spans):
        if i % 2:
            assert op_name(s) == "memory.write" and s.attributes["hrm.memory.key"] == f"k{i % 500}"
            assert s.attributes["hrm.memory.version"] >= 1
        else:
            assert op_name(s) == "memory.read" and s.attributes["hrm.memory.key"] == f"k{(i + 1) % 500}"
        assert s.start_time <= s.end_time
    provider.shutdown()


@deferred_only
def test_a_slow_processor_that_never_waits_stays_on_the_callers_thread(
    open_manager: Any, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slow batches without a wait (CPU work, or this thread descheduled on a
    loaded machine) are not a network exporter: moving them to the drainer
    would save the caller nothing under the GIL."""
    monkeypatch.setattr(Recorder, "TICK", 0.3)

    class Busy(SpanProcessor):
        def on_end(self, span: Any) -> None:
            until = time.perf_counter() + 2 * Recorder.SLOW
            while time.perf_counter() < until:
                pass

    seen = Threads()
    provider = TracerProvider()
    provider.add_span_processor(Busy())
    provider.add_span_processor(seen)
    me = threading.get_ident()
    n = 5 * Recorder.BATCH
    with open_manager(root, provider) as mm:
        for i in range(n):
            mm.write("t.hot", f"k{i}", i)
        assert tracing._recorders[provider].inline
        assert [t for t, _ in seen.ended] == [me] * n
    provider.shutdown()


#: A codec with plain names (counted from the renames alone) and names that
#: read differently beside a quote or are not ASCII (counted from the texts):
#: the count a batch remembers per renames must be told apart from the other.
_MIXED = Codec(
    "mixed",
    aliases={"tags": "t", "last_updated": "lu", " lead": "l", "naïve": "nv", "end.": "e", "Stance": "S"},
    values={"sensemaking": "sm", "Work Colleague": "WC", "x y": "z", "-dash": "d", "it's here": "ih"},
)


@deferred_only
def test_tokens_saved_remembered_per_batch_equals_each_write_counted_alone(root: Path) -> None:
    """A batch counts ``hrm.memory.tokens_saved`` once per list of renames
    and gives that count to the next warm writes that list the same renames
    (records of one shape): every span carries exactly what its own write,
    counted alone (``TokensSaved.value``), gives, for records of a few
    shapes, with plain and awkward names, coded strings, lists and nesting;
    hot writes (whose renames are found when the span is finished) in the
    same batches too."""
    import orjson
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from hrm_memory.tracing.sdk import TokensSaved

    names = sorted({*_MIXED.aliases, *_MIXED.values})
    words = st.sampled_from(names) | st.sampled_from(["plain", "other", "x"])
    scalars = words | st.integers(-1000, 1000) | st.booleans() | st.none()
    field = scalars | st.lists(words, max_size=3) | st.dictionaries(words, scalars, max_size=2)
    shapes = st.lists(st.lists(words, min_size=1, max_size=5, unique=True), min_size=1, max_size=3)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    specs = [NamespaceSpec("t.warm", codec="mixed"), NamespaceSpec("t.hot", tier="hot", codec="mixed")]
    with MemoryManager(root, tracer_provider=provider, namespaces=specs, codecs=[_MIXED]) as mm:

        @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(shapes=shapes, data=st.data())
        def check(shapes: list[list[str]], data: st.DataObject) -> None:
            exporter.clear()
            order = data.draw(st.lists(st.integers(0, len(shapes) - 1), min_size=1, max_size=40))
            values = [{k: data.draw(field) for k in shapes[i]} for i in order]
            for i, value in enumerate(values):
                mm.write("t.warm", f"k{i}", value)
                mm.write("t.hot", f"k{i}", value)
            tracing.flush()
            got = {(s.attributes["db.collection.name"], s.attributes["hrm.memory.key"]): s.attributes
                   for s in exporter.get_finished_spans() if op_name(s) == "memory.write"}  # fmt: skip
            assert len(got) == 2 * len(values)
            for i, value in enumerate(values):
                raw = orjson.dumps(value)
                stored = orjson.dumps(_MIXED.compact(value))
                alone = TokensSaved(raw, _MIXED, stored=stored, pairs=_MIXED.renames_of(value, raw)).value()
                assert got[("t.warm", f"k{i}")]["hrm.memory.tokens_saved"] == alone, value
                assert got[("t.hot", f"k{i}")]["hrm.memory.tokens_saved"] == alone, value

        check()
    provider.shutdown()
