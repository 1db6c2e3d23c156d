"""Storage: the default file backend and its parts.

``FileBackend`` implements :class:`hrm_memory.core.backend.Backend` over files
under one root: warm (checksummed JSON logs), cold (archive), flock locks and
the file change log. ``HotTier`` is process memory (session namespaces and
gated values awaiting consent), which the pipeline keeps for every backend.
``MemoryBackend`` (``memory://``) is the reference backend, every record in
process memory. ``RedisBackend`` (several hosts, one Redis server) is
imported on first use: redis-py is the optional extra ``redis``. Nothing here imports the manager or
the pipeline.
"""

from typing import Any

from .cold import ColdTier
from .file import DURABILITY, FileBackend
from .hot import HotTier, ReadCache
from .memory import MemoryBackend
from .signal_log import FileChangeLog
from .warm import WarmTier


def __getattr__(name: str) -> Any:
    if name == "RedisBackend":
        from .redis_backend import RedisBackend

        return RedisBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DURABILITY", "ColdTier", "FileBackend", "FileChangeLog", "HotTier", "MemoryBackend", "ReadCache", "RedisBackend",
           "WarmTier"]
