"""Where a canary's bytes are: every file under a root that holds them.

A plain grep misses a copy inside the cold archive, whose frames are
compressed (``HRMc | len u32 BE | crc32 u32 BE | zlib payload``, see
storage/file/cold.py); :func:`inflated` adds each frame's inflated payload to
the bytes searched, so every helper here sees those copies too.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any

FRAME_MAGIC = b"HRMc"


def inflated(data: bytes) -> bytes:
    """``data`` and, after it, every cold-archive frame found in it inflated
    (damaged or partial frames are skipped: their raw bytes are in ``data``)."""
    out = [data]
    at = data.find(FRAME_MAGIC)
    while at >= 0:
        _, length, _ = struct.unpack(">4sII", data[at : at + 12].ljust(12, b"\0"))
        try:
            out.append(zlib.decompressobj().decompress(data[at + 12 : at + 12 + length]))
        except zlib.error:
            pass
        at = data.find(FRAME_MAGIC, at + 1)
    return b"".join(out)


def files_holding(root: Path | str, *needles: bytes | str, skip: tuple[str, ...] = ()) -> list[str]:
    """Paths (relative to ``root``, sorted) of the files under ``root`` holding
    any of ``needles`` (text is UTF-8 encoded), cold-archive frames inflated.
    Symlinks are not followed; paths starting with one of ``skip`` are left out."""
    raw = [n.encode() if isinstance(n, str) else n for n in needles]
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            if path.is_symlink() or (skip and rel.startswith(skip)):
                continue
            try:
                data = inflated(path.read_bytes())
            except (FileNotFoundError, IsADirectoryError):
                continue  # removed while walking (a temporary file)
            if any(n in data for n in raw):
                found.append(rel)
    return sorted(found)


def redis_key_parts(client: Any, name: bytes) -> list[bytes]:
    """What one Redis key holds, as byte strings to search: its DUMP (what an
    RDB holds; large values LZF-compressed there) and its contents read back
    by type (hash fields and values, a string, set members, list items,
    stream entries' fields and values)."""
    kind = client.type(name)
    parts: list[bytes] = [client.dump(name) or b""]
    if kind == b"hash":
        for f, v in client.hgetall(name).items():
            parts += [f, v]
    elif kind == b"string":
        parts.append(client.get(name) or b"")
    elif kind == b"set":
        parts += list(client.smembers(name))
    elif kind == b"list":
        parts += list(client.lrange(name, 0, -1))
    elif kind == b"stream":
        for _id, fields in client.xrange(name):
            parts += [b for kv in fields.items() for b in kv]
    return parts
