"""Spans a GenAI viewer understands: OpenTelemetry's GenAI memory convention on
every operation, through every door (sync, async, CLI, MCP); no value, query
text or gated key unless opted in; span files under the root scrubbed of
forgotten and purged keys; one trace per CLI command; a real OTLP/HTTP
receiver (oteltest's sink) sees a command as one trace."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hrm_memory import AsyncMemoryManager, MemoryManager, NamespaceSpec, setup_tracing
from hrm_memory.tracing import keys, span_file
from tests.conftest import REPO

CLI = [sys.executable, "-m", "hrm_memory.cli.main"]
GATED = "learning.patterns"  # consent category "preferences"
OPS = {"search_memory", "upsert_memory", "update_memory", "delete_memory", "create_memory_store", "delete_memory_store"}


def canary() -> str:
    return "canary" + secrets.token_hex(8)


@pytest.fixture(params=["deferred", "api"])
def traced(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[MemoryManager, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(tmp_path / "s", durability="flush", tracer_provider=provider,
                       deferred_spans=request.param == "deferred") as mm:  # fmt: skip
        yield mm, exporter
    provider.shutdown()


@pytest.fixture(autouse=True)
def content_off() -> Iterator[None]:
    keys.capture_content(False)
    yield
    keys.capture_content(False)


def finished(mm: MemoryManager, exporter: InMemorySpanExporter) -> list[Any]:
    mm._pipeline.core.tracing.flush()  # noqa: SLF001 - the deferred records of this manager
    out = list(exporter.get_finished_spans())
    exporter.clear()
    return out


def sync_calls(mm: MemoryManager, tmp: Path, value: str) -> list[tuple[str, Callable[[], Any], str, str | None]]:
    """(db.operation.name, call, store id, record id) for every public operation."""
    t = time.time() + 1
    return [
        ("write", lambda: mm.write("shared.people", "ann", {"v": value}), "shared.people", "ann"),
        ("read", lambda: mm.read("shared.people", "ann"), "shared.people", "ann"),
        ("get", lambda: mm.get_record("shared.people", "ann"), "shared.people", "ann"),
        ("update", lambda: mm.update("shared.people", "n", lambda v: (v or 0) + 1), "shared.people", "n"),
        ("query", lambda: mm.query("shared.people", "*"), "shared.people", None),
        ("query", lambda: mm.query("shared.people", "ann"), "shared.people", "ann"),
        ("delete", lambda: mm.delete("shared.people", "n"), "shared.people", "n"),
        ("subscribe", lambda: mm.subscribe("shared.*", lambda e: None, remote=False).cancel(), "shared.*", None),
        ("cursor", lambda: mm.cursor(), "*", None),
        ("events_since", lambda: mm.events_since("1:0"), "*", None),
        ("expand", lambda: mm.expand("shared.people", {"v": 1}), "shared.people", None),
        ("namespaces", lambda: mm.namespaces(), "*", None),
        ("declare", lambda: mm.declare(NamespaceSpec("shared.extra")), "shared.extra", None),
        ("undeclare", lambda: mm.undeclare("shared.extra", purge=True), "shared.extra", None),
        ("consent", lambda: mm.consent.revoke("signals"), "*", None),
        ("archive", lambda: mm.archive(now=time.time() + 60), "*", None),
        ("check", lambda: mm.check(), "*", None),
        ("compact", lambda: mm.compact(), "*", None),
        ("stats", lambda: mm.stats(), "*", None),
        ("remember", lambda: mm.remember(f"Ann keeps {value} in the blue drawer", kind="semantic", key="drawer"),
         "shared.memories", "drawer"),
        ("recall", lambda: mm.recall(f"where does Ann keep {value}", namespaces="shared.memories"),
         "shared.memories", None),
        ("context", lambda: mm.context("altitude", budget=200, query=f"about {value}"), "*", None),
        ("history", lambda: mm.history("shared.people", "ann"), "shared.people", "ann"),
        ("read_as_of", lambda: mm.read("shared.people", "ann", as_of=t), "shared.people", "ann"),
        ("query_as_of", lambda: mm.query("shared.people", as_of=t), "shared.people", None),
        ("export", lambda: mm.export(tmp / "x.jsonl"), "*", None),
        ("import", lambda: mm.import_(tmp / "x.jsonl"), "*", None),
        ("forget", lambda: mm.forget("shared.people", "ann"), "shared.people", None),
    ]


def check_span(span: Any, op: str, store: str, record: str | None, secret: str) -> None:
    attrs = dict(span.attributes or {})
    assert attrs["db.operation.name"] == op
    name = attrs["gen_ai.operation.name"]
    assert name == keys.GENAI_OPERATIONS.get(op, f"hrm_memory.{op}") and span.name == name, (op, name, span.name)
    assert attrs["gen_ai.memory.store.id"] == store, (op, attrs)
    assert attrs.get("gen_ai.memory.record.id") == record, (op, attrs)
    text = orjson.dumps({"a": attrs, "n": span.name, "s": span.status.description}, default=str).decode()
    assert secret not in text, (op, text)  # no value, no query text
    assert "gen_ai.memory.query.text" not in attrs and "gen_ai.memory.records" not in attrs


def test_every_sync_operation_speaks_the_convention(traced: Any, tmp_path: Path) -> None:
    mm, exporter = traced
    secret = canary()
    for op, call, store, record in sync_calls(mm, tmp_path, secret):
        call()
        spans = [s for s in finished(mm, exporter) if (s.attributes or {}).get("db.operation.name") == op]
        assert len(spans) == 1, (op, spans)
        check_span(spans[0], op, store, record, secret)
    assert {keys.GENAI_OPERATIONS[o] for o in keys.GENAI_OPERATIONS} == OPS


def test_every_async_operation_speaks_the_convention(traced: Any) -> None:
    mm, exporter = traced
    secret = canary()

    async def body() -> list[tuple[str, str, str | None]]:
        amm = AsyncMemoryManager(manager=mm)
        done = []
        await amm.write("shared.people", "bo", {"v": secret})
        done.append(("write", "shared.people", "bo"))
        await amm.read("shared.people", "bo")
        done.append(("read", "shared.people", "bo"))
        await amm.update("shared.people", "bo", lambda v: {**v, "w": 1})
        done.append(("update", "shared.people", "bo"))
        await amm.query("shared.*")
        done.append(("query", "shared.*", None))
        await amm.remember(f"Bo likes {secret} tea at noon", kind="semantic", key="tea")
        done.append(("remember", "shared.memories", "tea"))
        await amm.recall(f"what does Bo like {secret}", namespaces="shared.memories")
        done.append(("recall", "shared.memories", None))
        await amm.history("shared.people", "bo")
        done.append(("history", "shared.people", "bo"))
        await amm.delete("shared.people", "bo")
        done.append(("delete", "shared.people", "bo"))
        await amm.declare(NamespaceSpec("shared.tmp"))
        done.append(("declare", "shared.tmp", None))
        await amm.undeclare("shared.tmp")
        done.append(("undeclare", "shared.tmp", None))
        await amm.stats()
        done.append(("stats", "*", None))
        await amm.forget("shared.memories", "tea")
        done.append(("forget", "shared.memories", None))
        await amm.aclose()
        return done

    expected = asyncio.run(body())
    spans = finished(mm, exporter)
    assert len(spans) == len(expected)
    for span, (op, store, record) in zip(spans, expected):
        check_span(span, op, store, record, secret)


def test_a_gated_key_is_named_only_once_granted_and_persisted(traced: Any) -> None:
    mm, exporter = traced
    key = canary()
    mm.write(GATED, key, {"x": 1})  # consent not granted: kept in memory only
    mm.read(GATED, key)
    mm.update(GATED, key, lambda v: {**v, "y": 2})
    mm.query(GATED, key)
    mm.query("learning.*", key)  # a pattern that covers the gated namespace
    mm.history(GATED, key)
    mm.remember(f"The user likes {key} jazz records", kind="semantic", namespace=GATED)
    mm.delete(GATED, key)
    spans = finished(mm, exporter)
    assert len(spans) == 8
    for s in spans:
        assert key not in orjson.dumps(dict(s.attributes or {}), default=str).decode(), s.name
        assert "hrm.memory.key" not in (s.attributes or {}) and "gen_ai.memory.record.id" not in (s.attributes or {})
    mm.consent.grant("preferences")
    mm.write(GATED, key, {"x": 3})
    (consent, write) = finished(mm, exporter)
    assert write.attributes["gen_ai.memory.record.id"] == key and write.attributes["hrm.memory.persisted"] is True


def test_query_text_only_when_opted_in_and_never_for_a_gated_namespace(traced: Any) -> None:
    mm, exporter = traced
    mm.consent.grant("preferences")
    mm.remember("Ann keeps the spare keys in the blue drawer", kind="semantic", namespace="shared.memories")
    mm.remember("The user hums old jazz records in the evening", kind="semantic", namespace=GATED)
    question, private = "where are the spare keys", "what does the user hum " + canary()
    finished(mm, exporter)
    mm.recall(question, namespaces="shared.memories")
    (plain,) = finished(mm, exporter)
    assert "gen_ai.memory.query.text" not in plain.attributes and "gen_ai.memory.records" not in plain.attributes
    keys.capture_content(True)
    mm.recall(question, namespaces="shared.memories")
    mm.recall(private, namespaces=GATED)
    mm.recall(private)  # every namespace: gated ones among them
    opted, gated, everywhere = finished(mm, exporter)
    assert opted.attributes["gen_ai.memory.query.text"] == question
    records = orjson.loads(opted.attributes["gen_ai.memory.records"])
    assert records and "Ann keeps" in records[0]["content"] and records[0]["metadata"]["namespace"] == "shared.memories"
    for s in (gated, everywhere):
        text = orjson.dumps(dict(s.attributes), default=str).decode()
        assert "gen_ai.memory.query.text" not in text and "jazz" not in text and private not in text


# -- span files under the root: gated keys never, forgotten and purged keys scrubbed --------------


def file_tracing(root: Path) -> tuple[TracerProvider, Path]:
    path = root / "traces" / "spans.jsonl"
    return setup_tracing("jsonl", path=path, set_global=False), path


def test_forget_and_purge_leave_no_byte_of_the_key_in_span_files(tmp_path: Path) -> None:
    root = tmp_path / "s"
    provider, path = file_tracing(root)
    gated_key, kept_key, forgotten, purged, undeclared = canary(), canary(), canary(), canary(), canary()
    with MemoryManager(root, durability="flush", tracer_provider=provider) as mm:
        mm.write(GATED, gated_key, {"x": 1})  # not persisted: its key never reaches the file
        mm.write("shared.people", kept_key, {"x": 1})
        mm.write("shared.people", forgotten, {"x": 1})
        mm.read("shared.people", forgotten)
        mm.query("shared.*", forgotten)
        provider.force_flush()
        before = path.read_bytes()
        assert forgotten.encode() in before and kept_key.encode() in before
        counts = mm.forget("shared.people", forgotten)
        assert counts.get("spans") == 3
        after = path.read_bytes()
        assert forgotten.encode() not in after and kept_key.encode() in after
        assert (path.stat().st_mode & 0o777) == 0o600
        mm.consent.grant("preferences")
        mm.write(GATED, purged, {"x": 1})
        mm.read(GATED, purged)
        provider.force_flush()
        assert purged.encode() in path.read_bytes()
        mm.consent.revoke("preferences", purge=True)
        mm.declare(NamespaceSpec("shared.scratch"))
        mm.write("shared.scratch", undeclared, 1)
        provider.force_flush()
        assert undeclared.encode() in path.read_bytes()
        mm.undeclare("shared.scratch", purge=True)
        mm.write("shared.people", "later", 1)
    provider.shutdown()
    data = path.read_bytes()
    for key in (gated_key, forgotten, purged, undeclared):
        assert key.encode() not in data
    assert kept_key.encode() in data and b'"later"' in data
    assert all(key.encode() not in p.read_bytes() for p in root.rglob("*") if p.is_file()
               for key in (gated_key,))  # fmt: skip


def test_a_scrub_loses_no_span_of_a_concurrent_writer(tmp_path: Path) -> None:
    """A JSONL exporter appending while the file is scrubbed again and again:
    every span it appended is there at the end (it follows the replaced file)."""
    root = tmp_path / "s"
    provider, path = file_tracing(root)
    with MemoryManager(root, durability="flush", tracer_provider=provider) as mm:
        stop = threading.Event()
        written = []

        def writer() -> None:
            i = 0
            while not stop.is_set():
                mm.write("shared.people", f"w{i}", i)
                written.append(f"w{i}")
                i += 1
                if i % 20 == 0:
                    provider.force_flush()

        t = threading.Thread(target=writer)
        t.start()
        removed = 0
        try:
            for _ in range(30):
                key = canary()
                mm.write("shared.people", key, 1)
                removed += mm.forget("shared.people", key).get("spans", 0)
        finally:
            stop.set()
            t.join()
    provider.shutdown()
    spans = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    named = {s["attributes"].get("hrm.memory.key") for s in spans}
    assert set(written) <= named and removed >= 30
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_scrub_span_files_reaches_every_file_under_traces(tmp_path: Path) -> None:
    root = tmp_path / "s"
    (root / "traces" / "old").mkdir(parents=True)
    key = canary()
    line = orjson.dumps({"name": "upsert_memory", "trace_id": "a" * 32, "span_id": "b" * 16,
                         "attributes": {"gen_ai.memory.store.id": "shared.people", "hrm.memory.key": key}})  # fmt: skip
    other = line.replace(b"shared.people", b"shared.places")
    for p in (root / "traces" / "a.jsonl", root / "traces" / "old" / "b.jsonl"):
        p.write_bytes(line + b"\n" + other + b"\n" + b"not a span\n")
    assert span_file.scrub_span_files(root, "shared.people", key) == 2
    for p in (root / "traces" / "a.jsonl", root / "traces" / "old" / "b.jsonl"):
        assert p.read_bytes() == other + b"\n" + b"not a span\n"


def test_mcp_tool_calls_parent_spans_with_the_convention(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    import anyio

    from tests.helpers.mcp_servers import call, stdio_session

    root = tmp_path / "s"
    trace_file = root / "traces" / "spans.jsonl"
    secret, gated_key = canary(), canary()

    async def body() -> None:
        async with stdio_session(root, errlog=tmp_path / "err.txt", trace_file=trace_file) as s:
            await call(s, "write_record", namespace="shared.people", key="dana", value={"v": secret})
            await call(s, "read_record", namespace="shared.people", key="dana")
            gated = await call(s, "write_record", namespace=GATED, key=gated_key, value={"v": secret})
            assert gated["persisted"] is False
            await call(s, "read_record", namespace=GATED, key=gated_key)
            await call(s, "recall", query=f"dana {secret}")
            await call(s, "remember", content=f"Dana keeps {secret} notes on Fridays", kind="semantic")

    anyio.run(body)
    data = trace_file.read_bytes()
    assert secret.encode() not in data and gated_key.encode() not in data
    spans = [orjson.loads(line) for line in data.splitlines()]
    tools = {s["span_id"]: s for s in spans if s["name"].startswith("mcp.tool ")}
    children = [s for s in spans if s["parent_span_id"] in tools]
    assert len(tools) == 6 and len(children) >= 6
    for s in children:
        attrs = s["attributes"]
        assert s["trace_id"] == tools[s["parent_span_id"]]["trace_id"]
        assert s["name"] == attrs["gen_ai.operation.name"] in OPS | {"hrm_memory.consent"}
        assert "gen_ai.memory.store.id" in attrs
    written = [s for s in children if s["attributes"]["db.operation.name"] == "write"]
    assert {s["attributes"].get("gen_ai.memory.record.id") for s in written} == {"dana", None}
    (remembered,) = [s for s in children if s["attributes"]["db.operation.name"] == "remember"]
    assert remembered["attributes"]["gen_ai.memory.store.id"].endswith(".memories")
    assert remembered["attributes"]["gen_ai.memory.record.id"].startswith("semantic-")


# -- the CLI: one trace per command, the convention in the file, and a way in -------------------


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip


def test_a_cli_command_is_one_trace_with_the_convention(tmp_path: Path) -> None:
    root = tmp_path / "s"
    secret, gated_key = canary(), canary()
    p = run("--root", str(root), "--trace", "jsonl", "--json", "put", "shared.people", "ann", orjson.dumps({"v": secret}).decode())
    assert p.returncode == 0, p.stderr
    trace_id = orjson.loads(p.stdout)["trace_id"]
    assert run("--root", str(root), "--trace", "jsonl", "put", GATED, gated_key, "1").returncode == 0
    data = (root / "traces" / "spans.jsonl").read_bytes()
    assert secret.encode() not in data and gated_key.encode() not in data
    spans = [orjson.loads(line) for line in data.splitlines()]
    put = [s for s in spans if s["trace_id"] == trace_id]
    (cmd,) = [s for s in put if s["parent_span_id"] is None]
    assert cmd["name"] == "hrm-memory put" and len(put) >= 2
    for s in put:
        if s is cmd:
            continue
        assert s["parent_span_id"] == cmd["span_id"]
        attrs = s["attributes"]
        assert attrs["gen_ai.operation.name"] in OPS and s["name"] == attrs["gen_ai.operation.name"]
        assert attrs["gen_ai.memory.store.id"] == "shared.people" and attrs["gen_ai.memory.record.id"] == "ann"
    assert len({s["trace_id"] for s in spans}) == 2  # two commands, two traces


def test_the_environment_opts_the_cli_in_to_query_text(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    question = "where are the spare keys " + canary()
    on = {"HRM_MEMORY_TRACE_CONTENT": "1"}
    for env in ({}, on):
        assert run("--root", root, "--trace", "jsonl", "recall", question, "--ns", "shared.memories", env=env).returncode == 1
    assert run("--root", root, "--trace", "jsonl", "recall", question, "--ns", GATED, env=on).returncode == 1
    spans = [orjson.loads(line) for line in (tmp_path / "s" / "traces" / "spans.jsonl").read_bytes().splitlines()]
    recalls = [s["attributes"] for s in spans if s["attributes"].get("db.operation.name") == "recall"]
    assert [a.get("gen_ai.memory.query.text") for a in recalls] == [None, question, None]


def test_trace_tail_without_spans_says_how_to_make_some(tmp_path: Path) -> None:
    p = run("--root", str(tmp_path / "s"), "trace", "tail")
    assert p.returncode == 1 and "--trace jsonl" in p.stderr and "setup_tracing" in p.stderr
    assert not (tmp_path / "s").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_otlp_with_nothing_listening_costs_one_short_wait_and_one_warning(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    root = str(tmp_path / "s")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    t0 = time.monotonic()
    plain = run("--root", root, "put", "shared.people", "k", "1")
    base = time.monotonic() - t0
    t0 = time.monotonic()
    p = run("--root", root, "--trace", "otlp", "get", "shared.people", "k", env=env)
    took = time.monotonic() - t0
    assert plain.returncode == 0 and p.returncode == 0 and p.stdout == "1\n"
    assert p.stderr.count("no OTLP collector") == 1 and "retrying" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert took < base + 2 * 1.0 + 1.5, (took, base)  # the connect timeout, at most twice (export, shutdown)


def test_a_real_otlp_receiver_sees_a_cli_command_as_one_trace(tmp_path: Path) -> None:
    """oteltest's OTLP/HTTP sink (the OpenTelemetry Python community's test
    receiver, from PyPI) on loopback, fed by ``--trace otlp``."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    sink_mod = pytest.importorskip("oteltest.sink")
    import logging

    from google.protobuf.json_format import MessageToDict

    received: list[dict[str, Any]] = []

    class Collect:
        def handle_logs(self, request: Any, headers: Any) -> None: ...

        def handle_metrics(self, request: Any, headers: Any) -> None: ...

        def handle_trace(self, request: Any, headers: Any) -> None:
            received.append(MessageToDict(request))

    port = free_port()
    sink = sink_mod.HttpSink(Collect(), logging.getLogger("oteltest"), port=port)
    sink.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        secret = canary()
        p = run("--root", str(tmp_path / "s"), "--trace", "otlp", "put", "shared.people", "ann",
                orjson.dumps({"v": secret}).decode(), env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})  # fmt: skip
        assert p.returncode == 0 and "no OTLP collector" not in p.stderr, p.stderr
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sink.stop()
    spans = [span for req in received for rs in req.get("resourceSpans", []) for ss in rs.get("scopeSpans", [])
             for span in ss.get("spans", [])]  # fmt: skip
    assert spans and secret not in orjson.dumps(received).decode()
    assert len({s["traceId"] for s in spans}) == 1  # one command, one trace
    (root_span,) = [s for s in spans if not s.get("parentSpanId")]
    assert root_span["name"] == "hrm-memory put"
    ops = [s for s in spans if s is not root_span]
    assert ops
    for s in ops:
        attrs = {a["key"]: next(iter(a["value"].values())) for a in s.get("attributes", [])}
        assert s["name"] == attrs["gen_ai.operation.name"] in OPS
        assert attrs["gen_ai.memory.store.id"] == "shared.people" and attrs["gen_ai.memory.record.id"] == "ann"

