"""A purge's last step in the file change log: the namespace's lines blanked in place.

The change log (``changes.py``) holds, per change, the namespace and the
key (never the value). A purge removes the keys too (as the Redis backend
rewrites its stream): every line of the purged namespace
in the kept segments is overwritten, at the same offset and with the same
length, by a checksummed filler line that is no event, so cursors (segment
and offset) stay valid and readers skip it as they skip any line that is not
an event. Done under the log's exclusive lock, as a roll is: no append is in
flight meanwhile.
"""

from __future__ import annotations

import os
import zlib

import orjson

from ..fsutil import NOFOLLOW, unframe
from .changes import FileChangeLog

_HEAD = b'["-","'
_TAIL = b'"]'


def filler(length: int) -> bytes:
    """A framed line (without its newlines) of exactly ``length`` bytes that
    parses as no event."""
    body = _HEAD + b"." * (length - 9 - len(_HEAD) - len(_TAIL)) + _TAIL
    return b"%08x " % zlib.crc32(body) + body


def scrub(log: FileChangeLog, namespace: str) -> int:
    """Blank every line of ``namespace``; return how many."""
    blanked = 0
    with log.exclusively() as segments:
        for path in segments:
            try:
                fd = os.open(path, os.O_RDWR | NOFOLLOW)
            except FileNotFoundError:
                continue
            try:
                data = os.pread(fd, os.fstat(fd).st_size, 0)
                pos = 0
                for line in data.split(b"\n"):
                    start, pos = pos, pos + len(line) + 1
                    body = unframe(line)
                    if body is None or len(line) < 9 + len(_HEAD) + len(_TAIL):
                        continue
                    try:
                        doc = orjson.loads(body)
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(doc, list) and len(doc) == 7 and doc[3] == namespace:
                        os.pwrite(fd, filler(len(line)), start)
                        blanked += 1
                if blanked:
                    os.fsync(fd)
            finally:
                os.close(fd)
    return blanked


__all__ = ["filler", "scrub"]
