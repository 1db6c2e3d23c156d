"""Persisted bucket indexes: ``warm/<namespace>/<bb>.idx``.

Without one, the first use of a bucket in a process scans the whole bucket
file to build its key -> offset index (42 ms for a 4 MiB bucket, which is
what 1M records in one namespace make). With one, the first read costs a
read of this file, two 4 KiB samples of the bucket, a binary search and the
read of the record's line; lines appended after the index was written are
scanned as before (issue 13).

It is a cache, never a source of truth:

- It describes the bucket file as it was up to ``covered`` bytes (complete
  lines, no damage). It is used only if the bucket file is the same file
  (``st_dev``, ``st_ino``), at least ``covered`` bytes long, its first and
  last 4 KiB before ``covered`` still have the crc32 recorded, and the index
  file's own crc32s (header and body) hold. A bucket file is append-only
  between compactions, and a compaction makes a new inode; so a valid index
  describes the file's first ``covered`` bytes. Anything else (a file
  copied, truncated, rewritten in place, the index damaged or from another
  machine) makes it ignored: the bucket is scanned as if there were none.
- Every line it leads to is checked again on read (its own crc32 and its
  key), and a mismatch drops the index and rescans the bucket.
- It is written without fsync, by a temp file and a rename: a crash leaves
  the old index, the new one, or a torn file whose checksum fails.

Format (little endian)::

    header  "HRMi" | u16 format | u16 flags | u64 dev | u64 ino | u64 covered
            | u64 garbage | u32 n | u32 head crc | u32 tail crc | u32 body crc
            | u32 header crc (of everything before it)
    body    n x u32 key hash (crc32 of the key's UTF-8, sorted)
            n x u32 offset (u64 when flag 1 is set: buckets over 4 GiB)

An entry is a key's current line (its first byte); keys whose hashes
collide sit next to each other and are told apart by reading the line.
Only the offset is stored (8 bytes a key in all, 0.04x of the JSON bytes of
~200-byte records): the version and times are in the line, which a read
fetches anyway. Buckets under ``MIN_BYTES`` get no index: scanning them
costs less than a millisecond.
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path

from .fsutil import NOFOLLOW, atomic_write

MAGIC = b"HRMi"
FORMAT = 1
MIN_BYTES = 64 * 1024
SAMPLE = 4096
_WIDE = 1  # flag: 64-bit offsets
_HEAD = struct.Struct("<4sHHQQQQIIII")
_HEAD_CRC = struct.Struct("<I")
HEADER_BYTES = _HEAD.size + _HEAD_CRC.size
_SWAP = sys.byteorder != "little"


def key_hash(key: str) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass"))


def _samples(fd: int, covered: int) -> tuple[int, int]:
    """crc32 of the first and of the last ``SAMPLE`` bytes before ``covered``."""
    n = min(SAMPLE, covered)
    head = os.pread(fd, n, 0)
    tail = os.pread(fd, n, covered - n)
    if len(head) != n or len(tail) != n:
        raise OSError("bucket file shorter than its index says")
    return zlib.crc32(head), zlib.crc32(tail)


class Persisted:
    """A loaded, validated index: ``offsets(key)`` gives the candidate
    offsets (usually one) of ``key``'s current line among the first
    ``covered`` bytes of the bucket file."""

    __slots__ = ("covered", "garbage", "n", "_hashes", "_offsets")

    def __init__(self, covered: int, garbage: int, hashes: array[int], offsets: array[int]) -> None:
        self.covered = covered
        self.garbage = garbage
        self.n = len(hashes)
        self._hashes = hashes
        self._offsets = offsets

    def offsets(self, key: str) -> Iterator[int]:
        h = key_hash(key)
        hashes = self._hashes
        i = bisect_left(hashes, h)
        while i < self.n and hashes[i] == h:
            yield self._offsets[i]
            i += 1

    def pairs(self) -> Iterator[tuple[int, int]]:
        """``(key hash, offset)`` of every entry, in hash order."""
        return zip(self._hashes, self._offsets)


def index_path(log_path: Path) -> Path:
    return log_path.with_suffix(".idx")


def load(path: Path, log_fd: int, log_st: os.stat_result) -> Persisted | None:
    """The index at ``path`` if it is intact and describes the bucket file
    open as ``log_fd`` (whose ``fstat`` is ``log_st``), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None
    try:
        data = _read_all(fd)
        return _parse(data, log_fd, log_st)
    except (OSError, ValueError, struct.error):
        return None
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    if len(data) != size:
        raise OSError("index file changed while read")
    return data


def _parse(data: bytes, log_fd: int | None, log_st: os.stat_result | None) -> Persisted | None:
    if len(data) < HEADER_BYTES:
        return None
    magic, fmt, flags, dev, ino, covered, garbage, n, head_crc, tail_crc, body_crc = _HEAD.unpack_from(data)
    if magic != MAGIC or fmt != FORMAT or flags & ~_WIDE:
        return None
    if _HEAD_CRC.unpack_from(data, _HEAD.size)[0] != zlib.crc32(memoryview(data)[: _HEAD.size]):
        return None
    width = 8 if flags & _WIDE else 4
    body = memoryview(data)[HEADER_BYTES:]
    if len(body) != n * (4 + width) or zlib.crc32(body) != body_crc:
        return None
    if log_st is not None and log_fd is not None:
        if (log_st.st_dev, log_st.st_ino) != (dev, ino) or log_st.st_size < covered or covered == 0:
            return None
        if _samples(log_fd, covered) != (head_crc, tail_crc):
            return None
    hashes = array("I")
    hashes.frombytes(body[: 4 * n])
    offsets = array("Q" if width == 8 else "I")
    offsets.frombytes(body[4 * n :])
    if _SWAP:
        hashes.byteswap()
        offsets.byteswap()
    return Persisted(covered, garbage, hashes, offsets)


def encode(keys: list[str], offs: list[int], log_fd: int, log_st: os.stat_result, covered: int, garbage: int) -> bytes:
    """The index file's bytes for ``keys`` at ``offs`` (their current lines)
    describing the first ``covered`` bytes of the bucket file open as
    ``log_fd``. Hashing and sorting run in C (map, sorted with a key)."""
    try:
        hashed = list(map(zlib.crc32, map(str.encode, keys)))
    except UnicodeEncodeError:  # a key with a lone surrogate
        hashed = list(map(key_hash, keys))
    order = sorted(range(len(hashed)), key=hashed.__getitem__)
    wide = covered >= 1 << 32
    hashes = array("I", [hashed[i] for i in order])
    offsets = array("Q" if wide else "I", [offs[i] for i in order])
    if _SWAP:
        hashes.byteswap()
        offsets.byteswap()
    body = hashes.tobytes() + offsets.tobytes()
    head_crc, tail_crc = _samples(log_fd, covered)
    header = _HEAD.pack(
        MAGIC, FORMAT, _WIDE if wide else 0, log_st.st_dev, log_st.st_ino, covered, garbage, len(hashed),
        head_crc, tail_crc, zlib.crc32(body),
    )  # fmt: skip
    return header + _HEAD_CRC.pack(zlib.crc32(header)) + body


def write(path: Path, data: bytes) -> None:
    """Replace the index at ``path`` (temp file and rename, no fsync: it is
    a cache that validates itself)."""
    atomic_write(path, data, durable=False)


def describe(path: Path) -> tuple[Persisted | None, tuple[int, int, int] | None]:
    """For check(): the index at ``path`` read without a bucket file to
    match (None if it is damaged), and its ``(dev, ino, covered)``."""
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    try:
        data = _read_all(fd)
    finally:
        os.close(fd)
    parsed = _parse(data, None, None)
    if parsed is None:
        return None, None
    _, _, _, dev, ino, covered, *_ = _HEAD.unpack_from(data)
    return parsed, (dev, ino, covered)


def matches(path: Path, log_fd: int, log_st: os.stat_result) -> bool:
    """True if the index at ``path`` is one ``load`` would use."""
    return load(path, log_fd, log_st) is not None


__all__ = ["HEADER_BYTES", "MIN_BYTES", "Persisted", "describe", "encode", "index_path", "key_hash", "load", "write"]
