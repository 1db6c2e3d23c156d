"""Warm tier, upkeep side: bucket handles, writer notes, compaction, recovery.

``warm.py`` holds the record format, the per-bucket indexes, reads and
appends; its ``WarmTier`` inherits ``WarmUpkeep`` from here, so the tier's
methods and attributes are the same as when all of it was one module. What
lives here keeps the buckets healthy:

- *Bucket handles.* ``_Bucket`` (one log file's descriptor and index) and the
  opening and closing of its descriptor.
- *Dead writers.* Every writing process notes in ``run/`` which buckets it
  appends to, before its first append; a later process that finds the note of
  a dead one moves that bucket's torn tail aside and removes the temp file of
  a compaction it cut short.
- *Bounded garbage.* A bucket is rewritten with only its current lines, under
  the namespace's cross-process lock, damaged lines being copied to
  ``quarantine/`` first (when to do so is decided in ``warm.py``).
- *Persisted indexes.* A compaction, and ``close()``, write a bucket's
  persisted index (``bucket_index.py``) when the one on disk is missing or
  lags.

``check(fix)`` is in ``warm_check.py``, bulk reads in ``warm_bulk.py``.

This module does not import ``warm`` (which imports it): what it needs of the
tier it reaches through ``self``. The tunables the tests patch
(``warm.COMPACT_MIN_GARBAGE``, ``warm.FULL_CHECK_SECONDS``) are read only by
code that stayed in ``warm.py``, so a patched value still takes effect.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from hrm_memory.errors import MemoryStoreError
from hrm_memory.records import Finding

from .fsutil import (
    FILE_MODE,
    NOFOLLOW,
    SharedCounters,
    ensure_real_dirs,
    fsync_dir,
    make_dirs,
    quarantine,
    storage_error,
    temp_path,
)
from . import bucket_index
from .bucket_index import Persisted
from .locks import NamespaceLocks
from .warm_format import Misfit, audit, lines, parse_line, read_line_at

log = logging.getLogger("hrm_memory.warm")

# Index entry: (op, version, created_us, updated_us, offset, length); offset
# and length delimit the line between its two newlines. op "x" marks a key
# whose newest line is damaged: reads raise CorruptRecord until it is rewritten.
Entry = tuple[str, int, int, int, int, int]

class _Bucket:
    __slots__ = (
        "_path", "spath", "rel", "idx", "gens", "seen_gen", "checked_at", "fd", "writable", "ino", "size", "tail",
        "index", "garbage", "corrupt", "unknown_after", "lock", "loaded", "pidx", "idx_covered",
    )

    def __init__(self, spath: str, rel: str, idx: int, gens: SharedCounters | None) -> None:
        self.spath = spath  # the path as a string: what the read path uses
        self._path: Path | None = None
        self.rel = rel
        self.idx = idx
        self.gens = gens  # the namespace's shared change counters, warm.Generations (None: always stat)
        self.seen_gen = -1  # counter value when the index was last known fresh
        self.checked_at = 0.0
        self.fd: int | None = None
        self.writable = False
        self.ino: int | None = None
        self.size = 0  # bytes consumed: up to the end of the last complete line
        self.tail = 0  # bytes of an incomplete last line after ``size``
        self.index: dict[str, Entry] = {}
        self.garbage = 0
        self.corrupt: list[tuple[int, int]] = []
        # End of the last damaged line whose key cannot be read: any key not
        # rewritten after it might have its newest version in that line.
        self.unknown_after = -1
        self.lock = threading.RLock()
        self.loaded = False
        # The persisted index in use (bucket_index.Persisted): ``index`` then
        # holds only what was appended after it, and keys looked up since.
        self.pidx: Persisted | None = None
        self.idx_covered = -1  # bytes the persisted index on disk covers, for this inode (-1: none known)

    @property
    def path(self) -> Path:
        """The bucket file's path (made on first use: a first read needs only ``spath``)."""
        p = self._path
        if p is None:
            p = self._path = Path(self.spath)
        return p

    def reset(self) -> None:
        self.seen_gen = -1
        self.ino = None
        self.size = self.tail = self.garbage = 0
        self.index = {}
        self.corrupt = []
        self.unknown_after = -1
        self.loaded = False
        self.pidx = None
        self.idx_covered = -1


class WarmUpkeep:
    """The upkeep half of ``warm.WarmTier`` (which is its only user).

    It keeps no state of its own: the attributes below are set by the tier's
    ``__init__``, and the methods declared for the type checker only are the
    tier's, in ``warm.py``."""

    store_root: Path
    root: Path
    locks: NamespaceLocks
    fsync: bool
    _run_file: Path | None
    _touched: set[str]
    recovered: set[str]

    if TYPE_CHECKING:

        def _bucket(self, namespace: str, index: int) -> _Bucket: ...

        def _buckets_of(self, namespace: str) -> list[_Bucket]: ...

        def _refresh(self, b: _Bucket) -> bool: ...

        def _refresh_by_stat(self, b: _Bucket) -> bool: ...

        def _bump(self, b: _Bucket) -> None: ...

        def _append(self, namespace: str, b: _Bucket, line: bytes) -> int: ...

        def _reload(self, b: _Bucket, use_index: bool = True) -> bool: ...

        def _lookup(self, b: _Bucket, key: str) -> Entry | None: ...

        def _scan_into(self, b: _Bucket, start: int, end: int) -> None: ...

    # -- bucket files ----------------------------------------------------------

    def _open_fd(self, b: _Bucket) -> int:
        """The bucket's descriptor, writable, creating the file if needed."""
        if b.fd is not None and b.writable:
            return b.fd
        if b.fd is not None:
            # Opened read-only by a read; a write needs its own descriptor on
            # the same file (reported as the OS reports it if refused).
            try:
                fd = os.open(b.path, os.O_RDWR | os.O_APPEND | NOFOLLOW)
            except OSError as exc:
                raise storage_error(exc, "open for writing", b.path) from None
            os.close(b.fd)
            b.fd, b.writable = fd, True
            return fd
        try:
            if not b.path.parent.exists():
                make_dirs(b.path.parent, durable=self.fsync)
            new = not b.path.exists()
            b.fd = os.open(b.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | NOFOLLOW, FILE_MODE)
            b.writable = True
            if new and self.fsync:
                fsync_dir(b.path.parent)
        except OSError as exc:
            raise storage_error(exc, "open", b.path) from None
        if b.ino is None:
            b.ino = os.fstat(b.fd).st_ino
            b.loaded = True
        return b.fd

    def _open_existing(self, b: _Bucket) -> int:
        """Open an existing bucket file: read-write if allowed (so a later
        write reuses it), else read-only (read-only root, file mode 0400)."""
        try:
            b.fd = os.open(b.spath, os.O_RDWR | os.O_APPEND | NOFOLLOW)
            b.writable = True
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise storage_error(exc, "open (a symbolic link, never followed)", b.path) from None
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise storage_error(exc, "open", b.path) from None
            try:
                b.fd = os.open(b.path, os.O_RDONLY | NOFOLLOW)
            except FileNotFoundError:
                raise
            except OSError as exc2:
                raise storage_error(exc2, "read", b.path) from None
            b.writable = False
        return b.fd

    def _close_fd(self, b: _Bucket) -> None:
        if b.fd is not None:
            os.close(b.fd)
            b.fd = None
            b.writable = False

    # -- writer notes ----------------------------------------------------------

    def _writer_notes(self, *, alive: bool) -> Iterator[tuple[str, Path, list[str] | None]]:
        """``(pid, path, buckets)`` of each ``run/`` note whose process is (not)
        alive; ``buckets`` is None when the note cannot be read."""
        run = self.store_root / "run"
        try:
            ensure_real_dirs(self.store_root, "run")  # a planted link is never followed
            names = os.listdir(run)
        except OSError:  # StorageError (a planted link) included: no notes to read
            return
        for name in names:
            pid = name.split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)) != alive:
                continue
            path = run / name
            try:
                rels: list[str] | None = path.read_text().split()
            except OSError:
                rels = None
            yield pid, path, rels

    def _repair_tail(self, b: _Bucket) -> None:
        """Move an incomplete last line (a crashed writer's) aside and cut it off.

        Called under the writer gate's exclusive lock, so no append is in
        flight; the file is looked at again first (not the shared counters: an
        appender bumps them only after its write, so they may lag), and a line
        that has completed since is left alone."""
        if not self._refresh_by_stat(b) or not b.tail:
            return
        fd = self._open_fd(b)
        try:
            data = os.pread(fd, b.tail, b.size)
            if data:
                quarantine(self.store_root, f"warm/{b.rel}", data, f"torn-{b.size}")
            os.ftruncate(fd, b.size)
            if self.fsync:
                os.fsync(fd)
        except OSError as exc:
            raise storage_error(exc, "repair the torn end of", b.path) from None
        b.tail = 0
        self._bump(b)

    def _register_touch(self, b: _Bucket, *more: _Bucket) -> None:
        """Note (once per process) which buckets this process writes, so that a
        later process can repair a torn tail if this one dies mid-write (and
        remove the temp file of a compaction or index write it cut short)."""
        if not more and b.rel in self._touched:
            return  # every append asks: the common case, first
        rels = sorted({x.rel for x in (b, *more)} - self._touched)
        if not rels:
            return
        run = self.store_root / "run"
        path = self._run_file or run / f"{os.getpid()}-{secrets.token_hex(4)}.touched"
        ensure_real_dirs(self.store_root, "run")  # a planted link is never followed
        try:
            make_dirs(run, durable=self.fsync)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, FILE_MODE)
            try:
                os.write(fd, "".join(rel + "\n" for rel in rels).encode())
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise storage_error(exc, "write", path) from None
        self._run_file = path
        self._touched.update(rels)

    # -- listing ---------------------------------------------------------------

    def namespaces(self) -> list[str]:
        if self.root.is_symlink():
            return []
        try:
            return sorted(n for n in os.listdir(self.root) if not n.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- maintenance -----------------------------------------------------------

    def compact_bucket(self, namespace: str, b: _Bucket, *, wait: bool = True, drop_deleted: bool = False) -> int:
        """Rewrite ``b`` with only its current lines; return the bytes reclaimed.
        ``drop_deleted`` (a purge): tombstones go too, so no key stays.

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
            if not self._refresh_by_stat(b):
                return 0
            if b.pidx is not None and not self._reload(b, use_index=False):
                return 0
            if b.tail:
                self._repair_tail(b)
            fd = self._open_fd(b)
            old_size = b.size
            try:
                for off, length in b.corrupt:
                    quarantine(self.store_root, f"warm/{b.rel}", os.pread(fd, length, off), f"corrupt-{off}")
            except OSError as exc:
                raise storage_error(exc, "move damaged bytes aside from", b.path) from None
            live = sorted(b.index.items(), key=lambda ke: ke[1][4])
            # Noted in run/ before the temp exists, so that if this process
            # dies here the next open removes the temp (issue 14, item 13: a
            # compacting process that never appended to the bucket had no note).
            self._register_touch(b)
            tmp = b.path.with_name(f".{b.path.name}.{os.getpid()}.compact")
            new_index: dict[str, Entry] = {}
            pos = 0
            try:
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, FILE_MODE)
                try:
                    chunks = []
                    for k, e in live:
                        if e[0] == "x" or (drop_deleted and e[0] == "d"):
                            continue
                        line = os.pread(fd, e[5], e[4])
                        chunks.append(b"\n" + line + b"\n")
                        new_index[k] = (e[0], e[1], e[2], e[3], pos + 1, e[5])
                        pos += e[5] + 2
                        if len(chunks) >= 4096:
                            _write_all(out, b"".join(chunks))
                            chunks = []
                    _write_all(out, b"".join(chunks))
                    os.fsync(out)
                finally:
                    os.close(out)
                os.replace(tmp, b.path)
                fsync_dir(b.path.parent)
                self._bump(b)
            except OSError as exc:
                # Disk full or the like: the bucket itself is untouched.
                tmp.unlink(missing_ok=True)
                raise storage_error(exc, "compact", b.path) from None
            # Nothing can have been appended to the old file since the scan:
            # every append holds the writer gate, which we hold exclusively. A
            # process whose descriptor still points at the old file finds it
            # unlinked after its write and writes the record again (_append).
            self._close_fd(b)
            reclaimed = old_size - pos
            b.reset()
            b.index = new_index
            b.size = pos
            b.loaded = True
            b.ino = os.fstat(self._open_fd(b)).st_ino
            self._save_index(b)
            return reclaimed

    def _save_indexes(self, buckets: list[_Bucket]) -> None:
        """``_save_index`` of each bucket (at close). The buckets that may get
        one are noted in ``run/`` first, in one write, as a writer notes its
        buckets: if this process dies part-way, the next one removes its temp
        files (a reader too writes indexes). Never raises."""
        due = [b for b in buckets if b.loaded and b.ino is not None and bucket_index.lags(b.idx_covered, b.size)]
        if not due:
            return
        try:
            self._register_touch(*due)
        except MemoryStoreError as exc:  # a read-only root, say: it could not take an index either
            log.info("persisted indexes not written: %s", exc)
            return
        for b in due:
            with b.lock:
                self._save_index(b)

    def _save_index(self, b: _Bucket) -> None:
        """Write ``b``'s persisted index (``bucket_index.py``) if the one on
        disk is missing or lags (``bucket_index.lags``) and the bucket is
        undamaged: from the whole index in memory, or, when ``b`` is read
        through a persisted index, from that one merged with what was
        appended after it. The caller holds ``b.lock``. Never raises: the
        index is only a cache."""
        if not b.loaded or b.fd is None or b.ino is None or b.corrupt or b.unknown_after >= 0:
            return
        if not bucket_index.lags(b.idx_covered, b.size):
            return
        if any(e[0] == "x" for e in b.index.values()):
            return
        try:
            st = os.fstat(b.fd)
            if st.st_ino != os.lstat(b.path).st_ino:
                return  # compacted elsewhere: our index is of the old file
            if st.st_size != b.size + b.tail:
                # Other processes appended since we looked (or we appended
                # behind them): index up to the end first, so that every
                # entry lies within what the index says it covers.
                self._scan_into(b, b.size, st.st_size)
                if b.corrupt or b.unknown_after >= 0:
                    return
            if any(e[4] >= b.size for e in b.index.values()):
                return
            pidx = b.pidx
            if pidx is None:
                keys = list(b.index)
                offs = [e[4] for e in b.index.values()]
                data = bucket_index.encode(keys, offs, b.fd, st, b.size, b.garbage)
            else:
                appended = {k: e[4] for k, e in b.index.items() if e[4] >= pidx.covered}
                fd = b.fd
                merged = bucket_index.merge(pidx, appended, lambda off: _key_at(fd, off))
                if merged is None:
                    return
                data = bucket_index.encode_hashed(merged[0], merged[1], fd, st, b.size, b.garbage)
            bucket_index.write(bucket_index.index_path(b.path), data)
        except OSError as exc:
            log.info("persisted index of %s not written: %s", b.rel, exc)
            return
        b.idx_covered = b.size

    def _recover_dead_writers(self) -> None:
        """Repair torn tails left by writer processes that died (SIGKILL, power
        loss). Costs one directory listing when nothing crashed. The
        namespaces such a writer touched are left in ``recovered`` (the
        backend logs them: see ``RECOVER``)."""
        for pid_text, path, rels in self._writer_notes(alive=False):
            if rels is None:
                continue
            ok = True
            for rel in set(rels):
                namespace, _, fname = rel.partition("/")
                self.recovered.add(namespace)
                try:
                    idx = int(fname[:2], 16)
                except ValueError:
                    continue
                b = self._bucket(namespace, idx)
                try:
                    with self.locks.hold(namespace, cross_process=True), b.lock, self.locks.writers.exclusive(namespace):
                        # A compaction cut short leaves its temp file; the
                        # bucket itself is intact (the rename never happened).
                        b.path.with_name(f".{b.path.name}.{pid_text}.compact").unlink(missing_ok=True)
                        temp_path(bucket_index.index_path(b.path), pid_text).unlink(missing_ok=True)  # an index write
                        if self._refresh(b) and b.tail:
                            self._repair_tail(b)
                except OSError:
                    ok = False  # read-only root: leave it to a process that can write
            if ok:
                try:
                    path.unlink()
                except OSError:
                    pass

    def compact(self, namespace: str | None = None, *, drop_deleted: bool = False) -> int:
        """Compact every bucket (of one namespace); return the bytes reclaimed."""
        total = 0
        for ns in [namespace] if namespace else self.namespaces():
            for b in self._buckets_of(ns):
                total += self.compact_bucket(ns, b, drop_deleted=drop_deleted)
        return total


def _key_at(fd: int, off: int) -> str | None:
    """The key of the line at ``off``, None if it is damaged."""
    parsed = parse_line(read_line_at(fd, off))
    return None if parsed is None else str(parsed[0][1])


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
