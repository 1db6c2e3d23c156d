"""A Redis purge that leaves no copy: the change stream rewritten, the persistence files redone.

``XDEL`` only flags a stream entry as deleted inside its listpack node: the
bytes (namespace, key) stay in memory, in ``DUMP``, in the rewritten AOF and
in ``dump.rdb``, and come back after a restart.
``rewrite_stream`` copies every entry of other namespaces, with its id, to a
new stream (in batches, each a script), and a last script copies what was
appended meanwhile, carries the stream's last id, entries-added and
max-deleted-id over (so cursors and trim detection read it as before) and
``RENAME``s the copy over the stream: atomic for every reader and writer.

``persist`` then makes the files agree with memory: it waits for a running
AOF rewrite or RDB save (one forked before the purge still holds the purged
values), starts a new one, and waits for that to finish
and succeed (``aof_rewrites``/``rdb_saves`` counted up, status ok). A save is
made when the server snapshots (``save`` set) or has made a snapshot since it
started. Bounded by ``timeout``; past it, ``StorageError``: the purge is done
in memory, but a file may still hold the old values (purging again retries).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hrm_memory.core.errors import StorageError

BATCH = 500

#: Lua, the part both scripts share: copy the entries of the stream KEYS[1]
#: after ARGV[1] (exclusive; '' = from the first entry), at most ``count`` of
#: them (nil: all), into KEYS[2], leaving out the entries of namespace ``ns``.
#: Returns the entries looked at and how many were left out.
_COPY_BUT = """
local function copy_but(ns, count)
  local start = ARGV[1] == '' and '-' or '(' .. ARGV[1]
  local entries
  if count then entries = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', count)
  else entries = redis.call('XRANGE', KEYS[1], start, '+') end
  local dropped = 0
  for _, e in ipairs(entries) do
    local fields, mine = e[2], false
    for i = 1, #fields, 2 do
      if fields[i] == 'e' then
        local ok, doc = pcall(cjson.decode, fields[i + 1])
        mine = ok and type(doc) == 'table' and doc[3] == ns
      end
    end
    if mine then dropped = dropped + 1 else redis.call('XADD', KEYS[2], e[1], unpack(fields)) end
  end
  return entries, dropped
end
"""

#: KEYS: stream, copy. ARGV: exclusive start, count, namespace. Copies up to
#: count entries not of the namespace; returns {last id looked at ('' if
#: none), entries left out}.
_COPY = _COPY_BUT + """
local entries, dropped = copy_but(ARGV[3], tonumber(ARGV[2]))
if #entries == 0 then return {'', 0} end
return {entries[#entries][1], dropped}
"""

#: KEYS: stream, copy. ARGV: exclusive start, namespace. Copies the rest,
#: carries the stream's ids and counters over, renames. Returns entries left out.
_FINISH = _COPY_BUT + """
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) return 0 end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last, added = '0-0', 0
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then last = info[i + 1]
  elseif info[i] == 'entries-added' then added = info[i + 1] end
end
local _, dropped = copy_but(ARGV[2], nil)
if redis.call('EXISTS', KEYS[2]) == 0 then
  -- every entry went: an empty stream that still knows its last id
  redis.call('XADD', KEYS[2], last, 'e', '')
  redis.call('XDEL', KEYS[2], last)
end
redis.call('XSETID', KEYS[2], last, 'ENTRIESADDED', added, 'MAXDELETEDID', last)
redis.call('RENAME', KEYS[2], KEYS[1])
return dropped
"""


def rewrite_stream(cmd: Callable[..., Any], stream: str, namespace: str) -> int:
    """Rewrite ``stream`` without the entries of ``namespace``; return how many went."""
    copy = stream + ":purging"
    cmd("DEL", copy)
    start, dropped = "", 0
    while True:
        last, n = cmd("EVAL", _COPY, 2, stream, copy, start, BATCH, namespace)
        dropped += int(n)
        last = last.decode() if isinstance(last, bytes) else str(last)
        if not last:
            break
        start = last
    return dropped + int(cmd("EVAL", _FINISH, 2, stream, copy, start, namespace))


def _info(cmd: Callable[..., Any]) -> dict[str, str]:
    raw = cmd("INFO", "persistence")
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _wait(cmd: Callable[..., Any], done: Callable[[dict[str, str]], bool], deadline: float, what: str) -> dict[str, str]:
    while True:
        info = _info(cmd)
        if done(info):
            return info
        if time.monotonic() > deadline:
            raise StorageError(
                f"purge: Redis did not finish {what} in time; the data is gone from memory, but its persistence "
                "files may still hold it until a rewrite completes (purge again to retry)"
            )
        time.sleep(0.02)


def persist(cmd: Callable[..., Any], config: Callable[[str], str], timeout: float = 60.0) -> int:
    """Rewrite the AOF and/or make a new RDB snapshot from memory as it is
    now, waiting for each; return how many were made."""
    deadline = time.monotonic() + timeout
    made = 0
    info = _info(cmd)
    if info.get("aof_enabled") == "1" or config("appendonly") == "yes":
        idle = _wait(cmd, lambda i: i.get("aof_rewrite_in_progress") == "0" and i.get("aof_rewrite_scheduled") == "0",
                     deadline, "an AOF rewrite already running")
        before = int(idle.get("aof_rewrites", "0"))
        _start(cmd, ("BGREWRITEAOF",), deadline)
        after = _wait(cmd, lambda i: int(i.get("aof_rewrites", "0")) > before and i.get("aof_rewrite_in_progress") == "0"
                      and i.get("aof_rewrite_scheduled") == "0", deadline, "its AOF rewrite")
        if after.get("aof_last_bgrewrite_status") != "ok":
            raise StorageError("purge: Redis's AOF rewrite failed; its AOF may still hold the purged values")
        made += 1
    if config("save") or int(info.get("rdb_saves", "0")) > 0:
        idle = _wait(cmd, lambda i: i.get("rdb_bgsave_in_progress") == "0", deadline, "an RDB save already running")
        before = int(idle.get("rdb_saves", "0"))
        _start(cmd, ("BGSAVE", "SCHEDULE"), deadline)
        after = _wait(cmd, lambda i: int(i.get("rdb_saves", "0")) > before and i.get("rdb_bgsave_in_progress") == "0",
                      deadline, "its RDB snapshot")
        if after.get("rdb_last_bgsave_status") != "ok":
            raise StorageError("purge: Redis's RDB snapshot failed; dump.rdb may still hold the purged values")
        made += 1
    return made


def _start(cmd: Callable[..., Any], command: tuple[str, ...], deadline: float) -> None:
    """Start ``command``; a refusal because one is running (started by
    someone else meanwhile) is waited out and tried again."""
    while True:
        try:
            cmd(*command)
            return
        except Exception as exc:  # redis-py's ResponseError: "already in progress", "child process is active"
            if not any(w in str(exc) for w in ("progress", "active")) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


__all__ = ["persist", "rewrite_stream"]
