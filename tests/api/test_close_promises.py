"""Issue 14, item 11: close() while other threads write gave untyped errors,
and with the window held open a write landed in an unrelated file."""

from __future__ import annotations

import threading
from pathlib import Path

from hrm_memory import MemoryManager, NamespaceSpec, StoreClosed

NS = "t.close"


def test_item11_close_fences_writers_of_other_threads(tmp_path: Path) -> None:
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


def test_item11_close_waits_for_a_write_in_flight(tmp_path: Path, monkeypatch: object) -> None:
    """The window held open: a write paused inside the warm tier while
    another thread closes the store and opens files (which take the freed
    descriptor numbers). The write must complete into the store, or fail
    typed; never land in one of those files."""
    import pytest

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
