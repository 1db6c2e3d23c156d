"""Warm tier, upkeep: compaction, persisted indexes, recovery after dead writers.

What keeps the buckets (``warm/files.py``) healthy:

- *Bounded garbage.* A bucket is rewritten with only its current lines, under
  the namespace's cross-process lock, damaged lines being copied to
  ``quarantine/`` first (when to do so is decided in ``warm.py``).
- *Persisted indexes.* A compaction, and ``close()``, write a bucket's
  persisted index (``warm/buckets.py``) when the one on disk is missing or
  lags.
- *Dead writers.* Every writing process notes in ``run/`` which buckets it
  appends to (``warm/notes.py``); a later process that finds the note of a
  dead one moves that bucket's torn tail aside and removes the temp file of a
  compaction or index write it cut short.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from hrm_memory.core.errors import MemoryStoreError

from . import buckets as bucket_index
from ...fsutil import FILE_MODE, NOFOLLOW, fsync_dir, quarantine, storage_error, temp_path
from ..locks import NamespaceLocks
from .files import Bucket, BucketFiles, Entry, by_offset
from .format import bucket_of, line_key, parse_line, read_line_at
from .notes import WriterNotes

log = logging.getLogger("hrm_memory.warm")


class Upkeep:
    """Compaction, persisted index writing and dead-writer recovery of one
    warm tier's buckets; no state of its own."""

    def __init__(self, store_root: Path, *, files: BucketFiles, notes: WriterNotes, locks: NamespaceLocks) -> None:
        self.store_root = store_root
        self.files = files
        self.notes = notes
        self.locks = locks

    def compact_bucket(self, namespace: str, b: Bucket, *, wait: bool = True, drop_deleted: bool = False,
                       forget: frozenset[str] = frozenset()) -> int:
        """Rewrite ``b`` with only its current lines; return the bytes reclaimed.
        ``drop_deleted`` (a purge): tombstones go too, so no key stays;
        ``forget``: the tombstones of these keys go (``forget()``).

        Damaged lines are copied to ``quarantine/`` first. Runs under the
        namespace's cross-process lock whatever the locking mode, so two
        compactions never race; a plain writer of another process (locking
        off) that appends meanwhile is not lost: its line lands after the
        rename's cut-off and is copied over below."""
        with (
            self.locks.hold(namespace, cross_process=True, wait=wait),
            b.lock,
            self.locks.writers.exclusive(namespace, wait=wait),  # no append is part-way through
        ):
            # A stat, not the shared counters: an appender bumps them only
            # after its write, so they may not show a line already there,
            # which this rewrite would then drop.
            if not self.files.refresh_by_stat(b):
                return 0
            if b.pidx is not None and not self.files.reload(b, use_index=False):
                return 0
            if b.tail:
                self.files.repair_tail(b)
            fd = self.files.open_fd(b)
            old_size = b.size
            try:
                for off, length in b.corrupt:
                    quarantine(self.store_root, f"warm/{b.rel}", os.pread(fd, length, off), f"corrupt-{off}")
            except OSError as exc:
                raise storage_error(exc, "move damaged bytes aside from", b.path) from None
            live = sorted(b.index.items(), key=by_offset)
            # Noted in run/ before the temp exists, so that if this process
            # dies here the next open removes the temp (a compacting process
            # that never appended to the bucket has no note of its own).
            self.notes.touch(b.rel)
            tmp = b.path.with_name(f".{b.path.name}.{os.getpid()}.compact")
            new_index: dict[str, Entry] = {}
            pos = 0
            try:
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, FILE_MODE)
                try:
                    chunks = []
                    for k, e in live:
                        if e.op == "x" or (e.op == "d" and (drop_deleted or k in forget)):
                            continue
                        line = os.pread(fd, e.length, e.offset)
                        chunks.append(b"\n" + line + b"\n")
                        new_index[k] = e._replace(offset=pos + 1)
                        pos += e.length + 2
                        if len(chunks) >= 4096:
                            _write_all(out, b"".join(chunks))
                            chunks = []
                    _write_all(out, b"".join(chunks))
                    os.fsync(out)
                finally:
                    os.close(out)
                os.replace(tmp, b.path)
                fsync_dir(b.path.parent)
                self.files.bump(b)
            except OSError as exc:
                # Disk full or the like: the bucket itself is untouched.
                tmp.unlink(missing_ok=True)
                raise storage_error(exc, "compact", b.path) from None
            # Nothing can have been appended to the old file since the scan:
            # every append holds the writer gate, which we hold exclusively. A
            # process whose descriptor still points at the old file finds it
            # unlinked after its write and writes the record again (BucketFiles.append).
            self.files.close_fd(b)
            reclaimed = old_size - pos
            b.reset()
            b.index = new_index
            b.size = pos
            b.loaded = True
            b.ino = os.fstat(self.files.open_fd(b)).st_ino
            self.save_index(b)
            return reclaimed

    def save_indexes(self, buckets: list[Bucket]) -> None:
        """``save_index`` of each bucket (at close). The buckets that may get
        one are noted in ``run/`` first, in one write, as a writer notes its
        buckets: if this process dies part-way, the next one removes its temp
        files (a reader too writes indexes). Never raises."""
        due = [b for b in buckets if b.loaded and b.ino is not None and bucket_index.lags(b.idx_covered, b.size)]
        if not due:
            return
        try:
            self.notes.touch(*(b.rel for b in due))
        except MemoryStoreError as exc:  # a read-only root, say: it could not take an index either
            log.info("persisted indexes not written: %s", exc)
            return
        for b in due:
            with b.lock:
                self.save_index(b)

    def save_index(self, b: Bucket) -> None:
        """Write ``b``'s persisted index (``warm/buckets.py``) if the one on
        disk is missing or lags (``bucket_index.lags``) and the bucket is
        undamaged: from the whole index in memory, or, when ``b`` is read
        through a persisted index, from that one merged with what was
        appended after it. The caller holds ``b.lock``. Never raises: the
        index is only a cache."""
        if not b.loaded or b.fd is None or b.ino is None or b.corrupt or b.unknown_after >= 0:
            return
        if not bucket_index.lags(b.idx_covered, b.size):
            return
        if any(e.op == "x" for e in b.index.values()):
            return
        try:
            st = os.fstat(b.fd)
            if st.st_ino != os.lstat(b.path).st_ino:
                return  # compacted elsewhere: our index is of the old file
            if st.st_size != b.size + b.tail:
                # Other processes appended since we looked (or we appended
                # behind them): index up to the end first, so that every
                # entry lies within what the index says it covers.
                self.files.scan_into(b, b.size, st.st_size)
                if b.corrupt or b.unknown_after >= 0:
                    return
            if any(e.offset >= b.size for e in b.index.values()):
                return
            pidx = b.pidx
            if pidx is None:
                keys = list(b.index)
                offs = [e.offset for e in b.index.values()]
                data = bucket_index.encode(keys, offs, b.fd, st, b.size, b.garbage)
            else:
                appended = {k: e.offset for k, e in b.index.items() if e.offset >= pidx.covered}
                fd = b.fd
                merged = bucket_index.merge(pidx, appended, lambda off: _key_at(fd, off))
                if merged is None:
                    return
                hashes, offsets = merged
                data = bucket_index.encode_hashed(hashes, offsets, fd, st, b.size, b.garbage)
            bucket_index.write(bucket_index.index_path(b.path), data)
        except OSError as exc:
            log.info("persisted index of %s not written: %s", b.rel, exc)
            return
        b.idx_covered = b.size

    def recover_dead_writers(self) -> set[str]:
        """Repair torn tails left by writer processes that died (SIGKILL, power
        loss). Costs one directory listing when nothing crashed. Returns the
        namespaces such a writer touched (the backend logs them: see
        ``RECOVER``)."""
        recovered: set[str] = set()
        for pid_text, path, rels in self.notes.notes(alive=False):
            if rels is None:
                continue
            ok = True
            for rel in set(rels):
                namespace, _, fname = rel.partition("/")
                recovered.add(namespace)
                try:
                    idx = int(fname[:2], 16)
                except ValueError:
                    continue
                b = self.files.bucket(namespace, idx)
                try:
                    with self.locks.hold(namespace, cross_process=True), b.lock, self.locks.writers.exclusive(namespace):
                        # A compaction cut short leaves its temp file; the
                        # bucket itself is intact (the rename never happened).
                        b.path.with_name(f".{b.path.name}.{pid_text}.compact").unlink(missing_ok=True)
                        temp_path(bucket_index.index_path(b.path), pid_text).unlink(missing_ok=True)  # an index write
                        if self.files.refresh(b) and b.tail:
                            self.files.repair_tail(b)
                except OSError:
                    ok = False  # read-only root: leave it to a process that can write
            if ok:
                try:
                    path.unlink()
                except OSError:
                    pass
        return recovered

    def compact(self, namespace: str | None = None, *, drop_deleted: bool = False,
                forget: frozenset[str] = frozenset()) -> int:
        """Compact every bucket (of one namespace); return the bytes reclaimed.
        With ``forget``, only the buckets those keys hash to: every line of a
        key is in its own bucket."""
        total = 0
        only = {bucket_of(k) for k in forget}
        for ns in [namespace] if namespace else self.files.namespaces():
            for b in self.files.buckets_of(ns):
                if not only or b.idx in only:
                    total += self.compact_bucket(ns, b, drop_deleted=drop_deleted, forget=forget)
        return total


def _key_at(fd: int, off: int) -> str | None:
    """The key of the line at ``off``, None if it is damaged."""
    parsed = parse_line(read_line_at(fd, off))
    return None if parsed is None else str(line_key(parsed))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
