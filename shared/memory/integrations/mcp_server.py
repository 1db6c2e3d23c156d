"""``hrm-memory mcp``: the store as a Model Context Protocol server.

Built on the official MCP Python SDK (``pip install 'hrm-memory[mcp]'``),
imported only here and only when a server is built: :func:`require_sdk`
raises :class:`~hrm_memory.core.errors.Unsupported` with the install hint when it
is missing. Transports: stdio (the default; what desktop agent hosts start)
and streamable HTTP (``--http [HOST:]PORT``, guarded as
:mod:`hrm_memory.integrations.mcp_http` describes).

Every tool call (:mod:`hrm_memory.integrations.mcp_tools`) runs on a worker
thread inside one span ``mcp.tool <name>``, started with the manager's tracer
provider and made current, so the spans of the store operations it runs are
its children. The span carries the tool's name, the served HRM and, on
failure, the error's type: never an argument or a value. A failure is an MCP
tool error (``isError``) whose text is ``<ErrorType>: <message>`` of the
store's typed error; anything else becomes ``InternalError`` with no detail.
Nothing is logged but a failed call's tool name and error type (the SDK's
own logging is kept at WARNING, where it logs no argument).

Consent is never granted through MCP: there is no tool for it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from hrm_memory.core.errors import BadInput, MemoryStoreError, Unsupported
from hrm_memory.manager import MemoryManager, default_root
from . import mcp_http
from .mcp_tools import TOOLS, MemoryTools

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["INSTALL_HINT", "add_cli", "build_server", "mcp_speak", "require_sdk", "run_cli", "serve_http"]

INSTALL_HINT = "pip install 'hrm-memory[mcp]'"
log = logging.getLogger("hrm_memory.mcp")

INSTRUCTIONS = (
    "hrm-memory is this agent's long-term memory, stored locally. Use recall before answering anything that "
    "may depend on what you were told before; remember durable facts, preferences, events, intentions and "
    "procedures as short self-contained sentences (one memory each); call context at the start of a task for "
    "a compact summary within a token budget. Records (read_record, write_record, query_records, "
    "delete_record) address structured data by namespace and key; list_namespaces says which exist. A result "
    "with persisted: false was kept in the server's memory only (the user has not granted consent for that "
    "namespace): do not tell the user it is saved for later."
)


def require_sdk() -> None:
    """Import the MCP SDK or raise :class:`Unsupported` with the install hint."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError as exc:
        raise Unsupported(
            f"the MCP server needs the MCP Python SDK, which is not installed ({exc.name}): {INSTALL_HINT}"
        ) from None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hrm-memory")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was not installed
        return "0"


def _tracer(provider: trace.TracerProvider | None) -> trace.Tracer:
    return (provider or trace.get_tracer_provider()).get_tracer("hrm_memory.mcp")


#: Library spellings in error hints, and what a model can do instead through
#: this server (it cannot call Python; declaring is the store operator's).
_MCP_SPEAK = (
    ("declare it with MemoryManager.declare(NamespaceSpec(...)) first",
     "list_namespaces gives the namespaces this server can use (a new one is declared by the store's "
     "operator, not through MCP)"),
)


def mcp_speak(message: str) -> str:
    """An error's hint said as what a model can do through this server."""
    for python, tools in _MCP_SPEAK:
        message = message.replace(python, tools)
    return message


def _runner(name: str, method: Callable[..., Any], tracer: trace.Tracer, scope: str | None) -> Callable[..., Any]:
    """``method`` as the SDK calls it: same signature (the input schema) and
    docstring (the description), run inside the tool's span, store errors
    turned into tool errors."""
    from mcp.server.mcpserver.exceptions import ToolError

    attrs: dict[str, Any] = {"mcp.tool.name": name, "gen_ai.tool.name": name, "gen_ai.operation.name": "execute_tool"}
    if scope is not None:
        attrs["hrm.memory.hrm"] = scope

    @functools.wraps(method)
    def run(**kwargs: Any) -> Any:
        with tracer.start_as_current_span(
            f"mcp.tool {name}", kind=trace.SpanKind.INTERNAL, attributes=attrs,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                return method(**kwargs)
            except MemoryStoreError as exc:
                failure = type(exc).__name__
                message = f"{failure}: {mcp_speak(str(exc))}"
            except Exception as exc:  # noqa: BLE001 - never a traceback to the client
                failure = type(exc).__name__
                message = f"InternalError: the tool failed unexpectedly ({failure})"
                log.error("tool %s failed with %s", name, failure)
            span.set_attribute("error.type", failure)
            span.set_status(Status(StatusCode.ERROR))
        raise ToolError(message)

    return run


def build_server(tools: MemoryTools, tracer_provider: trace.TracerProvider | None = None) -> MCPServer[Any]:
    """The MCP server for ``tools``: its tools and resources registered."""
    require_sdk()
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError
    from mcp_types import ToolAnnotations

    server: MCPServer[Any] = MCPServer(
        "hrm-memory",
        title="hrm-memory",
        instructions=INSTRUCTIONS,
        version=_version(),
        log_level="WARNING",
    )
    tracer = _tracer(tracer_provider)
    for name, read_only, destructive, idempotent in TOOLS:
        method = getattr(tools, name)
        server.add_tool(
            _runner(name, method, tracer, tools.scope),
            name=name,
            description=" ".join((method.__doc__ or "").split()),  # one paragraph, as a model reads it
            annotations=ToolAnnotations(
                read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent,
                open_world_hint=False,
            ),
        )

    def resource(fn: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(fn)
        def read(**kwargs: Any) -> str:
            try:
                return fn(**kwargs)
            except MemoryStoreError as exc:
                raise ResourceError(f"{type(exc).__name__}: {mcp_speak(str(exc))}") from None

        return read

    server.resource(
        "hrm-memory://namespaces", name="namespaces", mime_type="application/json",
        description="The declared namespaces this server may read (as the list_namespaces tool returns them).",
    )(resource(tools.namespaces_json))

    def context_resource(hrm: str) -> str:
        return tools.context_markdown(hrm)

    server.resource(
        "hrm-memory://context/{hrm}", name="context", mime_type="text/markdown",
        description="An HRM's memory as Markdown within 2000 tokens (the context tool with its defaults), "
        "e.g. hrm-memory://context/altitude.",
    )(resource(context_resource))
    return server


# -- transports ---------------------------------------------------------------------


async def serve_http(
    server: MCPServer[Any],
    *,
    host: str,
    port: int,
    token: str,
    host_given: bool,
    on_ready: Callable[[str], None],
) -> None:
    """Serve ``server`` over streamable HTTP at ``http://host:port/mcp`` behind
    :class:`~hrm_memory.integrations.mcp_http.Guard` until SIGINT/SIGTERM.
    ``on_ready(url)`` is called once the server accepts requests."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    guard_hosts = set(mcp_http.LOOPBACK_NAMES) | ({host} if host_given else set())
    netlocs = [f"[{h}]" if ":" in h else h for h in sorted(guard_hosts)]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=netlocs + [f"{n}:*" for n in netlocs],
        allowed_origins=[f"{s}://{n}{p}" for s in ("http", "https") for n in netlocs for p in ("", ":*")],
    )
    app = server.streamable_http_app(host=host, transport_security=security)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BadInput(f"--http: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    netloc = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        mcp_http.Guard(app, token, host, host_given),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    uv = uvicorn.Server(config)
    task = asyncio.ensure_future(uv.serve(sockets=[sock]))
    try:
        while not uv.started and not task.done():
            await asyncio.sleep(0.01)
        if uv.started:
            on_ready(f"http://{netloc}:{bound}/mcp")
        await task
    finally:
        sock.close()


# -- command line ---------------------------------------------------------------------


def _stop_quietly(signum: int, frame: Any) -> None:
    """Nothing: the HTTP server already stopped on this signal."""


def add_cli(sub: Any) -> None:
    """Register ``hrm-memory mcp`` with the CLI's subparsers."""
    s = sub.add_parser(
        "mcp",
        help="serve the store to agent hosts over the Model Context Protocol (stdio, or HTTP with --http)",
        description="Serve the store as an MCP server: over stdio (default; what desktop agent hosts start), or "
        "over streamable HTTP at http://HOST:PORT/mcp with --http, bearer token required. Needs "
        f"{INSTALL_HINT}. See docs/mcp.md.",
    )
    s.add_argument("--http", metavar="[HOST:]PORT", help="serve streamable HTTP (host default 127.0.0.1; port 0 "
                   "picks a free port, printed on stderr)")
    s.add_argument("--scope", metavar="HRM", help="serve one HRM's namespaces only (it writes its own, reads "
                   "those and shared.*)")
    s.add_argument("--token-file", metavar="FILE", help="the HTTP bearer token's file (default ROOT/run/mcp-token, "
                   f"created 0600 with a random token when absent; ${mcp_http.TOKEN_ENV} overrides)")
    s.add_argument("--allow-remote", action="store_true", help="allow --http on a non-loopback host (only behind "
                   "a TLS-terminating proxy: the token travels in clear text otherwise)")


def run_cli(args: argparse.Namespace, tracer_provider: trace.TracerProvider | None) -> int:
    """Run ``hrm-memory mcp`` until the client disconnects (stdio) or a signal (HTTP)."""
    try:
        require_sdk()
    except Unsupported as exc:
        raise BadInput(str(exc)) from None
    http = mcp_http.parse_bind(args.http) if args.http is not None else None
    warning = mcp_http.check_bind(http[0], args.allow_remote) if http is not None else None
    root = Path(args.root) if args.root is not None else default_root()
    token = ""
    where = ""
    if http is not None:
        token_file = Path(args.token_file) if args.token_file else mcp_http.default_token_file(root.absolute())
        token = mcp_http.load_token(token_file, create=not args.token_file)
        where = f"${mcp_http.TOKEN_ENV}" if mcp_http.TOKEN_ENV in os.environ else str(token_file)
    backend = (getattr(args, "backend", None) or os.environ.get("HRM_MEMORY_BACKEND") or "").strip() or None
    with MemoryManager(
        args.root if backend else root,
        backend=backend,
        durability=args.durability,
        locking=args.locking,
        tracer_provider=tracer_provider,
    ) as mm:
        server = build_server(MemoryTools(mm, args.scope), tracer_provider)
        if http is None:
            asyncio.run(server.run_stdio_async())
            return 0
        host, port, host_given = http

        def ready(url: str) -> None:
            if warning:
                print(warning, file=sys.stderr)
            print(f"hrm-memory mcp: serving {url} (bearer token in {where})", file=sys.stderr, flush=True)

        # uvicorn stops on SIGINT/SIGTERM, then raises the signal again for the
        # handler it found: a no-op here, so that the store is closed (pending
        # spans exported) and the command exits 0.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _stop_quietly)
        asyncio.run(serve_http(server, host=host, port=port, token=token, host_given=host_given, on_ready=ready))
    return 0
