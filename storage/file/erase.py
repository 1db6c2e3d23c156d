"""Erasing one key from the files of a store root (``FileBackend.erase``).

``delete`` leaves a versioned tombstone and keeps what came before (the
superseded log lines until compaction, the archived copy, the kept history,
the change-log entries naming the key). ``erase`` removes all of it, so that
not a byte of the record's values stays in any file of the store, and its key
stays in none of the change-log entries. ``FileBackend.erase`` does:

- warm: a tombstone, then the key's bucket rewritten (compaction), so
  the old lines are in no file any more (left-over ``.compact`` temps removed);
- cold: every frame holding the key rewritten in place without it
  (:meth:`ColdTier.erase`: same offsets, the other keys' markers stay valid);
- quarantine (:func:`erase_quarantined`): every quarantined span of the
  namespace that holds the key, or that cannot be read well enough to tell
  (a damaged archive span), removed;
- change log (:func:`erase_log_entries`): each ``events/*.log`` line naming
  the key overwritten in place with blanks of the same length (readers skip
  unframed lines), so every cursor (a byte offset) stays valid.

The Redis backend's counterpart is ``RedisBackend.erase`` (one script per
namespace: ``redis/scripts.py``'s ``ERASE``); whole-namespace purges
(``Backend.purge``) are the other path to the same end, and share the
quarantine and change-log scrubbing rules.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import orjson

from .. import fsutil as _fs


def _in_line(data: bytes, key: str) -> bool:
    """True if ``data`` holds ``key`` as a warm line does (a JSON string)."""
    return orjson.dumps(key) in data


def _in_rows(data: bytes, key: str) -> bool:
    """True if inflated archive rows may hold ``key`` (msgpack keeps it raw:
    a short key matches more spans than its own, and they go too)."""
    return key.encode("utf-8", "surrogatepass") in data


def erase_quarantined(root: Path, namespace: str, key: str) -> int:
    """Remove the namespace's quarantined spans that hold ``key`` (warm
    lines are text: looked for directly; archive spans are compressed: one
    that inflates and does not hold the key is kept, one that cannot be
    inflated may hold anything and goes)."""
    import zlib

    _fs.ensure_real_dirs(root, "quarantine")
    qdir = root / "quarantine"
    if not qdir.is_dir():
        return 0
    removed = 0
    for path in sorted(qdir.iterdir()):
        name = path.name
        if path.is_symlink() or not path.is_file():
            continue
        if name.startswith(f"warm__{namespace}__"):
            doomed = _in_line(path.read_bytes(), key)
        elif name.startswith(f"cold__{namespace}__"):
            data = path.read_bytes()
            try:
                doomed = _in_rows(data, key) or _in_rows(zlib.decompressobj().decompress(data[12:]), key)
            except zlib.error:
                doomed = True  # cannot tell what it holds
        else:
            continue
        if doomed:
            path.unlink()
            removed += 1
    return removed


def erase_log_entries(events: Path, namespace: str, key: str) -> int:
    """Blank, in place, every change-log line naming ``(namespace, key)``."""
    from ..fsutil import unframe

    if not events.is_dir() or events.is_symlink():
        return 0
    blanked = 0
    lock_fd = os.open(events / ".lock", os.O_RDWR | os.O_CREAT | _fs.NOFOLLOW, _fs.FILE_MODE)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # as a roll does: no segment changes name meanwhile
        for seg in sorted(events.glob("*.log")):
            if seg.is_symlink():
                continue
            data = seg.read_bytes()
            if orjson.dumps(key) not in data:
                continue
            patches: list[tuple[int, int]] = []
            off = 0
            for line in data.split(b"\n"):
                body = unframe(line)
                if body is not None:
                    try:
                        entry: Any = orjson.loads(body)
                        if entry[3] == namespace and entry[4] == key:
                            patches.append((off, len(line)))
                    except (ValueError, IndexError, TypeError, orjson.JSONDecodeError):
                        pass
                off += len(line) + 1
            if not patches:
                continue
            fd = os.open(seg, os.O_WRONLY | _fs.NOFOLLOW)
            try:
                for start, length in patches:
                    os.pwrite(fd, b" " * length, start)
                os.fsync(fd)
            finally:
                os.close(fd)
            blanked += len(patches)
    finally:
        os.close(lock_fd)
    return blanked


__all__ = ["erase_log_entries", "erase_quarantined"]
