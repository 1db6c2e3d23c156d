"""Warm tier, record format: bucket choice, line encoding and parsing, and
the audit of a bucket's lines that ``check()`` runs.

One line per record, framed by newlines on both sides::

    \\n<crc32 as 8 hex> <header JSON>\\t<value JSON>\\n

with header ``[op, key, version, created_us, updated_us]``. See ``warm.py``
for why the format has this shape; this module has no state.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

from ...fsutil import frame

N_BUCKETS = 64
_crc32 = zlib.crc32
_CHUNK = 8 * 1024 * 1024


def bucket_of(key: str) -> int:
    """The bucket a key's lines go to (WarmTier.get computes it inline)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % N_BUCKETS


def encode_line(op: str, key: str, version: int, created: int, updated: int, value: bytes) -> bytes:
    return frame(orjson.dumps([op, key, version, created, updated]) + b"\t" + value)


def parse_line(line: bytes) -> tuple[list[Any], bytes] | None:
    """``(header, value)`` of a line whose checksum holds, else None (the
    checksum test is ``fsutil.unframe``'s, spelled out: a call fewer per read
    and per scanned line)."""
    if len(line) < 10 or line[8] != 32:  # b" "
        return None
    # The checksum is compared as the exact 8 lowercase hex digits written,
    # never parsed with int(): int() takes "\t1ab2c3d", "0x1ab2c3", "1_2345ab"
    # and upper case for the same number, so damage there went unnoticed.
    if line[:8] != b"%08x" % _crc32(memoryview(line)[9:]):
        return None
    view = memoryview(line)
    tab = line.find(b"\t", 9)
    if tab < 0:
        return None
    try:
        header = orjson.loads(view[9:tab])
    except orjson.JSONDecodeError:
        return None
    if type(header) is not list or len(header) != 5:
        return None
    _, key, _, _, _ = header
    if type(key) is not str:
        return None
    return header, line[tab + 1 :]


def line_key(parsed: tuple[list[Any], bytes]) -> Any:
    """The key a parsed line (``parse_line``) names."""
    (_, key, _, _, _), _ = parsed
    return key


def is_line_of(parsed: tuple[list[Any], bytes], key: str, version: int) -> bool:
    """Whether a parsed line (``parse_line``) is the line of ``key`` at ``version``."""
    (_, named, named_version, _, _), _ = parsed
    return bool(named == key and named_version == version)


def salvage(line: bytes) -> tuple[str, int] | None:
    """Best effort: ``(key, version)`` of a damaged line, if its header still parses."""
    tab = line.find(b"\t", 9)
    try:
        header = orjson.loads(line[9:tab] if tab > 0 else line[9:])
    except orjson.JSONDecodeError:
        return None
    if type(header) is not list or len(header) != 5:
        return None
    _, key, version, _, _ = header
    return (key, version) if type(key) is str and type(version) is int else None


def lines(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of every complete, non-empty line in ``[start, end)``
    (offset and line without their newlines); a torn tail is not yielded."""
    pos, carry = start, b""
    while pos < end:
        chunk = os.pread(fd, min(_CHUNK, end - pos), pos)
        if not chunk:
            return
        data, base = carry + chunk, pos - len(carry)
        at = 0
        while True:
            nl = data.find(b"\n", at)
            if nl < 0:
                break
            if nl > at:
                yield base + at, data[at:nl]
            at = nl + 1
        carry = data[at:]
        pos += len(chunk)


def read_line_at(fd: int, off: int) -> bytes:
    """The line that starts at ``off`` (without its newline), read from a
    4 KiB window that grows only for a longer line."""
    n = 4096
    while True:
        data = os.pread(fd, n, off)
        nl = data.find(b"\n")
        if nl >= 0:
            return data[:nl]
        if len(data) < n:
            return data  # no closing newline: a torn line, which fails its checksum
        n *= 4


class Misfit(NamedTuple):
    """An intact line that is not where it belongs (check's finding)."""

    offset: int
    length: int
    key: str
    version: int
    home: int  # the bucket its key hashes to
    newest: int  # misplaced: -1; replayed: the highest version of the key before it


def audit(
    fd: int, end: int, idx: int, replays: bool = True
) -> tuple[list[Misfit], list[Misfit], dict[str, tuple[int, bytes]]]:
    """``(misplaced, replayed, current)`` for bucket ``idx`` up to ``end``.

    *Misplaced*: an intact line whose key hashes to another bucket (a bucket
    file restored under the wrong name, two files swapped): a read of that
    key never looks here. *Replayed*: an intact line whose version is below
    an earlier line's of the same key and that repeats an earlier line byte
    for byte: an old line appended again. ``current`` maps each key with a
    replayed line to ``(offset, line)`` of its last line that is not one:
    the newest legitimate record, which a fix keeps. With ``replays=False``
    only misplaced lines are looked for (and no line is kept in memory).

    Why not every lower version: with ``locking=True`` versions of a key
    only grow along a file, but with ``locking=False`` two processes may race
    and the later write may carry a lower version (it is still the later
    write, and the current one, as the last line of a key always is). A
    write never repeats an earlier line (the line holds its version and its
    microsecond times), so a repeat is a replay whatever the locking. An old
    line whose original a compaction has removed is not told apart from such
    a racing write (documented in docs/storage.md)."""
    misplaced: list[Misfit] = []
    replayed: list[Misfit] = []
    top: dict[str, int] = {}
    seen: set[bytes] = set()
    last: dict[str, tuple[int, bytes]] = {}
    for off, line in lines(fd, 0, end):
        parsed = parse_line(line)
        if parsed is None:
            continue  # damaged: reported as corrupt-record
        (_, key, version, _, _), _ = parsed
        if type(version) is not int:
            continue
        home = bucket_of(key)
        if home != idx:
            misplaced.append(Misfit(off, len(line), key, version, home, -1))
            continue
        if not replays:
            continue
        high = top.get(key, -1)
        if version < high and line in seen:
            replayed.append(Misfit(off, len(line), key, version, home, high))
            continue
        seen.add(line)
        top[key] = max(high, version)
        last[key] = (off, line)
    return misplaced, replayed, {m.key: last[m.key] for m in replayed}
