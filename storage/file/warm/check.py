"""Warm tier, check side: ``check(fix)`` of buckets and their persisted indexes.

A check scans every bucket afresh (never the cached or persisted index) and
reports, and with ``fix`` repairs: damaged lines and torn tails (moved to
quarantine by a compaction), loose permissions, stray files, lines in a
bucket their key does not hash to and old lines replayed, and persisted
indexes that are damaged or untrue to their bucket file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from hrm_memory.core.records import Finding

from . import buckets as bucket_index
from .buckets import Persisted
from ...fsutil import FILE_MODE, NOFOLLOW, quarantine, storage_error
from ..locks import NamespaceLocks
from .files import Bucket, BucketFiles, Entry
from .format import Misfit, audit, lines, parse_line
from .notes import alive_pid
from .upkeep import Upkeep


class Misplaced(NamedTuple):
    """A misplaced line (its finding) and its bytes, on its way to its home bucket."""

    misfit: Misfit
    line: bytes


class Checker:
    """``check(fix)`` of one warm tier: it reads the buckets through ``files``
    and has ``upkeep`` compact the ones it repairs; no state of its own."""

    def __init__(self, store_root: Path, *, files: BucketFiles, upkeep: Upkeep, locks: NamespaceLocks) -> None:
        self.store_root = store_root
        self.root = files.root
        self.files = files
        self.upkeep = upkeep
        self.locks = locks

    def check(self, fix: bool = False) -> list[Finding]:
        findings: list[Finding] = []
        for namespace in self.files.namespaces():
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
                    if owner.isdigit() and alive_pid(int(owner)):
                        continue  # a compaction in progress in a live process
                    findings.append(
                        Finding("stray-temp", str(path), "temporary file of a dead process", namespace, fixed=fix)
                    )
                    if fix:
                        path.unlink(missing_ok=True)
                    continue
                if path.is_symlink():
                    continue
                if len(name) == 6 and name.endswith(".idx") and _hex2(name):
                    findings.extend(self._check_index(namespace, path, fix))
                    continue
                if not (len(name) == 6 and name.endswith(".log")):
                    findings.append(Finding("stray-file", str(path), "unexpected file in namespace", namespace))
                    continue
                findings.extend(self._check_bucket(namespace, int(name[:2], 16), fix))
        return findings

    def _check_bucket(self, namespace: str, idx: int, fix: bool) -> list[Finding]:
        findings: list[Finding] = []
        b = self.files.bucket(namespace, idx)
        with self.locks.hold(namespace, cross_process=fix), b.lock:
            # A fresh scan, not the cached or persisted index: check must see
            # today's bytes.
            if not self.files.reload(b, use_index=False):
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
            # Without locking, two racing update()s can write the same bytes
            # (same version, value and microsecond stamp), the later one
            # behind newer versions: a repeat is then no evidence of a replay.
            # Only a store used with locking=True has versions that grow along
            # a file, so only there are repeats looked for.
            replays = self.locks.cross_process
            misplaced, replayed, current = audit(b.fd, b.size, idx, replays) if b.fd is not None else ([], [], {})
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
                self.upkeep.compact_bucket(namespace, b)
        return findings

    def _rehome(
        self,
        namespace: str,
        b: Bucket,
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
            newest: dict[str, Misplaced] = {}
            for m in misplaced:
                if m.key not in newest or m.version >= newest[m.key].misfit.version:
                    newest[m.key] = Misplaced(m, os.pread(fd, m.length, m.offset))
        except OSError as exc:
            raise storage_error(exc, "move misplaced lines aside from", b.path) from None
        homes: dict[int, list[Misplaced]] = {}
        for found in newest.values():
            homes.setdefault(found.misfit.home, []).append(found)
        for home, group in sorted(homes.items()):
            hb = self.files.bucket(namespace, home)
            with hb.lock:
                self.files.refresh(hb)
                moving: list[tuple[Entry, str, bytes]] = []
                for m, line in group:
                    e = self.files.lookup(hb, m.key)
                    entry = _entry_of(line)
                    if entry is not None and (e is None or (e.op != "x" and m.version > e.version)):
                        moving.append((entry, m.key, line))
                if not moving:
                    continue
                pos = self.files.append(namespace, hb, b"".join(b"\n" + line + b"\n" for _, _, line in moving))
                for entry, key, line in moving:
                    old = hb.index.get(key)
                    if old is not None:
                        hb.garbage += old.length + 2
                    hb.index[key] = entry._replace(offset=pos + 1)
                    pos += len(line) + 2
        for m in misplaced:
            b.index.pop(m.key, None)
        for key, (off, line) in current.items():
            entry = _entry_of(line)
            if entry is not None:
                b.index[key] = entry._replace(offset=off)

    def _check_index(self, namespace: str, path: Path, fix: bool) -> list[Finding]:
        """A persisted index: private, intact, and, where it is of the bucket
        file there now, true to it (every key's current line in the bytes it
        covers, and nothing else). A stale one (the bucket compacted or
        appended to since) is no finding: it is ignored until rewritten.
        The fix removes it; the bucket is scanned instead until the next
        compaction or close writes a new one."""
        findings: list[Finding] = []
        b = self.files.bucket(namespace, int(path.name[:2], 16))
        with self.locks.hold(namespace, cross_process=fix), b.lock:
            try:
                mode = os.lstat(path).st_mode & 0o777
                persisted, identity = bucket_index.describe(path)
            except FileNotFoundError:
                return findings
            except OSError as exc:
                return [Finding("unreadable-index", str(path), str(exc), namespace)]
            if mode & 0o077:
                findings.append(Finding("bad-permissions", str(path), f"mode {mode:o}, expected 600", namespace, fixed=fix))
                if fix:
                    os.chmod(path, FILE_MODE)
            problem = None
            if persisted is None or identity is None:
                problem = "persisted index fails its checksum (ignored; rebuilt by the next compaction or close)"
            elif not b.path.exists():
                problem = "persisted index of a bucket file that does not exist"
            else:
                problem = self._index_disagrees(b, persisted, identity)
            if problem is not None:
                findings.append(Finding("bad-index", str(path), problem, namespace, fixed=fix))
                if fix:
                    path.unlink(missing_ok=True)
                    b.idx_covered = -1
        return findings

    def _index_disagrees(self, b: Bucket, persisted: Persisted, identity: tuple[int, int, int]) -> str | None:
        """Why ``persisted`` (of ``b``'s current file) is wrong, or None."""
        dev, ino, covered = identity
        try:
            fd = os.open(b.path, os.O_RDONLY | NOFOLLOW)
        except OSError:
            return None  # reported with the bucket itself
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (dev, ino) or st.st_size < covered:
                return None  # stale: of an older file, ignored
            current: dict[str, int] = {}
            for off, line in lines(fd, 0, covered):
                parsed = parse_line(line)
                if parsed is None:
                    # The bucket was damaged after it was indexed: that is
                    # the bucket's finding (corrupt-record), not the index's;
                    # reads through the index meet the damage and rescan.
                    return None
                (_, key, _, _, _), _ = parsed
                current[key] = off
            if bucket_index.load(bucket_index.index_path(b.path), fd, st) is None:
                return "persisted index does not match the first bytes of its bucket file (rewritten in place?)"
        finally:
            os.close(fd)
        want = sorted((bucket_index.key_hash(k), off) for k, off in current.items())
        if want != sorted(persisted.pairs()):
            return f"persisted index disagrees with its bucket file ({persisted.n} entries, {len(want)} keys)"
        return None


def _entry_of(line: bytes) -> Entry | None:
    """The index entry (offset 0) of an intact line whose header has the
    expected types, else None."""
    parsed = parse_line(line)
    if parsed is None:
        return None
    (op, _, version, created, updated), _ = parsed
    if op not in ("p", "d", "a") or not all(type(n) is int for n in (version, created, updated)):
        return None
    return Entry(op, version, created, updated, 0, len(line))


def _hex2(name: str) -> bool:
    return all(c in "0123456789abcdef" for c in name[:2])
