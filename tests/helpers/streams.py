"""A binary stream read once, front to back, like a pipe: it cannot seek."""

from __future__ import annotations

import io
from typing import Any


class Pipe(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def pipe(data: bytes) -> io.BufferedReader:
    """``data`` as a buffered, unseekable binary stream (what ``sys.stdin.buffer`` is for a pipe)."""
    return io.BufferedReader(Pipe(data))
