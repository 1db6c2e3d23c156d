"""Every promise, checked through every entry point, on each backend.

Each cell is a real call through one entry point (the sync API, the async
twin, a scope, the CLI in a subprocess, the MCP server through the MCP SDK's
client, the LangGraph store, an import file) on one backend (files, a real
redis-server, a real 6-node Redis Cluster, the memory:// reference backend),
checking one promise:

- a gated write without consent leaves 0 bytes of its value on disk (or on
  the server);
- the consent records cannot be written, deleted or imported into being;
- a scope writes only its own namespaces;
- a bad key, a value over the size limit and a value that is not JSON are
  refused with the typed error, and nothing is stored.

The entry points are drivers with one shape (:class:`Driver`): ``write`` and
``delete`` return ``"ok"`` or the name of the error class the entry point
reported (the exception's class, the CLI's ``error: Class:`` line, the MCP
tool error's ``Class:`` prefix, an import line's cause).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

import pytest

from hrm_memory import AsyncMemoryManager, BadImportLine, MemoryManager, MemoryStoreError
from tests.helpers.canary import files_holding
from tests.helpers.redis_server import fresh_url, require_redis

OK = "ok"
GATED = "focus.conversation"  # consent category "conversation"
CONSENT = "focus.consent"
PLAIN = "focus.slow"  # owned by focus, ungated, warm
BIG = {"blob": "x" * (2 << 20)}  # over the 1 MiB write limit
SURROGATE = {"text": "\ud800"}  # JSON can say it; it is not text
DEEP: dict[str, Any] = {"a": []}  # past the 254 levels a value may have
_inner = DEEP["a"]
for _ in range(300):
    _inner.append([])
    _inner = _inner[0]


class Driver(Protocol):
    name: str
    scoped: bool  # runs as the HRM "altitude"

    def write(self, namespace: str, key: str, value: Any) -> str: ...

    def delete(self, namespace: str, key: str) -> str: ...


def _outcome(call: Callable[[], Any]) -> str:
    try:
        call()
    except MemoryStoreError as exc:
        return type(exc).__name__
    return OK


class Api:
    def __init__(self, mm: MemoryManager, hrm: str | None = None) -> None:
        self.handle: Any = mm if hrm is None else mm.scope(hrm)
        self.scoped = hrm is not None
        self.name = "scope" if self.scoped else "api"

    def write(self, namespace: str, key: str, value: Any) -> str:
        return _outcome(lambda: self.handle.write(namespace, key, value))

    def delete(self, namespace: str, key: str) -> str:
        return _outcome(lambda: self.handle.delete(namespace, key))


class Loop:
    """An event loop on a thread of its own, for drivers whose clients are coroutines."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 120) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Async:
    def __init__(self, loop: Loop, amm: AsyncMemoryManager, hrm: str | None = None) -> None:
        self.loop = loop
        self.handle: Any = amm if hrm is None else amm.scope(hrm)
        self.scoped = hrm is not None
        self.name = "async scope" if self.scoped else "async"

    def _outcome(self, coro: Any) -> str:
        async def run() -> str:
            try:
                await coro
            except MemoryStoreError as exc:
                return type(exc).__name__
            return OK

        return str(self.loop.run(run()))

    def write(self, namespace: str, key: str, value: Any) -> str:
        return self._outcome(self.handle.write(namespace, key, value))

    def delete(self, namespace: str, key: str) -> str:
        return self._outcome(self.handle.delete(namespace, key))


_CLI_ERROR = re.compile(r"hrm-memory: error: (\w+):")


class Cli:
    name = "cli"
    scoped = False

    def __init__(self, root: Path, backend: str | None) -> None:
        self.args = [sys.executable, "-m", "hrm_memory.cli.main", "--root", str(root)]
        if backend is not None:
            self.args += ["--backend", backend]

    def _run(self, *args: str, stdin: bytes | None = None) -> str:
        res = subprocess.run([*self.args, *args], input=stdin, capture_output=True, timeout=120)
        if res.returncode == 0:
            return OK
        err = res.stderr.decode(errors="replace")
        assert "Traceback" not in err, err
        m = _CLI_ERROR.search(err)
        return m.group(1) if m else f"exit {res.returncode}: {err.strip()}"

    def write(self, namespace: str, key: str, value: Any) -> str:
        # The value on stdin: a 2 MiB argument is past the kernel's limit for one.
        return self._run("put", namespace, key, "-", stdin=json.dumps(value).encode())  # \ud800 as JSON says it

    def delete(self, namespace: str, key: str) -> str:
        return self._run("rm", namespace, key)


class Mcp:
    """A client session held open by one task (the SDK's cancel scopes must
    be left by the task that entered them), serving calls from a queue."""

    def __init__(self, loop: Loop, opener: Callable[[], AbstractAsyncContextManager[Any]], scoped: bool) -> None:
        self.loop = loop
        self.scoped = scoped
        self.name = "mcp --scope" if scoped else "mcp"
        self.opener = opener
        self.queue: asyncio.Queue[Any] = loop.run(self._queue())
        self.ready: Future[None] = Future()
        self.served = asyncio.run_coroutine_threadsafe(self._serve(), loop.loop)
        self.ready.result(120)

    @staticmethod
    async def _queue() -> asyncio.Queue[Any]:
        return asyncio.Queue()

    async def _serve(self) -> None:
        try:
            async with self.opener() as session:
                self.ready.set_result(None)
                while (item := await self.queue.get()) is not None:
                    tool, arguments, done = item
                    try:
                        done.set_result(await session.call_tool(tool, arguments))
                    except Exception as exc:  # noqa: BLE001 - handed to the caller
                        done.set_exception(exc)
        except Exception as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            raise

    def _call(self, tool: str, **arguments: Any) -> str:
        done: Future[Any] = Future()
        self.loop.loop.call_soon_threadsafe(self.queue.put_nowait, (tool, arguments, done))
        result = done.result(120)
        if not result.is_error:
            return OK
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        m = re.search(r"\b([A-Z]\w+): ", text)
        return m.group(1) if m else f"untyped: {text}"

    def write(self, namespace: str, key: str, value: Any) -> str:
        return self._call("write_record", namespace=namespace, key=key, value=value)

    def delete(self, namespace: str, key: str) -> str:
        return self._call("delete_record", namespace=namespace, key=key)

    def close(self) -> None:
        self.loop.loop.call_soon_threadsafe(self.queue.put_nowait, None)
        self.served.result(60)


class LangGraph:
    """The LangGraph store: its items live in one hrm namespace, keyed by its
    own (namespace, key) pairs, so it can address no consent record at all."""

    name = "langgraph"
    scoped = False

    def __init__(self, mm: MemoryManager) -> None:
        from hrm_memory.integrations.langgraph import MemoryStore

        self.mm = mm
        self.stores: dict[str, Any] = {}
        self.factory = MemoryStore

    def _store(self, namespace: str) -> Any:
        if namespace not in self.stores:
            self.stores[namespace] = self.factory(manager=self.mm, namespace=namespace)
        return self.stores[namespace]

    def write(self, namespace: str, key: str, value: Any) -> str:
        return _outcome(lambda: self._store(namespace).put(("matrix",), key, value if isinstance(value, dict) else {"v": value}))

    def delete(self, namespace: str, key: str) -> str:
        return _outcome(lambda: self._store(namespace).delete(("matrix",), key))


class Import:
    """An export file of one record line, imported."""

    name = "import"
    scoped = False

    def __init__(self, mm: MemoryManager, folder: Path) -> None:
        self.mm = mm
        self.folder = folder
        self.n = 0
        self.last: dict[str, int] = {}

    def write(self, namespace: str, key: str, value: Any) -> str:
        self.n += 1
        path = self.folder / f"line-{self.n}.jsonl"
        lines = [{"format": "hrm-memory-export", "version": 1},
                 {"t": "record", "ns": namespace, "key": key, "tier": "warm", "cut": 0,
                  "versions": [[1, 1_700_000_000_000_000, 1_700_000_000_000_000, 0, value]]},
                 {"t": "end"}]
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))  # \ud800 as JSON says it
        try:
            self.last = self.mm.import_(path)
        except BadImportLine as exc:
            return type(exc.__cause__).__name__ if exc.__cause__ is not None else type(exc).__name__
        except MemoryStoreError as exc:
            return type(exc).__name__
        if self.last.get("consent_skipped"):
            return "skipped"
        return OK

    def delete(self, namespace: str, key: str) -> str:
        return "n/a"  # an export line is never a deletion of a key the store holds


# -- the stores ------------------------------------------------------------------------

BACKENDS = ["file", "redis", "cluster", "memory"]
#: Entry points in a process of their own cannot reach a store held in this process's memory.
OTHER_PROCESS = ("cli", "mcp", "mcp --scope")
ENTRY_POINTS = ["api", "async", "scope", "async scope", "cli", "mcp", "mcp --scope", "langgraph", "import"]


class Store:
    """One store on one backend, with every entry point's driver onto it."""

    def __init__(self, tmp: Path, backend: str) -> None:
        self.root = tmp / "store"
        self.url: str | None = None
        self.nodes: list[str] = []  # redis URLs of the servers holding the store's keys
        if backend == "redis":
            require_redis()
            self.url = fresh_url()
            self.nodes = [self.url.split("?", 1)[0]]
        elif backend == "memory":
            self.url = f"memory://matrix-{secrets.token_hex(6)}"
        elif backend == "cluster":
            require_redis()
            from tests.helpers.redis_cluster import shared_cluster

            cluster = shared_cluster()
            self.url = cluster.fresh_url()
            self.nodes = [f"redis://127.0.0.1:{port}/0" for port in cluster.primaries()]
        self.mm = MemoryManager(self.root, backend=self.url, locking=True)
        self.loop = Loop()
        self.amm = AsyncMemoryManager(manager=self.mm)
        self.drivers: dict[str, Driver] = {}
        self.closers: list[Callable[[], None]] = []
        self.tmp = tmp

    def driver(self, name: str) -> Driver:
        if self.url is not None and self.url.startswith("memory://") and name in OTHER_PROCESS:
            pytest.skip("the memory:// backend lives in this process; a CLI or MCP server process has its own")
        if name not in self.drivers:
            self.drivers[name] = self._make(name)
        return self.drivers[name]

    def _make(self, name: str) -> Driver:
        if name == "api":
            return Api(self.mm)
        if name == "scope":
            return Api(self.mm, "altitude")
        if name == "async":
            return Async(self.loop, self.amm)
        if name == "async scope":
            return Async(self.loop, self.amm, "altitude")
        if name == "cli":
            return Cli(self.root, self.url)
        if name.startswith("mcp"):
            pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'hrm-memory[mcp]'")
            from tests.helpers.mcp_servers import stdio_session

            scope = ["--scope", "altitude"] if name == "mcp --scope" else []
            errlog = self.tmp / f"{name.replace(' ', '_')}.err"
            root, url = self.root, self.url

            def opener() -> AbstractAsyncContextManager[Any]:
                return stdio_session(root, *scope, errlog=errlog, backend=url)

            mcp = Mcp(self.loop, opener, bool(scope))
            self.closers.append(mcp.close)
            return mcp
        if name == "langgraph":
            pytest.importorskip("langgraph", reason="langgraph is not installed: pip install 'hrm-memory[langgraph]'")
            return LangGraph(self.mm)
        if name == "import":
            return Import(self.mm, self.tmp)
        raise AssertionError(name)

    def close(self) -> None:
        for close in self.closers:
            close()
        self.loop.run(self.amm.aclose())
        self.mm.close()
        self.loop.close()

    def holding(self, needle: bytes) -> list[str]:
        """Where ``needle`` is: files under the root, and (Redis) the server's keys and values."""
        found = files_holding(self.root, needle)
        for node in self.nodes:
            import redis

            assert self.url is not None
            prefix = self.url.split("prefix=", 1)[1]
            client = redis.Redis.from_url(node)
            try:
                for k in client.scan_iter(match=f"{prefix}*".encode(), count=1000):
                    dumped = client.dump(k) or b""
                    if needle in k or needle in dumped:
                        found.append(f"redis:{k!r}")
            finally:
                client.close()
        return found


@pytest.fixture(scope="module", params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    s = Store(tmp_path_factory.mktemp(f"matrix-{request.param}"), request.param)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """The module's store (its event loop, MCP servers and pool threads) lives
    across its cells: the suite's per-test leak check is the module's here."""
    yield


def _unscoped(name: str) -> bool:
    return name not in ("scope", "async scope", "mcp --scope")


# -- the promises ----------------------------------------------------------------------


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if _unscoped(e)])
def test_a_gated_write_without_consent_leaves_no_byte_on_disk(store: Store, entry: str) -> None:
    canary = f"canary-{secrets.token_hex(8)}"
    assert not store.mm.consent.granted("conversation")
    outcome = store.driver(entry).write(GATED, f"turn-{canary}", {"text": canary})
    assert outcome == OK, outcome
    assert store.holding(canary.encode()) == []


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if e != "scope" and e != "async scope"])
@pytest.mark.parametrize("change", ["write", "delete"])
def test_the_consent_records_are_not_writable(store: Store, entry: str, change: str) -> None:
    driver = store.driver(entry)
    for category in ("conversation", "signals"):
        if change == "write":
            outcome = driver.write(CONSENT, category, {"granted": True})
        else:
            outcome = driver.delete(CONSENT, category)
        if entry == "langgraph":
            assert outcome == OK  # its items are keyed by its own pairs: no consent record is ever named
        elif entry == "import":
            assert outcome in ("skipped", "n/a"), outcome
        elif entry == "mcp --scope":
            assert outcome == "AccessDenied", outcome  # altitude may not write focus.* at all
        else:
            assert outcome == "AccessDenied", outcome
        assert store.mm.consent.granted(category) is False
    assert store.holding(b"canary-never") == []


def test_a_focus_scope_cannot_grant_consent_either(store: Store) -> None:
    """The consent namespace is focus's, yet focus's scope cannot change a decision."""
    focus = store.mm.scope("focus")
    with pytest.raises(MemoryStoreError) as err:
        focus.write(CONSENT, "conversation", {"granted": True})
    assert type(err.value).__name__ == "AccessDenied" and isinstance(err.value, PermissionError)
    with pytest.raises(PermissionError):
        focus.update(CONSENT, "conversation", lambda v: {"granted": True})
    with pytest.raises(PermissionError):
        store.mm.forget(CONSENT, "conversation")
    assert store.mm.consent.granted("conversation") is False


@pytest.mark.parametrize("entry", ["scope", "async scope", "mcp --scope"])
def test_a_scope_writes_only_its_own_namespaces(store: Store, entry: str) -> None:
    driver = store.driver(entry)
    assert driver.write(PLAIN, "from-altitude", {"n": 1}) == "AccessDenied"
    assert driver.delete(PLAIN, "from-altitude") == "AccessDenied"
    assert driver.write("altitude.patterns", f"own-{entry.replace(' ', '-')}", {"s": 0.5}) == OK
    assert store.mm.read(PLAIN, "from-altitude") is None


HOSTILE = {
    "bad key": ("a\nb", {"n": 1}, "InvalidKey"),
    "value over the limit": ("big", BIG, "ValueTooLarge"),
    "value that is not text": ("surrogate", SURROGATE, "InvalidValue"),
    "value nested too deep": ("deep", DEEP, "InvalidValue"),
}
#: Cells an entry point cannot even express, and why.
CANNOT_SAY = {
    (mcp, case): why
    for mcp in ("mcp", "mcp --scope")
    for case, why in (
        ("value that is not text", "the MCP client's JSON encoder refuses a lone surrogate before sending"),
        ("value nested too deep", "the MCP client's JSON encoder refuses past its depth limit before sending"),
    )
}


@pytest.mark.parametrize(("case", "entry"), [(c, e) for c in sorted(HOSTILE) for e in ENTRY_POINTS if (e, c) not in CANNOT_SAY])
def test_hostile_input_is_refused_with_its_typed_error_and_stores_nothing(store: Store, entry: str, case: str) -> None:
    key, value, error = HOSTILE[case]
    namespace = "altitude.patterns" if entry in ("scope", "async scope", "mcp --scope") else PLAIN
    before = {r.key for r in store.mm.query(namespace)}
    outcome = store.driver(entry).write(namespace, key, value)
    if entry == "langgraph" and case == "bad key":
        # LangGraph keys are any string: the store escapes them into a usable key.
        assert outcome == OK
        return
    if entry in ("cli", "import") and case in ("value that is not text", "value nested too deep"):
        # Read as JSON text first: refused there, as bad input (exit 2; a line that is not an export line).
        assert outcome in (error, "BadImportLine") or outcome.startswith("exit 2: "), outcome
    else:
        assert outcome == error, outcome
    assert {r.key for r in store.mm.query(namespace)} == before
    assert store.mm.check() == []
