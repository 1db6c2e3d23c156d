"""Storage: the backends and the tiers they are made of.

- ``file/``: the default backend, files under one root: the warm tier
  (``file/warm/``: checksummed JSON logs in buckets), the cold archive, flock
  locks and the file change log.
- ``redis/``: one Redis server or a Redis Cluster, for stores shared by hosts;
  imported on first use (redis-py is the optional extra ``redis``).
- ``memory.py``: ``memory://``, the reference backend, every record in process
  memory.
- ``sealed/``: the wrapper that encrypts consent-gated namespaces on any
  backend, and the key providers it reads.
- ``hot.py``: process memory for hot namespaces and gated values awaiting
  consent, which the pipeline keeps for every backend.

Nothing here imports the manager or the pipeline.
"""

from typing import Any

from .file.backend import DURABILITY, FileBackend
from .file.changes import FileChangeLog
from .file.cold import ColdTier
from .file.warm.tier import WarmTier
from .hot import HotTier, ReadCache
from .memory import MemoryBackend


def __getattr__(name: str) -> Any:
    if name == "RedisBackend":
        from .redis.backend import RedisBackend

        return RedisBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DURABILITY", "ColdTier", "FileBackend", "FileChangeLog", "HotTier", "MemoryBackend", "ReadCache", "RedisBackend",
           "WarmTier"]
