"""``AsyncMemoryManager``: the same operations as coroutines, on the same ops.

Each method builds the op its sync twin builds and runs it through the same
pipeline on a small thread pool (the backends do blocking file or socket
I/O, and an ``fsync`` must not stall the event loop). The caller's context
travels with the op, so spans are parented to the caller's current span as
in sync code. Ops from concurrent tasks run concurrently, with the same
guarantees as ops from concurrent threads (``update`` is atomic per key).

Subscriptions are async iterables (``async for event in sub``) or take a
callback (a plain function or a coroutine function), delivered on the event
loop that subscribed, in commit order per key.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from hrm_memory.core.errors import InvalidArgument, StoreClosed
from hrm_memory.core.events import Subscription
from hrm_memory.manager import MemoryManager, _op_list
from hrm_memory.core.ops import (
    ArchiveOp,
    CheckOp,
    CompactOp,
    ConsentOp,
    ContextOp,
    CursorOp,
    DeclareOp,
    DeleteOp,
    EventsSinceOp,
    ExpandOp,
    ExportOp,
    ForgetOp,
    GetOp,
    GetRecordOp,
    HistoryOp,
    ImportOp,
    NamespacesOp,
    Op,
    PutOp,
    QueryAsOfOp,
    QueryOp,
    ReadAsOfOp,
    RecallOp,
    RememberOp,
    StatsOp,
    SubscribeOp,
    UndeclareOp,
    UpdateOp,
)
from hrm_memory.core.records import Event, Finding, Record
from hrm_memory.core.spec import NamespaceSpec
from hrm_memory.context.render import Context
from hrm_memory.recall.memories import Remembered
from hrm_memory.recall.search import Hit
from hrm_memory.history.keeper import Version
from hrm_memory.storage.sealed.backend import Rotation
from hrm_memory.storage.sealed.wrap import Passphrase

_END = object()


class Workers(NamedTuple):
    """What an async twin and its scopes share: the threads that run their
    ops, and the live subscriptions made through them (ended by ``aclose()``)."""

    pool: ThreadPoolExecutor
    live: weakref.WeakSet[_Feed]


class _Ended:
    """Queued when the store closed under a subscription: the iteration raises ``error``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Feed:
    """What a subscription delivers to, on the writing thread: hands each
    event to the event loop, queued for an ``async for`` or passed to the
    callback there. The async twin that subscribed binds it, drops it or
    closes it; :class:`AsyncSubscription` is the caller's view of it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[Event], Any] | None) -> None:
        self._loop = loop
        self.callback = callback
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._dropped = False
        self._ended = False
        self.subscription: Subscription | None = None

    def bind(self, subscription: Subscription) -> None:
        self.subscription = subscription
        subscription.when_ended(self._store_ended)

    def deliver(self, event: Event) -> None:
        """Called on the writing thread: hand the event to the loop."""
        try:
            self._loop.call_soon_threadsafe(self._on_loop, event)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def _on_loop(self, event: Any) -> None:
        if self._dropped:
            return  # a subscribe() that never returned: nobody asked for this
        callback = self.callback
        if callback is None:
            self.queue.put_nowait(event)
            return
        result = callback(event)
        if inspect.isawaitable(result):
            asyncio.ensure_future(result)

    def _store_ended(self, error: BaseException | None) -> None:
        """The subscription ended (any thread); ``error`` when the store closed."""
        if error is None:
            return  # cancel() queues its own end
        try:
            self._loop.call_soon_threadsafe(self._end_on_loop, error)
        except RuntimeError:  # the loop is closed: no iteration left to end
            pass

    def _end_on_loop(self, error: BaseException) -> None:
        if not self._ended:
            self._ended = True
            self.queue.put_nowait(_Ended(error))

    def close(self, error: BaseException) -> None:
        """End this subscription because its async twin closed (any thread)."""
        if self.subscription is not None:
            self.subscription.cancel()
        self._store_ended(error)

    def drop(self) -> None:
        """Undo a subscribe() that was cancelled: no delivery, ever."""
        self._dropped = True
        if self.subscription is not None:
            self.subscription.cancel()

    def cancel(self) -> None:
        if self.subscription is not None:
            self.subscription.cancel()
        self.queue.put_nowait(_END)


class AsyncSubscription:
    """A live subscription seen from asyncio: iterate it with ``async for``
    (when no callback was given), ``cancel()`` it, or use ``async with``.

    After ``cancel()`` an iteration ends (``StopAsyncIteration``); once the
    store is closed (``aclose()``, or ``close()`` of the manager) it delivers
    what was already queued, then raises :class:`StoreClosed`."""

    def __init__(self, feed: _Feed) -> None:
        self._feed = feed

    @property
    def subscription(self) -> Subscription | None:
        """The store's subscription this one delivers from."""
        return self._feed.subscription

    def cancel(self) -> None:
        """Stop delivery; an ``async for`` over this subscription ends."""
        self._feed.cancel()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        if self._feed.callback is not None:
            raise InvalidArgument("this subscription delivers to its callback; it cannot be iterated")
        queue = self._feed.queue
        item = await queue.get()
        if item is _END:
            queue.put_nowait(_END)  # a second iterator ends too
            raise StopAsyncIteration
        if isinstance(item, _Ended):
            queue.put_nowait(item)  # and so does every later one
            raise item.error
        return item  # type: ignore[no-any-return]

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


class AsyncOperations:
    """The record operations shared by :class:`AsyncMemoryManager` and
    :class:`AsyncScope`; each is the sync method's op, awaited."""

    #: The manager's pipeline run, bound to this handle's HRM (``MemoryManager.runner``).
    _runner: Callable[..., Any]
    _workers: Workers
    _hrm: str | None = None

    async def _run(self, op: Op) -> Any:
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        try:
            fut = loop.run_in_executor(self._workers.pool, ctx.run, self._runner, op)
        except RuntimeError:  # the worker pool is shut down: aclose() ran
            raise StoreClosed("the async manager is closed (aclose() ran)") from None
        return await fut

    async def read(self, namespace: str, key: str, default: Any = None, *, compact: bool = False,
                   as_of: Any = None) -> Any:
        """See :meth:`MemoryManager.read`."""
        if as_of is not None:
            return await self._run(ReadAsOfOp(namespace, key, as_of, default, compact, False))
        return await self._run(GetOp(namespace, key, default, compact))

    async def get_record(self, namespace: str, key: str, *, compact: bool = False,
                         as_of: Any = None) -> Record | None:
        """See :meth:`MemoryManager.get_record`."""
        if as_of is not None:
            return await self._run(ReadAsOfOp(namespace, key, as_of, None, compact, True))  # type: ignore[no-any-return]
        return await self._run(GetRecordOp(namespace, key, compact))  # type: ignore[no-any-return]

    async def history(self, namespace: str, key: str, *, compact: bool = False) -> list[Version]:
        """See :meth:`MemoryManager.history`."""
        return await self._run(HistoryOp(namespace, key, compact))  # type: ignore[no-any-return]

    async def forget(self, namespace: str, key: str) -> dict[str, int]:
        """See :meth:`MemoryManager.forget`."""
        return await self._run(ForgetOp(namespace, key))  # type: ignore[no-any-return]

    async def write(self, namespace: str, key: str, value: Any, *, imported: bool = False) -> str:
        """See :meth:`MemoryManager.write`."""
        return await self._run(PutOp(namespace, key, value, imported))  # type: ignore[no-any-return]

    async def update(self, namespace: str, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """See :meth:`MemoryManager.update`. ``fn`` is a plain function: it
        runs under the namespace lock, where nothing may be awaited."""
        if inspect.iscoroutinefunction(fn):
            raise InvalidArgument("update() runs fn under the namespace lock; pass a plain function, not a coroutine")
        return await self._run(UpdateOp(namespace, key, fn, default))

    async def delete(self, namespace: str, key: str) -> bool:
        """See :meth:`MemoryManager.delete`."""
        return await self._run(DeleteOp(namespace, key))  # type: ignore[no-any-return]

    async def query(
        self,
        namespace: str = "*",
        key: str = "*",
        *,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
        include_cold: bool = False,
        compact: bool = False,
        as_of: Any = None,
    ) -> list[Record]:
        """See :meth:`MemoryManager.query`."""
        if as_of is not None:
            return await self._run(QueryAsOfOp(namespace, key, where, limit, as_of, compact))  # type: ignore[no-any-return]
        return await self._run(QueryOp(namespace, key, where, limit, include_cold, compact))  # type: ignore[no-any-return]

    async def recall(
        self,
        query: str,
        *,
        namespaces: str | Sequence[str] = "*",
        kinds: str | Sequence[str] | None = None,
        k: int = 10,
        since: Any = None,
        explain: bool = False,
        include_cold: bool = False,
        where: dict[str, Any] | None = None,
        prefix: str | None = None,
    ) -> list[Hit]:
        """See :meth:`MemoryManager.recall`."""
        return await self._run(  # type: ignore[no-any-return]
            RecallOp(query, namespaces, kinds, k, since, explain, include_cold, where, prefix)
        )

    async def remember(
        self,
        content: str,
        *,
        kind: str,
        namespace: str | None = None,
        importance: float = 0.5,
        tags: Sequence[str] = (),
        key: str | None = None,
    ) -> Remembered:
        """See :meth:`MemoryManager.remember`."""
        return await self._run(  # type: ignore[no-any-return]
            RememberOp(content, kind, namespace, importance, tuple(tags), key)
        )

    async def context(
        self,
        hrm: str | None = None,
        *,
        budget: int = 2000,
        query: str | None = None,
        sections: str | Sequence[str] | None = None,
        now: Any = None,
    ) -> Context:
        """See :meth:`MemoryManager.context`."""
        hrm = hrm if hrm is not None else self._hrm
        if hrm is None:
            raise InvalidArgument("context() needs the HRM whose memory to render, e.g. context('altitude')")
        return await self._run(ContextOp(hrm, budget, query, sections, now))  # type: ignore[no-any-return]

    async def expand(self, namespace: str, value: Any) -> Any:
        """See :meth:`MemoryManager.expand`."""
        return await self._run(ExpandOp(namespace, value))

    async def subscribe(
        self,
        namespace: str,
        callback: Callable[[Event], Any] | None = None,
        key: str = "*",
        *,
        remote: bool = True,
        since: str | None = None,
    ) -> AsyncSubscription:
        """Events of matching changes (see :meth:`MemoryManager.subscribe`),
        delivered on this event loop: to ``callback`` (a function or a
        coroutine function) or, without one, to ``async for``."""
        feed = _Feed(asyncio.get_running_loop(), callback)
        ctx = contextvars.copy_context()
        op = SubscribeOp(namespace, feed.deliver, key, remote, since)
        try:
            job = self._workers.pool.submit(ctx.run, self._runner, op)
        except RuntimeError:  # the worker pool is shut down: aclose() ran
            raise StoreClosed("the async manager is closed (aclose() ran)") from None
        waiting = asyncio.wrap_future(job)
        try:
            subscription = await asyncio.shield(waiting)
        except asyncio.CancelledError:
            # Cut short (wait_for timing out, the task cancelled). A job not
            # started yet never will be; one running registers whatever we
            # do, so wait for it and cancel what it made: the caller got no
            # handle, so nothing may stay registered or be delivered.
            feed.drop()
            if not job.cancel():
                await _undo(waiting)
            raise
        feed.bind(subscription)
        self._workers.live.add(feed)
        return AsyncSubscription(feed)

    async def cursor(self) -> str:
        """See :meth:`MemoryManager.cursor`."""
        return await self._run(CursorOp())  # type: ignore[no-any-return]

    async def events_since(self, cursor: str, namespace: str = "*", key: str = "*") -> tuple[list[Event], str]:
        """See :meth:`MemoryManager.events_since`."""
        return await self._run(EventsSinceOp(cursor, namespace, key))  # type: ignore[no-any-return]

    async def namespaces(self) -> list[NamespaceSpec]:
        """See :meth:`MemoryManager.namespaces`."""
        return await self._run(NamespacesOp())  # type: ignore[no-any-return]

    async def batch(self, ops: Iterable[Op]) -> list[Any]:
        """Run ``ops`` in order (one after another, not concurrently); one
        result each. The first that raises stops the batch."""
        return [await self._run(op) for op in _op_list(ops)]


class AsyncMemoryManager(AsyncOperations):
    """:class:`MemoryManager` for asyncio: ``await amm.read(...)``,
    ``async with AsyncMemoryManager(root) as amm``, ``async for`` over a
    subscription. Takes the manager's arguments, or ``manager=`` an open
    one to share (closing the async twin then leaves it open).
    ``max_workers`` bounds the threads that run ops."""

    def __init__(
        self,
        root: Any = None,
        *,
        manager: MemoryManager | None = None,
        max_workers: int = 4,
        **options: Any,
    ) -> None:
        if type(max_workers) is not int or max_workers < 1:
            raise InvalidArgument(f"max_workers must be an int >= 1, not {max_workers!r}")
        if manager is not None and (root is not None or options):
            raise InvalidArgument("pass either manager= or the manager's arguments, not both")
        if manager is not None and not isinstance(manager, MemoryManager):
            raise InvalidArgument(f"manager= takes an open MemoryManager, not {type(manager).__name__}")
        self._owns = manager is None
        self.manager = manager if manager is not None else MemoryManager(root, **options)
        self._runner = self.manager.runner(None)
        self._workers = Workers(ThreadPoolExecutor(max_workers, thread_name_prefix="hrm-memory-async"), weakref.WeakSet())
        self.consent = AsyncConsent(self)

    async def __aenter__(self) -> AsyncMemoryManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Wait for running ops, then close the manager (if this twin opened it).

        Every subscription made through this twin (or its scopes) ends: an
        ``async for`` over one delivers what was queued, then raises
        :class:`StoreClosed`; later calls raise :class:`StoreClosed`.

        The close is not cut short: cancelled (``asyncio.wait_for`` timing
        out, a task cancelled), ``aclose`` still waits for the close running
        in its thread to finish, then raises ``CancelledError``. So when it
        returns or raises, the manager is closed and its threads stopped,
        never left open behind a cancelled await."""
        done = asyncio.get_running_loop().run_in_executor(None, self._close_now)
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            await done  # the close goes on in its thread: wait for it, then let the cancellation through
            raise

    def _close_now(self) -> None:
        self._workers.pool.shutdown(True)
        if self._owns:
            self.manager.close()
        closed = StoreClosed("the async manager is closed (aclose() ran); this subscription ended with it")
        for feed in list(self._workers.live):
            feed.close(closed)

    @property
    def workers(self) -> Workers:
        """The threads that run ops and the live subscriptions, shared with this twin's scopes."""
        return self._workers

    @property
    def closed(self) -> bool:
        """See :attr:`MemoryManager.closed`."""
        return self.manager.closed

    def __repr__(self) -> str:
        return f"AsyncMemoryManager({self.manager!r})"

    def runner(self, hrm: str | None = None) -> Callable[..., Any]:
        """See :meth:`MemoryManager.runner`: the same blocking ``run(op)``
        (the async operations run it on this manager's worker threads)."""
        return self.manager.runner(hrm)

    def scope(self, hrm: str) -> AsyncScope:
        """See :meth:`MemoryManager.scope`."""
        self.manager.scope(hrm)  # checks the HRM
        return AsyncScope(self, hrm)

    async def declare(self, spec: NamespaceSpec | str, **fields: Any) -> NamespaceSpec:
        """See :meth:`MemoryManager.declare`."""
        if isinstance(spec, str):
            spec = NamespaceSpec(spec, **fields)
        elif fields:
            raise InvalidArgument("pass either a NamespaceSpec or a name with fields, not both")
        return await self._run(DeclareOp(spec))  # type: ignore[no-any-return]

    async def undeclare(self, namespace: str, *, purge: bool = False) -> dict[str, int]:
        """See :meth:`MemoryManager.undeclare`."""
        return await self._run(UndeclareOp(namespace, purge))  # type: ignore[no-any-return]

    async def rotate_keys(self, category: str, *, wait: bool = False) -> Rotation:
        """See :meth:`MemoryManager.rotate_keys` (the reseal runs in its own
        thread; with ``wait=True`` it is awaited on the pool, never on the loop)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._workers.pool, functools.partial(self.manager.rotate_keys, category, wait=wait)
        )

    async def archive(self, now: float | None = None) -> dict[str, int]:
        """See :meth:`MemoryManager.archive`."""
        return await self._run(ArchiveOp(now))  # type: ignore[no-any-return]

    async def check(self, fix: bool = False) -> list[Finding]:
        """See :meth:`MemoryManager.check`."""
        return await self._run(CheckOp(fix))  # type: ignore[no-any-return]

    async def compact(self, namespace: str | None = None) -> int:
        """See :meth:`MemoryManager.compact`."""
        return await self._run(CompactOp(namespace))  # type: ignore[no-any-return]

    async def stats(self) -> dict[str, Any]:
        """See :meth:`MemoryManager.stats`."""
        return await self._run(StatsOp())  # type: ignore[no-any-return]

    async def export(self, out: Any, *, namespaces: str = "*", progress: Callable[[int], Any] | None = None,
                     include_keys: bool = False, passphrase: Passphrase | str | bytes | None = None) -> dict[str, int]:
        """See :meth:`MemoryManager.export` (runs on the pool: the event loop is never blocked)."""
        op = ExportOp(out, namespaces, progress, include_keys, Passphrase.of(passphrase))
        return await self._run(op)  # type: ignore[no-any-return]

    async def import_(self, source: Any, *, progress: Callable[[int], Any] | None = None,
                      apply_consent: bool = False, passphrase: Passphrase | str | bytes | None = None) -> dict[str, int]:
        """See :meth:`MemoryManager.import_`."""
        return await self._run(ImportOp(source, progress, apply_consent, Passphrase.of(passphrase)))  # type: ignore[no-any-return]


class AsyncScope(AsyncOperations):
    """An :class:`AsyncMemoryManager` seen by one HRM."""

    def __init__(self, amm: AsyncMemoryManager, hrm: str) -> None:
        self.hrm = self._hrm = hrm
        self._runner = amm.manager.runner(hrm)
        self._workers = amm.workers

    def __repr__(self) -> str:
        return f"AsyncScope({self.hrm!r})"


async def _undo(waiting: asyncio.Future[Any]) -> None:
    """Wait for a subscribe job already running, then cancel what it
    registered. Further cancellations wait too (the caller re-raises)."""
    while True:
        try:
            subscription = await asyncio.shield(waiting)
        except asyncio.CancelledError:
            if waiting.cancelled():
                return  # the job never ran
            continue
        except Exception:  # noqa: BLE001 - it failed: nothing was registered
            return
        subscription.cancel()
        return


class AsyncConsent:
    """``amm.consent``: :class:`~hrm_memory.manager.Consent` as coroutines."""

    def __init__(self, amm: AsyncMemoryManager) -> None:
        self._amm = amm

    async def granted(self, category: str) -> bool:
        return self._amm.manager.consent.granted(category)

    async def status(self) -> dict[str, bool]:
        return self._amm.manager.consent.status()

    async def namespaces(self, category: str) -> list[str]:
        return self._amm.manager.consent.namespaces(category)

    async def grant(self, category: str) -> dict[str, Any]:
        (result,) = await self._amm.batch([ConsentOp(category, True)])
        return result  # type: ignore[no-any-return]

    async def revoke(self, category: str, *, purge: bool = False) -> dict[str, Any]:
        (result,) = await self._amm.batch([ConsentOp(category, False, purge)])
        return result  # type: ignore[no-any-return]


__all__ = ["AsyncConsent", "AsyncMemoryManager", "AsyncScope", "AsyncSubscription"]
