"""Persisted bucket indexes: ``warm/<namespace>/<bb>.idx``.

Without one, the first use of a bucket in a process scans the whole bucket
file to build its key -> offset index, a cost that grows with the bucket
and made the p99 of reads after a reopen a scan (BENCHMARKS.md, "Figures
the code's comments rely on"). With
one, the first read costs a read of this file, two 1 KiB samples of the
bucket (for a bucket of up to ``SMALL`` bytes: one read of all of it, whose
lines are then cut from those bytes), a binary search and the read of the
record's line; lines appended after the index was written are scanned as
usual. Every bucket gets one, whatever its size.

It is a cache, never a source of truth:

- It describes the bucket file as it was up to ``covered`` bytes (complete
  lines, no damage). It is used only if the bucket file is the same file
  (``st_dev``, ``st_ino``), at least ``covered`` bytes long, its first and
  last ``SAMPLE`` bytes before ``covered`` still have the crc32 recorded,
  and the index file's own crc32s (header and body) hold. A bucket file is append-only
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
fetches anyway.

It is rewritten (by ``close()`` or a compaction) when it lags the bucket
by ``lags``: ``LAG_BYTES`` or a sixteenth of the bucket, whichever is less,
so a first read never scans more than that. A process that read through
an index rewrites it by merging it with what was appended (``merge``).
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ...fsutil import NOFOLLOW, atomic_write

MAGIC = b"HRMi"
FORMAT = 2  # 2: 1 KiB samples (1 had 4 KiB ones; such an index is ignored, then rewritten)
LAG_BYTES = 32 * 1024
SAMPLE = 1024
SMALL = 16 * 1024  # a bucket up to this size is read whole when its index is loaded
_FIRST_READ = 16 * 1024  # one pread of an index file this size or smaller
_WIDE = 1  # flag: 64-bit offsets
_HEAD = struct.Struct("<4sHHQQQQIIII")
_HEAD_CRC = struct.Struct("<I")
HEADER_BYTES = _HEAD.size + _HEAD_CRC.size
_SWAP = sys.byteorder != "little"


def key_hash(key: str) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass"))


def lags(covered: int, size: int) -> bool:
    """True if an index covering ``covered`` bytes (-1: none) of a bucket of
    ``size`` bytes is worth rewriting."""
    if covered < 0:
        return size > 0
    return size - covered >= min(LAG_BYTES, max(covered // 16, 1))


def _samples(fd: int, covered: int) -> tuple[int, int, bytes | None]:
    """crc32 of the first and of the last ``SAMPLE`` bytes before ``covered``,
    and, for a bucket of up to ``SMALL`` bytes, those ``covered`` bytes
    (read in one go)."""
    n = min(SAMPLE, covered)
    if covered <= SMALL:
        both = os.pread(fd, covered, 0)
        if len(both) != covered:
            raise OSError("bucket file shorter than its index says")
        view = memoryview(both)
        return zlib.crc32(view[:n]), zlib.crc32(view[covered - n :]), both
    head = os.pread(fd, n, 0)
    tail = os.pread(fd, n, covered - n)
    if len(head) != n or len(tail) != n:
        raise OSError("bucket file shorter than its index says")
    return zlib.crc32(head), zlib.crc32(tail), None


class Persisted:
    """A loaded, validated index: ``at(key_hash(key))`` gives the candidate
    offsets (usually one) of ``key``'s current line among the first
    ``covered`` bytes of the bucket file. For a small bucket (``SMALL``),
    ``data`` holds those bytes, read while validating: the reader cuts its
    lines from there, without a system call (the file is append-only up to a
    compaction, which makes a new inode and so a new ``Persisted``)."""

    __slots__ = ("covered", "garbage", "n", "data", "_hashes", "_offsets")

    def __init__(
        self, covered: int, garbage: int, hashes: array[int], offsets: array[int], data: bytes | None = None
    ) -> None:
        self.covered = covered
        self.garbage = garbage
        self.n = len(hashes)
        self.data = data
        self._hashes = hashes
        self._offsets = offsets

    def at(self, h: int) -> Sequence[int]:
        """Offsets of the entries of key hash ``h`` (usually none or one)."""
        hashes = self._hashes
        i = bisect_left(hashes, h)
        n = self.n
        if i == n or hashes[i] != h:
            return ()
        if i + 1 == n or hashes[i + 1] != h:
            return (self._offsets[i],)
        j = i + 1
        while j < n and hashes[j] == h:
            j += 1
        return self._offsets[i:j].tolist()

    def pairs(self) -> Iterator[tuple[int, int]]:
        """``(key hash, offset)`` of every entry, in hash order."""
        return zip(self._hashes, self._offsets)

    def arrays(self) -> tuple[array[int], array[int]]:
        """The entries' key hashes (sorted) and their offsets, to read, never to change."""
        return self._hashes, self._offsets


def index_path(log_path: Path) -> Path:
    return log_path.with_suffix(".idx")


def load(path: str | Path, log_fd: int, log_st: os.stat_result) -> Persisted | None:
    """The index at ``path`` if it is intact and describes the bucket file
    open as ``log_fd`` (whose ``fstat`` is ``log_st``), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None
    try:
        data = os.pread(fd, _FIRST_READ, 0)  # a short read is the end of the file
        if len(data) == _FIRST_READ:
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
    (head_sum,) = _HEAD_CRC.unpack_from(data, _HEAD.size)
    if head_sum != zlib.crc32(memoryview(data)[: _HEAD.size]):
        return None
    width = 8 if flags & _WIDE else 4
    body = memoryview(data)[HEADER_BYTES:]
    if len(body) != n * (4 + width) or zlib.crc32(body) != body_crc:
        return None
    small = None
    if log_st is not None and log_fd is not None:
        if (log_st.st_dev, log_st.st_ino) != (dev, ino) or log_st.st_size < covered or covered == 0:
            return None
        head, tail, small = _samples(log_fd, covered)
        if (head, tail) != (head_crc, tail_crc):
            return None
    hashes = array("I")
    hashes.frombytes(body[: 4 * n])
    offsets = array("Q" if width == 8 else "I")
    offsets.frombytes(body[4 * n :])
    if _SWAP:
        hashes.byteswap()
        offsets.byteswap()
    return Persisted(covered, garbage, hashes, offsets, small)


def hashes_of(keys: list[str]) -> list[int]:
    """``key_hash`` of each key, in C where it can (map over str.encode)."""
    try:
        return list(map(zlib.crc32, map(str.encode, keys)))
    except UnicodeEncodeError:  # a key with a lone surrogate
        return list(map(key_hash, keys))


def encode(keys: list[str], offs: list[int], log_fd: int, log_st: os.stat_result, covered: int, garbage: int) -> bytes:
    """The index file's bytes for ``keys`` at ``offs`` (their current lines)
    describing the first ``covered`` bytes of the bucket file open as
    ``log_fd``. Hashing and sorting run in C (map, sorted with a key)."""
    return encode_hashed(hashes_of(keys), offs, log_fd, log_st, covered, garbage)


def encode_hashed(
    hashed: list[int], offs: list[int], log_fd: int, log_st: os.stat_result, covered: int, garbage: int
) -> bytes:
    """``encode`` of entries given by key hash."""
    order = sorted(range(len(hashed)), key=hashed.__getitem__)
    wide = covered >= 1 << 32
    hashes = array("I", [hashed[i] for i in order])
    offsets = array("Q" if wide else "I", [offs[i] for i in order])
    if _SWAP:
        hashes.byteswap()
        offsets.byteswap()
    body = hashes.tobytes() + offsets.tobytes()
    head_crc, tail_crc, _ = _samples(log_fd, covered)
    header = _HEAD.pack(
        MAGIC, FORMAT, _WIDE if wide else 0, log_st.st_dev, log_st.st_ino, covered, garbage, len(hashed),
        head_crc, tail_crc, zlib.crc32(body),
    )  # fmt: skip
    return header + _HEAD_CRC.pack(zlib.crc32(header)) + body


def merge(
    pidx: Persisted, appended: dict[str, int], key_at: Callable[[int], str | None]
) -> tuple[list[int], list[int]] | None:
    """``(hashes, offsets)`` of the entries of ``pidx`` with the keys of
    ``appended`` (key -> offset of its current line, after what ``pidx``
    covers) at their new lines: what a scan of the whole bucket would give,
    without one. Hashes are shared by a few keys at most, so the line of an
    entry whose hash an appended key has is read (``key_at``: its key, None
    if damaged) to tell whether it is that key's older line; None if one is
    damaged (the caller then writes no index)."""
    hashes, offsets = pidx.arrays()
    keys = list(appended)
    new = hashes_of(keys)
    drop: set[int] = set()
    for key, h in zip(keys, new):
        i = bisect_left(hashes, h)
        while i < pidx.n and hashes[i] == h:
            found = key_at(offsets[i])
            if found is None:
                return None
            if found == key:
                drop.add(i)
            i += 1
    if drop:
        kept = [i for i in range(pidx.n) if i not in drop]
        old_h, old_o = [hashes[i] for i in kept], [offsets[i] for i in kept]
    else:
        old_h, old_o = hashes.tolist(), offsets.tolist()
    return old_h + new, old_o + list(appended.values())


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


__all__ = [
    "HEADER_BYTES", "LAG_BYTES", "Persisted", "describe", "encode", "encode_hashed", "hashes_of", "index_path",
    "key_hash", "lags", "load", "merge", "write",
]  # fmt: skip
