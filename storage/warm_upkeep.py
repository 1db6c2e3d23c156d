"""Warm tier, upkeep side: bucket handles, writer notes, compaction, recovery, check.

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
- *check(fix).* A fresh scan of every bucket, reporting (and repairing) damage,
  torn tails, stray files and loose permissions.

This module does not import ``warm`` (which imports it): what it needs of the
tier it reaches through ``self``. The tunables the tests patch
(``warm.COMPACT_MIN_GARBAGE``, ``warm.FULL_CHECK_SECONDS``) are read only by
code that stayed in ``warm.py``, so a patched value still takes effect.
"""

from __future__ import annotations

import errno
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

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
)
from .locks import NamespaceLocks
from .warm_format import Misfit, audit, parse_line

# Index entry: (op, version, created_us, updated_us, offset, length); offset
# and length delimit the line between its two newlines. op "x" marks a key
# whose newest line is damaged: reads raise CorruptRecord until it is rewritten.
Entry = tuple[str, int, int, int, int, int]

class _Bucket:
    __slots__ = (
        "path", "spath", "rel", "idx", "gens", "seen_gen", "checked_at", "fd", "writable", "ino", "size", "tail",
        "index", "garbage", "corrupt", "unknown_after", "lock", "loaded",
    )

    def __init__(self, path: Path, rel: str, idx: int, gens: SharedCounters | None) -> None:
        self.path = path
        self.spath = str(path)
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

    def reset(self) -> None:
        self.seen_gen = -1
        self.ino = None
        self.size = self.tail = self.garbage = 0
        self.index = {}
        self.corrupt = []
        self.unknown_after = -1
        self.loaded = False


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

    if TYPE_CHECKING:

        def _bucket(self, namespace: str, index: int) -> _Bucket: ...

        def _buckets_of(self, namespace: str) -> list[_Bucket]: ...

        def _refresh(self, b: _Bucket) -> bool: ...

        def _refresh_by_stat(self, b: _Bucket) -> bool: ...

        def _bump(self, b: _Bucket) -> None: ...

        def _append(self, namespace: str, b: _Bucket, line: bytes) -> int: ...

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
            b.fd = os.open(b.path, os.O_RDWR | os.O_APPEND | NOFOLLOW)
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

    def _register_touch(self, b: _Bucket) -> None:
        """Note (once per process) which bucket this process writes, so that a
        later process can repair a torn tail if this one dies mid-write."""
        if b.rel in self._touched:
            return
        run = self.store_root / "run"
        path = self._run_file or run / f"{os.getpid()}-{secrets.token_hex(4)}.touched"
        ensure_real_dirs(self.store_root, "run")  # a planted link is never followed
        try:
            make_dirs(run, durable=self.fsync)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, FILE_MODE)
            try:
                os.write(fd, b.rel.encode() + b"\n")
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise storage_error(exc, "write", path) from None
        self._run_file = path
        self._touched.add(b.rel)

    # -- listing ---------------------------------------------------------------

    def keys(self, namespace: str) -> list[tuple[str, int, int]]:
        """``(key, version, created_us)`` of every live (not archived) key."""
        out: list[tuple[str, int, int]] = []
        for b in self._buckets_of(namespace):
            with b.lock:
                self._refresh(b)
                out.extend((k, e[1], e[2]) for k, e in b.index.items() if e[0] == "p")
        return out

    def namespaces(self) -> list[str]:
        if self.root.is_symlink():
            return []
        try:
            return sorted(n for n in os.listdir(self.root) if not n.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def stats(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for ns in self.namespaces():
            live = archived = deleted = size = 0
            for b in self._buckets_of(ns):
                with b.lock:
                    self._refresh(b)
                    size += b.size + b.tail
                    for e in b.index.values():
                        if e[0] == "p":
                            live += 1
                        elif e[0] == "a":
                            archived += 1
                        elif e[0] == "d":
                            deleted += 1
            out[ns] = {"keys": live, "archived": archived, "deleted": deleted, "bytes": size}
        return out

    # -- maintenance -----------------------------------------------------------

    def compact_bucket(self, namespace: str, b: _Bucket, *, wait: bool = True) -> int:
        """Rewrite ``b`` with only its current lines; return the bytes reclaimed.

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
                        if e[0] == "x":
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
            return reclaimed

    def _recover_dead_writers(self) -> None:
        """Repair torn tails left by writer processes that died (SIGKILL, power
        loss). Costs one directory listing when nothing crashed."""
        for pid_text, path, rels in self._writer_notes(alive=False):
            if rels is None:
                continue
            ok = True
            for rel in set(rels):
                namespace, _, fname = rel.partition("/")
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
                        if self._refresh(b) and b.tail:
                            self._repair_tail(b)
                except OSError:
                    ok = False  # read-only root: leave it to a process that can write
            if ok:
                try:
                    path.unlink()
                except OSError:
                    pass

    def check(self, fix: bool = False) -> list[Finding]:
        findings: list[Finding] = []
        for namespace in self.namespaces():
            ns_dir = self.root / namespace
            if ns_dir.is_symlink():
                continue  # reported (and never followed) by the store-wide symlink check
            if not ns_dir.is_dir():
                findings.append(Finding("stray-file", str(ns_dir), "not a namespace directory"))
                continue
            for name in sorted(os.listdir(ns_dir)):
                path = ns_dir / name
                if name == ".gen":
                    continue
                if name.startswith(".") and name.endswith((".tmp", ".compact")):
                    owner = name.rsplit(".", 2)[-2]
                    if owner.isdigit() and _alive(int(owner)):
                        continue  # a compaction in progress in a live process
                    findings.append(
                        Finding("stray-temp", str(path), "temporary file of a dead process", namespace, fixed=fix)
                    )
                    if fix:
                        path.unlink(missing_ok=True)
                    continue
                if path.is_symlink():
                    continue
                if not (len(name) == 6 and name.endswith(".log")):
                    findings.append(Finding("stray-file", str(path), "unexpected file in namespace", namespace))
                    continue
                findings.extend(self._check_bucket(namespace, int(name[:2], 16), fix))
        return findings

    def _check_bucket(self, namespace: str, idx: int, fix: bool) -> list[Finding]:
        findings: list[Finding] = []
        b = self._bucket(namespace, idx)
        with self.locks.hold(namespace, cross_process=fix), b.lock:
            # A fresh scan, not the cached index: check must see today's bytes.
            self._close_fd(b)
            b.reset()
            if not self._refresh(b):
                return findings  # removed while we looked
            mode = os.fstat(b.fd).st_mode & 0o777 if b.fd is not None else FILE_MODE
            if mode & 0o077:
                findings.append(
                    Finding("bad-permissions", str(b.path), f"mode {mode:o}, expected 600", namespace, fixed=fix)
                )
                if fix:
                    os.chmod(b.path, FILE_MODE)
            for off, length in b.corrupt:
                findings.append(
                    Finding(
                        "corrupt-record",
                        str(b.path),
                        f"{length} bytes at offset {off} fail their checksum",
                        namespace,
                        fixed=fix,
                        extra={"offset": off, "length": length},
                    )
                )
            if b.tail:
                findings.append(
                    Finding(
                        "torn-tail",
                        str(b.path),
                        f"incomplete last record ({b.tail} bytes at offset {b.size})",
                        namespace,
                        fixed=fix,
                    )
                )
            misplaced, replayed, current = audit(b.fd, b.size, idx) if b.fd is not None else ([], [], {})
            for m in misplaced:
                findings.append(
                    Finding(
                        "misplaced-record",
                        str(b.path),
                        f"line of key {m.key!r} (version {m.version}) at offset {m.offset} belongs in bucket "
                        f"{m.home:02x}.log (a bucket file restored or renamed wrongly?)",
                        namespace,
                        fixed=fix,
                        extra={"offset": m.offset, "length": m.length, "key": m.key, "bucket": m.home},
                    )
                )
            for m in replayed:
                findings.append(
                    Finding(
                        "replayed-record",
                        str(b.path),
                        f"line of key {m.key!r} at offset {m.offset} repeats an earlier line (version {m.version}, "
                        f"below version {m.newest} before it): an old line appended again",
                        namespace,
                        fixed=fix,
                        extra={"offset": m.offset, "length": m.length, "key": m.key, "version": m.version},
                    )
                )
            if fix and (misplaced or replayed):
                self._rehome(namespace, b, misplaced, replayed, current)
            if fix and (b.corrupt or b.tail or misplaced or replayed):
                self.compact_bucket(namespace, b)
        return findings

    def _rehome(
        self,
        namespace: str,
        b: _Bucket,
        misplaced: list[Misfit],
        replayed: list[Misfit],
        current: dict[str, tuple[int, bytes]],
    ) -> None:
        """check(fix=True) of misplaced and replayed lines; nothing is lost.

        Every such line is copied to ``quarantine/`` first. The newest line
        of each misplaced key is then appended to the bucket its key hashes
        to, unless that bucket already holds the same or a newer version of
        the key (or a damaged line of it): then the copy in quarantine is all
        there is to keep, as for any superseded line. Finally the misplaced
        keys leave this bucket's index, and each replayed key's entry goes
        back to its newest legitimate line, so the compaction that follows
        drops the misplaced and replayed lines and keeps that one."""
        assert b.fd is not None
        fd = b.fd
        try:
            for kind, lost in (("misplaced", misplaced), ("replayed", replayed)):
                if lost:
                    data = b"".join(b"\n" + os.pread(fd, m.length, m.offset) + b"\n" for m in lost)
                    quarantine(self.store_root, f"warm/{b.rel}", data, f"{kind}-{lost[0].offset}")
            newest: dict[str, tuple[Misfit, bytes]] = {}
            for m in misplaced:
                if m.key not in newest or m.version >= newest[m.key][0].version:
                    newest[m.key] = (m, os.pread(fd, m.length, m.offset))
        except OSError as exc:
            raise storage_error(exc, "move misplaced lines aside from", b.path) from None
        homes: dict[int, list[tuple[Misfit, bytes]]] = {}
        for m, line in newest.values():
            homes.setdefault(m.home, []).append((m, line))
        for home, group in sorted(homes.items()):
            hb = self._bucket(namespace, home)
            with hb.lock:
                self._refresh(hb)
                moving: list[tuple[Entry, str, bytes]] = []
                for m, line in group:
                    e = hb.index.get(m.key)
                    entry = _entry_of(line)
                    if entry is not None and (e is None or (e[0] != "x" and m.version > e[1])):
                        moving.append((entry, m.key, line))
                if not moving:
                    continue
                pos = self._append(namespace, hb, b"".join(b"\n" + line + b"\n" for _, _, line in moving))
                for entry, key, line in moving:
                    old = hb.index.get(key)
                    if old is not None:
                        hb.garbage += old[5] + 2
                    hb.index[key] = (entry[0], entry[1], entry[2], entry[3], pos + 1, len(line))
                    pos += len(line) + 2
        for m in misplaced:
            b.index.pop(m.key, None)
        for key, (off, line) in current.items():
            entry = _entry_of(line)
            if entry is not None:
                b.index[key] = (entry[0], entry[1], entry[2], entry[3], off, len(line))

    def compact(self, namespace: str | None = None) -> int:
        """Compact every bucket (of one namespace); return the bytes reclaimed."""
        total = 0
        for ns in [namespace] if namespace else self.namespaces():
            for b in self._buckets_of(ns):
                total += self.compact_bucket(ns, b)
        return total


def _entry_of(line: bytes) -> Entry | None:
    """The index entry (offset 0) of an intact line whose header has the
    expected types, else None."""
    parsed = parse_line(line)
    if parsed is None:
        return None
    op, _, version, created, updated = parsed[0]
    if op not in ("p", "d", "a") or not all(type(n) is int for n in (version, created, updated)):
        return None
    return (op, version, created, updated, 0, len(line))


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
