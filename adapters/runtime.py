"""Which MemoryManager the adapters use.

Legacy constructors take no manager, so the adapters ask this module. By
default :func:`get_manager` lazily opens one process-wide manager on
``$HRM_MEMORY_ROOT`` (else ``~/.local/share/hrm-memory``) with
``locking=True`` (legacy hosts may run several processes on one store) and
closes it at exit. Tests and hosts inject their own with :func:`use_manager`,
either for good (``use_manager(mm)``) or for a block
(``with use_manager(mm): ...``, which restores the previous one).

An adapter object binds the manager current when it is constructed; module
functions (``feedback``, ``integrity``, ``entities``) look it up per call.
"""

from __future__ import annotations

import atexit
import threading
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hrm_memory import MemoryManager

_lock = threading.Lock()
_current: MemoryManager | None = None  # injected with use_manager
_default: MemoryManager | None = None  # opened by get_manager


def get_manager() -> MemoryManager:
    """The injected manager, else the process-wide default (opened on first use)."""
    global _default
    mm = _current
    if mm is not None:
        return mm
    with _lock:
        if _default is None or _default.closed:
            from hrm_memory import MemoryManager

            _default = MemoryManager(None, locking=True)
            atexit.register(_default.close)
        return _default


class use_manager:
    """Make ``mm`` the manager of the adapters; as a context manager, only
    for the ``with`` block (the previous one is restored on exit)."""

    def __init__(self, mm: MemoryManager) -> None:
        global _current
        with _lock:
            self._previous = _current
            _current = mm
        self.manager = mm

    def __enter__(self) -> MemoryManager:
        return self.manager

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        global _current
        with _lock:
            _current = self._previous


__all__ = ["get_manager", "use_manager"]
