"""Every way of reaching the store, by name: every backend, sync and the
async twin. ``DRIVERS[name](root)`` opens a store on ``root`` with the
synchronous API; for the async twin it is :class:`AsyncBridge`, which runs
each coroutine of an :class:`AsyncMemoryManager` on an event loop in a
background thread, so the very same assertions hold for both. The
conformance suite (tests/conformance) runs its cases on each.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hrm_memory import AsyncMemoryManager, MemoryManager


class AsyncBridge:
    """The sync API over an :class:`AsyncMemoryManager` (each call awaited on a loop thread)."""

    def __init__(self, root: Path, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="conformance-loop", daemon=True)
        self.thread.start()
        self.amm = self._call(self._open(root, options))
        self.consent = _Bridged(self, self.amm.consent)

    async def _open(self, root: Path, options: dict[str, Any]) -> AsyncMemoryManager:
        return AsyncMemoryManager(root, **options)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def scope(self, hrm: str) -> _Bridged:
        return _Bridged(self, self.amm.scope(hrm))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return _Bridged(self, self.amm).__getattr__(name)

    def close(self) -> None:
        self._call(self.amm.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


class _Bridged:
    def __init__(self, bridge: AsyncBridge, target: Any) -> None:
        self._bridge = bridge
        self._target = target

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._target, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = self._bridge._call(method(*args, **kwargs))
            if name == "subscribe":
                return _Sub(self._bridge, result)
            return result

        return call


class _Sub:
    def __init__(self, bridge: AsyncBridge, sub: Any) -> None:
        self._bridge, self._sub = bridge, sub

    def cancel(self) -> None:
        self._bridge.loop.call_soon_threadsafe(self._sub.cancel)


def _sync(root: Path) -> Any:
    return MemoryManager(root, durability="flush")


def _async(root: Path) -> Any:
    return AsyncBridge(root, durability="flush")


def _memory_url(root: Path) -> str:
    """A named in-memory store of this test's own (from its root: two stores
    opened by one test share it, as two processes share a file root)."""
    return f"memory://c{hashlib.sha1(str(root).encode()).hexdigest()[:16]}"


def _memory_sync(root: Path) -> Any:
    return MemoryManager(root, backend=_memory_url(root))


def _memory_async(root: Path) -> Any:
    return AsyncBridge(root, backend=_memory_url(root))


def _redis_url(root: Path) -> str:
    """The shared test redis-server, with a key prefix of this test's own (from
    its root: two stores opened by one test share it, other tests do not)."""
    from tests.helpers.redis_server import shared_server

    return f"{shared_server().url}?prefix=c{hashlib.sha1(str(root).encode()).hexdigest()[:16]}:"


def _redis_sync(root: Path) -> Any:
    return MemoryManager(root, backend=_redis_url(root))


def _redis_async(root: Path) -> Any:
    return AsyncBridge(root, backend=_redis_url(root))


def _redis_cluster_url(root: Path, query: str) -> str:
    """The shared test Redis Cluster (3 primaries, 3 replicas), a key prefix
    of this test's own."""
    from tests.helpers.redis_cluster import shared_cluster

    return f"{shared_cluster().url}?prefix=k{hashlib.sha1(str(root).encode()).hexdigest()[:16]}:{query}"


def _redis_cluster_sync(root: Path) -> Any:
    return MemoryManager(root, backend=_redis_cluster_url(root, "&wait=1"))  # the replicated mode


def _redis_cluster_async(root: Path) -> Any:
    return AsyncBridge(root, backend=_redis_cluster_url(root, ""))


DRIVERS: dict[str, Callable[[Path], Any]] = {
    "memory-sync": _memory_sync,
    "memory-async": _memory_async,
    "file-sync": _sync,
    "file-async": _async,
    "redis-sync": _redis_sync,
    "redis-async": _redis_async,
    "redis-cluster-sync": _redis_cluster_sync,
    "redis-cluster-async": _redis_cluster_async,
}
