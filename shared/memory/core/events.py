"""Subscriptions: change events within a process and across processes.

In-process, a committed change is queued while the namespace lock is still
held (so the queue is in commit order) and delivered after the lock is
released, on the writing thread, by whichever thread is dispatching at the
time. Callbacks therefore run outside every store lock, in commit order per
key; one that raises is logged and traced and stops neither the write nor
the other callbacks.

Across processes, every persisted change is also appended to the backend's
change log (:class:`hrm_memory.core.backend.ChangeLog`: a file log by default). A
process with cross-process subscriptions runs one thread that asks the log
every ``poll_interval`` seconds (5 ms by default) whether anything was added,
and delivers new entries in log order, which is commit order per key. A
cursor (:meth:`EventBus.cursor`) replays what a process missed.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from hrm_memory.core.backend import RECOVER, ChangeLog
from hrm_memory.core.errors import CursorExpired
from hrm_memory.core.records import Event

log = logging.getLogger("hrm_memory.core.events")

Callback = Callable[[Event], Any]


class Subscription:
    """A live subscription; ``cancel()`` ends it (also as a context manager)."""

    def __init__(self, bus: EventBus, namespace: str, key: str, callback: Callback, remote: bool) -> None:
        self.bus = bus
        self.namespace = namespace
        self.key = key
        self.callback = callback
        self.remote = remote
        self.active = True
        # While a replay (subscribe(since=...)) is being delivered, live
        # remote events queue here instead of being called at once.
        self.backlog: list[Event] | None = None
        self.backlog_lock = threading.Lock()

    def deliver_remote(self, event: Event, call: Callable[[Subscription, Event], None]) -> None:
        with self.backlog_lock:
            if self.backlog is not None:
                self.backlog.append(event)
                return
        call(self, event)

    def matches(self, event: Event) -> bool:
        if event.op == RECOVER or event.namespace[:1] == "_":
            # a note for derived data, or a change to a store-internal
            # namespace (kept history: "_h.<namespace>"), not a change to report
            return False
        return fnmatch.fnmatchcase(event.namespace, self.namespace) and (
            self.key == "*" or fnmatch.fnmatchcase(event.key, self.key)
        )

    def cancel(self) -> None:
        if self.active:
            self.active = False
            self.bus._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return f"Subscription({self.namespace!r}, key={self.key!r}, remote={self.remote}, active={self.active})"


class EventBus:
    """In-process dispatch of one manager, plus the watcher that reads the
    backend's change log for other processes' changes."""

    def __init__(
        self,
        changes: ChangeLog | None,
        *,
        report_error: Callable[[Subscription, Event, BaseException], None],
        poll_interval: float = 0.005,
    ) -> None:
        self.changes = changes
        self.poll_interval = poll_interval
        self._report_error = report_error
        self._subs: list[Subscription] = []
        self._remote: list[Subscription] = []
        self._queue: deque[tuple[Event, list[Subscription]]] = deque()
        self._dispatching = threading.Lock()
        self._dispatch_owner: int | None = None
        self._guard = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._pos: str | None = None
        self._read_lock = threading.Lock()
        #: Namespaces whose changed keys the recall index wants to know of,
        #: and those keys since it last looked (:meth:`take_touched`).
        self.indexed: frozenset[str] = frozenset()
        self.touched: set[tuple[str, str]] = set()

    @property
    def pending(self) -> bool:
        """Events are queued for delivery (the pipeline dispatches after the lock)."""
        return bool(self._queue)

    def take_touched(self) -> set[tuple[str, str]]:
        """The keys of indexed namespaces changed here since the last call."""
        taken, self.touched = self.touched, set()
        return taken

    # -- subscribing ---------------------------------------------------------------

    def subscribe(
        self, namespace: str, callback: Callback, key: str = "*", remote: bool = True, since: str | None = None
    ) -> Subscription:
        changes = self.changes if remote else None
        sub = Subscription(self, namespace, key, callback, remote)
        replay: list[Event] = []
        with self._guard:
            self._subs = [*self._subs, sub]
            if changes is not None:
                with self._read_lock:
                    if self._pos is None:
                        self._pos = changes.cursor()
                    if since is not None:
                        # What was missed, up to where the watcher is; live
                        # events after that wait in the backlog until the
                        # replay is delivered, so nothing is skipped, doubled
                        # or reordered at the seam.
                        replay, _ = changes.read(since, upto=self._pos)
                        sub.backlog = []
                    self._remote = [*self._remote, sub]
                self._ensure_watcher()
        if since is not None:
            # Callbacks run outside every lock (one may write to the store).
            for ev in replay:
                if sub.matches(ev):
                    self._call(sub, ev)
            while True:
                with sub.backlog_lock:
                    pending, sub.backlog = sub.backlog or [], ([] if sub.backlog else None)
                    if not pending:
                        sub.backlog = None
                        break
                for ev in pending:
                    self._call(sub, ev)
        return sub

    def _remove(self, sub: Subscription) -> None:
        with self._guard:
            self._subs = [s for s in self._subs if s is not sub]
            self._remote = [s for s in self._remote if s is not sub]
            stop = not self._remote and self._watcher is not None
        if stop:
            self._stop_watcher()

    # -- publishing ----------------------------------------------------------------

    def record(self, op: str, namespace: str, key: str, version: int, trace_id: str, persisted: bool) -> None:
        """Called with the namespace lock held, right after the commit: queue
        the local event and log the change for other processes (commit order)."""
        if persisted and self.changes is not None:
            self.changes.append(op, namespace, key, version, trace_id)
        if namespace in self.indexed:
            self.touched.add((namespace, key))
        subs = self._subs
        if subs:
            event = Event(op, namespace, key, version, trace_id, "local")
            matched = [s for s in subs if s.matches(event)]
            if matched:
                self._queue.append((event, matched))

    def dispatch(self) -> None:
        """Deliver queued events; called after the namespace lock is released.

        One thread at a time delivers, in queue order; a callback that writes
        to the store only queues (the outer loop delivers it next)."""
        me = threading.get_ident()
        while self._queue:
            if self._dispatch_owner == me or not self._dispatching.acquire(blocking=False):
                return
            self._dispatch_owner = me
            try:
                while self._queue:
                    event, subs = self._queue.popleft()
                    for sub in subs:
                        if sub.active:
                            self._call(sub, event)
            finally:
                self._dispatch_owner = None
                self._dispatching.release()

    def _call(self, sub: Subscription, event: Event) -> None:
        try:
            sub.callback(event)
        except Exception as exc:  # noqa: BLE001 - a subscriber's failure is its own
            log.exception("subscriber %r failed on %s %s/%s", sub, event.op, event.namespace, event.key)
            self._report_error(sub, event, exc)

    # -- cursors -------------------------------------------------------------------

    def cursor(self) -> str:
        return self.changes.cursor() if self.changes is not None else ""

    def since(self, cursor: str, namespace: str = "*", key: str = "*") -> tuple[list[Event], str]:
        """Events logged after ``cursor`` (every origin, this one included)
        matching the globs, and the cursor to resume from."""
        if self.changes is None:
            return [], cursor
        events, end = self.changes.read(cursor, skip_own=False)
        probe = Subscription(self, namespace, key, lambda e: None, True)
        return [e for e in events if probe.matches(e)], end

    # -- the watcher thread ---------------------------------------------------------

    def _ensure_watcher(self) -> None:
        if self._watcher is None:
            self._stop.clear()
            self._watcher = threading.Thread(target=self._watch, name="hrm-memory-events", daemon=True)
            self._watcher.start()

    def _stop_watcher(self) -> None:
        thread = self._watcher
        if thread is not None:
            self._stop.set()
            if thread is not threading.current_thread():
                thread.join(timeout=5)
            self._watcher = None

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - a dead watcher would lose every later event
                log.exception("change log watcher: poll failed; retrying")

    def _poll(self) -> None:
        changes, pos = self.changes, self._pos
        if changes is None or pos is None:
            return
        try:
            if not changes.changed(pos):
                return
        except CursorExpired:
            # We fell behind what the log keeps (a long pause): say so and go
            # on from the oldest entry there is.
            log.warning("change log: entries after %s were removed before this process read them; missed", pos)
            with self._read_lock:
                self._pos = changes.oldest()
            return
        with self._read_lock:
            events, self._pos = changes.read(self._pos or pos)
            remote = self._remote
        for ev in events:
            for sub in remote:
                if sub.active and sub.matches(ev):
                    sub.deliver_remote(ev, self._call)

    def close(self) -> None:
        self._stop_watcher()
        with self._guard:
            for sub in self._subs:
                sub.active = False
            self._subs = []
            self._remote = []
