"""Subscriptions: change events within a process and across processes.

In-process, a committed change is queued while the namespace lock is still
held (so the queue is in commit order) and delivered after the lock is
released, on the writing thread, by whichever thread is dispatching at the
time. Callbacks therefore run outside every store lock, in commit order per
key; one that raises is logged and traced and stops neither the write nor
the other callbacks.

Across processes, every persisted change is also appended to the backend's
change log (:class:`hrm_memory.core.backend.ChangeLog`: a file log by default). A
process with cross-process subscriptions runs one thread per manager that
reads new entries and delivers them in log order, which is commit order per
key. It sleeps until the log says it may have grown
(:meth:`~hrm_memory.core.backend.ChangeLog.notify`: file-system notifications for
the file log, one observer per process) and, while asleep, looks once every
``HEALTH_CHECK`` seconds whether the wake-ups still come. Where a log has no
notifications (Redis), where they cannot start (no inotify instance, watch or
file descriptor left; a network file system), or once they stop (the
observer's thread died, or the log grew twice without one), the thread asks
the log every ``poll_interval`` seconds (5 ms by default) instead, and the
first such fallback of the process is logged as a warning. A notification
only says "read again": order and completeness come from the log either
way. A cursor (:meth:`EventBus.cursor`) replays what a process missed.

Closing the bus ends every subscription: ``when_ended`` callbacks are told
with :class:`StoreClosed`.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from hrm_memory.core.backend import RECOVER, ChangeLog, Notifications
from hrm_memory.core.errors import CursorExpired, StoreClosed
from hrm_memory.core.records import Event

log = logging.getLogger("hrm_memory.core.events")

Callback = Callable[[Event], Any]
#: Called once when a subscription ends: None after ``cancel()``, the error
#: (:class:`StoreClosed`) when the store closed under it.
Ended = Callable[[BaseException | None], Any]

#: Seconds a notified watcher sleeps before it checks that wake-ups still come.
HEALTH_CHECK = 1.0


class OncePerProcess:
    """Warns once per process per kind of fallback, however many buses fall back."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def warn(self, kind: str, message: str, *args: object) -> None:
        with self._lock:
            if kind in self._said:
                return
            self._said.add(kind)
        log.warning(message, *args)


#: The fallback warnings said so far in this process (a test may swap in a fresh one).
fallback_warnings = OncePerProcess()


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
        self._ended: list[Ended] = []
        self._end_lock = threading.Lock()
        self._end: BaseException | None | bool = False  # False while live

    def when_ended(self, fn: Ended) -> None:
        """Call ``fn`` once this subscription ends: ``fn(None)`` after
        ``cancel()``, ``fn(StoreClosed(...))`` when the store closes. At once
        if it has ended already."""
        with self._end_lock:
            if self._end is False:
                self._ended.append(fn)
                return
            end = self._end
        fn(None if end is True else end)

    def finish(self, error: BaseException | None) -> None:
        """End this subscription (the bus calls it: None on cancel, StoreClosed
        on close) and tell the ``when_ended`` listeners once."""
        self.active = False
        with self._end_lock:
            if self._end is not False:
                return
            self._end = True if error is None else error
            told, self._ended = self._ended, []
        for fn in told:
            try:
                fn(error)
            except Exception:  # noqa: BLE001 - one listener's failure stops neither the close nor the others
                log.exception("subscription end listener failed for %r", self)

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
            self.bus.unsubscribe(self)
        self.finish(None)

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
        notifications: bool = True,
    ) -> None:
        self.changes = changes
        self.poll_interval = poll_interval
        self._report_error = report_error
        self._subs: list[Subscription] = []
        self._remote: list[Subscription] = []
        #: Events awaiting delivery, in commit order. Others only test it for
        #: emptiness (the pipeline, after every op: dispatch when not empty,
        #: one attribute read and no call on the hot path); the bus alone
        #: appends and pops.
        self.queue: deque[tuple[Event, list[Subscription]]] = deque()
        #: True while a subscription is live: a writer that knows no commit
        #: listener follows its namespace may skip :meth:`record` otherwise.
        self.subscribed = False
        self._dispatching = threading.Lock()
        self._dispatch_owner: int | None = None
        self._guard = threading.Lock()
        self.notifications = notifications
        self._watcher: _Watcher | None = None
        self._halting: _Watcher | None = None  # stopped by unsubscribe, not yet joined
        self._closed = False
        self._pos: str | None = None
        self._read_lock = threading.Lock()
        #: The namespaces some commit listener follows (:meth:`follow`).
        self.followed: frozenset[str] = frozenset()
        self._followers: dict[str, tuple[Callable[[str, str], None], ...]] = {}

    @property
    def pending(self) -> bool:
        """Events are queued for delivery (the pipeline dispatches after the lock)."""
        return bool(self.queue)

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        """The live subscriptions."""
        return tuple(self._subs)

    @property
    def watching(self) -> str | None:
        """How the watcher thread learns of other processes' changes:
        ``"notified"``, ``"polling"``, or None when no thread runs."""
        watcher = self._watcher
        if watcher is None:
            return None
        return "notified" if watcher.notes is not None else "polling"

    def follow(self, listeners: list[tuple[Callable[[str, str], None], frozenset[str]]]) -> None:
        """Call each ``listener(namespace, key)`` on every change recorded
        to one of its namespaces (replacing what was followed before)."""
        followers: dict[str, tuple[Callable[[str, str], None], ...]] = {}
        for listener, namespaces in listeners:
            for ns in namespaces:
                followers[ns] = (*followers.get(ns, ()), listener)
        self._followers = followers
        self.followed = frozenset(followers)

    def tell(self, namespace: str, keys: list[str]) -> None:
        """Tell the listeners that follow ``namespace`` of changed ``keys``
        that no :meth:`record` reported (an import's)."""
        for listener in self._followers.get(namespace, ()):
            for key in keys:
                listener(namespace, key)

    # -- subscribing ---------------------------------------------------------------

    def subscribe(
        self, namespace: str, callback: Callback, key: str = "*", remote: bool = True, since: str | None = None
    ) -> Subscription:
        changes = self.changes if remote else None
        sub = Subscription(self, namespace, key, callback, remote)
        replay: list[Event] = []
        with self._guard:
            if self._closed:
                raise StoreClosed("the memory manager is closed")
            self._subs = [*self._subs, sub]
            self.subscribed = True
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

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop delivering to ``sub`` (:meth:`Subscription.cancel` calls it)."""
        with self._guard:
            self._subs = [s for s in self._subs if s is not sub]
            self.subscribed = bool(self._subs)
            self._remote = [s for s in self._remote if s is not sub]
            watcher = None
            if not self._remote and self._watcher is not None:
                watcher, self._watcher = self._watcher, None
                self._halting = watcher
        self._halt(watcher)

    # -- publishing ----------------------------------------------------------------

    def record(self, op: str, namespace: str, key: str, version: int, trace_id: str, persisted: bool) -> None:
        """Called with the namespace lock held, right after the commit: queue
        the local event and log the change for other processes (commit order)."""
        if persisted and self.changes is not None:
            self.changes.append(op, namespace, key, version, trace_id)
        if namespace in self.followed:
            for listener in self._followers.get(namespace, ()):  # a declare may have replaced it since
                listener(namespace, key)
        subs = self._subs
        if subs:
            event = Event(op, namespace, key, version, trace_id, "local")
            matched = [s for s in subs if s.matches(event)]
            if matched:
                self.queue.append((event, matched))

    def dispatch(self) -> None:
        """Deliver queued events; called after the namespace lock is released.

        One thread at a time delivers, in queue order; a callback that writes
        to the store only queues (the outer loop delivers it next)."""
        me = threading.get_ident()
        while self.queue:
            if self._dispatch_owner == me or not self._dispatching.acquire(blocking=False):
                return
            self._dispatch_owner = me
            try:
                while self.queue:
                    event, subs = self.queue.popleft()
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
        """Called with ``_guard`` held."""
        if self._watcher is None:
            self._watcher = _Watcher(self, self._halting)

    def start_notifications(self, wake: Callable[[], None]) -> Notifications | None:
        """Wake-ups from the change log for a new watcher, or None: it polls."""
        changes = self.changes
        if changes is None or not self.notifications:
            return None
        try:
            return changes.notify(wake)
        except Exception as exc:  # noqa: BLE001 - any failure to start them leaves polling, which always works
            fallback_warnings.warn(
                "unavailable",
                "change log: file-system notifications are unavailable (%s); subscribers poll the log every %g ms",
                exc, self.poll_interval * 1000,
            )
            return None

    def _halt(self, watcher: _Watcher | None) -> None:
        """Stop a watcher taken out of ``_watcher`` (outside ``_guard``: a
        callback on its thread may be subscribing or cancelling)."""
        if watcher is not None:
            watcher.halt()
            with self._guard:
                if self._halting is watcher:
                    self._halting = None

    def run_watcher(self, watcher: _Watcher, previous: _Watcher | None) -> None:
        """The watcher thread's loop."""
        if previous is not None and previous.thread is not threading.current_thread():
            previous.thread.join(timeout=5)  # one watcher delivers at a time: commit order holds across the handover
        self._poll_safely()  # what was logged before the wake-ups started
        misses = 0
        stop, woken = watcher.stop, watcher.woken
        while not stop.is_set():
            notes = watcher.notes
            if notes is None:
                if stop.wait(self.poll_interval):
                    return
                self._poll_safely()
                continue
            woke = woken.wait(HEALTH_CHECK)
            if stop.is_set():
                return
            if woke:
                # Cleared before the read: a change logged during it wakes us again.
                woken.clear()
                misses = 0
                self._poll_safely()
                continue
            # A quiet while: check that the wake-ups still come.
            if not notes.alive():
                reason = "the notification thread stopped"
            else:
                misses = misses + 1 if self._poll_safely() else 0
                if misses < 2:
                    continue  # one miss may be a wake-up still on its way
                reason = "the log grew twice without a notification"
            fallback_warnings.warn(
                "stopped", "change log: file-system notifications failed (%s); subscribers poll the log every %g ms",
                reason, self.poll_interval * 1000,
            )
            watcher.drop_notifications()
            self._poll_safely()

    def _poll_safely(self) -> bool:
        try:
            return self._poll()
        except Exception:  # noqa: BLE001 - a dead watcher would lose every later event
            log.exception("change log watcher: poll failed; retrying")
            return False

    def _poll(self) -> bool:
        """Deliver what was logged since the last read; True if the log had grown."""
        changes, pos = self.changes, self._pos
        if changes is None or pos is None:
            return False
        try:
            if not changes.changed(pos):
                return False
        except CursorExpired:
            # We fell behind what the log keeps (a long pause): say so and go
            # on from the oldest entry there is.
            log.warning("change log: entries after %s were removed before this process read them; missed", pos)
            with self._read_lock:
                self._pos = changes.oldest()
            return True
        with self._read_lock:
            events, self._pos = changes.read(self._pos or pos)
            remote = self._remote
        for ev in events:
            for sub in remote:
                if sub.active and sub.matches(ev):
                    sub.deliver_remote(ev, self._call)
        return True

    def close(self) -> None:
        """Stop the watcher and end every subscription (its ``when_ended``
        callbacks are told with :class:`StoreClosed`). Later subscribes raise
        :class:`StoreClosed`."""
        with self._guard:
            self._closed = True
            ended, self._subs, self._remote = self._subs, [], []
            self.subscribed = False
            for sub in ended:
                sub.active = False
            watcher, self._watcher = self._watcher, None
            halting = self._halting
        self._halt(watcher)
        self._halt(halting)
        for sub in ended:
            sub.finish(StoreClosed("the memory manager is closed; this subscription ended with it"))


class _Watcher:
    """One watcher thread of a bus, its stop signal and what wakes it."""

    def __init__(self, bus: EventBus, previous: _Watcher | None) -> None:
        self.stop = threading.Event()
        self.woken = threading.Event()
        self.notes = bus.start_notifications(self.woken.set)
        self.thread = threading.Thread(
            target=bus.run_watcher, args=(self, previous), name="hrm-memory-events", daemon=True
        )
        self.thread.start()

    def drop_notifications(self) -> None:
        notes, self.notes = self.notes, None
        if notes is not None:
            notes.close()

    def halt(self) -> None:
        """Stop the thread and wait for it (unless called on it: a callback
        that cancelled the last subscription), then end the wake-ups."""
        self.stop.set()
        self.woken.set()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=5)
        self.drop_notifications()
