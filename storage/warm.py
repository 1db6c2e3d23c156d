"""Warm tier: append-only, checksummed JSON logs, one per (namespace, bucket).

Layout: ``warm/<namespace>/<bb>.log`` where ``bb`` is one of 64 buckets picked
by a stable hash of the key. Keys never become file names, so no key can name
a path outside the root, and 100k small records fill 64 files instead of 100k
4 KiB blocks.

Each record is one line, framed by newlines on both sides::

    \\n<crc32 as 8 hex> <header JSON>\\t<value JSON>\\n

with header ``[op, key, version, created_us, updated_us]``; ``op`` is ``"p"``
(put), ``"d"`` (delete; empty value) or ``"a"`` (archived: the value is the
cold location). The checksum covers header, tab and value. orjson escapes tabs
and newlines inside strings, so neither can occur inside a record.

Why this shape:

- *Atomic records.* A record is one ``write()`` on an ``O_APPEND`` descriptor,
  acknowledged only after the write (and, with ``durability="fsync"``, an
  ``fdatasync``) returned. A crash leaves at most an incomplete last line,
  which has no closing newline and is never indexed. The leading newline means
  that even such a fragment cannot glue itself to the next record.
- *Lazy, flat open.* Opening the tier reads nothing. A bucket's index (key ->
  offset) is built on its first use from its persisted index (``<bb>.idx``,
  see ``bucket_index.py``: validated, never trusted blindly) plus a scan of
  what was appended after it, or, if there is no valid one, by scanning
  that one file; it is kept fresh with one ``stat``: growth is
  scanned from where we stopped, a new inode (compaction elsewhere) means a
  rescan. That is also what makes a write from another process visible to
  the next read here.
- *Bounded garbage.* Superseded lines are garbage; a bucket whose garbage
  exceeds its live bytes (and 256 KiB) is rewritten under the namespace's
  cross-process lock, damaged lines being copied to ``quarantine/`` first.

Compaction, recovery after dead writers and check() live in ``warm_upkeep.py``.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from hrm_memory.core.backend import CROSS_PROCESS, PERSISTENT
from hrm_memory.core.errors import CorruptRecord, MemoryStoreError, StoreClosed
from hrm_memory.core.records import Stored

from . import bucket_index
from .fsutil import SharedCounters, ensure_real_dirs, storage_error
from .locks import NamespaceLocks
from .warm_bulk import WarmBulk
from .warm_check import WarmCheck
from .warm_format import N_BUCKETS, bucket_of, encode_line, parse_line, read_line_at, salvage
from .warm_upkeep import Entry, WarmUpkeep, _Bucket

__all__ = [
    "COMPACT_MIN_GARBAGE", "FULL_CHECK_SECONDS", "N_BUCKETS", "Cache", "WarmTier", "generations", "bucket_of",
    "encode_line", "parse_line",
]  # fmt: skip

log = logging.getLogger("hrm_memory.warm")

COMPACT_MIN_GARBAGE = 256 * 1024
_CHUNK = 8 * 1024 * 1024
_crc32 = zlib.crc32  # bucket_of, spelled out in get
_new = tuple.__new__  # a Stored without the Python-level __new__ of a NamedTuple

class Cache(Protocol):
    """The read cache the warm tier consults (the hot tier's ReadCache)."""

    def get(self, key: tuple[str, str]) -> Stored | None: ...

    def put(self, key: tuple[str, str], stored: Stored) -> None: ...


def generations(path: str | Path) -> SharedCounters:
    """A namespace's change counters (``.gen``), one per bucket, mapped into
    memory by every process of the store.

    A writer adds one to a bucket's counter after every append, compaction or
    tail repair of that bucket; a reader whose index was fresh at counter
    value *g* knows it still is while the counter reads *g*, without a
    system call (the idea of SQLite's WAL index). An ``lstat`` is still made
    when the counter moved, and at least once a second whatever it says, so a
    change the counters cannot see (the file removed by hand) is noticed too.
    Losing the file loses nothing but that shortcut."""
    return SharedCounters(path, N_BUCKETS)


FULL_CHECK_SECONDS = 1.0


class WarmTier(WarmBulk, WarmCheck, WarmUpkeep):
    """The warm tier. Thread-safe; see the module docstring for the format.
    Its bulk reads and archive markers are inherited from ``WarmBulk``,
    ``check`` from ``WarmCheck``, its upkeep (compaction, recovery) from
    ``WarmUpkeep``."""

    name = "warm"
    capabilities = frozenset({PERSISTENT, CROSS_PROCESS})

    def __init__(
        self,
        root: Path,
        *,
        locks: NamespaceLocks,
        durability: str = "fsync",
        cache: Cache | None = None,
    ) -> None:
        self.store_root = root
        self.root = root / "warm"
        self._sroot = str(self.root)
        self.locks = locks
        self.fsync = durability == "fsync"
        self.cache = cache
        self._buckets: dict[tuple[str, int], _Bucket] = {}
        self._gens: dict[str, SharedCounters] = {}
        self._real: set[str] = set()  # namespaces whose directories were found real (see _bucket)
        self._guard = threading.Lock()
        self._run_file: Path | None = None
        self._touched: set[str] = set()
        self.closed = False
        self.recovered: set[str] = set()
        self._recover_dead_writers()

    # -- buckets -----------------------------------------------------------

    def _bucket(self, namespace: str, index: int) -> _Bucket:
        b = self._buckets.get((namespace, index))
        if b is None:
            # First use of the namespace in this process: make sure nothing
            # on the way to it is a planted symbolic link (again at each new
            # bucket until the directory exists; the files themselves are
            # opened with O_NOFOLLOW). Once per namespace, not per bucket: a
            # link swapped in later could as well be swapped in between any
            # check and the open that follows it.
            if namespace not in self._real and ensure_real_dirs(self.store_root, "warm", namespace):
                self._real.add(namespace)
            with self._guard:
                b = self._buckets.get((namespace, index))
                if b is None:
                    rel = f"{namespace}/{index:02x}.log"
                    b = _Bucket(f"{self._sroot}/{rel}", rel, index, self._generations(namespace))
                    self._buckets[(namespace, index)] = b
        return b

    def _generations(self, namespace: str) -> SharedCounters | None:
        """The namespace's shared counters; None until its directory exists
        (then every read stats, as it must: there is nothing to read yet)."""
        gens = self._gens.get(namespace)
        if gens is None:
            d = f"{self._sroot}/{namespace}"
            if not os.path.isdir(d):
                return None
            try:
                gens = self._gens[namespace] = generations(f"{d}/.gen")
            except OSError:
                return None  # read-only root or the like: stat every time
        return gens

    def _buckets_of(self, namespace: str) -> list[_Bucket]:
        ensure_real_dirs(self.store_root, "warm", namespace)
        try:
            names = os.listdir(self.root / namespace)
        except FileNotFoundError:
            names = []
        found = set()
        for n in names:
            if len(n) == 6 and n.endswith(".log"):
                try:
                    found.add(int(n[:2], 16))
                except ValueError:
                    continue
        found.update(i for (ns, i) in list(self._buckets) if ns == namespace)
        return [self._bucket(namespace, i) for i in sorted(found) if i < N_BUCKETS]

    def _refresh(self, b: _Bucket) -> bool:
        """Bring ``b``'s index up to date with the file; False if there is no file.

        The index always describes the file behind ``b.fd``: a new inode at
        the path (a compaction in another process) is opened once and then
        scanned and read through that one descriptor, never by path again,
        so an index can never be paired with another file's bytes."""
        if self.closed:
            raise StoreClosed("the memory manager is closed")
        gens = b.gens
        if gens is not None:
            gen = gens.get(b.idx)
            now = time.monotonic()
            if gen == b.seen_gen and now - b.checked_at < FULL_CHECK_SECONDS:
                return b.ino is not None
            ok = self._refresh_by_stat(b)
            b.seen_gen, b.checked_at = gen, now
            return ok
        return self._refresh_by_stat(b)

    def _refresh_by_stat(self, b: _Bucket) -> bool:
        if self.closed:
            raise StoreClosed("the memory manager is closed")
        if b.ino is None and not b.loaded:
            return self._reload(b)  # first use: open it, no stat before
        try:
            st = os.lstat(b.spath)
        except NotADirectoryError:
            raise storage_error(OSError(errno.ENOTDIR, "not a directory"), "read", b.path.parent) from None
        except FileNotFoundError:
            if b.ino is not None:
                # Removed underneath us: what we indexed is gone from disk.
                self._close_fd(b)
                b.reset()
            return False
        if st.st_ino != b.ino or st.st_size < b.size:
            return self._reload(b)
        if st.st_size != b.size + b.tail or not b.loaded:
            self._scan_into(b, b.size, st.st_size)
            b.loaded = True
        return True

    def _reload(self, b: _Bucket, use_index: bool = True) -> bool:
        """Index ``b`` from scratch: from its persisted index and what was
        appended after it when that is valid (and ``use_index``), else by
        scanning the whole file."""
        self._close_fd(b)
        b.reset()
        try:
            fd = self._open_existing(b)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        b.ino = st.st_ino
        start = 0
        if use_index and st.st_size:
            pidx = bucket_index.load(b.spath[:-4] + ".idx", fd, st)
            if pidx is not None:
                b.pidx, b.idx_covered, b.garbage = pidx, pidx.covered, pidx.garbage
                start = pidx.covered
        self._scan_into(b, start, st.st_size)
        b.loaded = True
        return True

    def _full(self, b: _Bucket) -> bool:
        """Like ``_refresh``, and the whole index in memory (no persisted one)."""
        ok = self._refresh(b)
        if ok and b.pidx is not None:
            ino, covered = b.ino, b.idx_covered
            ok = self._reload(b, use_index=False)
            if ok and b.ino == ino:
                b.idx_covered = covered  # still true of this file: not rewritten at close
        return ok

    def _lookup(self, b: _Bucket, key: str) -> Entry | None:
        """``key``'s index entry: in memory, else from the persisted index."""
        e = b.index.get(key)
        if e is None and b.pidx is not None:
            found = self._from_persisted(b, key)
            e = found[0] if found is not None else b.index.get(key)
        return e

    def _from_persisted(self, b: _Bucket, key: str, h: int = -1) -> tuple[Entry, bytes] | None:
        """``(entry, value)`` of ``key``'s current line as the persisted
        index locates it (the entry is kept in memory), or None if the index
        has no such key (``h``: its hash if known). A line that fails its
        checksum, or a line the index points to that is not a line of the key
        hash it claims, means the index cannot be trusted: it is dropped and
        the bucket is scanned."""
        pidx = b.pidx
        assert pidx is not None
        if h < 0:
            h = _crc32(key.encode("utf-8", "surrogatepass"))
        data = pidx.data
        for off in pidx.at(h):
            if data is not None:  # a small bucket, read whole when its index was loaded
                nl = data.find(b"\n", off)
                line = data[off:nl] if nl >= 0 else data[off:]
            else:
                try:
                    line = read_line_at(b.fd if b.fd is not None else self._open_existing(b), off)
                except OSError as exc:
                    raise storage_error(exc, "read", b.path) from None
            parsed = parse_line(line)
            if parsed is not None:
                header = parsed[0]
                if header[1] == key:
                    e: Entry = (header[0], header[2], header[3], header[4], off, len(line))
                    b.index[key] = e
                    return e, parsed[1]
                if bucket_index.key_hash(header[1]) == h:
                    continue  # another key of the same hash
            log.warning("persisted index of %s does not match the bucket; rescanning it", b.rel)
            self._reload(b, use_index=False)
            return None
        return None

    def _scan_into(self, b: _Bucket, start: int, end: int) -> None:
        fd = b.fd if b.fd is not None else self._open_existing(b)
        pos = start
        carry = b""
        while pos < end:
            try:
                chunk = os.pread(fd, min(_CHUNK, end - pos), pos)
            except OSError as exc:
                raise storage_error(exc, "read", b.path) from None
            if not chunk:
                break
            data = carry + chunk
            base = pos - len(carry)
            consumed = self._scan_chunk(b, data, base)
            carry = data[consumed:]
            pos += len(chunk)
        b.size = pos - len(carry)
        b.tail = len(carry)

    def _scan_chunk(self, b: _Bucket, data: bytes, base: int) -> int:
        index = b.index
        pos = 0
        consumed = 0
        find = data.find
        while True:
            nl = find(b"\n", pos)
            if nl < 0:
                return consumed
            if nl > pos:
                line = data[pos:nl]
                parsed = parse_line(line)
                if parsed is None:
                    b.corrupt.append((base + pos, nl - pos))
                    b.garbage += nl - pos + 2
                    # The key a damaged line names may itself be damaged, so
                    # every key older than the line is suspect (see get()).
                    b.unknown_after = base + nl
                    salvaged = salvage(line)
                    if salvaged is not None:
                        key, version = salvaged
                        old = index.get(key)
                        # Versions only grow per key, so a damaged line that
                        # claims a version no newer than an intact line of
                        # that key cannot be its newest: the damage is in the
                        # key (note)0000 read as note-0000), and the intact
                        # record must not be dropped with it (issue 14, item 3).
                        if old is None or old[0] == "x" or version > old[1]:
                            index[key] = ("x", old[1] if old else 0, 0, 0, base + pos, nl - pos)
                else:
                    header = parsed[0]
                    key = header[1]
                    old = index.get(key)
                    if old is not None:
                        b.garbage += old[5] + 2
                    index[key] = (header[0], header[2], header[3], header[4], base + pos, nl - pos)
            pos = nl + 1
            consumed = pos

    def _read_line(self, b: _Bucket, entry: Entry) -> bytes:
        fd = b.fd if b.fd is not None else self._open_existing(b)
        try:
            return os.pread(fd, entry[5], entry[4])
        except OSError as exc:
            raise storage_error(exc, "read", b.path) from None

    # -- writing -------------------------------------------------------------

    def _append(self, namespace: str, b: _Bucket, line: bytes) -> int:
        """Append one or more framed record lines in one write (and one sync);
        return the offset where they start."""
        self._register_touch(b)
        gate = self.locks.writers
        if b.tail:
            # An incomplete last line: under the exclusive gate no process is
            # part-way through an append, so if it is still there it is a
            # dead writer's, and it is moved aside. (Without the gate it
            # could be a live writer's line still being copied in.)
            with gate.exclusive(namespace):
                self._repair_tail(b)
        fd = self._open_fd(b)
        with gate.shared(namespace):  # no rewrite of the bucket while we append
            try:
                n = os.write(fd, line)
            except OSError as exc:
                raise storage_error(exc, "write", b.path) from None
            end = os.lseek(fd, 0, os.SEEK_CUR)
            # Looked at under the gate: no compaction can run now, so a file
            # already renamed away means our line went to the old inode, lost;
            # one renamed after we let go has our line copied in.
            orphaned = not self.locks.cross_process and os.fstat(fd).st_nlink == 0
        if n != len(line):
            # A short write (disk full) leaves a torn line: cut it off again so
            # that the next record starts clean, then report the failure. Only
            # if it is still the last thing in the file: another process's
            # append after it must not be cut with it.
            try:
                with gate.exclusive(namespace):
                    if os.fstat(fd).st_size == end:
                        os.ftruncate(fd, end - n)
            finally:
                raise storage_error(OSError(28, "short write"), "write", b.path)
        if self.fsync:
            try:
                os.fdatasync(fd)
            except OSError as exc:
                raise storage_error(exc, "fsync", b.path) from None
        if orphaned:
            # Another process compacted this bucket before we wrote (our fd
            # was still on the file it renamed away): write the line again
            # into the new file. (Re-appending after a compaction that did copy
            # it put an old line after newer ones: a stale read, and what
            # check() reports as replayed.)
            self._reload(b)
            return self._append(namespace, b, line)
        start = end - len(line)
        if start == b.size + b.tail:
            b.size = end
            b.tail = 0
        self._bump(b)
        return start

    def _bump(self, b: _Bucket) -> None:
        """Tell other processes' readers that this bucket changed."""
        if b.gens is None:
            b.gens = self._generations(b.path.parent.name)
        if b.gens is not None:
            before = b.gens.bump(b.idx)
            # Our index is up to date with what we just did, but only if no
            # other process moved the counter meanwhile (say, by compacting).
            if b.seen_gen == before:
                b.seen_gen = before + 1

    def put(
        self, namespace: str, key: str, value: bytes, now_us: int, min_version: int = 1, created_us: int | None = None
    ) -> Stored:
        """Commit ``value``; its version is the previous one + 1, and at least
        ``min_version`` (for a value that already had versions elsewhere);
        a new key's creation time is ``created_us`` when given (a value that
        was created elsewhere first: the hot tier, awaiting consent)."""
        b = self._bucket(namespace, bucket_of(key))
        with self.locks.thread_lock(namespace), b.lock:
            self._refresh(b)
            old = self._lookup(b, key)
            first = now_us if created_us is None else created_us
            if old is None:
                version, created = max(1, min_version), first
            else:
                version = max(old[1] + 1, min_version)
                created = old[2] if old[0] in ("p", "a") else first
            line = encode_line("p", key, version, created, now_us, value)
            offset, length = self._append(namespace, b, line) + 1, len(line) - 2
            if old is not None:
                b.garbage += old[5] + 2
            b.index[key] = ("p", version, created, now_us, offset, length)
            stored = Stored(key, version, created, now_us, value, "warm")
            if self.cache is not None:
                self.cache.put((namespace, key), stored)
            self._maybe_compact(namespace, b)
            return stored

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        b = self._bucket(namespace, bucket_of(key))
        with self.locks.thread_lock(namespace), b.lock:
            if not self._refresh(b):
                return None
            old = self._lookup(b, key)
            if old is None or old[0] == "d":
                return None
            line = encode_line("d", key, old[1] + 1, old[2], now_us, b"")
            offset, length = self._append(namespace, b, line) + 1, len(line) - 2
            b.garbage += old[5] + 2
            b.index[key] = ("d", old[1] + 1, old[2], now_us, offset, length)
            self._maybe_compact(namespace, b)
            return Stored(key, old[1], old[2], old[3], b"", "cold" if old[0] == "a" else "warm")

    # -- reading -------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Stored | None:
        # The read path, with _bucket's, bucket_of's and _refresh's common
        # cases spelled out (one Python call each fewer per read).
        h = _crc32(key.encode("utf-8", "surrogatepass"))
        b = self._buckets.get((namespace, h % N_BUCKETS))
        if b is None:
            b = self._bucket(namespace, h % N_BUCKETS)
        with b.lock:
            gens = b.gens
            if self.closed or gens is None or gens.get(b.idx) != b.seen_gen or (
                time.monotonic() - b.checked_at >= FULL_CHECK_SECONDS
            ):
                if not self._refresh(b):
                    return None
            elif b.ino is None:
                return None
            e = b.index.get(key)
            value = None
            if e is None and b.pidx is not None:
                found = self._from_persisted(b, key, h)
                e, value = found if found is not None else (b.index.get(key), None)
            if b.unknown_after >= 0 and (e is None or e[4] < b.unknown_after):
                # Never answer with what may be an older version (or a false
                # "absent") while an unreadable newer line could be this key's.
                raise CorruptRecord(
                    f"record {namespace}/{key!r} cannot be trusted: its bucket {b.path.name} holds a damaged "
                    "record whose key is unreadable and that may be a newer version of it; "
                    "run check(fix=True) to move the damage aside",
                    namespace=namespace,
                    key=key,
                    path=str(b.path),
                )
            if e is None or e[0] == "d":
                return None
            if e[0] == "x":
                raise CorruptRecord(
                    f"record {namespace}/{key!r} is damaged on disk (checksum mismatch); "
                    "run check(fix=True) to move it aside",
                    namespace=namespace,
                    key=key,
                    path=str(b.path),
                )
            cache = self.cache
            if value is None:
                if cache is not None:
                    hit = cache.get((namespace, key))
                    if hit is not None and hit.version == e[1] and hit.updated_us == e[3] and e[0] == "p":
                        return hit
                fd = b.fd if b.fd is not None else self._open_existing(b)
                try:
                    line = os.pread(fd, e[5], e[4])
                except OSError as exc:
                    raise storage_error(exc, "read", b.path) from None
                parsed = parse_line(line)
                if parsed is None or parsed[0][1] != key or parsed[0][2] != e[1]:
                    # The bytes are not the record the index promised: the
                    # file was damaged after indexing. Re-index from scratch.
                    self._reload(b, use_index=False)
                    e = b.index.get(key)
                    if e is None or e[0] == "d":
                        return None
                    parsed = parse_line(self._read_line(b, e)) if e[0] != "x" else None
                    if parsed is None or parsed[0][1] != key or parsed[0][2] != e[1]:
                        raise CorruptRecord(
                            f"record {namespace}/{key!r} failed its checksum on read",
                            namespace=namespace,
                            key=key,
                            path=str(b.path),
                        )
                value = parsed[1]
            tier = "warm" if e[0] == "p" else "cold"
            stored = _new(Stored, (key, e[1], e[2], e[3], value, tier))
            if cache is not None and tier == "warm":
                cache.put((namespace, key), stored)
            return stored

    # -- maintenance -----------------------------------------------------------

    # _maybe_compact stays here, not in warm_upkeep.py: it reads this module's
    # COMPACT_MIN_GARBAGE at call time, which tests patch.

    def _maybe_compact(self, namespace: str, b: _Bucket) -> None:
        """Compact a bucket that is mostly garbage, as a side effect of a
        write that has already committed: so it never waits for another
        process's lock, never raises (the write succeeded), and never touches
        a bucket holding damage (that is check(fix=True)'s to report and
        repair, not a write's to sweep away)."""
        if b.garbage > COMPACT_MIN_GARBAGE and b.garbage * 2 > b.size and not b.corrupt and not b.tail:
            try:
                self.compact_bucket(namespace, b, wait=False)
            except MemoryStoreError as exc:
                log.info("compaction of %s postponed: %s", b.rel, exc)

    def close(self) -> None:
        # A fence, not a cut (issue 14, item 11): operations already on a
        # bucket finish (each bucket's lock is taken before its file is
        # closed); later ones meet ``closed`` in _refresh and raise
        # StoreClosed. A descriptor is never closed under a running write,
        # so a write can never land in a file that reused its number.
        self.closed = True
        with self._guard:
            self._save_indexes(list(self._buckets.values()))  # so that the next open's first reads are not scans
            for b in self._buckets.values():
                with b.lock:
                    self._close_fd(b)
            self._buckets.clear()
            for gens in self._gens.values():
                gens.close()
            self._gens.clear()
        if self._run_file is not None:
            try:
                self._run_file.unlink()
            except OSError:
                pass  # gone already, or a read-only root: recovery copes either way
            self._run_file = None
            self._touched.clear()
