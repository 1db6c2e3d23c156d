"""Closing ends every subscription it owns, and a subscribe() cut short
leaves nothing behind.

- After ``aclose()`` (or ``close()`` of the manager under an async twin), an
  ``async for`` over a subscription delivers what was queued, then raises
  :class:`StoreClosed`; it never hangs.
- A ``subscribe()`` cancelled before it returns (``asyncio.wait_for`` timing
  out) leaves no subscription in the manager, no watcher thread and nothing
  delivered to its callback.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hrm_memory import AsyncMemoryManager, Event, MemoryManager, StoreClosed


def _watch_threads() -> list[threading.Thread]:
    """The threads that watch the change log: the bus's and watchdog's."""
    return [
        t for t in threading.enumerate()
        if t.is_alive() and (t.name == "hrm-memory-events" or type(t).__module__.startswith("watchdog"))
    ]


async def _drain(events: Any, into: list[Event]) -> None:
    async for event in events:
        into.append(event)


@pytest.mark.parametrize("how", ["aclose", "aclose-shared-manager", "close-manager"])
@pytest.mark.parametrize("remote", [True, False])
def test_async_for_ends_with_store_closed(root: Path, how: str, remote: bool) -> None:
    """Failed before: the iteration hung after aclose() (wait_for timed out)."""
    shared = MemoryManager(root, durability="flush") if how == "aclose-shared-manager" else None

    async def main() -> None:
        amm = AsyncMemoryManager(manager=shared) if shared is not None else AsyncMemoryManager(root, durability="flush")
        events = await amm.subscribe("focus.*", remote=remote)
        got: list[Event] = []
        reader = asyncio.create_task(_drain(events, got))
        await amm.write("focus.slow", "before-close", 1)
        if how == "close-manager":
            await asyncio.get_running_loop().run_in_executor(None, amm.manager.close)
        else:
            await amm.aclose()
        with pytest.raises(StoreClosed):
            await asyncio.wait_for(reader, timeout=5)
        assert [e.key for e in got] == ["before-close"]  # what was queued came first
        with pytest.raises(StoreClosed):  # a later iteration ends at once too
            await asyncio.wait_for(events.__anext__(), timeout=5)
        with pytest.raises(StoreClosed):
            await amm.subscribe("focus.*")
        await amm.aclose()

    try:
        asyncio.run(main())
        assert _watch_threads() == []
    finally:
        if shared is not None:
            shared.close()


@pytest.mark.parametrize("delay_ms", [5, 20, 40, 60, 80, 120])
@pytest.mark.parametrize("with_callback", [False, True])
def test_subscribe_cut_short_leaves_nothing_registered(root: Path, delay_ms: int, with_callback: bool) -> None:
    """The one worker is busy for 50 ms, then runs a subscribe that replays
    a few thousand logged changes; wait_for gives up at various points
    before, during and after. When it gave up, nothing is registered.
    Failed before: the subscription was registered once the worker ran it
    (bus.subscriptions non-empty, the watcher thread running)."""
    called: list[Event] = []
    with MemoryManager(root, durability="flush") as mm:
        cursor = mm.cursor()
        for i in range(3000):
            mm.write("focus.lanes", f"k{i % 50}", i)

    async def main() -> None:
        async with AsyncMemoryManager(root, durability="flush", max_workers=1) as amm:
            bus = amm.manager._pipeline.bus
            busy = asyncio.create_task(amm.update("focus.slow", "busy", lambda v: time.sleep(0.05) or 1))
            await asyncio.sleep(0)
            cut = False
            try:
                sub = await asyncio.wait_for(
                    amm.subscribe("focus.*", called.append if with_callback else None, since=cursor),
                    timeout=delay_ms / 1000,
                )
            except TimeoutError:
                cut = True
            await busy
            await amm.read("focus.slow", "busy")  # the worker has run whatever was queued before
            if not cut:
                sub.cancel()
                return
            assert bus.subscriptions == ()
            assert bus.watching is None
            assert [t for t in _watch_threads()] == []
            before = len(called)
            await amm.write("focus.lanes", "after", 1)
            await asyncio.sleep(0.05)
            assert len(called) == before  # nothing reaches the callback of a subscribe that never returned

    asyncio.run(main())
