"""Erasing one record from every place a backend keeps it (``MemoryManager.forget``).

``delete`` leaves a versioned tombstone and keeps what came before (the
superseded log lines until compaction, the archived copy, the kept history,
the change-log entries naming the key). ``forget`` removes all of it, so that
not a byte of the record's values stays in any file of the store (or key of
the server), and its key stays in none of the change-log entries:

File backend (:func:`erase_file`):
- warm: a tombstone, then the namespace's buckets rewritten (compaction), so
  the old lines are in no file any more (left-over ``.compact`` temps removed);
- cold: every frame holding the key rewritten in place without it
  (:meth:`ColdTier.erase`: same offsets, the other keys' markers stay valid);
- quarantine: every quarantined span of the namespace that holds the key, or
  that cannot be read well enough to tell (a damaged archive span), removed;
- change log: each ``events/*.log`` line naming the key overwritten in place
  with blanks of the same length (readers skip unframed lines), so every
  cursor (a byte offset) stays valid.

Redis backend (:func:`erase_redis`): the key's fields removed from the live,
archive and quarantine hashes (no tombstone), the change stream rewritten
without the key's entries by one script (the same ids, so cursors stay valid;
``XDEL`` would leave the bytes in the stream's nodes), then the server asked
to rewrite its persistence files, as a purge does.

Both are called with the namespace lock held, for the namespace itself and
for its kept history (``_h.<namespace>``). Whole-namespace purges
(``Backend.purge``) are the other path to the same end; the two share the
quarantine and change-log scrubbing rules.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from hrm_memory.core.backend import Backend

from . import fsutil as _fs
from .file import FileBackend

#: What an eraser reports: count per place.
Erased = dict[str, int]


def _now_us() -> int:
    return time.time_ns() // 1000


def eraser_for(backend: Backend) -> Callable[[str, str], Erased]:
    """The function that erases ``(namespace, key)`` from ``backend``;
    :class:`Unsupported` for a backend this module does not know."""
    if isinstance(backend, FileBackend):
        return lambda namespace, key: erase_file(backend, namespace, key)
    if type(backend).__name__ == "RedisBackend":
        return lambda namespace, key: erase_redis(backend, namespace, key)
    from hrm_memory.core.errors import Unsupported

    def refuse(namespace: str, key: str) -> Erased:
        raise Unsupported(f"the backend {backend.system} cannot forget a record (no eraser for it)")

    return refuse


# -- files ----------------------------------------------------------------------------


def erase_file(backend: FileBackend, namespace: str, key: str) -> Erased:
    out = {"warm": 0, "cold": 0, "quarantine": 0, "events": 0}
    with backend.locks.hold(namespace):
        old = backend.warm.get(namespace, key)
        if old is not None:
            backend.delete(namespace, key, _now_us())
            out["warm"] = 1
        if (backend.root / "warm" / namespace).is_dir():
            backend.warm.compact(namespace, forget=frozenset({key}))  # its tombstone goes too: no line names it
            for temp in (backend.root / "warm" / namespace).glob(".*.compact"):
                temp.unlink(missing_ok=True)
        backend.cache.discard((namespace, key))
        out["cold"] = backend.cold.erase(namespace, key)
        out["quarantine"] = erase_quarantined(backend.root, namespace, key)
    out["events"] = erase_log_entries(backend.root / "events", namespace, key)
    return out


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
    from .fsutil import unframe

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


# -- Redis ----------------------------------------------------------------------------

#: Copy the stream without the entries of (namespace, key), ids kept, and
#: put the copy in its place; its last id stays the old one (XSETID), so a
#: new entry never gets an id below a cursor handed out before.
_REWRITE_STREAM = """
local src, tmp = KEYS[1], KEYS[2]
local ns, key = ARGV[1], ARGV[2]
if redis.call('EXISTS', src) == 0 then return 0 end
local info = redis.call('XINFO', 'STREAM', src)
local last = nil
for i = 1, #info, 2 do if info[i] == 'last-generated-id' then last = info[i + 1] end end
redis.call('DEL', tmp)
local removed, kept, start = 0, 0, '-'
while true do
  local batch = redis.call('XRANGE', src, start, '+', 'COUNT', 500)
  for _, entry in ipairs(batch) do
    local drop = false
    local fields = entry[2]
    for j = 1, #fields, 2 do
      if fields[j] == 'e' then
        local ok, e = pcall(cjson.decode, fields[j + 1])
        if ok and type(e) == 'table' and e[3] == ns and e[4] == key then drop = true end
      end
    end
    if drop then removed = removed + 1 else
      redis.call('XADD', tmp, entry[1], unpack(fields))
      kept = kept + 1
    end
  end
  if #batch < 500 then break end
  start = '(' .. batch[#batch][1]
end
if removed == 0 then redis.call('DEL', tmp) return 0 end
if kept == 0 then
  redis.call('DEL', src)
  return removed
end
redis.call('RENAME', tmp, src)
if last then redis.call('XSETID', src, last) end
return removed
"""


def erase_redis(backend: Any, namespace: str, key: str) -> Erased:
    from redis.exceptions import RedisError

    from .redis_conn import failure

    p = backend.prefix
    live, cold, quarantine = (f"{p}{t}:{namespace}" for t in "rcq")
    out = {"warm": 0, "cold": 0, "quarantine": 0, "events": 0}
    with backend.lock(namespace, cross_process=True):
        try:
            pipe = backend._client.pipeline(transaction=True)
            pipe.hdel(live, key)
            pipe.hdel(cold, key)
            pipe.hdel(quarantine, key)
            out["warm"], out["cold"], out["quarantine"] = (int(n) for n in pipe.execute())
            out["events"] = int(
                backend._client.eval(_REWRITE_STREAM, 2, backend._stream, backend._stream + ":forget", namespace, key)
            )
        except RedisError as exc:
            raise failure(exc, "a forget", backend._shown, namespace) from None
    if any(out.values()):
        out["rewrite"] = backend._rewrite_files()
    return out


__all__ = ["Erased", "erase_file", "erase_log_entries", "erase_quarantined", "erase_redis", "eraser_for"]
