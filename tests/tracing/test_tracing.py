"""One span per public operation, with the attributes, no values, correct
parents; both span paths (deferred and API)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from hrm_memory import InvalidValue, MemoryManager, NamespaceSpec
from hrm_memory.tracing import sdk_internals
from hrm_memory.tracing.spans import INVALID_TRACE_ID
from tests.helpers.global_tracing import global_provider
from tests.helpers.span_names import op_name

CANARY = "CANARY-7f3a9c-do-not-trace"


@pytest.fixture(params=["deferred", "api", "global"])
def traced(request: pytest.FixtureRequest, root: Path) -> Iterator[tuple[MemoryManager, TracerProvider, InMemorySpanExporter]]:
    """The two span paths with the provider passed in, and the standard
    deployment: the SDK set as the global provider with a
    ``BatchSpanProcessor``, the manager built without ``tracer_provider=``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    specs = [NamespaceSpec("t.warm", ttl=60.0), NamespaceSpec("t.hot", tier="hot")]
    if request.param == "global":
        provider.add_span_processor(BatchSpanProcessor(exporter))
        with global_provider(provider), MemoryManager(root, namespaces=specs) as mm:
            yield mm, provider, exporter
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with MemoryManager(
            root, tracer_provider=provider, namespaces=specs, deferred_spans=request.param == "deferred"
        ) as mm:
            yield mm, provider, exporter
    provider.shutdown()


def spans(provider: TracerProvider, exporter: InMemorySpanExporter) -> list[Any]:
    provider.force_flush()
    return list(exporter.get_finished_spans())


def test_one_span_per_public_operation(traced: Any) -> None:
    mm, provider, exporter = traced
    calls = [
        ("memory.write", lambda: mm.write("t.warm", "k", {"v": CANARY})),
        ("memory.read", lambda: mm.read("t.warm", "k")),
        ("memory.get", lambda: mm.get_record("t.warm", "k")),
        ("memory.update", lambda: mm.update("t.warm", "n", lambda v: (v or 0) + 1)),
        ("memory.query", lambda: mm.query("t.*", "*")),
        ("memory.archive", lambda: mm.archive(now=time.time() + 3600)),
        ("memory.delete", lambda: mm.delete("t.warm", "n")),
        ("memory.subscribe", lambda: mm.subscribe("t.*", lambda e: None, remote=False).cancel()),
        ("memory.events_since", lambda: mm.events_since("1:0")),
        ("memory.check", lambda: mm.check()),
        # every op goes through the one pipeline, so these have spans too
        ("memory.expand", lambda: mm.expand("t.warm", {"v": 1})),
        ("memory.namespaces", lambda: mm.namespaces()),
        ("memory.declare", lambda: mm.declare(NamespaceSpec("t.extra"))),
        ("memory.undeclare", lambda: mm.undeclare("t.extra")),
        ("memory.stats", lambda: mm.stats()),
        ("memory.compact", lambda: mm.compact()),
        ("memory.cursor", lambda: mm.cursor()),
    ]
    for name, call in calls:
        exporter.clear()
        call()
        got = [op_name(s) for s in spans(provider, exporter)]
        assert got == [name], f"{name}: {got}"


def test_attributes_and_no_values_anywhere(traced: Any) -> None:
    mm, provider, exporter = traced
    trace_id = mm.write("t.warm", "secret-key", {"note": CANARY, "nested": [CANARY]})
    mm.write("t.hot", "h", CANARY)
    assert mm.read("t.warm", "secret-key") == {"note": CANARY, "nested": [CANARY]}
    mm.read("t.warm", "absent")
    mm.update("t.warm", "secret-key", lambda v: {**v, "more": CANARY})
    rows = mm.query("t.warm", where={"note": CANARY})
    assert len(rows) == 1
    found = spans(provider, exporter)
    by_name: dict[str, list[Any]] = {}
    for s in found:
        by_name.setdefault(op_name(s), []).append(s)
    write = by_name["memory.write"][0]
    assert format(write.context.trace_id, "032x") == trace_id
    attrs = dict(write.attributes)
    assert attrs["db.system.name"] == "hrm-memory"
    assert attrs["db.operation.name"] == "write"
    assert attrs["db.collection.name"] == "t.warm"
    assert attrs["hrm.memory.key"] == "secret-key"
    assert attrs["hrm.memory.tier"] == "warm"
    assert attrs["hrm.memory.persisted"] is True
    assert attrs["hrm.memory.bytes"] == len(orjson.dumps({"note": CANARY, "nested": [CANARY]}))
    hot = by_name["memory.write"][1]
    assert hot.attributes["hrm.memory.persisted"] is False and hot.attributes["hrm.memory.tier"] == "hot"
    hit, miss = by_name["memory.read"]
    assert hit.attributes["hrm.memory.hit"] is True and miss.attributes["hrm.memory.hit"] is False
    assert by_name["memory.query"][0].attributes["db.response.returned_rows"] == 1
    # the where filter's field names may appear, its values never
    text = orjson.dumps(
        [
            {
                "attrs": dict(s.attributes),
                "events": [dict(e.attributes or {}) for e in s.events],
                "status": s.status.description,
                "name": op_name(s),
            }
            for s in found
        ],
        default=str,
    ).decode()
    assert CANARY not in text


def test_spans_are_children_of_the_callers_span(traced: Any) -> None:
    mm, provider, exporter = traced
    tracer = provider.get_tracer("caller")
    with tracer.start_as_current_span("handle-turn") as parent:
        trace_id = mm.write("t.warm", "k", 1)
        mm.read("t.warm", "k")
        mm.query("t.*")
    ctx = parent.get_span_context()
    assert trace_id == format(ctx.trace_id, "032x")
    ours = [s for s in spans(provider, exporter) if op_name(s).startswith("memory.")]
    assert len(ours) == 3
    for s in ours:
        assert s.parent is not None and s.parent.span_id == ctx.span_id
        assert s.context.trace_id == ctx.trace_id
        assert s.start_time <= s.end_time
    outside = mm.write("t.warm", "k", 2)
    assert outside != trace_id and outside != INVALID_TRACE_ID


def test_timestamps_and_ids_are_real(traced: Any) -> None:
    mm, provider, exporter = traced
    before = time.time_ns()
    for i in range(20):
        mm.write("t.warm", f"k{i}", i)
    after = time.time_ns()
    found = spans(provider, exporter)
    assert len(found) == 20
    assert len({s.context.span_id for s in found}) == 20
    assert len({s.context.trace_id for s in found}) == 20  # each a root span
    assert all(before <= s.start_time <= s.end_time <= after for s in found)


def test_failed_operation_has_one_error_span(traced: Any) -> None:
    mm, provider, exporter = traced
    with pytest.raises(InvalidValue):
        mm.write("t.warm", "k", float("nan"))
    with pytest.raises(ValueError):
        mm.read("no.such", "k")
    found = spans(provider, exporter)
    assert [op_name(s) for s in found] == ["memory.write", "memory.read"]
    assert all(s.status.status_code is StatusCode.ERROR for s in found)
    assert found[0].attributes["error.type"] == "InvalidValue"
    assert found[1].attributes["error.type"] == "UndeclaredNamespace"


def test_failing_callback_is_traced(traced: Any) -> None:
    mm, provider, exporter = traced

    def bad(event: Any) -> None:
        raise RuntimeError("subscriber bug")

    with mm.subscribe("t.*", bad, remote=False):
        mm.write("t.warm", "k", 1)
    notify = [s for s in spans(provider, exporter) if op_name(s) == "memory.notify"]
    assert len(notify) == 1 and notify[0].status.status_code is StatusCode.ERROR
    assert notify[0].attributes["error.type"] == "RuntimeError"


def test_no_sdk_means_no_spans_yet_a_real_unique_trace_id(root: Path) -> None:
    """Without an SDK, every operation still has a
    trace id of its own, and the events it makes carry it."""
    seen: list[Any] = []
    with MemoryManager(root) as mm:  # the global provider is the API's placeholder
        with mm.subscribe("altitude.*", seen.append, remote=False):
            ids = [mm.write("altitude.patterns", f"k{i}", i) for i in range(200)]
            ids.append(mm.write("focus.fast", "k", 1))  # hot
    assert INVALID_TRACE_ID not in ids and len(set(ids)) == len(ids)
    assert all(len(t) == 32 and int(t, 16) for t in ids)
    assert [e.trace_id for e in seen] == ids[:200]


def test_close_flushes_deferred_spans(root: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mm = MemoryManager(root, tracer_provider=provider)
    mm.write("altitude.patterns", "k", 1)
    mm.close()
    assert [op_name(s) for s in exporter.get_finished_spans()] == ["memory.write"]
    provider.shutdown()


def test_jsonl_file_and_trace_viewer(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hrm_memory.cli import main as cli

    assert cli.main(["--root", str(root), "--trace", "jsonl", "--json", "put", "altitude.patterns", "k", "1"]) == 0
    trace_id = orjson.loads(capsys.readouterr().out)["trace_id"]
    spans_file = root / "traces" / "spans.jsonl"
    assert (spans_file.stat().st_mode & 0o777) == 0o600
    lines = [orjson.loads(line) for line in spans_file.read_bytes().splitlines()]
    assert {"memory.write", "memory.get"} <= {op_name(s) for s in lines}
    assert cli.main(["--root", str(root), "trace", "show", trace_id]) == 0
    out = capsys.readouterr().out
    assert trace_id in out and "upsert_memory write" in out and "altitude.patterns/k" in out
    assert cli.main(["--root", str(root), "trace", "tail", "-n", "5"]) == 0
    assert "search_memory get" in capsys.readouterr().out
    assert cli.main(["--root", str(root), "trace", "show", "0" * 32]) == 1


def test_global_provider_set_after_first_use_is_honoured(tmp_path: Path) -> None:
    """The pipeline skips Tracing.start while no SDK is set; a provider set
    later (the usual order in an application's start-up) must still get every
    span. In a subprocess: the global provider can be set once per process."""
    import subprocess
    import sys

    code = f"""
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from hrm_memory import MemoryManager
with MemoryManager({str(tmp_path / "store")!r}) as mm:
    first = mm.write("altitude.patterns", "k", 1)  # no SDK yet: an id of its own
    assert first != "0" * 32
    mm.read("altitude.patterns", "k")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    second = mm.write("altitude.patterns", "k", 2)
    mm.read("altitude.patterns", "k")
provider.force_flush()
(write,) = [s for s in exporter.get_finished_spans() if s.attributes["db.operation.name"] == "write"]
assert second == "%032x" % write.context.trace_id != first  # the id the span carries
print(sorted("memory." + s.attributes["db.operation.name"] for s in exporter.get_finished_spans()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['memory.read', 'memory.write']"


# -- the deferred path: what it must deliver ------------------------------------------------


def _batch_provider(**kw: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider(**kw)
    provider.add_span_processor(BatchSpanProcessor(exporter))  # default queue: 2,048 spans
    return provider, exporter


def test_batch_processor_gets_every_span_of_10k_ops_with_ids_parents_times_attributes(root: Path) -> None:
    provider, exporter = _batch_provider()
    tracer = provider.get_tracer("caller")
    done: list[tuple[str, str, str | None, int, int, Any]] = []  # op, key, trace id, t0, t1, parent
    with MemoryManager(root, tracer_provider=provider, namespaces=[NamespaceSpec("t.hot", tier="hot")]) as mm:
        for i in range(10_000):
            key = f"k{i % 997}"
            parent = None
            t0 = time.time_ns()
            if i % 10 == 0:  # some under a caller's span
                with tracer.start_as_current_span("turn") as span:
                    parent = span.get_span_context()
                    trace_id: str | None = mm.write("t.hot", key, i)
            elif i % 2:
                trace_id = mm.write("t.hot", key, i)
            else:
                mm.read("t.hot", key)
                trace_id = None
            done.append(("write" if trace_id else "read", key, trace_id, t0, time.time_ns(), parent))
    provider.force_flush()
    ours = [s for s in exporter.get_finished_spans() if op_name(s).startswith("memory.")]
    assert len(ours) == 10_000
    ours.sort(key=lambda s: s.start_time)
    assert len({s.context.span_id for s in ours}) == 10_000
    for s, (op, key, trace_id, t0, t1, parent) in zip(ours, done):
        assert op_name(s) == f"memory.{op}"
        assert t0 <= s.start_time <= s.end_time <= t1
        assert s.context.is_valid and s.context.trace_flags.sampled and not s.context.is_remote
        if trace_id is not None:
            assert format(s.context.trace_id, "032x") == trace_id
        if parent is None:
            assert s.parent is None
        else:
            assert s.parent is not None and s.parent.span_id == parent.span_id
            assert s.context.trace_id == parent.trace_id
        attrs = dict(s.attributes)
        assert attrs["db.system.name"] == "hrm-memory" and attrs["db.operation.name"] == op
        assert attrs["db.collection.name"] == "t.hot" and attrs["hrm.memory.key"] == key
        assert attrs["hrm.memory.tier"] == "hot"
        assert s.resource is provider.resource
        assert s.instrumentation_scope is not None and s.instrumentation_scope.name == "hrm-memory"
    provider.shutdown()


@pytest.mark.parametrize("deferred", [True, False])
def test_a_ratio_sampler_is_honoured(root: Path, deferred: bool) -> None:
    """TraceIdRatioBased keeps exactly the traces whose id is below its bound,
    whichever thread asks it."""
    from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

    sampler = TraceIdRatioBased(0.3)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(root, tracer_provider=provider, deferred_spans=deferred) as mm:
        returned = {mm.write("altitude.patterns", f"k{i}", i) for i in range(2_000)}
    provider.force_flush()
    mask = (1 << 64) - 1
    expected = {t for t in returned if int(t, 16) & mask < sampler.bound}
    got = {format(s.context.trace_id, "032x") for s in exporter.get_finished_spans()}
    assert got == expected
    assert 300 < len(got) < 900  # 30% of 2,000, give or take
    provider.shutdown()


@pytest.mark.parametrize("sampler_kind", ["default", "parent-ratio"])
@pytest.mark.parametrize("parent_sampled", [True, False])
def test_a_remote_parents_sampled_flag_is_honoured(root: Path, sampler_kind: str, parent_sampled: bool) -> None:
    from opentelemetry import context, trace
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    exporter = InMemorySpanExporter()
    kw: dict[str, Any] = {} if sampler_kind == "default" else {"sampler": ParentBased(TraceIdRatioBased(0.5))}
    provider = TracerProvider(**kw)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if parent_sampled else trace.TraceFlags.DEFAULT)
    state = trace.TraceState([("vendor", "v1")])
    remote = trace.SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=flags, trace_state=state)
    with MemoryManager(root, tracer_provider=provider) as mm:
        token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
        try:
            ids = {mm.write("altitude.patterns", f"k{i}", i) for i in range(200)}
            mm.read("altitude.patterns", "k1")
        finally:
            context.detach(token)
    provider.force_flush()
    found = exporter.get_finished_spans()
    assert ids == {format(0xABC, "032x")}
    if not parent_sampled:
        assert found == ()
        return
    assert len(found) == 201
    for s in found:
        assert s.parent == remote and s.context.trace_id == 0xABC
        assert s.context.trace_state == state  # carried from the parent
    provider.shutdown()


def test_record_only_decisions_reach_on_end_unsampled(root: Path) -> None:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

    class RecordOnly(Sampler):
        def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                          attributes: Any = None, links: Any = None, trace_state: Any = None) -> SamplingResult:
            if (attributes or {}).get("db.operation.name") == "read":
                return SamplingResult(Decision.DROP)
            # The SDK's samplers hand back the attributes they were given (the
            # span keeps what the sampler returns), plus their own.
            return SamplingResult(Decision.RECORD_ONLY, {**(attributes or {}), "sampler.says": "keep"})

        def get_description(self) -> str:
            return "RecordOnly"

    class Collect(SpanProcessor):
        def __init__(self) -> None:
            self.ended: list[Any] = []

        def on_end(self, span: Any) -> None:
            self.ended.append(span)

    collect = Collect()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=RecordOnly())
    provider.add_span_processor(collect)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(root, tracer_provider=provider) as mm:
        mm.write("altitude.patterns", "k", 1)
        mm.read("altitude.patterns", "k")
    provider.force_flush()
    assert [op_name(s) for s in collect.ended] == ["memory.write"]
    span = collect.ended[0]
    assert not span.context.trace_flags.sampled
    assert span.attributes["sampler.says"] == "keep" and span.attributes["hrm.memory.key"] == "k"
    assert exporter.get_finished_spans() == ()  # an exporter sees sampled spans only
    provider.shutdown()


@pytest.mark.parametrize("ending", ["exit", "close", "close-and-shutdown"])
def test_spans_of_a_short_process_are_not_lost(tmp_path: Path, ending: str) -> None:
    """A process that writes and ends at once (no flush of its own): every
    span reaches the batch processor's exporter."""
    import subprocess
    import sys

    code = f"""
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from hrm_memory import MemoryManager, NamespaceSpec

class Count(SpanExporter):
    n = 0
    def export(self, spans):
        Count.n += len(spans)
        return SpanExportResult.SUCCESS
    def shutdown(self):
        print("exported", Count.n, flush=True)

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(Count()))
mm = MemoryManager({str(tmp_path / "store")!r}, tracer_provider=provider,
                   namespaces=[NamespaceSpec("t.hot", tier="hot")])
for i in range(3000):
    mm.write("t.hot", f"k{{i}}", i)
    mm.read("t.hot", f"k{{i}}")
if {ending!r} != "exit":
    mm.close()
if {ending!r} == "close-and-shutdown":
    provider.shutdown()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.strip() == "exported 6000"


@pytest.mark.skipif(not sdk_internals.FAST_WANTED, reason="the fast path is turned off (HRM_MEMORY_TRACING_FAST=0)")
def test_the_constructor_shortcuts_build_what_the_constructors_build(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcuts pass the start-up check with the SDK we test against,
    and the constructors (used if an SDK lays its objects out otherwise)
    give the same spans."""
    assert sdk_internals.probe() == sdk_internals.Probe(deferred=True, fast_spans=True)
    fast_build = sdk_internals.make_span
    got = []
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(sdk_internals, "make_span", sdk_internals._constructed_span)
        assert (sdk_internals.make_span is fast_build) is fast
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with MemoryManager(root / str(fast), tracer_provider=provider) as mm:
            mm.write("altitude.patterns", "k", 1)
        provider.force_flush()
        (span,) = exporter.get_finished_spans()
        got.append(span)
        provider.shutdown()
    fast_span, slow_span = got
    assert type(fast_span) is type(slow_span)
    assert set(vars(fast_span)) == set(vars(slow_span))
    assert dict(fast_span.attributes) == dict(slow_span.attributes)
    assert fast_span.context.is_valid and slow_span.context.is_valid
    assert fast_span.to_json()  # an exporter's view of it works


def test_no_span_lost_when_threads_write_while_the_drainer_drains(root: Path) -> None:
    import threading

    provider, exporter = _batch_provider()
    with MemoryManager(root, tracer_provider=provider, namespaces=[NamespaceSpec("t.hot", tier="hot")]) as mm:

        def work(t: int) -> None:
            for i in range(2_500):
                mm.write("t.hot", f"t{t}-{i % 50}", i)
                if i % 500 == 0:
                    provider.force_flush()  # drains while the other threads append

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    provider.force_flush()
    assert len(exporter.get_finished_spans()) == 10_000
    provider.shutdown()


def test_untraced_trace_ids_differ_in_a_forked_child() -> None:
    """A forked child draws a prefix of its own: its ids never repeat the parent's."""
    from hrm_memory.tracing import spans

    spans.new_trace_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then out without running the parent's atexit hooks
        os.write(write, (",".join(spans.new_trace_id() for _ in range(3))).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode().split(",")
    os.close(read)
    mine = [spans.new_trace_id() for _ in range(3)]
    assert len(child) == 3 and not set(child) & set(mine)
    assert {c[:16] for c in child} != {m[:16] for m in mine}


# -- seed namespaces, the global provider, tokens_saved ---------------------------------------


def _compact_bytes(codec: Any, value: Any) -> bytes:
    return orjson.dumps(codec.compact(value))


@pytest.mark.parametrize("namespace", ["focus.fast", "altitude.session", "altitude.patterns", "reasoning.strategies"])
def test_seed_namespaces_under_the_global_provider_deliver_every_span_with_exact_tokens_saved(
    root: Path, namespace: str
) -> None:
    """Under the standard set-up (global SDK provider, batch processor), each
    write to a seed namespace has its span with the right ids, parent and
    attributes; ``hrm.memory.tokens_saved`` is the exact o200k count of the
    value as written minus that of its coded form: 0 for a value the codec
    leaves as it is, and > 0 for one it codes."""
    from hrm_memory.core import tokens
    from hrm_memory.namespaces import seed_codecs

    hrm = namespace.split(".")[0]
    codec = {c.name: c for c in seed_codecs()}[{"focus": "focus", "altitude": "altitude", "reasoning": "reasoning"}[hrm]]
    coded = {
        "focus": {"user_input_length": 142, "stance_used": "sensemaking", "to_stance": "execution", "note": "split it"},
        "altitude": {"people": [{"relationship": "work_colleague", "tags": ["patent"]}], "first_mentioned": "2024"},
        "reasoning": {"matched_intent": "plan", "recommendation": "decompose", "revision_needed": False, "n": 3},
    }[hrm]
    plain = {"id": 7, "agent": "focus", "text": "inbox lunch focus deadline", "score": 0.5, "labels": ["a", "b"]}
    assert orjson.dumps(codec.compact(plain)) == orjson.dumps(plain) and codec.keeps(orjson.dumps(plain))
    assert not codec.keeps(orjson.dumps(coded))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    caller = provider.get_tracer("caller")
    with global_provider(provider), MemoryManager(root) as mm:
        mm.consent.grant("signals")  # focus.fast is gated: its spans name keys once granted
        written = []
        for i in range(600):  # more than a batch of records, finished on the caller's thread
            value = coded if i % 3 == 0 else {**plain, "id": i}
            with caller.start_as_current_span("turn") as turn:
                tid = mm.write(namespace, f"k{i}", value)
                assert mm.read(namespace, f"k{i}") == value
                assert mm.read(namespace, f"k{i}", compact=True) == codec.compact(value)
            written.append((f"k{i}", value, tid, turn.get_span_context()))
        provider.force_flush()
        got = [s for s in exporter.get_finished_spans() if op_name(s) == "memory.write"]
        reads = [s for s in exporter.get_finished_spans() if op_name(s) == "memory.read"]
    provider.shutdown()
    assert len(got) == 600 and len(reads) == 1200
    by_key = {s.attributes["hrm.memory.key"]: s for s in got}
    expected_saved = tokens.count(orjson.dumps(coded).decode()) - tokens.count(_compact_bytes(codec, coded).decode())
    assert expected_saved > 0
    ids = set()
    for key, value, tid, parent in written:
        span = by_key[key]
        ctx = span.get_span_context()
        assert "%032x" % ctx.trace_id == tid == "%032x" % parent.trace_id
        assert span.parent is not None and span.parent.span_id == parent.span_id
        ids.add(ctx.span_id)
        attrs = span.attributes
        assert attrs["db.collection.name"] == namespace and attrs["db.operation.name"] == "write"
        assert attrs["hrm.memory.tokens_saved"] == (expected_saved if value is coded else 0)
        # the bytes kept: a hot record as written (coded when asked for), a warm one coded
        kept = orjson.dumps(value) if namespace in ("focus.fast", "altitude.session") else _compact_bytes(codec, value)
        assert attrs["hrm.memory.bytes"] == len(kept)
    assert len(ids) == 600 and 0 not in ids


def test_tokens_saved_is_counted_only_for_spans_the_sampler_keeps(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the SDK's default sampler, a write under a parent that was not
    sampled makes no span, and its tokens are never counted (docs/tracing.md)."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    from hrm_memory.tracing.sdk import TokensSaved

    counted: list[int] = []
    real = TokensSaved.value

    def value(self: TokensSaved) -> int:
        counted.append(1)
        return real(self)

    monkeypatch.setattr(TokensSaved, "value", value)
    coded = {"user_input_length": 3, "stance_used": "sensemaking"}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    with global_provider(provider), MemoryManager(root) as mm:
        for sampled in (False, True):
            flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
            parent = SpanContext(0xABC + sampled, 0xDEF, is_remote=True, trace_flags=flags)
            with trace.use_span(NonRecordingSpan(parent)):
                for i in range(300):
                    mm.write("focus.fast", f"k{i}", coded)
            provider.force_flush()
            assert len(counted) == (300 if sampled else 0)
        writes = [s for s in exporter.get_finished_spans() if op_name(s) == "memory.write"]
    provider.shutdown()
    assert len(writes) == 300 and all(s.attributes["hrm.memory.tokens_saved"] > 0 for s in writes)


def test_tokens_saved_stays_exact_when_remembered_per_shape(root: Path) -> None:
    """tokens_saved is remembered per value shape with digits masked
    (``tokens.saved``): under the global provider, writes of one shape whose
    numbers change (every one) and whose free text changes (every fifth)
    each carry exactly count(JSON) - count(coded JSON) of their own value."""
    from hrm_memory.core import tokens
    from hrm_memory.namespaces import seed_codecs

    codec = {c.name: c for c in seed_codecs()}["focus"]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    values = {}
    with global_provider(provider), MemoryManager(root) as mm:
        mm.consent.grant("signals")  # focus.fast is gated: its spans name keys once granted
        for i in range(400):
            value = {"user_input_length": i * 37 % 1000, "response_length": 10**i % 99991, "stance_used": "sensemaking",
                     "had_commitment": i % 2 == 0, "to_stance": ["execution", "discovery", "paused"][i % 3],
                     "note": f"turn {i // 5} about {'x' * (i // 5 % 4)} ticket-{i // 5}", "turn": i}  # fmt: skip
            mm.write("focus.fast", f"k{i}", value)
            values[f"k{i}"] = value
        provider.force_flush()
        got = [s for s in exporter.get_finished_spans() if op_name(s) == "memory.write"]
    provider.shutdown()
    assert len(got) == 400
    for span in got:
        value = values[span.attributes["hrm.memory.key"]]
        readable, coded = orjson.dumps(value).decode(), orjson.dumps(codec.compact(value)).decode()
        assert span.attributes["hrm.memory.tokens_saved"] == tokens.count(readable) - tokens.count(coded)
