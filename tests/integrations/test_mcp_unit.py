"""The MCP server in process (the SDK's in-memory client): what a failure the
store did not type looks like, and what is logged and traced about it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'hrm-memory[mcp]'")

import anyio  # noqa: E402
from mcp.client.client import Client  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from hrm_memory import MemoryManager  # noqa: E402
from hrm_memory.integrations.mcp_server import build_server  # noqa: E402
from hrm_memory.integrations.mcp_tools import MemoryTools, snippet  # noqa: E402


def test_an_untyped_failure_is_an_internal_tool_error_without_detail(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "secret-value-1234"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(root, durability="flush", tracer_provider=provider, deferred_spans=False) as mm:
        tools = MemoryTools(mm)

        def broken(namespace: str, key: str, *, compact: bool = False) -> None:
            raise RuntimeError(f"something held {secret}")

        real_get_record = mm.get_record
        mm.get_record = broken  # type: ignore[method-assign]
        server = build_server(tools, provider)

        async def body() -> None:
            async with Client(server) as client:
                result = await client.call_tool("read_record", {"namespace": "shared.people", "key": secret})
                assert result.is_error
                text = result.content[0].text  # type: ignore[union-attr]
                assert text.endswith("InternalError: the tool failed unexpectedly (RuntimeError)"), text
                assert secret not in text
                assert "Traceback" not in text
                mm.get_record = real_get_record  # type: ignore[method-assign]
                ok = await client.call_tool("write_record", {"namespace": "shared.people", "key": "k",
                                                              "value": {"v": secret}})
                assert not ok.is_error

        with caplog.at_level(logging.DEBUG):
            anyio.run(body)
        provider.force_flush()
    assert secret not in caplog.text
    assert "read_record" in caplog.text and "RuntimeError" in caplog.text
    finished = exporter.get_finished_spans()
    tool_spans = [s for s in finished if s.name.startswith("mcp.tool ")]
    assert [s.name for s in tool_spans] == ["mcp.tool read_record", "mcp.tool write_record"]
    assert tool_spans[0].attributes is not None and tool_spans[0].attributes["error.type"] == "RuntimeError"
    write_span = tool_spans[1]
    children = [s for s in finished if s.parent is not None and s.parent.span_id == write_span.context.span_id]
    assert {s.attributes["db.operation.name"] for s in children if s.attributes} == {"write", "get"}
    for span in finished:
        assert secret not in repr(dict(span.attributes or {})) and secret not in span.name
    provider.shutdown()


def test_snippet_is_a_bounded_readable_preview() -> None:
    assert snippet({"text": "hello there", "kind": "semantic"}) == "hello there"
    assert snippet("plain") == "plain"
    assert snippet({"a": [1, 2]}) == '{"a":[1,2]}'
    long = snippet("word " * 200)
    assert len(long) == 280 and long.endswith("…")
