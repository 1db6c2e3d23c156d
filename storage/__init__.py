"""Storage: the default file backend and its parts.

``FileBackend`` implements :class:`hrm_memory.backend.Backend` over files
under one root: warm (checksummed JSON logs), cold (archive), flock locks and
the file change log. ``HotTier`` is process memory (session namespaces and
gated values awaiting consent), which the pipeline keeps for every backend.
Nothing here imports the manager or the pipeline.
"""

from .cold import ColdTier
from .file import DURABILITY, FileBackend
from .hot import HotTier, ReadCache
from .signal_log import FileChangeLog
from .warm import WarmTier

__all__ = ["DURABILITY", "ColdTier", "FileBackend", "FileChangeLog", "HotTier", "ReadCache", "WarmTier"]
