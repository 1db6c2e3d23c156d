"""Damage made by hand in a store's real files, the way a bad disk would.

The formats are the documented ones: warm lines
``\\n<crc32 8 hex> <header JSON>\\t<value JSON>\\n`` in ``warm/<ns>/<bb>.log``
(storage/file/warm/format.py) and cold frames ``HRMc | len u32 BE | crc32 u32
BE | payload`` in ``cold/<ns>/<nnnnnn>.seg`` (storage/file/cold.py).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import orjson


def find_line(root: Path, ns: str, key: str, op: bytes = b"p") -> tuple[Path, int, int]:
    """(file, start, end) of the newest line of ``key`` in the warm logs of
    ``ns``: the bytes between the line's two newlines."""
    needle = b'["' + op + b'",' + orjson.dumps(key) + b","
    hits = []
    for path in sorted((root / "warm" / ns).glob("*.log")):
        data = path.read_bytes()
        pos = data.rfind(needle)
        if pos >= 0:
            hits.append((path, data, pos))
    assert len(hits) == 1, f"{key!r} found in {len(hits)} files"
    path, data, pos = hits[0]
    start = data.rfind(b"\n", 0, pos) + 1
    end = data.find(b"\n", pos)
    assert end > 0
    return path, start, end


def damage(path: Path, changes: dict[int, int]) -> bytes:
    """Set the byte at each offset of ``changes``; the file's new bytes."""
    data = bytearray(path.read_bytes())
    for pos, byte in changes.items():
        data[pos] = byte
    path.write_bytes(bytes(data))
    return bytes(data)


def flip_value_byte(root: Path, ns: str, key: str) -> Path:
    """Flip one bit in the value JSON of ``key``'s newest warm line (its
    checksum no longer matches); the file changed."""
    path, start, end = find_line(root, ns, key)
    data = path.read_bytes()
    value_at = data.index(b"\t", start, end) + 1
    pos = (value_at + end - 1) // 2
    damage(path, {pos: data[pos] ^ 0x01})
    return path


def quarantined(root: Path) -> dict[str, bytes]:
    """Name -> bytes of every file ``check(fix=True)`` moved under quarantine/."""
    q = root / "quarantine"
    return {p.name: p.read_bytes() for p in sorted(q.iterdir())} if q.is_dir() else {}


def frames(seg: Path) -> list[tuple[int, int]]:
    """(offset, total length) of every frame of an undamaged cold segment."""
    data = seg.read_bytes()
    out, off = [], 0
    while off < len(data):
        magic, length, crc = struct.unpack_from(">4sII", data, off)
        assert magic == b"HRMc" and zlib.crc32(data[off + 12 : off + 12 + length]) == crc
        out.append((off, 12 + length))
        off += 12 + length
    return out
