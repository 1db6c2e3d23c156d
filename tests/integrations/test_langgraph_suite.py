"""LangGraph's own store tests, run against ``hrm_memory.integrations.langgraph.MemoryStore``.

The tests come from the source distributions of the installed
``langgraph-checkpoint`` (``tests/test_store.py``: the in-memory store's
suite, every test backend-agnostic) and ``langgraph-checkpoint-sqlite``
(``tests/test_store.py``, ``tests/test_async_store.py``, ``tests/test_ttl.py``:
the SQLite store's suites, vector search with their deterministic
``CharacterEmbeddings``, and TTL). They are downloaded with pip at test time
into ``~/.cache/hrm-memory/langgraph-suite`` (``$HRM_MEMORY_CACHE`` moves it),
never committed. A small conftest points their stores at ``MemoryStore``:

- ``InMemoryStore(index=..., ttl=...)`` becomes a ``MemoryStore`` on a fresh
  temporary root;
- ``SqliteStore.from_conn_string(conn, index=..., ttl=...)`` (and the async
  twin: an ``AsyncMemoryStore``, whose TTL methods are coroutines as
  AsyncSqliteStore's are) yields a store whose root is beside the SQLite file
  (or temporary for ``":memory:"``); ``setup()`` does nothing.

The suites run in a subprocess with their own pytest configuration; this test
asserts the number passed and that only the tests listed in ``DESELECTED`` (each
with its reason: it reads another backend's internals) were left out. Without
network (no sdist can be downloaded) it skips, saying so.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("langgraph.store.base", reason="langgraph-checkpoint is not installed (pip install -e '.[test]')")

#: Two suites in subprocesses, about two minutes: left out of the fast run (-m "not slow").
pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("HRM_MEMORY_CACHE") or Path.home() / ".cache" / "hrm-memory") / "langgraph-suite"

#: Tests left out, with why: each reads another backend's internals.
DESELECTED: dict[str, dict[str, str]] = {
    "langgraph-checkpoint": {},
    "langgraph-checkpoint-sqlite": {
        "tests/test_store.py::test_vector_store_initialization": "reads SqliteStore.conn (its sqlite_master tables)",
        "tests/test_store.py::test_nonnull_migrations": "reads SqliteStore.MIGRATIONS (its SQL schema)",
        "tests/test_store.py::test_escape_glob_literal": "calls the SQLite module's private _escape_glob_literal",
        "tests/test_store.py::test_namespace_match_pattern": "calls the SQLite module's private _namespace_match_pattern",
        "tests/test_store.py::test_list_namespaces_prefix_uses_indexable_condition": (
            "builds a BaseSqliteStore and reads the SQL it generates"
        ),
        **{
            f"tests/test_async_store.py::test_no_running_loop[{conn}]": (
                "AsyncSqliteStore's sync methods refuse the event-loop thread because they bridge to its "
                "aiosqlite connection; MemoryStore's sync methods need no loop and work on any thread"
            )
            for conn in ("memory", "file")
        },
    },
}

#: Files run from each distribution.
FILES = {
    "langgraph-checkpoint": ["tests/test_store.py"],
    "langgraph-checkpoint-sqlite": ["tests/test_store.py", "tests/test_async_store.py", "tests/test_ttl.py"],
}

#: Tests passed for the versions this was measured on (another version: all must pass, none fail).
EXPECTED_PASSED = {
    ("langgraph-checkpoint", "4.3.2"): 117,
    ("langgraph-checkpoint-sqlite", "3.1.2"): 146,
}

CONFTEST = '''
"""Points the store tests of this distribution at hrm_memory.integrations.langgraph.MemoryStore."""
import asyncio
import contextlib
import shutil
import tempfile

import pytest

from hrm_memory.integrations.langgraph import AsyncMemoryStore, MemoryStore

_OPEN = []


def _root(conn_string):
    if conn_string == ":memory:":
        return tempfile.mkdtemp(prefix="hrm-lg-")
    return str(conn_string) + ".hrm-memory"


class HrmInMemoryStore(MemoryStore):
    """InMemoryStore(index=..., ttl=...) -> a MemoryStore on a fresh temporary root."""

    def __init__(self, *, index=None, ttl=None):
        root = tempfile.mkdtemp(prefix="hrm-lg-")
        super().__init__(root=root, index=index, ttl=ttl, durability="flush")
        _OPEN.append((self, root))


class HrmSqliteStore(MemoryStore):
    """SqliteStore.from_conn_string(...) -> a MemoryStore beside the SQLite file."""

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string, *, index=None, ttl=None):
        root = _root(conn_string)
        store = cls(root=root, index=index, ttl=ttl, durability="flush")
        try:
            yield store
        finally:
            store.close()
            shutil.rmtree(root, ignore_errors=True)

    def setup(self):
        pass


class HrmAsyncSqliteStore(AsyncMemoryStore):
    """AsyncSqliteStore.from_conn_string(...) -> an AsyncMemoryStore beside the
    SQLite file: only the constructor is adapted; the TTL coroutines are the store's own."""

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn_string, *, index=None, ttl=None):
        root = _root(conn_string)
        store = cls(root=root, index=index, ttl=ttl, durability="flush")
        try:
            yield store
        finally:
            await store.aclose()
            shutil.rmtree(root, ignore_errors=True)

    async def setup(self):
        pass


PATCHES = {
    "tests.test_store": {"InMemoryStore": HrmInMemoryStore, "SqliteStore": HrmSqliteStore},
    "tests.test_async_store": {"AsyncSqliteStore": HrmAsyncSqliteStore},
    "tests.test_ttl": {"SqliteStore": HrmSqliteStore, "AsyncSqliteStore": HrmAsyncSqliteStore},
}


@pytest.fixture(autouse=True)
def _hrm_memory_store(request, monkeypatch):
    module = getattr(request, "module", None)
    for name, replacement in PATCHES.get(getattr(module, "__name__", ""), {}).items():
        if hasattr(module, name):
            monkeypatch.setattr(module, name, replacement)
    yield
    while _OPEN:
        store, root = _OPEN.pop()
        store.close()
        shutil.rmtree(root, ignore_errors=True)
'''


def _sdist(dist: str, version: str) -> Path:
    """The extracted sdist of ``dist==version``, downloaded once into the cache."""
    target = CACHE / f"{dist}-{version}"
    done = target / ".complete"
    if done.exists():
        return next(p for p in target.iterdir() if p.is_dir())
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             f"{dist}=={version}", "-d", tmp],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = list(Path(tmp).glob("*.tar.gz"))
        if proc.returncode != 0 or not archives:
            pytest.skip(f"cannot download the {dist}=={version} sdist (no network?): {proc.stderr.strip()[-300:]}")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        with tarfile.open(archives[0]) as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuse links and paths out of target
                tar.extractall(target, filter="data")
            else:
                tar.extractall(target)  # noqa: S202 (a PyPI sdist of a pinned version)
    done.touch()
    return next(p for p in target.iterdir() if p.is_dir())


def _run_suite(dist: str, tmp_path: Path) -> tuple[dict[str, int], str]:
    version = importlib.metadata.version(dist)
    src = _sdist(dist, version)
    work = tmp_path / dist
    # Only the tests and the pytest configuration: the sdist's own `langgraph`
    # sources must not shadow the installed package.
    shutil.copytree(src / "tests", work / "tests")
    shutil.copy(src / "pyproject.toml", work / "pyproject.toml")
    (work / "conftest.py").write_text(CONFTEST)
    args = [sys.executable, "-m", "pytest", *FILES[dist], "-p", "no:cacheprovider", "-o", "addopts=", "-q",
            "--strict-markers", "-W", "ignore::DeprecationWarning"]
    for nodeid in DESELECTED[dist]:
        args += ["--deselect", nodeid]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(args, cwd=work, capture_output=True, text=True, timeout=1800, env=env)
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)", summary)}
    counts["returncode"] = proc.returncode
    return counts, tail


@pytest.mark.parametrize("dist", ["langgraph-checkpoint", "langgraph-checkpoint-sqlite"])
def test_langgraph_store_suite(dist: str, tmp_path: Path) -> None:
    pytest.importorskip("pytest_asyncio", reason="the suites need pytest-asyncio (pip install -e '.[test]')")
    pytest.importorskip("pytest_mock", reason="the suites need pytest-mock (pip install -e '.[test]')")
    if dist.endswith("sqlite"):
        pytest.importorskip("langgraph.store.sqlite", reason="langgraph-checkpoint-sqlite is not installed")
    counts, tail = _run_suite(dist, tmp_path)
    print(dist, counts)
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) + counts.get("errors", 0) == 0, tail
    assert counts["returncode"] == 0, tail
    assert counts.get("deselected", 0) == len(DESELECTED[dist]), tail
    expected = EXPECTED_PASSED.get((dist, importlib.metadata.version(dist)))
    if expected is not None and expected >= 0:
        assert counts.get("passed") == expected, tail
    else:
        assert counts.get("passed", 0) > 0, tail
