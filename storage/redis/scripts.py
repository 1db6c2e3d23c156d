"""The Lua scripts of the Redis backend, and how they are run.

Every change to a record is one script, so Redis runs it atomically: the
version is assigned from the stored one, the record is written, and the
change-log entry is appended to the stream in the same step (so the stream is
in commit order, and a committed change always has its entry). A script also
honours the namespace's lease (see :mod:`hrm_memory.storage.redis.backend`):
``mode`` ``"1"`` refuses to write while another holder has it (the caller
waits), ``"2"`` writes only while the caller still holds it (fencing: a lease
that expired under a slow holder cannot let two updates interleave) and then
ends the lease in the same step: a lease covers a read and the write that
follows it, so ``update()`` costs two round trips, not three.

Record blobs, the values of the per-namespace hashes:
``w<version>:<created_us>:<updated_us>:<crc32 hex, 8>`` followed by the value
(a live record), ``a<version>:<created_us>:<updated_us>:`` (archived: the
blob itself is in the cold hash), ``t<version>:<created_us>:<updated_us>:``
(a tombstone: deleted, its version kept so versions never go back).
Timestamps are copied as strings, never computed on in Lua (its numbers are
doubles and would print 16-digit integers in exponent form).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
import zlib
from typing import Any

from hrm_memory.core.errors import CorruptRecord
from hrm_memory.core.records import Stored
from redis.exceptions import NoScriptError

# Whoever waits for a lease blocks on the namespace's waiters list (BLPOP);
# ending a lease pushes one token, which wakes one waiter at once. At most a
# few tokens are kept (a token nobody took costs a waiter one extra try).
_WAKE = """
local function wake(w)
  redis.call('RPUSH', w, '1')
  redis.call('LTRIM', w, -4, -1)
  redis.call('PEXPIRE', w, 5000)
end
"""

# A foreign lease: busy (-1, its remaining milliseconds); ours expired: -2.
_LEASE_CHECK = _WAKE + """
local mode = ARGV[1]
if mode ~= '0' then
  local holder = redis.call('GET', KEYS[2])
  if mode == '1' then
    if holder and holder ~= ARGV[2] then return {-1, redis.call('PTTL', KEYS[2])} end
  elseif holder ~= ARGV[2] then
    return {-2, 0}
  end
end
"""

#: KEYS: live, lock, stream, namespaces set, cold, waiters.
#: ARGV: mode, token, key, crc+value, now, min_version, created ('' = now),
#: maxlen ('0' = no change log), entry head, entry tail, namespace.
PUT = _LEASE_CHECK + """
local old = redis.call('HGET', KEYS[1], ARGV[3])
local version = 1
local created = ARGV[7]
if created == '' then created = ARGV[5] end
if old then
  local kind, v, c = string.match(old, '^(%a)(%d+):(%d+):')
  if not kind then return {-3, 0} end
  version = tonumber(v) + 1
  if kind ~= 't' then created = c end
  if kind == 'a' then redis.call('HDEL', KEYS[5], ARGV[3]) end
end
local minv = tonumber(ARGV[6])
if minv > version then version = minv end
local vs = string.format('%d', version)
redis.call('HSET', KEYS[1], ARGV[3], 'w' .. vs .. ':' .. created .. ':' .. ARGV[5] .. ':' .. ARGV[4])
if ARGV[8] ~= '0' then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*', 'e', ARGV[9] .. vs .. ARGV[10])
end
if not old then redis.call('SADD', KEYS[4], ARGV[11]) end
if mode == '2' then redis.call('DEL', KEYS[2]) wake(KEYS[6]) end
return {version, created}
"""

#: KEYS: live, lock, stream, cold, waiters. ARGV: mode, token, key, now, maxlen, entry head, entry tail.
#: Returns {0} (nothing to delete) or {1, old version, created, updated, kind}.
DELETE = _LEASE_CHECK + """
local old = redis.call('HGET', KEYS[1], ARGV[3])
if not old then return {0} end
local kind, v, c, u = string.match(old, '^(%a)(%d+):(%d+):(%d+):')
if not kind then return {-3, 0} end
if kind == 't' then return {0} end
local vs = string.format('%d', tonumber(v) + 1)
redis.call('HSET', KEYS[1], ARGV[3], 't' .. vs .. ':' .. c .. ':' .. ARGV[4] .. ':')
if kind == 'a' then redis.call('HDEL', KEYS[4], ARGV[3]) end
if ARGV[5] ~= '0' then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'e', ARGV[6] .. vs .. ARGV[7])
end
if mode == '2' then redis.call('DEL', KEYS[2]) wake(KEYS[5]) end
return {1, tonumber(v), c, u, kind}
"""

#: KEYS: live, lock, stream, cold, waiters. ARGV: mode, token, maxlen, then triples
#: (key, version, change-log entry). The cold copy is written before the live
#: marker, in one script: a record is never in neither place. Returns the
#: keys moved (those still at the version given).
ARCHIVE = _LEASE_CHECK + """
local moved = {}
for i = 4, #ARGV, 3 do
  local key = ARGV[i]
  local cur = redis.call('HGET', KEYS[1], key)
  if cur then
    local kind, v, c, u = string.match(cur, '^(%a)(%d+):(%d+):(%d+):')
    if kind == 'w' and v == ARGV[i + 1] then
      redis.call('HSET', KEYS[4], key, cur)
      redis.call('HSET', KEYS[1], key, 'a' .. v .. ':' .. c .. ':' .. u .. ':')
      if ARGV[3] ~= '0' then
        redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'e', ARGV[i + 2])
      end
      moved[#moved + 1] = key
    end
  end
end
if mode == '2' then redis.call('DEL', KEYS[2]) wake(KEYS[5]) end
return {1, moved}
"""

#: KEYS: live, lock, cold, quarantine, stream, a scratch key in the stream's
#: slot. ARGV: mode, token, namespace, key. Erases the key (``forget``): its
#: fields in the live, archive and quarantine hashes (tombstone included),
#: and its entries in the change stream. ``XDEL`` would leave their bytes in
#: the stream's nodes, so a stream that holds any is copied without them
#: (same ids) and renamed over the old one; its last id is carried over, so
#: no later entry gets an id below a cursor handed out before. Returns
#: {fields removed from live, cold, quarantine, entries removed}, or {-3, 0}
#: (nothing changed) when one of the keys holds another type.
ERASE = _LEASE_CHECK + """
local ns, key = ARGV[3], ARGV[4]
-- every key checked before the first change: a key of the wrong type
-- (written by something else) refuses the whole erase, never half of it
for i, want in ipairs({'hash', '', 'hash', 'hash', 'stream'}) do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if want ~= '' and t ~= want and t ~= 'none' then return {-3, 0} end
end
local out = {redis.call('HDEL', KEYS[1], key), redis.call('HDEL', KEYS[3], key), redis.call('HDEL', KEYS[4], key), 0}
if redis.call('EXISTS', KEYS[5]) == 0 then return out end
local function names_key(fields)
  for j = 1, #fields, 2 do
    if fields[j] == 'e' then
      local ok, e = pcall(cjson.decode, fields[j + 1])
      if ok and type(e) == 'table' and e[3] == ns and e[4] == key then return true end
    end
  end
  return false
end
local function each(fn)
  local start = '-'
  while true do
    local batch = redis.call('XRANGE', KEYS[5], start, '+', 'COUNT', 500)
    for _, entry in ipairs(batch) do fn(entry) end
    if #batch < 500 then return end
    start = '(' .. batch[#batch][1]
  end
end
local found = 0
each(function(entry) if names_key(entry[2]) then found = found + 1 end end)
if found == 0 then return out end
out[4] = found
local info = redis.call('XINFO', 'STREAM', KEYS[5])
local last = nil
for i = 1, #info, 2 do if info[i] == 'last-generated-id' then last = info[i + 1] end end
redis.call('DEL', KEYS[6])
local kept = 0
each(function(entry)
  if not names_key(entry[2]) then
    redis.call('XADD', KEYS[6], entry[1], unpack(entry[2]))
    kept = kept + 1
  end
end)
if kept == 0 then
  -- every entry went: an empty stream that still knows its last id
  redis.call('XADD', KEYS[6], last, 'e', '')
  redis.call('XDEL', KEYS[6], last)
end
redis.call('RENAME', KEYS[6], KEYS[5])
redis.call('XSETID', KEYS[5], last)
return out
"""

#: KEYS: lock, live. ARGV: token, lease ms, [key]. Takes (or extends) the
#: lease and, with a key, reads the record in the same step.
ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return {0, redis.call('PTTL', KEYS[1])} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] then return {1, redis.call('HGET', KEYS[2], ARGV[3])} end
return {1}
"""

#: KEYS: lock, waiters. ARGV: token. Releases the lease only if it is still ours.
RELEASE = _WAKE + """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  wake(KEYS[2])
  return 1
end
return 0
"""

#: KEYS: declarations hash, generation. ARGV: name, spec JSON.
DECLARE = """
local found = redis.call('HGET', KEYS[1], ARGV[1])
if found then return found end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return false
"""

#: KEYS: declarations hash, generation. ARGV: name.
UNDECLARE = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('INCR', KEYS[2])
  return 1
end
return 0
"""

#: KEYS: declarations hash, generation. ARGV: the generation last read.
DECLARATIONS = """
local gen = redis.call('GET', KEYS[2]) or '0'
if gen == ARGV[1] then return {gen} end
return {gen, redis.call('HGETALL', KEYS[1])}
"""

#: KEYS: stream. ARGV: exclusive start ('(' id), end ('+' or an id), count.
#: Returns {entries ever removed (1/0), first id kept, entries}: with the
#: start, the first two tell whether entries after it were trimmed away
#: (trimming only removes the oldest, and does not update XINFO's
#: max-deleted-entry-id, so removal is told by entries-added > length).
READ = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, '', {}} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local added, length, first = 0, 0, ''
for i = 1, #info, 2 do
  if info[i] == 'entries-added' then added = info[i + 1]
  elseif info[i] == 'length' then length = info[i + 1]
  elseif info[i] == 'first-entry' and info[i + 1] then first = info[i + 1][1] end
end
local removed = 0
if added > length then removed = 1 end
return {removed, first, redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])}
"""


def decode(key: str, blob: bytes, tier: str, namespace: str) -> Stored | None:
    """A record blob as :class:`Stored`; None for a tombstone; an archive
    marker has tier ``"cold"`` and no value. Raises :class:`CorruptRecord`."""
    try:
        head, created, updated, rest = blob.split(b":", 3)
        kind, version = head[:1], int(head[1:])
        stored = Stored(key, version, int(created), int(updated), rest[8:], tier)
        if kind == b"w":
            if rest[:8] == b"%08x" % zlib.crc32(stored.value):  # exact digits, never int(): see warm_format
                return stored
        elif kind == b"t":
            return None
        elif kind == b"a" and not rest:
            return stored._replace(tier="cold")
    except ValueError:  # not four fields, or a number that is not one
        pass
    raise CorruptRecord(f"record {namespace}/{key!r} in Redis is damaged (bad header or checksum)", namespace=namespace, key=key)


class Script:
    """One Lua script, run by its SHA1 (loaded again after a server restart
    emptied the script cache)."""

    __slots__ = ("source", "sha")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(self, cmd: Callable[..., Any], keys: tuple[str, ...], *args: Any) -> Any:
        """Run with ``cmd`` (a client's ``execute_command``)."""
        try:
            return cmd("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            cmd("SCRIPT", "LOAD", self.source)
            return cmd("EVALSHA", self.sha, len(keys), *keys, *args)


SCRIPTS = {
    name: Script(src)
    for name, src in {
        "put": PUT,
        "delete": DELETE,
        "archive": ARCHIVE,
        "erase": ERASE,
        "acquire": ACQUIRE,
        "release": RELEASE,
        "declare": DECLARE,
        "undeclare": UNDECLARE,
        "declarations": DECLARATIONS,
        "read": READ,
    }.items()
}

__all__ = ["SCRIPTS", "Script", "decode"]
