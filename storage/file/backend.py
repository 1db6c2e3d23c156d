"""The default backend: everything on local files under one root.

``FileBackend`` composes the warm tier (checksummed append-only logs), the
cold archive, a read cache, per-namespace locks (threads, and ``flock``
across processes) and the file change log, and implements
:class:`hrm_memory.core.backend.Backend`. It owns every file under the root:
nothing above it opens one.

Layout under ``root``: ``warm/``, ``cold/``, ``events/``, ``locks/``,
``meta/`` (run-time declarations), ``run/`` (crash-recovery notes),
``quarantine/`` (damaged bytes kept aside). docs/storage.md has the formats.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import orjson
from hrm_memory.core.backend import ARCHIVE, CROSS_PROCESS, PERSISTENT, RECOVER
from hrm_memory.core.errors import CorruptRecord, MemoryStoreError, StorageError
from hrm_memory.core.records import Finding, Stored

from .. import fsutil as _fs
from .cold import ColdTier
from .erase import erase_log_entries, erase_quarantined
from ..hot import ReadCache
from .locks import NamespaceLocks
from ..purge_epochs import FilePurgeEpochs
from .changes import FileChangeLog
from .changes_scrub import scrub
from .warm.tier import WarmTier

DURABILITY = ("fsync", "flush")
_UNREAD = object()  # run-time declarations never read yet
_ROOT_DIRS = ("", "warm", "cold", "locks", "meta", "run", "quarantine", "events")


class FileBackend:
    """Warm logs and a cold archive under ``root``; see the module docstring.

    ``locking=True`` makes every namespace lock a cross-process ``flock`` too
    (``lock_timeout`` seconds before :class:`LockTimeout`). ``durability`` is
    ``"fsync"`` (a returned write survives power loss) or ``"flush"`` (it
    survives the process). ``signal_log=False`` turns the change log off
    (no cross-process subscriptions). Thread-safe."""

    system = "hrm-memory-file"
    capabilities = frozenset({PERSISTENT, CROSS_PROCESS, ARCHIVE})

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        locking: bool = False,
        durability: str = "fsync",
        lock_timeout: float = 10.0,
        cache_size: int = 100_000,
        signal_log: bool = True,
    ) -> None:
        self.root = Path(root).absolute()
        self.durability = durability
        try:
            _fs.make_dirs(self.root, durable=durability == "fsync")
        except OSError as exc:
            raise _fs.storage_error(exc, "create the store root", self.root) from None
        if not self.root.is_dir():
            raise StorageError(f"store root {self.root} is not a directory", path=str(self.root))
        self.locks = NamespaceLocks(self.root / "locks", cross_process=locking, timeout=lock_timeout)
        # The namespace lock is the locks' own method, not a wrapper: it is
        # taken on every write (one call frame less on the hot path).
        self.lock: Callable[..., AbstractContextManager[Any]] = self.locks.hold
        self.cache = ReadCache(cache_size)
        self.warm = WarmTier(self.root, locks=self.locks, durability=durability, cache=self.cache)
        self.cold = ColdTier(self.root, durability=durability)
        self.changes = FileChangeLog(self.root) if signal_log else None
        if self.changes is not None:
            # A dead writer's last commits may have no log entry of their
            # own: say which namespaces, for derived data (the recall index).
            for namespace in sorted(self.warm.recovered):
                self.changes.append(RECOVER, namespace, "", 0, "0" * 32)
        self._meta = self.root / "meta" / "namespaces.json"
        self._meta_stamp: object = _UNREAD
        self._meta_gen = -1
        self.purges = FilePurgeEpochs(self.root)
        self._meta_shared: _fs.SharedCounters | None = None
        self._meta_shared_ok = True

    # -- records ------------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Stored | None:
        stored = self.warm.get(namespace, key)
        if stored is not None and stored.tier == "cold":
            stored = self._fetch_cold(namespace, key, stored)
        return stored

    def _fetch_cold(self, namespace: str, key: str, marker: Stored) -> Stored:
        """The archived copy a warm marker points at, checked to be the
        version the marker names (a cached frame may be out of date if
        another process purged and re-archived)."""
        found = self.cold.fetch(namespace, key, marker.value)
        if found.version != marker.version:
            self.cold.forget(namespace, marker.value)
            found = self.cold.fetch(namespace, key, marker.value)
            if found.version != marker.version:
                raise CorruptRecord(
                    f"archived record {namespace}/{key!r}: version {found.version} where the marker says "
                    f"{marker.version}",
                    namespace=namespace,
                    key=key,
                )
        return found

    def put(
        self, namespace: str, key: str, value: bytes, now_us: int, min_version: int = 1, created_us: int | None = None
    ) -> Stored:
        return self.warm.put(namespace, key, value, now_us, min_version=min_version, created_us=created_us)

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        old = self.warm.delete(namespace, key, now_us)
        self.cache.discard((namespace, key))
        return old

    def scan(self, namespace: str, *, include_cold: bool = False, strict: bool = True) -> Iterator[Stored]:
        yield from self.warm.scan(namespace, strict=strict)
        if include_cold:
            yield from self._cold_current(namespace)

    def _cold_current(self, namespace: str) -> Iterator[Stored]:
        """The archived copies that are still current (their warm marker
        names that version), each once, streamed frame by frame."""
        markers = {s.key: s.version for s in self.warm.scan(namespace, archived=True) if s.tier == "cold"}
        if not markers:
            return
        for st in self.cold.scan(namespace):
            if markers.get(st.key) == st.version:
                del markers[st.key]
                yield st

    def keys(self, namespace: str) -> list[tuple[str, int, int]]:
        return self.warm.keys(namespace)


    # -- tiers ----------------------------------------------------------------------

    def archive(self, namespace: str, records: list[Stored]) -> list[str]:
        # Cold first (and synced), warm marker second: a crash in between
        # leaves the record in both tiers, never in neither (zict's rule).
        if not records:
            return []
        locations = self.cold.archive(namespace, records)
        marked = self.warm.mark_archived(namespace, [(st.key, st.version, loc) for st, loc in zip(records, locations)])
        for key in marked:
            self.cache.discard((namespace, key))
        return marked

    def purge(self, namespace: str) -> dict[str, int]:
        with self.locks.hold(namespace):
            keys = [st.key for st in self.warm.scan(namespace, archived=True, strict=False)]
            now = _now_us()
            for key in keys:
                self.warm.delete(namespace, key, now)
                self.cache.discard((namespace, key))
            # Tombstones go too: no key of purged data stays (versions start
            # again at 1, as on Redis); compaction makes new inodes and bumps
            # the shared counters, so other processes' caches let go.
            self.warm.compact(namespace, drop_deleted=True)
            # A compaction cut short by a crash may have left a copy behind.
            for temp in (self.root / "warm" / namespace).glob(".*.compact"):
                temp.unlink(missing_ok=True)
            cold = self.cold.purge(namespace)
            quarantined = 0
            qdir = self.root / "quarantine"
            _fs.ensure_real_dirs(self.root, "quarantine")  # never unlink through a planted link
            if qdir.is_dir():
                for path in qdir.iterdir():
                    if path.name.startswith((f"warm__{namespace}__", f"cold__{namespace}__")):
                        path.unlink()
                        quarantined += 1
            if self.changes is not None:  # the namespace's change-log lines (op, key) blanked in place
                scrub(self.changes, namespace)
            self.purges.bump(namespace)  # after the data went: every recall index drops its rows (purge_epochs.py)
        return {"warm": len(keys), "cold": cold, "quarantine": quarantined}

    def erase(self, namespace: str, key: str) -> dict[str, int]:
        """Every byte of ``key`` out of every file: warm lines (a tombstone,
        then the key's bucket rewritten without any line naming it), archive
        frames (rewritten in place), quarantined spans, change-log lines
        (blanked in place): ``forget.py`` has the why of each step."""
        out = {"warm": 0, "cold": 0, "quarantine": 0, "events": 0}
        with self.locks.hold(namespace):
            if self.warm.get(namespace, key) is not None:
                self.delete(namespace, key, _now_us())
                out["warm"] = 1
            if (self.root / "warm" / namespace).is_dir():
                self.warm.compact(namespace, forget=frozenset({key}))  # its tombstone goes too: no line names it
                for temp in (self.root / "warm" / namespace).glob(".*.compact"):
                    temp.unlink(missing_ok=True)
            self.cache.discard((namespace, key))
            out["cold"] = self.cold.erase(namespace, key)
            out["quarantine"] = erase_quarantined(self.root, namespace, key)
        out["events"] = erase_log_entries(self.root / "events", namespace, key)
        return out

    # -- run-time declarations ------------------------------------------------------

    def declarations(self) -> dict[str, dict[str, Any]] | None:
        """Run-time declarations, or None when unchanged since the last call.

        Asked before every operation on a run-time namespace (so an undeclare
        in another process takes effect at once), hence cheap: a shared
        memory-mapped counter (``meta/.gen``, bumped by every declare and
        undeclare) is read first, and the file is stat'ed and parsed only when
        it moved (or when there is no counter: a read-only root)."""
        counter = self._meta_counter()
        if counter is not None:
            gen = counter.get(0)
            if gen == self._meta_gen and self._meta_stamp is not _UNREAD:
                return None
            self._meta_gen = gen
        try:
            st = os.stat(self._meta)
            stamp: object = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        except OSError as exc:
            raise _fs.storage_error(exc, "read", self._meta) from None
        if stamp == self._meta_stamp:
            return None
        declared = self._read_meta()
        self._meta_stamp = stamp
        return declared

    def _meta_counter(self) -> _fs.SharedCounters | None:
        if self._meta_shared is None and self._meta_shared_ok:
            try:
                _fs.ensure_real_dirs(self.root, "meta")
                _fs.make_dirs(self._meta.parent, durable=False)
                self._meta_shared = _fs.SharedCounters(self._meta.parent / ".gen", 1)
            except OSError:
                self._meta_shared_ok = False  # read-only root or the like: stat every time
        return self._meta_shared

    def _read_meta(self) -> dict[str, dict[str, Any]]:
        _fs.ensure_real_dirs(self.root, "meta")
        declared = _fs.read_json(self._meta, {})
        if type(declared) is not dict or not all(type(v) is dict for v in declared.values()):
            # Never reset: the file is left as it is for a person to repair.
            raise CorruptRecord(
                f"{self._meta} is damaged (expected an object of namespace specs); run-time declarations "
                "cannot be read and the file was left untouched",
                path=str(self._meta),
            )
        return declared

    def _write_meta(self, declared: dict[str, dict[str, Any]]) -> None:
        _fs.ensure_real_dirs(self.root, "meta")
        _fs.make_dirs(self._meta.parent, durable=True)
        _fs.atomic_write(self._meta, orjson.dumps(declared, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        counter = self._meta_counter()
        if counter is not None:
            counter.bump(0)  # after the rename: a reader that sees the bump sees the file

    def declare(self, name: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        with self.locks.hold("meta.namespaces", cross_process=True):
            declared = self._read_meta()
            stored = declared.get(name)
            if stored is None:
                declared[name] = spec
                self._write_meta(declared)
            return stored

    def undeclare(self, name: str) -> bool:
        with self.locks.hold("meta.namespaces", cross_process=True):
            declared = self._read_meta()
            if declared.pop(name, None) is None:
                return False
            self._write_meta(declared)
            return True

    # -- maintenance ----------------------------------------------------------------

    def check(self, fix: bool = False) -> list[Finding]:
        return (
            self._check_symlinks(fix)
            + self.warm.check(fix)
            + self.cold.check(fix)
            + self._check_markers(fix)
            + self._check_root(fix)
        )

    def _check_symlinks(self, fix: bool) -> list[Finding]:
        findings = []
        for link in _fs.symlinks_under(self.root):
            try:
                target = os.readlink(link)
            except OSError:
                target = "?"
            findings.append(Finding("symlink", str(link), f"symbolic link to {target!r} (never followed)", fixed=fix))
            if fix:
                try:
                    link.unlink()
                except OSError as exc:
                    raise _fs.storage_error(exc, "remove the link", link) from None
        return findings

    def _check_markers(self, fix: bool) -> list[Finding]:
        """Archive markers whose cold copy cannot be read. With ``fix`` the
        marker is replaced by a deletion: the damaged frame's bytes are in
        quarantine already, and the key no longer claims a value it cannot give."""
        findings = []
        for ns in self.warm.namespaces():
            if (self.warm.root / ns).is_symlink() or not (self.warm.root / ns).is_dir():
                continue
            for st in self.warm.scan(ns, archived=True, strict=False):
                if st.tier != "cold":
                    continue
                try:
                    self.cold.fetch(ns, st.key, st.value)
                except MemoryStoreError as exc:
                    findings.append(
                        Finding("dangling-archive-marker", str(self.root / "cold" / ns), str(exc), ns, fixed=fix)
                    )
                    if fix:
                        with self.locks.hold(ns):
                            self.delete(ns, st.key, _now_us())
        return findings

    def _check_root(self, fix: bool) -> list[Finding]:
        findings = []
        for sub in _ROOT_DIRS:
            path = self.root / sub
            if path.is_dir() and not path.is_symlink():
                mode = path.stat().st_mode & 0o777
                if mode & 0o077:
                    findings.append(Finding("bad-permissions", str(path), f"mode {mode:o}, expected 700", fixed=fix))
                    if fix:
                        try:
                            os.chmod(path, _fs.DIR_MODE)
                        except OSError as exc:
                            raise _fs.storage_error(exc, "chmod", path) from None
        return findings

    def compact(self, namespace: str | None = None) -> int:
        return self.warm.compact(namespace)

    def stats(self) -> dict[str, dict[str, int]]:
        warm = self.warm.stats()
        cold = self.cold.stats()
        out: dict[str, dict[str, int]] = {}
        for ns in set(warm) | set(cold):
            w = warm.get(ns, {})
            out[ns] = {
                "keys": w.get("keys", 0),
                "archived": w.get("archived", 0),
                "bytes": w.get("bytes", 0),
                "cold_bytes": cold.get(ns, {}).get("bytes", 0),
            }
        return out

    def info(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "durability": self.durability,
            "locking": self.locks.cross_process,
            "cache": {"entries": len(self.cache), "hits": self.cache.hits, "misses": self.cache.misses},
        }

    def close(self) -> None:
        # Fenced, in this order: the warm tier (operations on a bucket finish,
        # later ones raise StoreClosed), then the namespace locks (an
        # operation still logging its change holds one), then the change log.
        self.warm.close()
        self.locks.close()
        if self.changes is not None:
            self.changes.close()
        if self._meta_shared is not None:
            self._meta_shared.close()
            self._meta_shared = None
        self.cold.close()
        self.cache.clear()

    def __repr__(self) -> str:
        return f"FileBackend({str(self.root)!r}, durability={self.durability!r})"


def _now_us() -> int:
    return time.time_ns() // 1000


__all__ = ["DURABILITY", "FileBackend"]
