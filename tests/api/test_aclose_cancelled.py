"""Issue 22, "also seen": an aclose() cut short by asyncio.wait_for left the
manager open with its threads running. Now the close completes before the
cancellation is let through."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from hrm_memory import AsyncMemoryManager, Event, StoreClosed


@pytest.mark.parametrize("round_", range(20))
def test_aclose_cut_short_by_wait_for_still_closes(root: Path, round_: int) -> None:
    """Failed before the fix: right after the TimeoutError the manager was
    still open (and its executor and event threads alive)."""
    before = set(threading.enumerate())

    async def main() -> None:
        amm = AsyncMemoryManager(root, durability="flush")
        seen: list[Event] = []

        def slow(event: Event) -> None:
            seen.append(event)
            time.sleep(0.3)  # a slow subscriber: the write's thread is busy while aclose waits for it

        # A synchronous subscriber runs on the writing thread (one of the
        # twin's workers); the async one on the loop, where it would block it.
        sub = amm.manager.subscribe("focus.slow", slow)
        other = await amm.subscribe("focus.*", None)  # and one delivered on the loop
        writing = asyncio.create_task(amm.write("focus.slow", "k", {"round": round_}))
        await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(amm.aclose(), timeout=0.01 + 0.01 * (round_ % 5))
        # Nothing more to await: the close is over when wait_for gave up.
        assert amm.manager.closed
        # (asyncio_N: the loop's own executor, which ran the close; asyncio.run ends it)
        left = [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.name.startswith("asyncio_")]
        assert left == [], f"threads still running after the cancelled aclose: {left}"
        assert await writing  # the write in flight was waited for, not cut off
        assert len(seen) == 1
        with pytest.raises(StoreClosed):
            await amm.read("focus.slow", "k")
        sub.cancel()
        other.cancel()

    asyncio.run(main())
