"""Per-namespace locks: a thread lock always, a file lock across processes on request.

The grain is one namespace: writers of different namespaces never wait for
each other. The file lock is taken *inside* the thread lock, so threads of
one process queue on the cheap lock and only one of them at a time touches
the file lock.

The file lock is ``flock(2)`` on ``locks/<namespace>.lock``, written here
rather than taken from filelock: filelock re-polls at a fixed interval, while
this lock retries after a short sleep that doubles up to 2 ms, so it is about
as fast as a blocking flock under contention while still honouring a timeout
(BENCHMARKS.md, "Figures the code's comments rely on"). The descriptor stays
open between acquisitions; after ``fork`` the child opens its own (a flock
belongs to the open file description, which a child shares with its parent).
A lock file deleted or replaced while we waited is detected (the locked inode
is no longer the one at the path) and the lock taken again on the new file.
A process that dies releases its flock with it: no stale locks.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any

from hrm_memory.core.errors import LockTimeout

from ..fsutil import FILE_MODE, NOFOLLOW, ensure_real_dirs, storage_error, this_process


class FileLock:
    """An exclusive ``flock`` on one file, with a timeout. Not re-entrant:
    :class:`NamespaceLocks` serialises the threads of a process in front of it."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | NOFOLLOW, FILE_MODE)
            except OSError as exc:
                raise storage_error(exc, "open lock file", self.path) from None
        return self._fd

    def acquire(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        delay = 0.00005
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not self._still_at_path(fd):
                    # The file we wait on was deleted or replaced: the next
                    # lockers use the new one, so wait there instead.
                    self.close()
                    continue
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"could not lock {self.path.stem!r} within {self.timeout} s (lock file {self.path})",
                        namespace=self.path.stem,
                        path=str(self.path),
                        timeout=self.timeout,
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.002)
                continue
            except OSError as exc:
                raise storage_error(exc, "lock", self.path) from None
            if self._still_at_path(fd):
                return
            # Our inode was unlinked or replaced: a lock on it excludes no one.
            self.close()

    def _still_at_path(self, fd: int) -> bool:
        mine = os.fstat(fd)
        try:
            current = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return mine.st_nlink > 0 and current.st_ino == mine.st_ino and current.st_dev == mine.st_dev

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WriterGate:
    """Appends against rewrites, across processes, whatever ``locking=`` says.

    Every append to a namespace's warm logs holds ``flock(LOCK_SH)`` on
    ``locks/<namespace>.writers`` for the length of its ``write``; compaction,
    torn-tail repair and open-time recovery hold ``LOCK_EX``. So a rewrite
    never runs while any process is part-way through an append: an incomplete
    last line seen under the exclusive lock is a dead writer's, and no line
    lands in a file between a compaction's scan and its rename (either would
    cut or reorder live writers' acknowledged records when
    ``locking=False``). ``locking=`` decides only whether ``update()``
    serialises across processes. Cost: two ``flock`` calls per append.

    Within a process the namespace's thread lock already keeps appends and
    rewrites apart (they share this descriptor, and a flock belongs to it)."""

    def __init__(self, lock_dir: Path) -> None:
        self.lock_dir = lock_dir
        self._fds: dict[str, int] = {}
        self._guard = threading.Lock()
        self._pid = this_process.pid

    def _fd(self, namespace: str) -> int:
        if self._pid != this_process.pid:
            # After fork: the inherited descriptions are the parent's locks.
            self._fds = {}
            self._pid = this_process.pid
        fd = self._fds.get(namespace)
        if fd is None:
            with self._guard:
                fd = self._fds.get(namespace)
                if fd is None:
                    ensure_real_dirs(self.lock_dir.parent, self.lock_dir.name)
                    path = self.lock_dir / f"{namespace}.writers"
                    try:
                        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, FILE_MODE)
                    except OSError as exc:
                        raise storage_error(exc, "open lock file", path) from None
                    self._fds[namespace] = fd
        return fd

    def shared(self, namespace: str) -> _Gate:
        return _Gate(self._fd(namespace), fcntl.LOCK_SH)

    def exclusive(self, namespace: str, *, wait: bool = True) -> _Gate:
        """Raises :class:`LockTimeout` at once when ``wait`` is False and an
        append of another process is under way."""
        return _Gate(self._fd(namespace), fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB, namespace)

    def close(self) -> None:
        with self._guard:
            for fd in self._fds.values():
                os.close(fd)
            self._fds = {}


class _Gate:
    __slots__ = ("fd", "mode", "namespace")

    def __init__(self, fd: int, mode: int, namespace: str = "") -> None:
        self.fd = fd
        self.mode = mode
        self.namespace = namespace

    def __enter__(self) -> None:
        try:
            fcntl.flock(self.fd, self.mode)
        except BlockingIOError:
            raise LockTimeout(
                f"namespace {self.namespace!r}: another process is appending; rewrite postponed",
                namespace=self.namespace,
                timeout=0.0,
            ) from None

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)


class NamespaceLocks:
    def __init__(self, lock_dir: Path, *, cross_process: bool, timeout: float) -> None:
        self.lock_dir = lock_dir
        self.cross_process = cross_process
        self.timeout = timeout
        self._guard = threading.Lock()
        self._threads: dict[str, threading.RLock] = {}
        self._files: dict[str, FileLock] = {}
        self._pid = this_process.pid
        #: Appends (shared) against rewrites (exclusive), always across processes.
        self.writers = WriterGate(lock_dir)

    def thread_lock(self, namespace: str) -> threading.RLock:
        lock = self._threads.get(namespace)
        if lock is None:
            with self._guard:
                lock = self._threads.setdefault(namespace, threading.RLock())
        return lock

    def file_lock(self, namespace: str) -> FileLock:
        """The cross-process lock of ``namespace`` (one per namespace and process)."""
        if self._pid != this_process.pid:
            # After fork: the inherited descriptors share the parent's locks.
            for inherited in self._files.values():
                inherited.close()
            self._files.clear()
            self._threads.clear()
            self._pid = this_process.pid
        lock = self._files.get(namespace)
        if lock is None:
            ensure_real_dirs(self.lock_dir.parent, self.lock_dir.name)  # never follow a planted link
            try:
                self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise storage_error(exc, "create directory", self.lock_dir) from None
            lock = self._files[namespace] = FileLock(self.lock_dir / f"{namespace}.lock", self.timeout)
        return lock

    def hold(self, namespace: str, *, cross_process: bool | None = None, wait: bool = True) -> Any:
        """A context manager holding the namespace's lock; across processes
        too when locking is on (or ``cross_process=True`` forces it, as
        compaction does).

        Without the file lock this is the bare ``threading.RLock`` (a C-level
        context manager: the common single-process path pays no Python call).
        Raises :class:`LockTimeout` (a ``TimeoutError``) after ``timeout`` s,
        or at once when ``wait`` is False and another process holds it."""
        if not (self.cross_process if cross_process is None else cross_process):
            lock = self._threads.get(namespace)
            return lock if lock is not None else self.thread_lock(namespace)
        return _Held(self, namespace, None if wait else 0.0)

    def close(self) -> None:
        # Each namespace's thread lock is taken once before anything closes,
        # so an operation holding it finishes first.
        for namespace in list(self._threads):
            with self.thread_lock(namespace):
                lock = self._files.pop(namespace, None)
                if lock is not None:
                    lock.close()
        for lock in self._files.values():
            lock.close()
        self._files.clear()
        self.writers.close()


class _Held:
    """Thread lock, then file lock; re-entrant through a per-thread depth, so
    that an operation holding the namespace may call another that takes it."""

    __slots__ = ("locks", "namespace", "timeout", "thread", "file", "outer")

    def __init__(self, locks: NamespaceLocks, namespace: str, timeout: float | None) -> None:
        self.locks = locks
        self.namespace = namespace
        self.timeout = timeout

    def __enter__(self) -> None:
        self.thread = self.locks.thread_lock(self.namespace)
        self.thread.acquire()
        depths = _depths()
        key = (id(self.locks), self.namespace)
        depth = depths.get(key, 0)
        self.outer = depth == 0
        if self.outer:
            try:
                self.file = self.locks.file_lock(self.namespace)
                self.file.acquire(self.timeout)
            except BaseException:
                self.thread.release()
                raise
        depths[key] = depth + 1

    def __exit__(self, *exc: object) -> None:
        _depths()[(id(self.locks), self.namespace)] -= 1
        try:
            if self.outer:
                self.file.release()
        finally:
            self.thread.release()


# Per-thread nesting depth of held namespaces (an RLock's owner count is not
# readable from Python).
_local = threading.local()


def _depths() -> dict[tuple[int, str], int]:
    try:
        return _local.depths  # type: ignore[no-any-return]
    except AttributeError:
        _local.depths = {}
        return _local.depths  # type: ignore[no-any-return]
