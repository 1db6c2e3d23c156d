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
  see ``warm/buckets.py``: validated, never trusted blindly) plus a scan of
  what was appended after it, or, if there is no valid one, by scanning
  that one file; it is kept fresh with one ``stat``: growth is
  scanned from where we stopped, a new inode (compaction elsewhere) means a
  rescan. That is also what makes a write from another process visible to
  the next read here.
- *Bounded garbage.* Superseded lines are garbage; a bucket whose garbage
  exceeds its live bytes (and 256 KiB) is rewritten under the namespace's
  cross-process lock, damaged lines being copied to ``quarantine/`` first.

The parts, each built here with exactly what it uses:

- ``warm/format.py``: the line format, bucket choice, the audit of a file's lines;
- ``warm/buckets.py``: the persisted index of a bucket (``<bb>.idx``);
- ``warm/files.py``: ``BucketFiles``, the bucket files, descriptors and
  in-memory indexes; the read and append path (refresh, lookup, append, tail
  repair) and the shared change counters;
- ``warm/notes.py``: ``WriterNotes``, which buckets this process writes
  (``run/``), so that a later process can repair after it if it dies;
- ``warm/upkeep.py``: ``Upkeep``, compaction, persisted index writing and
  recovery after dead writers;
- ``warm/check.py``: ``Checker``, ``check(fix)``;
- ``warm/bulk.py``: ``BulkReads``, scans, key lists and stats;
- here: ``WarmTier``, the record operations (get, put, delete, archive
  markers) and the compaction they trigger, and what the backend calls.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from hrm_memory.core.backend import CROSS_PROCESS, PERSISTENT
from hrm_memory.core.errors import CorruptRecord, MemoryStoreError
from hrm_memory.core.records import Finding, Stored

from ...fsutil import storage_error
from ..locks import NamespaceLocks
from .bulk import BulkReads
from .check import Checker
from .files import FULL_CHECK_SECONDS, Bucket, BucketFiles, Entry, generations
from .format import N_BUCKETS, bucket_of, encode_line, is_line_of, parse_line
from .notes import WriterNotes
from .upkeep import Upkeep

_crc32 = zlib.crc32

__all__ = [
    "COMPACT_MIN_GARBAGE", "FULL_CHECK_SECONDS", "N_BUCKETS", "Cache", "WarmTier", "generations", "bucket_of",
    "encode_line", "parse_line",
]  # fmt: skip

log = logging.getLogger("hrm_memory.warm")

COMPACT_MIN_GARBAGE = 256 * 1024
_new = tuple.__new__  # a Stored or an Entry without the Python-level __new__ of a NamedTuple


class Cache(Protocol):
    """The read cache the warm tier consults (the hot tier's ReadCache)."""

    def get(self, key: tuple[str, str]) -> Stored | None: ...

    def put(self, key: tuple[str, str], stored: Stored) -> None: ...


class WarmTier:
    """The warm tier. Thread-safe; see the module docstring for the format
    and its parts. It does the record operations itself, over its bucket
    files (``files``), and hands bulk reads, ``check`` and compaction to the
    parts that hold them."""

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
        self.locks = locks
        self.fsync = durability == "fsync"
        self.cache = cache
        notes = WriterNotes(root, fsync=self.fsync)
        self.notes = notes
        self.files = BucketFiles(root, locks=locks, fsync=self.fsync, notes=notes)
        self.upkeep = Upkeep(root, files=self.files, notes=notes, locks=locks)
        self.checker = Checker(root, files=self.files, upkeep=self.upkeep, locks=locks)
        self.bulk = BulkReads(self.files)
        self.recovered: set[str] = self.upkeep.recover_dead_writers()

    # -- writing -------------------------------------------------------------

    def put(
        self, namespace: str, key: str, value: bytes, now_us: int, min_version: int = 1, created_us: int | None = None
    ) -> Stored:
        """Commit ``value``; its version is the previous one + 1, and at least
        ``min_version`` (for a value that already had versions elsewhere);
        a new key's creation time is ``created_us`` when given (a value that
        was created elsewhere first: the hot tier, awaiting consent)."""
        b = self.files.bucket(namespace, bucket_of(key))
        with self.locks.thread_lock(namespace), b.lock:
            self.files.refresh(b)
            old = self.files.lookup(b, key)
            first = now_us if created_us is None else created_us
            if old is None:
                version, created = max(1, min_version), first
            else:
                version = max(old.version + 1, min_version)
                created = old.created_us if old.op in ("p", "a") else first
            line = encode_line("p", key, version, created, now_us, value)
            offset, length = self.files.append(namespace, b, line) + 1, len(line) - 2
            if old is not None:
                b.garbage += old.length + 2
            b.index[key] = _new(Entry, ("p", version, created, now_us, offset, length))
            stored = _new(Stored, (key, version, created, now_us, value, "warm"))
            if self.cache is not None:
                self.cache.put((namespace, key), stored)
            self._maybe_compact(namespace, b)
            return stored

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        b = self.files.bucket(namespace, bucket_of(key))
        with self.locks.thread_lock(namespace), b.lock:
            if not self.files.refresh(b):
                return None
            old = self.files.lookup(b, key)
            if old is None or old.op == "d":
                return None
            line = encode_line("d", key, old.version + 1, old.created_us, now_us, b"")
            offset, length = self.files.append(namespace, b, line) + 1, len(line) - 2
            b.garbage += old.length + 2
            b.index[key] = Entry("d", old.version + 1, old.created_us, now_us, offset, length)
            self._maybe_compact(namespace, b)
            return Stored(key, old.version, old.created_us, old.updated_us, b"", "cold" if old.op == "a" else "warm")

    def mark_archived(self, namespace: str, items: list[tuple[str, int, bytes]]) -> list[str]:
        """Record that each ``(key, version, location)`` now lives in the cold
        tier at ``location``; skip keys that changed since. Returns the keys
        marked. One write (and one sync) per bucket, not per record."""
        by_bucket: dict[int, list[tuple[str, int, bytes]]] = {}
        for item in items:
            key, _, _ = item
            by_bucket.setdefault(bucket_of(key), []).append(item)
        marked: list[str] = []
        for idx, group in sorted(by_bucket.items()):
            b = self.files.bucket(namespace, idx)
            with self.locks.thread_lock(namespace), b.lock:
                self.files.refresh(b)
                lines: list[bytes] = []
                olds: list[tuple[str, Entry]] = []
                for key, version, location in group:
                    old = self.files.lookup(b, key)
                    if old is None or old.op != "p" or old.version != version:
                        continue
                    lines.append(encode_line("a", key, version, old.created_us, old.updated_us, location))
                    olds.append((key, old))
                if not lines:
                    continue
                pos = self.files.append(namespace, b, b"".join(lines))
                for (key, old), line in zip(olds, lines):
                    b.garbage += old.length + 2
                    b.index[key] = old._replace(op="a", offset=pos + 1, length=len(line) - 2)
                    pos += len(line)
                    marked.append(key)
                self._maybe_compact(namespace, b)
        return marked

    # -- reading -------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Stored | None:
        # The common cases of BucketFiles.bucket, bucket_of and
        # BucketFiles.refresh are spelled out here, the one place they are:
        # three Python calls fewer a read, what the row "warm read, bucket_of
        # and refresh called" of BENCHMARKS.md's "Named state: instructions
        # per operation" measures.
        # A change to any of them changes this copy too.
        files = self.files
        h = _crc32(key.encode("utf-8", "surrogatepass"))
        b = files.buckets.get((namespace, h % N_BUCKETS))
        if b is None:
            b = files.bucket(namespace, h % N_BUCKETS)
        with b.lock:
            gens = b.gens
            if files.closed or gens is None or gens.get(b.idx) != b.seen_gen or (
                time.monotonic() - b.checked_at >= FULL_CHECK_SECONDS
            ):
                if not files.refresh(b):
                    return None
            elif b.ino is None:
                return None
            e = b.index.get(key)
            value = None
            if e is None and b.pidx is not None:
                found = files.from_persisted(b, key, h)
                if found is not None:
                    e, value = found
                else:
                    e = b.index.get(key)
            if b.unknown_after >= 0 and (e is None or e.offset < b.unknown_after):
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
            if e is None:
                return None
            op = e.op
            if op == "d":
                return None
            if op == "x":
                raise CorruptRecord(
                    f"record {namespace}/{key!r} is damaged on disk (checksum mismatch); "
                    "run check(fix=True) to move it aside",
                    namespace=namespace,
                    key=key,
                    path=str(b.path),
                )
            cache = self.cache
            version = e.version
            if value is None:
                if cache is not None:
                    hit = cache.get((namespace, key))
                    if hit is not None and hit.version == version and hit.updated_us == e.updated_us and op == "p":
                        return hit
                fd = b.fd if b.fd is not None else files.open_existing(b)
                try:
                    line = os.pread(fd, e.length, e.offset)
                except OSError as exc:
                    raise storage_error(exc, "read", b.path) from None
                parsed = parse_line(line)
                if parsed is None or not is_line_of(parsed, key, version):
                    # The bytes are not the record the index promised: the
                    # file was damaged after indexing. Re-index from scratch.
                    files.reload(b, use_index=False)
                    e = b.index.get(key)
                    if e is None or e.op == "d":
                        return None
                    op, version = e.op, e.version
                    parsed = parse_line(files.read_line(b, e)) if op != "x" else None
                    if parsed is None or not is_line_of(parsed, key, version):
                        raise CorruptRecord(
                            f"record {namespace}/{key!r} failed its checksum on read",
                            namespace=namespace,
                            key=key,
                            path=str(b.path),
                        )
                _, value = parsed
            tier = "warm" if op == "p" else "cold"
            stored = _new(Stored, (key, version, e.created_us, e.updated_us, value, tier))
            if cache is not None and tier == "warm":
                cache.put((namespace, key), stored)
            return stored

    # -- bulk reads, check, upkeep ----------------------------------------------

    def scan(self, namespace: str, *, archived: bool = False, strict: bool = True) -> Iterator[Stored]:
        """See ``BulkReads.scan``."""
        return self.bulk.scan(namespace, archived=archived, strict=strict)

    def keys(self, namespace: str) -> list[tuple[str, int, int]]:
        """See ``BulkReads.keys``."""
        return self.bulk.keys(namespace)

    def stats(self) -> dict[str, dict[str, int]]:
        return self.bulk.stats()

    def namespaces(self) -> list[str]:
        return self.files.namespaces()

    def check(self, fix: bool = False) -> list[Finding]:
        return self.checker.check(fix)

    def compact(self, namespace: str | None = None, *, drop_deleted: bool = False,
                forget: frozenset[str] = frozenset()) -> int:
        """Compact every bucket (of one namespace); return the bytes reclaimed.
        ``drop_deleted`` (a purge): tombstones go too, so no key stays;
        ``forget``: the tombstones of these keys go."""
        return self.upkeep.compact(namespace, drop_deleted=drop_deleted, forget=forget)

    # _maybe_compact stays here, not in upkeep.py: it reads this module's
    # COMPACT_MIN_GARBAGE at call time, which tests patch.

    def _maybe_compact(self, namespace: str, b: Bucket) -> None:
        """Compact a bucket that is mostly garbage, as a side effect of a
        write that has already committed: so it never waits for another
        process's lock, never raises (the write succeeded), and never touches
        a bucket holding damage (that is check(fix=True)'s to report and
        repair, not a write's to sweep away)."""
        if b.garbage > COMPACT_MIN_GARBAGE and b.garbage * 2 > b.size and not b.corrupt and not b.tail:
            try:
                self.upkeep.compact_bucket(namespace, b, wait=False)
            except MemoryStoreError as exc:
                log.info("compaction of %s postponed: %s", b.rel, exc)

    def close(self) -> None:
        # A fence, not a cut: see BucketFiles.close. Each
        # bucket's persisted index is written first, so that the next open's
        # first reads are not scans; then this process's writer note goes.
        self.files.close(self.upkeep.save_indexes)
        self.notes.close()
