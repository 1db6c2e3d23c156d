"""The MCP server's HTTP safety: where it binds, who may call it.

- **Bind**: ``127.0.0.1`` unless a host is given. A host that is not a
  loopback address is refused unless ``allow_remote`` is set: the bearer token
  would cross the network in clear text, so only a TLS-terminating proxy in
  front makes that safe, and the server says so loudly on stderr when it runs
  that way.
- **Token**: every request carries ``Authorization: Bearer <token>``, compared
  in constant time (:func:`hmac.compare_digest`). The token is given (a file,
  or ``$HRM_MEMORY_MCP_TOKEN``) or generated with :mod:`secrets` (32 random
  bytes, URL-safe) into ``<root>/run/mcp-token``, created 0600 in a 0700
  directory, and reused on the next start; a token file that other users may
  read is refused.
- **DNS rebinding**: a request whose ``Host`` is not ``localhost``,
  ``127.0.0.1`` or ``[::1]`` (or the bind host, when one was given) is
  refused with 403, and so is one whose ``Origin`` (when a browser sends one)
  is not on such a host.

:class:`Guard` is a plain ASGI middleware in front of the SDK's Starlette app.
It never logs a header's value.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hrm_memory.core.errors import BadInput

#: The environment variable that may carry the token.
TOKEN_ENV = "HRM_MEMORY_MCP_TOKEN"
#: Host names that always mean this machine.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def parse_bind(text: str) -> tuple[str, int, bool]:
    """``[HOST:]PORT`` (``[::1]:PORT`` for an IPv6 host) as ``(host, port,
    host_given)``; the host defaults to ``127.0.0.1``. Port 0 picks a free port."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise BadInput(f"--http expects [HOST:]PORT, e.g. 8765 or 127.0.0.1:8765, not {text!r}") from None
    if not 0 <= port <= 65535:
        raise BadInput(f"--http port must be in 0..65535, not {port}")
    return (host or "127.0.0.1"), port, bool(host)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, allow_remote: bool) -> str | None:
    """Refuse a non-loopback bind without ``allow_remote`` (:class:`BadInput`);
    with it, return the warning to print."""
    if is_loopback(host):
        return None
    if not allow_remote:
        raise BadInput(
            f"refusing to serve MCP on {host!r}, which is reachable from other machines: the bearer token "
            "and every memory would cross the network in clear text. Bind 127.0.0.1 (the default), or put a "
            "TLS-terminating proxy in front and pass --allow-remote"
        )
    return (
        f"WARNING: the MCP server listens on {host}, reachable from other machines, over plain HTTP. "
        "Anyone who can see the traffic can read the token and every memory: serve it only behind a "
        "TLS-terminating proxy."
    )


def default_token_file(root: Path) -> Path:
    return root / "run" / "mcp-token"


def load_token(path: Path | None, *, create: bool) -> str:
    """The token: ``$HRM_MEMORY_MCP_TOKEN`` if set, else the content of
    ``path``, created with a new random token when absent and ``create``."""
    env = os.environ.get(TOKEN_ENV)
    if env is not None:
        return _checked(env.strip(), f"${TOKEN_ENV}")
    if path is None:
        raise BadInput(f"no token: pass --token-file FILE or set ${TOKEN_ENV}")
    try:
        st = path.stat()
    except FileNotFoundError:
        if not create:
            raise BadInput(f"token file {path} does not exist") from None
        return _create(path)
    if st.st_mode & 0o077:
        raise BadInput(
            f"token file {path} may be read by other users (mode {stat.S_IMODE(st.st_mode):04o}); chmod 600 it"
        )
    return _checked(path.read_text(encoding="utf-8").strip(), str(path))


def _checked(token: str, where: str) -> str:
    if len(token) < 16 or not token.isascii() or not token.isprintable() or " " in token:
        raise BadInput(f"the token in {where} must be at least 16 printable ASCII characters without spaces")
    return token


def _private_dirs(folder: Path) -> None:
    """Create ``folder`` and its missing parents 0700 (``mkdir(parents=True)``
    would create the parents, the store's root among them, with the umask's mode)."""
    if folder.is_dir():
        return
    _private_dirs(folder.parent)
    folder.mkdir(mode=0o700, exist_ok=True)


def _create(path: Path) -> str:
    _private_dirs(path.parent)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another server created it meanwhile: use that one
        return load_token(path, create=False)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    return token


class Guard:
    """ASGI middleware: Host and Origin must be local (or the bind host), and
    the bearer token must match; else 403 or 401 before the MCP app sees the
    request. Lifespan and other non-HTTP scopes pass through."""

    def __init__(self, app: ASGIApp, token: str, bind_host: str, host_given: bool) -> None:
        self.app = app
        self._token = ("Bearer " + token).encode()
        hosts = {h.lower() for h in LOOPBACK_NAMES}
        if host_given and not is_loopback(bind_host):
            hosts.add(bind_host.lower())
        self.hosts = frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers", ()):
            headers.setdefault(bytes(name).lower(), bytes(value))
        if not self._local(headers.get(b"host", b""), url=False):
            await _refuse(send, 403, "the Host header is not this server (DNS rebinding protection)")
            return
        origin = headers.get(b"origin")
        if origin is not None and not self._local(origin, url=True):
            await _refuse(send, 403, "requests from this Origin are not allowed")
            return
        if not hmac.compare_digest(headers.get(b"authorization", b""), self._token):
            await _refuse(send, 401, "missing or wrong bearer token", auth=True)
            return
        await self.app(scope, receive, send)

    def _local(self, raw: bytes, *, url: bool) -> bool:
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            return False
        try:
            parts = urlsplit(text if url else "//" + text)
            host = parts.hostname
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError:
            return False
        if url and parts.scheme not in ("http", "https"):
            return False
        return host is not None and host.lower() in self.hosts


async def _refuse(send: Send, status: int, message: str, *, auth: bool = False) -> None:
    body = ('{"error": "' + message + '"}').encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if auth:
        headers.append((b"www-authenticate", b'Bearer realm="hrm-memory"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
