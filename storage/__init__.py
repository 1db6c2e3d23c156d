"""Tier backends: hot (process memory), warm (checksummed JSON logs), cold (archive).

Nothing here imports the manager; each backend implements the tier protocol
of :mod:`shared.memory.tiers` and is handed to the manager.
"""

from .cold import ColdTier
from .hot import HotTier, ReadCache
from .warm import WarmTier

__all__ = ["ColdTier", "HotTier", "ReadCache", "WarmTier"]
