"""File-system notifications for the file change log: one observer per process.

A process with cross-process subscriptions sleeps until the file system says
that a file of ``events/`` was written or created (``watchdog``: inotify on
Linux, FSEvents on macOS, kqueue on BSD), then reads the log, which stays the
only source of order and replay: a notification carries nothing but "look
again", so a lost or doubled one costs a read, never an event.

One watchdog observer serves every store root and every manager of the
process: each root's ``events/`` directory is watched once, whatever the
number of listeners (an event bus with cross-process subscriptions), and each
listener is woken through the callable it registered. The observer starts
with the first listener and is stopped (its threads joined) with the last, so
a process without cross-process subscriptions runs none of its threads.

On Linux the observer is watchdog's inotify reader (``InotifyFD``) itself:
its one thread reads the kernel's events and wakes the listeners directly, so
a change reaches a sleeping subscriber through one thread hand-over (reader,
then the subscriber's watcher). Elsewhere, or where that reader is missing
from the installed watchdog, it is watchdog's ``Observer``, whose events pass
its reader, emitter and dispatcher threads before the wake-up.

Where notifications cannot work, :func:`listen` raises :class:`OSError` and
the caller polls instead: watchdog's own choice is its polling observer (no
native notifications on this platform), or the log is on a network file
system (inotify there reports only this host's writes). Running out of
inotify instances or watches, or of file descriptors, raises the ``OSError``
of the failed system call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import FileCreatedEvent, FileModifiedEvent, FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver, PollingObserverVFS

try:
    from watchdog.observers.inotify_c import CallbackId, InotifyConstants, InotifyEvent, InotifyFD, Mask
    HAS_INOTIFY_READER = True
except (ImportError, OSError):  # not Linux, or a watchdog without the inotify reader
    HAS_INOTIFY_READER = False

#: Whether :func:`listen` uses the inotify reader directly where it exists
#: (tests set it False to run the ``Observer`` path on Linux as well).
DIRECT = True

#: File systems on which a host's notifications do not report other hosts'
#: writes (or report none at all): the log is polled there.
REMOTE_FILE_SYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "fuse.glusterfs", "lustre", "afs",
    "gfs2", "ocfs2", "fuse.sshfs", "fuse.s3fs", "fuse.rclone", "fuse.gcsfuse",
})

Wake = Callable[[], None]


def file_system_type(path: Path) -> str | None:
    """The type of the mounted file system holding ``path`` (Linux's
    ``/proc/self/mounts``: the longest mount point above it), or None where
    that cannot be told."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 3:
            continue
        # mount points escape space, tab, newline and backslash as octal
        mount = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind


class _Handler(FileSystemEventHandler):
    """Wakes every listener of one watched directory."""

    def __init__(self) -> None:
        self.wakes: tuple[Wake, ...] = ()
        self.dropped = False  # the kernel ended the watch (the directory went): its listeners poll

    def dispatch(self, event: FileSystemEvent) -> None:
        for wake in self.wakes:
            wake()


class _Generation:
    """One running watchdog ``Observer`` and the directories it watches. A
    generation whose threads died is left to its listeners (they poll); the
    next listener starts a new one."""

    def __init__(self) -> None:
        self.observer: BaseObserver = Observer()  # raises OSError when inotify has no instance or fd left
        if isinstance(self.observer, (PollingObserver, PollingObserverVFS)):
            raise OSError("watchdog has no native file-system notifications on this platform")
        self.watches: dict[str, tuple[ObservedWatch, _Handler]] = {}

    def watch(self, directory: str, handler: _Handler) -> ObservedWatch:
        watch = self.observer.schedule(
            handler, directory, recursive=False, event_filter=[FileModifiedEvent, FileCreatedEvent]
        )
        if not self.observer.is_alive():
            self.observer.start()
        return watch

    def unwatch(self, watch: Any, handler: _Handler) -> None:
        if self.alive():
            self.observer.unschedule(watch)

    def alive(self) -> bool:
        return self.observer.is_alive() and all(e.is_alive() for e in self.observer.emitters)

    def stop(self) -> None:
        self.observer.stop()
        if self.observer.is_alive() and self.observer is not threading.current_thread():
            self.observer.join(timeout=5)


class _Direct:
    """watchdog's inotify reader, one thread, waking listeners itself (see
    the module's docstring). A directory whose watch the kernel dropped (the
    directory was removed or replaced) is no longer alive for its listeners,
    who poll (its handler is marked dropped)."""

    def __init__(self) -> None:
        self.reader = InotifyFD()  # raises OSError when inotify has no instance or fd left
        self.reader.name = "hrm-memory-inotify"
        self.watches: dict[str, tuple[Any, _Handler]] = {}
        self.started = False

    def watch(self, directory: str, handler: _Handler) -> Any:
        mask = Mask(InotifyConstants.IN_MODIFY | InotifyConstants.IN_CREATE | InotifyConstants.IN_MOVED_TO)
        wd = self.reader.add_callback(os.fsencode(directory), mask, _DirectCallback(handler), CallbackId(id(handler)))
        if not self.started:
            self.reader.start()
            self.started = True
        return wd

    def unwatch(self, wd: Any, handler: _Handler) -> None:
        if self.alive():
            self.reader.remove_callbacks([(wd, CallbackId(id(handler)))])

    def alive(self) -> bool:
        return self.reader.is_alive()

    def stop(self) -> None:
        self.reader.stop()
        if self.reader.is_alive() and self.reader is not threading.current_thread():
            self.reader.join(timeout=5)


class _DirectCallback:
    """What the inotify reader calls for one watched directory."""

    def __init__(self, handler: _Handler) -> None:
        self.handler = handler

    def on_event(self, event: InotifyEvent) -> None:
        for wake in self.handler.wakes:
            wake()

    def on_watch_deleted(self, wd: Any) -> None:
        self.handler.dropped = True

    def on_queue_overflow(self) -> None:
        self.on_event(None)  # type: ignore[arg-type]  # events were lost: read the log again


class Listening:
    """One listener's registration. ``alive()``: notifications still come;
    ``close()`` ends the registration (idempotent)."""

    def __init__(self, shared: _Shared, generation: _Generation | _Direct, directory: str, handler: _Handler,
                 wake: Wake) -> None:
        self._shared = shared
        self.generation = generation
        self.directory = directory
        self.handler = handler
        self.wake = wake
        self.closed = False

    def alive(self) -> bool:
        return not self.closed and not self.handler.dropped and self.generation.alive()

    def close(self) -> None:
        self._shared.remove(self)


class _Shared:
    """The observer of this process (see the module's docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: _Generation | _Direct | None = None

    def add(self, directory: Path, wake: Wake) -> Listening:
        kind = file_system_type(directory)
        if kind in REMOTE_FILE_SYSTEMS:
            raise OSError(f"{directory} is on a network file system ({kind}): notifications miss other hosts' writes")
        key = os.fspath(directory)
        with self._lock:
            gen = self._current
            if gen is not None and not gen.alive():
                self._current = gen = None  # its listeners see it dead and poll; its threads stop with them
            if gen is None:
                gen = _Direct() if DIRECT and HAS_INOTIFY_READER else _Generation()
            watched = gen.watches.get(key)
            if watched is not None and watched[1].dropped:
                del gen.watches[key]  # the directory was replaced: watch the new one (the old listeners poll)
                watched = None
            if watched is None:
                handler = _Handler()
                try:
                    watch = gen.watch(key, handler)
                except BaseException:
                    if not gen.watches:
                        gen.stop()  # a failed first watch leaves no thread behind
                    raise
                watched = gen.watches[key] = (watch, handler)
                self._current = gen
            handler = watched[1]
            handler.wakes = (*handler.wakes, wake)
            return Listening(self, gen, key, handler, wake)

    def remove(self, listening: Listening) -> None:
        stop: _Generation | _Direct | None = None
        with self._lock:
            if listening.closed:
                return
            listening.closed = True
            gen = listening.generation
            handler = listening.handler
            handler.wakes = tuple(w for w in handler.wakes if w is not listening.wake)
            watched = gen.watches.get(listening.directory)
            if watched is not None and watched[1] is handler and not handler.wakes:
                del gen.watches[listening.directory]
                if gen.watches and not handler.dropped:
                    gen.unwatch(watched[0], handler)
            if not gen.watches:
                stop = gen
                if self._current is gen:
                    self._current = None
        if stop is not None:
            stop.stop()


    def forked(self) -> None:
        """In a forked child: no observer thread came along (and the lock may
        have been held by one of the parent's threads), so start afresh."""
        self._lock = threading.Lock()
        self._current = None


_SHARED = _Shared()
os.register_at_fork(after_in_child=_SHARED.forked)


def listen(directory: Path, wake: Wake) -> Listening:
    """Call ``wake()`` (from the observer's thread; it must be quick) whenever
    a file of ``directory`` is written or created. Raises :class:`OSError`
    where notifications are unavailable (see the module's docstring)."""
    return _SHARED.add(directory, wake)


__all__ = ["REMOTE_FILE_SYSTEMS", "Listening", "file_system_type", "listen"]
