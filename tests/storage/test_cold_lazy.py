"""A cold read decodes its frame only as far as the key it wants.

A frame's payload is checked whole (crc32) but inflated and unpacked lazily;
later lookups in the same frame resume the decode. Whatever the order of the
reads, and from several threads at once, every record comes back as written;
a frame that decodes badly past some point still gives the rows before it
and a typed error for the rest, and check() reports it.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrm_memory import CorruptRecord, MemoryManager, NamespaceSpec
from hrm_memory.core.records import Stored
from hrm_memory.storage.file import cold

NS = "t.aging"
N = 700  # three frames (FRAME_RECORDS = 256)


def open_mm(root: Path) -> MemoryManager:
    return MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS, ttl=60.0)])


def value(i: int) -> dict[str, object]:
    return {"i": i, "text": f"record {i} " + "lorem ipsum " * (i % 7)}


def archived(root: Path) -> Path:
    with open_mm(root) as mm:
        for i in range(N):
            mm.write(NS, f"k{i}", value(i))
        assert mm.archive(now=time.time() + 10**6) == {NS: N}
    return root


def test_every_key_in_any_order_after_reopen(root: Path) -> None:
    archived(root)
    order = list(range(N))
    random.Random(5).shuffle(order)
    with open_mm(root) as mm:
        for i in order:
            assert mm.read(NS, f"k{i}") == value(i)
    with open_mm(root) as mm:
        for i in reversed(range(N)):  # each frame's last key first: one whole decode, then lookups
            assert mm.read(NS, f"k{i}") == value(i)
        assert mm.check() == []


def test_threads_reading_one_frame(root: Path) -> None:
    archived(root)
    errors: list[BaseException] = []
    with open_mm(root) as mm:

        def reader(seed: int) -> None:
            rng = random.Random(seed)
            try:
                for _ in range(200):
                    i = rng.randrange(256)  # all in the first frame
                    assert mm.read(NS, f"k{i}") == value(i)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def _frame_of(rows: list[list[object]]) -> bytes:
    payload = zlib.compress(msgpack.packb(rows), 6)
    return cold._HEAD.pack(cold.MAGIC, len(payload), zlib.crc32(payload)) + payload


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), picks=st.lists(st.integers(0, 299), max_size=40))
def test_lazy_lookups_agree_with_a_whole_decode(  # type: ignore[no-untyped-def]
    tmp_path_factory, n: int, picks: list[int]
) -> None:
    """ColdTier.fetch on one frame, any sequence of keys (present or not),
    gives what decoding the whole frame gives."""
    root = tmp_path_factory.mktemp("c")
    tier = cold.ColdTier(root, durability="flush")
    rows = [[f"key{i}", i + 1, 10 * i, 10 * i + 1, b'{"v":%d}' % i] for i in range(n)]
    seg = root / "cold" / "ns"
    seg.mkdir(parents=True)
    (seg / "000001.seg").write_bytes(_frame_of(rows))
    whole = {s.key: s for s in cold._decode_payload(_frame_of(rows)[cold._HEAD.size :])}
    for i in picks:
        key = f"key{i}"
        if i < n:
            got = tier.fetch("ns", key, b"000001:0")
            assert got == whole[key] and type(got) is Stored
        else:
            with pytest.raises(CorruptRecord, match="missing from its frame"):
                tier.fetch("ns", key, b"000001:0")


def test_frame_damaged_past_a_point_gives_the_rows_before_it(root: Path) -> None:
    """The payload passes its crc32 (it was written so) but its zlib stream
    stops early: rows before the cut are intact and read; a key past it is a
    CorruptRecord, not a wrong answer; check() reports the frame."""
    archived(root)
    with open_mm(root) as mm:
        marker = mm.backend.warm.get(NS, "k0")  # type: ignore[attr-defined]
    assert marker is not None and marker.tier == "cold"
    seg_name, _, off = marker.value.decode().partition(":")
    seg = root / "cold" / NS / f"{seg_name}.seg"
    data = seg.read_bytes()
    _, length, _ = cold._HEAD.unpack_from(data, int(off))
    start = int(off) + cold._HEAD.size
    rows = msgpack.unpackb(zlib.decompress(data[start : start + length]), raw=False)
    cut = zlib.compress(msgpack.packb(rows), 6)[: length // 2]
    frame = cold._HEAD.pack(cold.MAGIC, len(cut), zlib.crc32(cut)) + cut
    seg.write_bytes(data[: int(off)] + frame + bytes(length - len(cut)))  # later frames keep their offsets
    first, last = rows[0][0], rows[-1][0]
    with open_mm(root) as mm:
        assert mm.read(NS, first) == value(int(first[1:]))
        with pytest.raises(CorruptRecord) as caught:
            mm.read(NS, last)
        assert caught.value.path == str(seg)
        assert "corrupt-frame" in {f.kind for f in mm.check()}
