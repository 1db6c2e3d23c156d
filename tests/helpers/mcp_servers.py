"""Start ``hrm-memory mcp`` as a subprocess and talk to it with the MCP SDK's
own client, over stdio or streamable HTTP (tests/test_mcp*.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

CLI = [sys.executable, "-m", "hrm_memory.cli.main"]
READY = re.compile(r"serving (http://\S+) ")


def cli_args(root: Path, *args: str, trace_file: Path | None = None, backend: str | None = None) -> list[str]:
    out = ["--root", str(root)]
    if backend is not None:
        out += ["--backend", backend]
    if trace_file is not None:
        out += ["--trace", "jsonl", "--trace-file", str(trace_file)]
    return [*out, "mcp", *args]


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HRM_MEMORY_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@asynccontextmanager
async def stdio_session(root: Path, *args: str, errlog: Path, trace_file: Path | None = None,
                        backend: str | None = None) -> AsyncIterator[ClientSession]:
    """A session with a stdio server started on ``root`` (and ``backend``); its stderr goes to ``errlog``."""
    params = StdioServerParameters(
        command=CLI[0], args=[*CLI[1:], *cli_args(root, *args, trace_file=trace_file, backend=backend)],
        env=server_env())
    with errlog.open("a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@dataclass
class HttpServer:
    url: str
    token: str
    proc: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)


@contextmanager
def http_server(root: Path, *args: str, trace_file: Path | None = None, env: dict[str, str] | None = None,
                bind: str = "127.0.0.1:0", stop: int = signal.SIGTERM) -> Iterator[HttpServer]:
    """An HTTP server on ``root`` (a free loopback port unless ``bind``);
    stopped with ``stop`` (a signal) on exit, which must end it with status 0."""
    proc = subprocess.Popen(
        [*CLI, *cli_args(root, "--http", bind, *args, trace_file=trace_file)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**server_env(), **(env or {})},
    )
    assert proc.stderr is not None
    lines: list[str] = []
    ready = threading.Event()
    url: list[str] = []

    def drain() -> None:  # reads stderr to the end, so the server never blocks on it
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            m = READY.search(line)
            if m and not url:
                url.append(m.group(1))
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if not ready.wait(60) or not url:
            raise AssertionError(f"the server did not start: {''.join(lines)}")
        token = (env or {}).get("HRM_MEMORY_MCP_TOKEN") or (root / "run" / "mcp-token").read_text().strip()
        server = HttpServer(url[0], token, proc, lines)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(stop)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        finally:
            reader.join(10)
            proc.stderr.close()
    assert rc == 0, f"the server exited {rc}: {''.join(lines)}"


@asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    timeout = httpx2.Timeout(30, read=300)  # the SDK's own client defaults (a response may be a stream)
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call ``tool``; its structured result (asserting it is not an error)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    assert result.structured_content is not None
    return dict(result.structured_content)


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call ``tool``, which must fail with a tool error; its text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool} did not fail: {result.structured_content}"
    return "\n".join(getattr(c, "text", "") for c in result.content)


def spans(trace_file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace_file.read_text().splitlines() if line.strip()]
