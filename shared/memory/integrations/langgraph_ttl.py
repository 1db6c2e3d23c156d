"""The TTL sweeper thread of :class:`hrm_memory.integrations.langgraph.MemoryStore`."""

from __future__ import annotations

import concurrent.futures
import math
import threading
from collections.abc import Callable
from typing import Any

from hrm_memory.core.errors import InvalidArgument


class Sweeper:
    """Calls ``sweep()`` every ``interval`` minutes on a daemon thread until
    :meth:`stop`. A sweep that raises is retried at the next interval, unless
    ``closed()`` says the store is gone (then the thread ends)."""

    def __init__(self, sweep: Callable[[], object], closed: Callable[[], bool]) -> None:
        self._sweep, self._closed = sweep, closed
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._done: concurrent.futures.Future[None] | None = None

    def start(self, interval: Any) -> concurrent.futures.Future[None]:
        """Start (if not running); a future that completes when the thread ends."""
        if self._thread is not None and self._thread.is_alive():
            assert self._done is not None
            return self._done
        if not (type(interval) in (int, float) and math.isfinite(interval) and interval > 0):
            raise InvalidArgument(f"sweep_interval_minutes must be a positive number, not {interval!r}")
        seconds = float(interval) * 60.0
        self._stop.clear()
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        stop, sweep, closed = self._stop, self._sweep, self._closed

        def loop() -> None:
            try:
                while not stop.wait(seconds):
                    try:
                        sweep()
                    except Exception:
                        if closed():
                            break
            finally:
                done.set_result(None)

        self._done = done
        self._thread = threading.Thread(target=loop, name="hrm-memory-langgraph-ttl", daemon=True)
        self._thread.start()
        return done

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread; True once it has ended (or none was running)."""
        thread = self._thread
        if thread is None:
            return True
        self._stop.set()
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._thread = None
        return True


__all__ = ["Sweeper"]
