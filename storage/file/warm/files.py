"""Warm tier, bucket files: the log's read and append path.

One ``BucketFiles`` per tier holds every bucket it has used (``Bucket``: one
log file's descriptor, its index and what is known of its bytes), opens and
closes their descriptors, keeps each index up to date with its file
(``refresh``: the shared change counters, else a ``stat``; a scan of what
was appended; a reload from the persisted index or a full scan when the file
was replaced), looks keys up (in memory, else through the persisted index),
and appends record lines, moving a dead writer's torn tail aside first.
See ``tier.py`` for the format and why it has this shape.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from hrm_memory.core.errors import StoreClosed

from . import buckets as bucket_index
from .buckets import Persisted
from ...fsutil import (
    FILE_MODE,
    NOFOLLOW,
    SharedCounters,
    ensure_real_dirs,
    fsync_dir,
    make_dirs,
    quarantine,
    storage_error,
)
from ..locks import NamespaceLocks
from .format import N_BUCKETS, parse_line, read_line_at, salvage
from .notes import WriterNotes

log = logging.getLogger("hrm_memory.warm")

_CHUNK = 8 * 1024 * 1024
_crc32 = zlib.crc32

FULL_CHECK_SECONDS = 1.0



class Entry(NamedTuple):
    """A key's entry in a bucket's index: the header of its newest line and
    where that line is (``offset`` and ``length`` delimit it between its two
    newlines). ``op`` is the line's: ``"p"``, ``"d"`` or ``"a"``; ``"x"``
    marks a key whose newest line is damaged (reads raise CorruptRecord until
    it is rewritten; ``version`` is then the newest intact one, 0 if none)."""

    op: str
    version: int
    created_us: int
    updated_us: int
    offset: int
    length: int


def by_offset(item: tuple[str, Entry]) -> int:
    """Sort key of an index item ``(key, entry)``: where its line is in the file."""
    _, e = item
    return e.offset


class Found(NamedTuple):
    """A key's entry and its value as a read through the persisted index found them."""

    entry: Entry
    value: bytes


#: An Entry from its fields without the Python-level ``__new__`` of a
#: NamedTuple: ``_new(Entry, (op, version, ...))``, where entries are made
#: per line scanned and per write.
_new = tuple.__new__


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


class Bucket:
    """One bucket file as this process knows it: a plain record shared by the
    tier's parts, each holding ``lock`` while it uses it."""

    __slots__ = (
        "_path", "spath", "rel", "idx", "gens", "seen_gen", "checked_at", "fd", "writable", "ino", "size", "tail",
        "index", "garbage", "corrupt", "unknown_after", "lock", "loaded", "pidx", "idx_covered",
    )

    def __init__(self, spath: str, rel: str, idx: int, gens: SharedCounters | None) -> None:
        self.spath = spath  # the path as a string: what the read path uses
        self._path: Path | None = None
        self.rel = rel
        self.idx = idx
        self.gens = gens  # the namespace's shared change counters, generations() (None: always stat)
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


class BucketFiles:
    """The buckets of one store's warm tier (``<store root>/warm``): their
    files, descriptors and indexes, the reading and appending of their lines.
    Thread-safe: each bucket has its lock, which callers hold around a
    bucket's use (``append`` also needs the namespace's thread lock)."""

    def __init__(self, store_root: Path, *, locks: NamespaceLocks, fsync: bool, notes: WriterNotes) -> None:
        self.store_root = store_root
        self.root = store_root / "warm"
        self._sroot = str(self.root)
        self.locks = locks
        self.fsync = fsync
        self.notes = notes
        #: Every bucket used so far, by (namespace, index): the read path looks here first.
        self.buckets: dict[tuple[str, int], Bucket] = {}
        self._gens: dict[str, SharedCounters] = {}
        self._real: set[str] = set()  # namespaces whose directories were found real (see bucket)
        self._guard = threading.Lock()
        self.closed = False

    # -- buckets -----------------------------------------------------------

    def bucket(self, namespace: str, index: int) -> Bucket:
        b = self.buckets.get((namespace, index))
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
                b = self.buckets.get((namespace, index))
                if b is None:
                    rel = f"{namespace}/{index:02x}.log"
                    b = Bucket(f"{self._sroot}/{rel}", rel, index, self.generations_of(namespace))
                    self.buckets[(namespace, index)] = b
        return b

    def generations_of(self, namespace: str) -> SharedCounters | None:
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

    def buckets_of(self, namespace: str) -> list[Bucket]:
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
        found.update(i for (ns, i) in list(self.buckets) if ns == namespace)
        return [self.bucket(namespace, i) for i in sorted(found) if i < N_BUCKETS]

    def namespaces(self) -> list[str]:
        if self.root.is_symlink():
            return []
        try:
            return sorted(n for n in os.listdir(self.root) if not n.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- indexing ------------------------------------------------------------

    def refresh(self, b: Bucket) -> bool:
        """Bring ``b``'s index up to date with the file; False if there is no file.

        The index always describes the file behind ``b.fd``: a new inode at
        the path (a compaction in another process) is opened once and then
        scanned and read through that one descriptor, never by path again,
        so an index can never be paired with another file's bytes.
        WarmTier.get holds a copy of the check that answers without a stat."""
        if self.closed:
            raise StoreClosed("the memory manager is closed")
        gens = b.gens
        if gens is not None:
            gen = gens.get(b.idx)
            now = time.monotonic()
            if gen == b.seen_gen and now - b.checked_at < FULL_CHECK_SECONDS:
                return b.ino is not None
            ok = self.refresh_by_stat(b)
            b.seen_gen, b.checked_at = gen, now
            return ok
        return self.refresh_by_stat(b)

    def refresh_by_stat(self, b: Bucket) -> bool:
        if self.closed:
            raise StoreClosed("the memory manager is closed")
        if b.ino is None and not b.loaded:
            return self.reload(b)  # first use: open it, no stat before
        try:
            st = os.lstat(b.spath)
        except NotADirectoryError:
            raise storage_error(OSError(errno.ENOTDIR, "not a directory"), "read", b.path.parent) from None
        except FileNotFoundError:
            if b.ino is not None:
                # Removed underneath us: what we indexed is gone from disk.
                self.close_fd(b)
                b.reset()
            return False
        if st.st_ino != b.ino or st.st_size < b.size:
            return self.reload(b)
        if st.st_size != b.size + b.tail or not b.loaded:
            self.scan_into(b, b.size, st.st_size)
            b.loaded = True
        return True

    def reload(self, b: Bucket, use_index: bool = True) -> bool:
        """Index ``b`` from scratch: from its persisted index and what was
        appended after it when that is valid (and ``use_index``), else by
        scanning the whole file."""
        self.close_fd(b)
        b.reset()
        try:
            fd = self.open_existing(b)
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
        self.scan_into(b, start, st.st_size)
        b.loaded = True
        return True

    def full(self, b: Bucket) -> bool:
        """Like ``refresh``, and the whole index in memory (no persisted one)."""
        ok = self.refresh(b)
        if ok and b.pidx is not None:
            ino, covered = b.ino, b.idx_covered
            ok = self.reload(b, use_index=False)
            if ok and b.ino == ino:
                b.idx_covered = covered  # still true of this file: not rewritten at close
        return ok

    def lookup(self, b: Bucket, key: str) -> Entry | None:
        """``key``'s index entry: in memory, else from the persisted index."""
        e = b.index.get(key)
        if e is None and b.pidx is not None:
            found = self.from_persisted(b, key)
            e = found.entry if found is not None else b.index.get(key)
        return e

    def from_persisted(self, b: Bucket, key: str, h: int = -1) -> Found | None:
        """The entry and value of ``key``'s current line as the persisted
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
                    line = read_line_at(b.fd if b.fd is not None else self.open_existing(b), off)
                except OSError as exc:
                    raise storage_error(exc, "read", b.path) from None
            parsed = parse_line(line)
            if parsed is not None:
                (op, named, version, created_us, updated_us), value = parsed
                if named == key:
                    e: Entry = _new(Entry, (op, version, created_us, updated_us, off, len(line)))
                    b.index[key] = e
                    return Found(e, value)
                if bucket_index.key_hash(named) == h:
                    continue  # another key of the same hash
            log.warning("persisted index of %s does not match the bucket; rescanning it", b.rel)
            self.reload(b, use_index=False)
            return None
        return None

    def scan_into(self, b: Bucket, start: int, end: int) -> None:
        """Index the lines of ``b``'s file from ``start`` to ``end``."""
        fd = b.fd if b.fd is not None else self.open_existing(b)
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

    def _scan_chunk(self, b: Bucket, data: bytes, base: int) -> int:
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
                        # record must not be dropped with it.
                        if old is None or old.op == "x" or version > old.version:
                            index[key] = _new(Entry, ("x", old.version if old else 0, 0, 0, base + pos, nl - pos))
                else:
                    (op, key, version, created_us, updated_us), _ = parsed
                    old = index.get(key)
                    if old is not None:
                        b.garbage += old.length + 2
                    index[key] = _new(Entry, (op, version, created_us, updated_us, base + pos, nl - pos))
            pos = nl + 1
            consumed = pos

    def read_line(self, b: Bucket, entry: Entry) -> bytes:
        fd = b.fd if b.fd is not None else self.open_existing(b)
        try:
            return os.pread(fd, entry.length, entry.offset)
        except OSError as exc:
            raise storage_error(exc, "read", b.path) from None

    # -- appending -------------------------------------------------------------

    def append(self, namespace: str, b: Bucket, line: bytes) -> int:
        """Append one or more framed record lines in one write (and one sync);
        return the offset where they start."""
        self.notes.touch(b.rel)
        gate = self.locks.writers
        if b.tail:
            # An incomplete last line: under the exclusive gate no process is
            # part-way through an append, so if it is still there it is a
            # dead writer's, and it is moved aside. (Without the gate it
            # could be a live writer's line still being copied in.)
            with gate.exclusive(namespace):
                self.repair_tail(b)
        fd = self.open_fd(b)
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
            self.reload(b)
            return self.append(namespace, b, line)
        start = end - len(line)
        if start == b.size + b.tail:
            b.size = end
            b.tail = 0
        self.bump(b)
        return start

    def bump(self, b: Bucket) -> None:
        """Tell other processes' readers that this bucket changed."""
        if b.gens is None:
            b.gens = self.generations_of(b.path.parent.name)
        if b.gens is not None:
            before = b.gens.bump(b.idx)
            # Our index is up to date with what we just did, but only if no
            # other process moved the counter meanwhile (say, by compacting).
            if b.seen_gen == before:
                b.seen_gen = before + 1

    def repair_tail(self, b: Bucket) -> None:
        """Move an incomplete last line (a crashed writer's) aside and cut it off.

        Called under the writer gate's exclusive lock, so no append is in
        flight; the file is looked at again first (not the shared counters: an
        appender bumps them only after its write, so they may lag), and a line
        that has completed since is left alone."""
        if not self.refresh_by_stat(b) or not b.tail:
            return
        fd = self.open_fd(b)
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
        self.bump(b)

    # -- descriptors -------------------------------------------------------------

    def open_fd(self, b: Bucket) -> int:
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

    def open_existing(self, b: Bucket) -> int:
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

    def close_fd(self, b: Bucket) -> None:
        if b.fd is not None:
            os.close(b.fd)
            b.fd = None
            b.writable = False

    def close(self, before: Callable[[list[Bucket]], None]) -> None:
        """Refuse further use, call ``before`` with every bucket (while no new
        one can appear), then close every descriptor and counter file.

        A fence, not a cut: operations already on a
        bucket finish (each bucket's lock is taken before its file is
        closed); later ones meet ``closed`` in refresh and raise
        StoreClosed. A descriptor is never closed under a running write,
        so a write can never land in a file that reused its number."""
        self.closed = True
        with self._guard:
            before(list(self.buckets.values()))
            for b in self.buckets.values():
                with b.lock:
                    self.close_fd(b)
            self.buckets.clear()
            for gens in self._gens.values():
                gens.close()
            self._gens.clear()
