"""The recall index and purges: every index drops what any process or host purged.

The store keeps a purge epoch (``Backend.purges``, part of the backend
contract: ``storage/purge_epochs.py`` for files and Redis). :func:`catch_up`
runs before an index answers (``RecallIndex.sync``) and at close: it
compares the epoch the index has recorded with the store's and deletes the
rows of every namespace purged since, then hands back what those namespaces
hold now, to index again. :func:`purged_since_now` is asked
by an index write inside its transaction, so rows read before a purge (and
embedded meanwhile) are never written after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hrm_memory.core.backend import Backend
from hrm_memory.core.errors import MemoryStoreError

#: ``p`` below is the :class:`~hrm_memory.recall.index.RecallIndex`, typed
#: loosely: that module imports this one.
log = logging.getLogger("hrm_memory.recall")


def purged_since_now(backend: Backend) -> Callable[[], set[str] | None] | None:
    """A test of "which namespaces were purged since now" (None: cannot
    tell, so all); None for a backend without purge epochs (its derived
    data lives in this process: ``Core.on_purge`` reaches it)."""
    epochs = backend.purges
    if epochs is None:
        return None
    start = epochs.current()

    def purged() -> set[str] | None:
        if epochs.current() == start:
            return set()
        found: set[str] | None = epochs.purged_since(start)
        return found

    return purged


def catch_up(p: Any) -> tuple[set[tuple[str, str]], dict[str, str]]:
    """Drop the persisted index's rows of namespaces purged since it last
    looked; return the keys to index again and the meta to record (empty
    when nothing moved)."""
    disk, epochs = p.disk, p.core.backend.purges
    if disk is None or epochs is None:
        return set(), {}
    now = epochs.current()
    seen = disk.meta("purge_epoch")
    if seen is not None and seen == str(now):
        return set(), {}
    if seen is None and disk.meta("cursor") is None:
        return set(), {"purge_epoch": str(now)}  # a new index: nothing in it predates a purge
    gone: set[str] | None = epochs.purged_since(int(seen) if seen is not None and seen.lstrip("-").isdigit() else -1)
    if gone is None:
        gone = disk.namespaces()
    for ns in sorted(gone):
        disk.purge(ns)
    p.changed(disk)
    again = [s for s in p.core.registry if s.index and s.tier != "hot" and s.name in gone]
    return (p.stale_keys(again, full=True) if again else set()), {"purge_epoch": str(now)}


def at_close(p: Any) -> None:
    """``catch_up`` at close, for an index file there is (opening none)."""
    disk = p.disk
    if disk is None or p.core.closed or not disk.exists():
        return
    try:
        epochs = p.core.backend.purges
        if epochs is not None and not disk.opened():
            # Not opened by this process: nothing of it is pending here, and
            # unless a purge is recorded that the file has not caught up
            # with, it is left closed (no open, no schema, no checkpoint).
            now = epochs.current()
            if now == 0 or disk.peek("purge_epoch") == str(now):
                return
        again, meta = catch_up(p)
        if meta and not again:
            disk.apply([], [], meta)
    except MemoryStoreError as exc:  # the next recall catches up instead
        log.warning("recall index: purges not caught up at close (%s); the next recall does", exc)


__all__ = ["at_close", "catch_up", "purged_since_now"]
