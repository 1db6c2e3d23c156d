"""close() and aclose() while other threads write or the caller cancels.

Writers of other threads are fenced by close(): each gets StoreClosed or
its write completes, and a write in flight never lands in a file opened
after close (on a freed descriptor number). An aclose() cut short by
asyncio.wait_for still closes the manager: the close completes before the
cancellation is let through."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from hrm_memory import AsyncMemoryManager, Event, MemoryManager, NamespaceSpec, StoreClosed

NS = "t.close"


def test_close_fences_writers_of_other_threads(tmp_path: Path) -> None:
    for round_ in range(10):
        root = tmp_path / f"store{round_}"
        mm = MemoryManager(root, durability="flush", locking=True, namespaces=[NamespaceSpec(NS)])
        errors: list[BaseException] = []
        started = threading.Barrier(5)

        def writer(w: int) -> None:
            started.wait()
            for i in range(100_000):
                try:
                    mm.write(NS, f"w{w}-{i % 50}", {"w": w, "i": i, "pad": "x" * 300})
                    mm.read(NS, f"w{w}-{i % 50}")
                except BaseException as exc:  # noqa: BLE001 - collected, then judged
                    errors.append(exc)
                    return

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        started.wait()
        mm.close()
        # Files opened now take the descriptor numbers the store just gave
        # back: a write still in flight must not land in them.
        decoys = []
        for j in range(16):
            path = tmp_path / f"decoy{round_}-{j}"
            path.write_bytes(b"")
            decoys.append((path, open(path, "rb+")))
        for t in threads:
            t.join(timeout=30)
        for path, f in decoys:
            f.close()
            assert path.read_bytes() == b"", f"a write landed in {path.name}"
        assert len(errors) == 4 and all(isinstance(e, StoreClosed) for e in errors), errors
        with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)]) as again:
            assert again.check() == []


def test_close_waits_for_a_write_in_flight(tmp_path: Path, monkeypatch: object) -> None:
    """The window held open: a write paused inside the warm tier while
    another thread closes the store and opens files (which take the freed
    descriptor numbers). The write must complete into the store, or fail
    typed; never land in one of those files."""
    from hrm_memory.storage.file.warm import files as warm_files

    inside, go_on = threading.Event(), threading.Event()
    real = warm_files.BucketFiles.append

    def paused(self: warm_files.BucketFiles, namespace: str, b: object, line: bytes) -> int:
        inside.set()
        go_on.wait(5)
        return real(self, namespace, b, line)  # type: ignore[arg-type]

    mp = pytest.MonkeyPatch()
    mp.setattr(warm_files.BucketFiles, "append", paused)
    try:
        root = tmp_path / "store"
        mm = MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)])
        mm.write(NS, "warm-up", 0)  # the bucket's file is open
        inside.clear()
        outcome: list[object] = []
        t = threading.Thread(target=lambda: outcome.append(_try(lambda: mm.write(NS, "warm-up", {"late": True}))))
        t.start()
        assert inside.wait(5)
        closer = threading.Thread(target=mm.close)
        closer.start()
        closer.join(0.3)  # a fenced close waits for the write; an unfenced one returns
        decoys = []
        for j in range(16):
            path = tmp_path / f"decoy{j}"
            path.write_bytes(b"")
            decoys.append((path, open(path, "rb+")))
        go_on.set()
        t.join(10)
        closer.join(10)
        for path, f in decoys:
            f.close()
            assert path.read_bytes() == b"", f"the write landed in {path.name}"
        assert outcome and (outcome[0] is None or isinstance(outcome[0], StoreClosed)), outcome
    finally:
        mp.undo()
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS)]) as again:
        assert again.check() == []
        if outcome[0] is None:  # acknowledged: it is there
            assert again.read(NS, "warm-up") == {"late": True}


def _try(fn: object) -> object:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - returned for the assertion
        return exc
    return None


@pytest.mark.parametrize("round_", range(20))
def test_aclose_cut_short_by_wait_for_still_closes(root: Path, round_: int) -> None:
    """Right after the TimeoutError the manager is closed, and its executor
    and event threads are gone."""
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
