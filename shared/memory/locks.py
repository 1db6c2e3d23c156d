"""Per-namespace locks: a thread lock always, a file lock across processes on request.

The grain is one namespace: writers of different namespaces never wait for
each other. The file lock is taken *inside* the thread lock, so threads of one
process queue on the cheap lock and only one of them at a time touches the
file lock; that also sidesteps filelock's thread-local mode (it is created
with ``thread_local=False``) and its re-entrancy counter is only ever used by
one thread at a time.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from pathlib import Path

import filelock

from .errors import LockTimeout
from .fsutil import storage_error


class NamespaceLocks:
    def __init__(self, lock_dir: Path, *, cross_process: bool, timeout: float) -> None:
        self.lock_dir = lock_dir
        self.cross_process = cross_process
        self.timeout = timeout
        self._guard = threading.Lock()
        self._threads: dict[str, threading.RLock] = {}
        self._files: dict[str, filelock.FileLock] = {}
        self._pid = os.getpid()

    def thread_lock(self, namespace: str) -> threading.RLock:
        lock = self._threads.get(namespace)
        if lock is None:
            with self._guard:
                lock = self._threads.setdefault(namespace, threading.RLock())
        return lock

    def _file_lock(self, namespace: str) -> filelock.FileLock:
        if self._pid != os.getpid():
            # After fork the child must not share the parent's lock objects:
            # a held flock would be inherited and released by the wrong side.
            self._files.clear()
            self._threads.clear()
            self._pid = os.getpid()
        lock = self._files.get(namespace)
        if lock is None:
            try:
                self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise storage_error(exc, "create directory", self.lock_dir) from None
            lock = filelock.FileLock(
                str(self.lock_dir / f"{namespace}.lock"),
                timeout=self.timeout,
                thread_local=False,
                mode=0o600,
            )
            self._files[namespace] = lock
        return lock

    def hold(self, namespace: str, *, cross_process: bool | None = None) -> Any:
        """A context manager holding the namespace's lock; across processes
        too when locking is on (or ``cross_process=True`` forces it, as
        compaction does).

        Without the file lock this is the bare ``threading.RLock`` (a C-level
        context manager: the common single-process path pays ~0.1 us).
        Raises :class:`LockTimeout` (a ``TimeoutError``) after ``timeout`` s."""
        if not (self.cross_process if cross_process is None else cross_process):
            return self.thread_lock(namespace)
        return _Held(self, namespace)


class _Held:
    __slots__ = ("locks", "namespace", "thread", "file")

    def __init__(self, locks: NamespaceLocks, namespace: str) -> None:
        self.locks = locks
        self.namespace = namespace

    def __enter__(self) -> None:
        self.thread = self.locks.thread_lock(self.namespace)
        self.thread.acquire()
        try:
            self.file = self.locks._file_lock(self.namespace)
            try:
                self.file.acquire()
            except filelock.Timeout:
                raise LockTimeout(
                    f"could not lock namespace {self.namespace!r} within {self.locks.timeout} s "
                    f"(lock file {self.file.lock_file})",
                    namespace=self.namespace,
                    path=self.file.lock_file,
                    timeout=self.locks.timeout,
                ) from None
            except OSError as exc:
                raise storage_error(exc, "lock", self.file.lock_file) from None
        except BaseException:
            self.thread.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.file.release()
        finally:
            self.thread.release()
