"""The MCP server over streamable HTTP: who may call it (token, Host, Origin),
where it may bind, and 200 calls from 4 concurrent clients."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'hrm-memory[mcp]'")

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from hrm_memory import MemoryManager  # noqa: E402
from hrm_memory.core.errors import BadInput  # noqa: E402
from hrm_memory.integrations import mcp_http  # noqa: E402
from tests.helpers.mcp_servers import CLI, call, http_server, http_session, server_env  # noqa: E402

INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "probe", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _post(url: str, headers: dict[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as client:
        return await client.post(url, json=INIT, headers={**ACCEPT, **headers})


def test_http_refuses_requests_without_the_token_or_from_a_foreign_origin(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with http_server(root) as server:
        token_file = root / "run" / "mcp-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert len(server.token) >= 40
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        bearer = {"Authorization": f"Bearer {server.token}"}

        async def probes() -> dict[str, int]:
            return {
                "no token": (await _post(server.url, {})).status_code,
                "wrong token": (await _post(server.url, {"Authorization": "Bearer " + "x" * 43})).status_code,
                "token without Bearer": (await _post(server.url, {"Authorization": server.token})).status_code,
                "foreign origin": (await _post(server.url, {**bearer, "Origin": "https://evil.example"})).status_code,
                "origin lookalike": (await _post(server.url, {**bearer, "Origin": "http://localhost.evil.example"})).status_code,
                "foreign host": (await _post(server.url, {**bearer, "Host": f"evil.example:{port}"})).status_code,
                "local origin": (await _post(server.url, {**bearer, "Origin": f"http://localhost:{port}"})).status_code,
                "token": (await _post(server.url, bearer)).status_code,
            }

        codes = anyio.run(probes)
        assert codes == {
            "no token": 401, "wrong token": 401, "token without Bearer": 401, "foreign origin": 403,
            "origin lookalike": 403, "foreign host": 403, "local origin": 200, "token": 200,
        }

        async def refused_client() -> None:
            async with http_session(server.url, "not-the-token-" + "y" * 30):
                pass

        with pytest.raises(Exception) as excinfo:  # the SDK's client cannot even initialize
            anyio.run(refused_client)
        assert excinfo.group_contains(MCPError, match="error response")
    # The token is reused on the next start (clients configured with it keep working); SIGINT stops it cleanly.
    with http_server(root, stop=signal.SIGINT) as again:
        assert again.token == server.token


def test_allow_remote_serves_a_non_loopback_bind_with_a_loud_warning(tmp_path: Path) -> None:
    with http_server(tmp_path / "store", "--allow-remote", bind="0.0.0.0:0") as server:
        assert "WARNING" in "".join(server.stderr) and "TLS" in "".join(server.stderr)
        local = server.url.replace("0.0.0.0", "127.0.0.1")

        async def body() -> None:
            async with http_session(local, server.token) as s:
                assert (await call(s, "list_namespaces"))["namespaces"]
            assert (await _post(local, {})).status_code == 401

        anyio.run(body)


def test_token_from_the_environment_and_refused_token_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loose = tmp_path / "loose-token"
    loose.write_text("t" * 40)
    loose.chmod(0o644)
    with pytest.raises(BadInput, match="other users"):
        mcp_http.load_token(loose, create=False)
    with pytest.raises(BadInput, match="does not exist"):
        mcp_http.load_token(tmp_path / "absent", create=False)
    monkeypatch.setenv(mcp_http.TOKEN_ENV, "short")
    with pytest.raises(BadInput, match="at least 16"):
        mcp_http.load_token(None, create=True)
    monkeypatch.setenv(mcp_http.TOKEN_ENV, "e" * 32)
    assert mcp_http.load_token(loose, create=False) == "e" * 32


def test_non_loopback_bind_is_refused_without_allow_remote(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "--root", str(tmp_path / "s"), "mcp", "--http", "0.0.0.0:0"],
                          capture_output=True, text=True, env=server_env(), timeout=60)
    assert done.returncode == 2
    assert "clear text" in done.stderr and "--allow-remote" in done.stderr and "Traceback" not in done.stderr
    assert mcp_http.parse_bind("8765") == ("127.0.0.1", 8765, False)
    assert mcp_http.parse_bind("[::1]:0") == ("::1", 0, True)
    assert mcp_http.check_bind("127.0.0.2", False) is None
    warning = mcp_http.check_bind("0.0.0.0", True)
    assert warning is not None and "TLS" in warning
    with pytest.raises(BadInput):
        mcp_http.parse_bind("localhost:http")


def test_missing_sdk_is_a_typed_error_with_the_install_hint(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mcp' or name.startswith('mcp.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import hrm_memory\n"
        "from hrm_memory.core.errors import Unsupported\n"
        "from hrm_memory.integrations import mcp_server\n"
        "try:\n"
        "    mcp_server.require_sdk()\n"
        "except Unsupported as exc:\n"
        "    print('typed:', exc)\n"
        "from hrm_memory.cli.main import main\n"
        f"sys.exit(main(['--root', {str(tmp_path / 's')!r}, 'mcp']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=server_env(), timeout=60)
    assert done.returncode == 2, done.stderr
    assert "typed: the MCP server needs the MCP Python SDK" in done.stdout
    assert "pip install 'hrm-memory[mcp]'" in done.stderr and "Traceback" not in done.stderr


CLIENTS = 4
CALLS = 50


def test_200_calls_from_4_concurrent_clients_all_answered_none_lost(tmp_path: Path) -> None:
    root = tmp_path / "store"
    answers: dict[int, list[dict[str, Any]]] = {}

    async def client(server_url: str, token: str, n: int) -> None:
        out = answers.setdefault(n, [])
        async with http_session(server_url, token) as s:
            for i in range(CALLS):
                if i % 5 == 4:  # every fifth call reads back what this client wrote just before
                    got = await call(s, "read_record", namespace="shared.people", key=f"c{n}-{i - 1}")
                    assert got["value"] == {"client": n, "call": i - 1}
                    out.append(got)
                else:
                    out.append(await call(s, "write_record", namespace="shared.people", key=f"c{n}-{i}",
                                          value={"client": n, "call": i}))

    with http_server(root) as server:

        async def all_clients() -> None:
            async with anyio.create_task_group() as tg:
                for n in range(CLIENTS):
                    tg.start_soon(client, server.url, server.token, n)

        anyio.run(all_clients)
    assert sum(len(a) for a in answers.values()) == CLIENTS * CALLS
    written = {(n, i) for n in range(CLIENTS) for i in range(CALLS) if i % 5 != 4}
    with MemoryManager(root) as mm:
        recs = mm.query("shared.people", "c*")
        assert {(r.value["client"], r.value["call"]) for r in recs} == written
        assert all(r.key == f"c{r.value['client']}-{r.value['call']}" and r.version == 1 for r in recs)
        assert mm.check() == []
    assert os.path.exists(root / "run" / "mcp-token")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--scope", "nosuch"], "no declared namespace belongs to HRM 'nosuch'"),
        (["--backend", "ftp://example"], "Redis URL"),
        (["--http", "localhost:web"], "--http expects [HOST:]PORT"),
        (["--http", "0", "--token-file", "/nonexistent/token"], "does not exist"),
    ],
)
def test_unusable_arguments_exit_2_with_the_reason(tmp_path: Path, args: list[str], reason: str) -> None:
    done = subprocess.run([*CLI, "--root", str(tmp_path / "s"), "mcp", *args],
                          capture_output=True, text=True, env=server_env(), timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert reason in done.stderr and "Traceback" not in done.stderr
