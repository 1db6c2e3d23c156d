"""Shared fixtures. Every test gets a fresh store root under pytest's tmp_path,
and fails if it leaks file descriptors or threads."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from hrm_memory import MemoryManager

# A failure anywhere (CI included) prints the @reproduce_failure blob next to
# the falsifying example, and every run ends with its Hypothesis seed
# ("hypothesis seed: N"; replay the run with --hypothesis-seed=N). Tests keep
# their own max_examples/deadline; only reporting and the seed are set here.
settings.register_profile("hrm", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "hrm"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Give every run a Hypothesis seed it states, so a red run is replayable:
    a fresh one each run (the suite keeps exploring) unless --hypothesis-seed
    or HRM_TEST_SEED names one."""
    worker: dict[str, str] | None = getattr(config, "workerinput", None)
    if worker is not None and SEED_KEY in worker:
        # A pytest-xdist worker runs on the seed its controller chose and states.
        config.option.hypothesis_seed = worker[SEED_KEY]
    elif config.getoption("hypothesis_seed", None) is None:
        chosen = os.environ.get("HRM_TEST_SEED") or str(int.from_bytes(os.urandom(4), "big"))
        config.option.hypothesis_seed = chosen


SEED_KEY = "hrm_hypothesis_seed"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: hand each worker the run's seed (one seed for the whole run,
    so the one stated replays a red test whichever worker ran it)."""
    node.workerinput[SEED_KEY] = str(node.config.getoption("hypothesis_seed"))


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis seed: {config.getoption('hypothesis_seed')}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    seed = config.getoption("hypothesis_seed")
    terminalreporter.write_line(f"hypothesis seed: {seed} (replay: pytest --hypothesis-seed={seed})")

REPO = Path(__file__).resolve().parent.parent


def _open_fds() -> set[int]:
    try:
        return {int(n) for n in os.listdir("/proc/self/fd")}
    except FileNotFoundError:  # not Linux
        return set()


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail a test that leaves file descriptors or threads behind."""
    fds = _open_fds()
    threads = set(threading.enumerate())
    yield
    leaked_threads = [t for t in threading.enumerate() if t not in threads and t.is_alive()]
    for t in leaked_threads:
        t.join(timeout=2)
    leaked_threads = [t for t in leaked_threads if t.is_alive()]
    leaked_fds = _open_fds() - fds
    # An fd listed at start may be reused; only count ones that point into
    # a pytest tmp dir (our store files), so unrelated runner fds don't flake.
    ours = []
    for fd in leaked_fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "pytest-" in target:
            ours.append(target)
    assert not ours, f"file descriptors leaked: {ours}"
    assert not leaked_threads, f"threads leaked: {leaked_threads}"


@pytest.fixture(autouse=True, scope="session")
def key_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Data keys of sealed namespaces go to a folder of this run, never to
    the user's ~/.config (each store's key file is named by its own id)."""
    where = tmp_path_factory.mktemp("keys")
    old = os.environ.get("HRM_MEMORY_KEYS")
    os.environ["HRM_MEMORY_KEYS"] = str(where)
    yield where
    if old is None:
        os.environ.pop("HRM_MEMORY_KEYS", None)
    else:
        os.environ["HRM_MEMORY_KEYS"] = old


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def mm(root: Path) -> Iterator[MemoryManager]:
    with MemoryManager(root, durability="flush") as manager:
        yield manager


@pytest.fixture
def store(mm: MemoryManager) -> Iterator[MemoryManager]:
    """``mm`` injected into the legacy adapters (``adapters.use_manager``)."""
    from hrm_memory.adapters import use_manager

    with use_manager(mm):
        yield mm


def python() -> str:
    return sys.executable
