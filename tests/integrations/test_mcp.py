"""The MCP server, started as a subprocess (``hrm-memory mcp``)
and driven with the MCP SDK's own client, over stdio and streamable HTTP."""

from __future__ import annotations

import json
import re
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'hrm-memory[mcp]'")

import anyio  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from hrm_memory import MemoryManager  # noqa: E402
from hrm_memory.integrations.mcp_tools import TOOLS  # noqa: E402
from hrm_memory.core.tokens import count  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.helpers.canary import files_holding  # noqa: E402
from tests.helpers.span_names import op_name  # noqa: E402
from tests.helpers.mcp_servers import (  # noqa: E402
    call,
    call_error,
    http_server,
    http_session,
    server_env,
    spans,
    stdio_session,
)

Opener = Callable[..., AbstractAsyncContextManager[ClientSession]]


@contextmanager
def serving(transport: str, root: Path, tmp_path: Path, *args: str,
            trace_file: Path | None = None) -> Iterator[tuple[Opener, list[str]]]:
    """An opener of client sessions on a server over ``transport``, and the
    server's stderr lines (complete once the block has ended)."""
    if transport == "http":
        with http_server(root, *args, trace_file=trace_file) as server:

            def open_http() -> AbstractAsyncContextManager[ClientSession]:
                return http_session(server.url, server.token)

            yield open_http, server.stderr
        return
    errlog = tmp_path / "stdio-stderr.txt"
    lines: list[str] = []

    @asynccontextmanager
    async def open_stdio() -> AsyncIterator[ClientSession]:
        async with stdio_session(root, *args, errlog=errlog, trace_file=trace_file) as session:
            yield session

    yield open_stdio, lines
    lines.extend(errlog.read_text().splitlines(keepends=True) if errlog.exists() else [])


TRANSPORTS = ["stdio", "http"]
FACTS = [
    "Dana prefers morning meetings before ten",
    "The quarterly review with Omar is on the third Thursday",
    "Priya is allergic to peanuts and shellfish",
    "Deploys to production happen only on Tuesdays after the standup",
    "The staging database password rotates every ninety days",
    "Lena's daughter started violin lessons in September",
    "Use the blue notebook for architecture sketches",
    "Marco wants weekly summaries sent on Friday afternoons",
]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tools_memories_context_forget_and_spans(transport: str, tmp_path: Path) -> None:
    root = tmp_path / "store"
    trace_file = root / "traces" / "spans.jsonl"
    canary = "canary-" + secrets.token_hex(12)

    async def session_body(open_session: Opener) -> None:
        async with open_session() as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert list(tools) == [name for name, *_ in TOOLS]
            for tool in tools.values():
                assert tool.description and len(tool.description) > 40, tool.name
                assert "\n" not in tool.description and "  " not in tool.description, tool.name
                assert tool.input_schema["type"] == "object"
            recall_props = tools["recall"].input_schema["properties"]
            assert {"query", "kinds", "namespaces", "k"} <= set(recall_props)
            assert recall_props["query"]["description"]
            assert tools["recall"].annotations is not None and tools["recall"].annotations.read_only_hint
            assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint
            resources = [str(r.uri) for r in (await s.list_resources()).resources]
            assert resources == ["hrm-memory://namespaces"]
            templates = [t.uri_template for t in (await s.list_resource_templates()).resource_templates]
            assert templates == ["hrm-memory://context/{hrm}"]

            keys = {}
            for fact in FACTS:
                done = await call(s, "remember", content=fact, kind="semantic", namespace="altitude.memories",
                                  tags=["people"])
                assert done["action"] == "created" and done["persisted"] is True
                keys[fact] = done["key"]
            again = await call(s, "remember", content=FACTS[0], kind="semantic", namespace="altitude.memories")
            assert again["action"] == "merged" and again["key"] == keys[FACTS[0]]

            hits = (await call(s, "recall", query="when does Dana like to have meetings?", k=3))["hits"]
            assert hits[0]["key"] == keys[FACTS[0]] and hits[0]["namespace"] == "altitude.memories"
            assert hits[0]["snippet"] == FACTS[0] and 0 < hits[0]["confidence"] <= 1
            assert len(hits) <= 3
            only_episodic = await call(s, "recall", query="Dana morning meetings", kinds=["episodic"])
            assert all(h["key"] != keys[FACTS[0]] for h in only_episodic["hits"])

            for budget in (40, 120, 2000):
                ctx = await call(s, "context", hrm="altitude", budget=budget)
                assert ctx["tokens"] == count(ctx["text"]) <= budget
            assert "Dana prefers morning meetings" in (await call(s, "context", hrm="altitude"))["text"]
            small = await call(s, "context", hrm="altitude", budget=40)
            assert small["omitted"] > 0
            resource = await s.read_resource("hrm-memory://context/altitude")
            text = resource.contents[0].text  # type: ignore[union-attr]
            assert "Dana prefers morning meetings" in text and count(text) <= 2000
            namespaces = await s.read_resource("hrm-memory://namespaces")
            assert '"altitude.memories"' in namespaces.contents[0].text  # type: ignore[union-attr]

            gone = await call(s, "forget", namespace="altitude.memories", key=keys[FACTS[2]])
            assert gone["forgotten"] is True
            assert (await call(s, "forget", namespace="altitude.memories", key=keys[FACTS[2]]))["forgotten"] is False
            hits = (await call(s, "recall", query="Priya allergic peanuts shellfish"))["hits"]
            assert all(h["key"] != keys[FACTS[2]] for h in hits)
            assert "peanuts" not in (await call(s, "context", hrm="altitude"))["text"]

            # records
            w = await call(s, "write_record", namespace="shared.people", key="dana", value={"role": "manager", "n": 3})
            assert w["persisted"] is True and w["version"] == 1
            r = await call(s, "read_record", namespace="shared.people", key="dana")
            assert r["found"] and r["value"] == {"role": "manager", "n": 3}
            q = await call(s, "query_records", namespace="shared.*", where={"n": {"$gt": 2}})
            assert [(x["namespace"], x["key"]) for x in q["records"]] == [("shared.people", "dana")]
            assert (await call(s, "delete_record", namespace="shared.people", key="dana"))["deleted"] is True
            assert (await call(s, "read_record", namespace="shared.people", key="dana"))["found"] is False

            # errors: the typed error's message, no traceback
            err = await call_error(s, "read_record", namespace="Not A Namespace", key="k")
            assert "InvalidNamespace" in err and "Traceback" not in err
            err = await call_error(s, "write_record", namespace="nosuch.place", key="k", value=1)
            assert "UndeclaredNamespace" in err
            err = await call_error(s, "remember", content="ok thanks", kind="semantic")
            assert "TrivialMemory" in err
            err = await call_error(s, "write_record", namespace="shared.people", key="x", value={"v": canary, "n": 2**70})
            assert "InvalidValue" in err and "Traceback" not in err
            err = await call_error(s, "context")
            assert "InvalidArgument" in err
            err = await call_error(s, "remember", content=f"about {canary} and more", kind="bogus")
            assert "kind" in err  # refused by the schema, naming the field (the caller's own input echoed to it)

            # a consent-gated namespace without consent: kept in the server only, and said so
            gated = await call(s, "write_record", namespace="learning.patterns", key="p1",
                               value={"text": f"user likes {canary} in the mornings"})
            assert gated["persisted"] is False and "consent" in gated["note"]
            mem = await call(s, "remember", content=f"The user secretly collects {canary} stamps from Peru",
                             kind="semantic", namespace="learning.patterns")
            assert mem["persisted"] is False and "never through MCP" in mem["note"]
            assert (await call(s, "read_record", namespace="learning.patterns", key="p1"))["value"]["text"].endswith(
                "in the mornings")
            found = (await call(s, "recall", query=f"{canary} stamps Peru"))["hits"]
            assert found and found[0]["persisted"] is False
            listed = {n["name"]: n for n in (await call(s, "list_namespaces"))["namespaces"]}
            assert listed["learning.patterns"]["consent"] == "preferences"
            assert listed["learning.patterns"]["consent_granted"] is False
            assert "consent" not in " ".join(tools)  # no tool grants consent

    with serving(transport, root, tmp_path, trace_file=trace_file) as (open_session, stderr):
        anyio.run(session_body, open_session)
    # The server has stopped: the gated values never reached a file, its log or its spans.
    assert files_holding(root, canary.encode()) == []
    assert canary not in "".join(stderr)
    assert "Traceback" not in "".join(stderr)
    assert trace_file.exists()
    with MemoryManager(root) as mm:
        assert mm.check() == []

    # One span per tool call, the parent of the store operations it ran.
    recorded = spans(trace_file)
    tool_spans = [sp for sp in recorded if sp["name"].startswith("mcp.tool ")]
    names = [sp["name"] for sp in tool_spans]
    assert names.count("mcp.tool remember") == len(FACTS) + 3  # and the merge, the trivial one, the gated one
    by_id = {sp["span_id"]: sp for sp in recorded}
    children = [sp for sp in recorded if sp["parent_span_id"] in {t["span_id"] for t in tool_spans}]
    ops = {op_name(sp) for sp in children}
    assert ops >= {f"memory.{op}" for op in ("remember", "recall", "context", "write", "get", "delete")}, ops
    for sp in children:
        parent = by_id[sp["parent_span_id"]]
        assert parent["trace_id"] == sp["trace_id"]
    failed = [sp for sp in tool_spans if sp["attributes"].get("error.type")]
    assert {sp["attributes"]["error.type"] for sp in failed} >= {"InvalidNamespace", "TrivialMemory", "InvalidValue"}
    for sp in tool_spans:
        assert sp["attributes"]["mcp.tool.name"] == sp["name"].split()[1]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_scoped_server_refuses_another_hrms_namespaces(transport: str, tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MemoryManager(root, durability="flush") as mm:
        mm.write("focus.notes", "n1", "focus's private note about the launch plan")
        mm.remember("Focus tracks the launch plan closely", kind="semantic", namespace="focus.memories")

    async def body(open_session: Opener) -> None:
        async with open_session() as s:
            done = await call(s, "remember", content="The user walks the dog at seven every morning",
                              kind="episodic")
            assert done["namespace"] == "altitude.memories"
            assert (await call(s, "context"))["hrm"] == "altitude"
            hits = (await call(s, "recall", query="launch plan"))["hits"]
            assert all(not h["namespace"].startswith("focus.") for h in hits)
            for tool, args in [
                ("read_record", {"namespace": "focus.notes", "key": "n1"}),
                ("write_record", {"namespace": "focus.notes", "key": "n2", "value": "x"}),
                ("delete_record", {"namespace": "focus.notes", "key": "n1"}),
                ("forget", {"namespace": "focus.memories", "key": "k"}),
                ("query_records", {"namespace": "focus.*"}),
                ("recall", {"query": "launch plan", "namespaces": ["focus.*"]}),
                ("remember", {"content": "Launch moved to March for the beta", "kind": "semantic",
                              "namespace": "focus.memories"}),
            ]:
                err = await call_error(s, tool, **args)
                assert err.count("AccessDenied") == 1 and "altitude" in err, (tool, err)
            err = await call_error(s, "context", hrm="focus")
            assert "InvalidArgument" in err
            names = [n["name"] for n in (await call(s, "list_namespaces"))["namespaces"]]
            assert names and all(n.startswith(("altitude.", "shared.")) for n in names)
            own = await s.read_resource("hrm-memory://context/altitude")
            assert "dog at seven" in own.contents[0].text  # type: ignore[union-attr]
            with pytest.raises(MCPError, match="InvalidArgument"):
                await s.read_resource("hrm-memory://context/focus")

    with serving(transport, root, tmp_path, "--scope", "altitude") as (open_session, _):
        anyio.run(body, open_session)
    with MemoryManager(root, durability="flush") as mm:
        assert mm.read("focus.notes", "n1") == "focus's private note about the launch plan"
        assert mm.read("focus.notes", "n2") is None


def test_redis_backend_over_stdio(tmp_path: Path) -> None:
    from tests.helpers.redis_server import fresh_url, require_redis

    require_redis()
    import redis

    url = fresh_url()
    root = tmp_path / "store"
    canary = "canary-" + secrets.token_hex(12)

    async def body(open_session: Opener) -> None:
        async with open_session() as s:
            done = await call(s, "remember", content="Omar reviews the budget every second Monday",
                              kind="semantic", namespace="altitude.memories")
            assert done["persisted"] is True
            hits = (await call(s, "recall", query="when does Omar review the budget?"))["hits"]
            assert hits[0]["key"] == done["key"]
            gated = await call(s, "write_record", namespace="learning.patterns", key="p",
                               value={"text": f"likes {canary}"})
            assert gated["persisted"] is False

    with serving("stdio", root, tmp_path, "--backend", url) as (open_session, stderr):
        anyio.run(body, open_session)
    base, _, query = url.partition("?")
    prefix = query.partition("prefix=")[2]
    assert prefix
    client = redis.Redis.from_url(base)
    try:
        dumped = b"".join(_redis_bytes(client, k) for k in client.scan_iter(match=prefix + "*", count=1000))
        assert b"Omar reviews the budget" in dumped  # the store is the Redis server's
        assert canary.encode() not in dumped
    finally:
        client.close()
    if root.exists():  # the recall index lives under --root
        assert files_holding(root, canary.encode()) == []
    assert canary not in "".join(stderr)
    with MemoryManager(backend=url) as mm:
        assert mm.recall("Omar budget Monday")[0].record.value["text"].startswith("Omar reviews")
        assert mm.check() == []


def _redis_bytes(client: Any, key: bytes) -> bytes:
    """Every byte a Redis key holds (names and values), whatever its type."""
    kind = client.type(key)
    parts: list[Any]
    if kind == b"string":
        parts = [client.get(key)]
    elif kind == b"hash":
        parts = [b for kv in client.hgetall(key).items() for b in kv]
    elif kind == b"list":
        parts = client.lrange(key, 0, -1)
    elif kind == b"set":
        parts = list(client.smembers(key))
    elif kind == b"zset":
        parts = client.zrange(key, 0, -1)
    elif kind == b"stream":
        parts = [b for _, fields in client.xrange(key) for kv in fields.items() for b in kv]
    else:
        raise AssertionError(f"unexpected Redis type {kind!r}")
    return key + b"".join(p if isinstance(p, bytes) else str(p).encode() for p in parts)


def _json_blocks(markdown: str, heading: str) -> list[dict[str, Any]]:
    """The ```json blocks of the section under ``heading``."""
    section = markdown.split(heading, 1)[1].split("\n## ", 1)[0]
    return [json.loads(block.split("```", 1)[0]) for block in section.split("```json\n")[1:]]


def test_readme_mcp_servers_snippet_starts_the_server_it_documents(tmp_path: Path) -> None:
    """The README's ``mcpServers`` configuration, run as a host would (the
    command from the venv, the env as given, the root moved to tmp_path)."""
    readme = (REPO / "README.md").read_text()
    (config,) = _json_blocks(readme, "## MCP server")
    assert config == _json_blocks((REPO / "docs" / "mcp.md").read_text(), "### An agent host's configuration")[0]
    entry = config["mcpServers"]["hrm-memory"]
    script = Path(sys.executable).parent / entry["command"]
    if not script.exists():
        pytest.skip(f"no {entry['command']} script beside {sys.executable} (install the package with pip)")
    root = tmp_path / "store"
    env = {**server_env(), **entry["env"], "HRM_MEMORY_ROOT": str(root)}
    listed = re.search(r"Tools: (.*?)\.\n", readme, re.S)
    assert listed is not None
    documented = re.findall(r"`(\w+)`", listed.group(1))
    assert documented == [name for name, *_ in TOOLS]
    doc_tools = re.findall(r"^\| `(\w+)` \|", (REPO / "docs" / "mcp.md").read_text(), re.M)
    assert [t for t in doc_tools if t in documented] == documented

    async def body() -> None:
        params = StdioServerParameters(command=str(script), args=entry["args"], env=env)
        with (tmp_path / "stderr.txt").open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    assert [t.name for t in (await s.list_tools()).tools] == documented
                    done = await call(s, "remember", content="The README snippet starts a working server",
                                      kind="semantic")
                    assert done["namespace"] == "altitude.memories"  # --scope altitude, as configured

    anyio.run(body)
    with MemoryManager(root) as mm:  # $HRM_MEMORY_ROOT from the snippet's env is the store
        assert mm.recall("README snippet working server")[0].namespace == "altitude.memories"
