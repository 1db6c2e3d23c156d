"""Compatibility adapters: the legacy the_assist / dopejar / locked_system
memory APIs, storing every byte through the MemoryManager.

``import hrm_memory.adapters`` registers the legacy import paths, so a legacy host needs
one extra line and nothing else::

    import hrm_memory.adapters                      # noqa: F401  (installs the aliases)
    from the_assist.core.memory_v2 import CompressedMemory

Which records each class reads and writes is fixed by
:mod:`migration.layout`; see docs/adapters.md.
"""

from ._aliases import ALIASES, install, uninstall
from .runtime import get_manager, use_manager

install()

__all__ = ["ALIASES", "get_manager", "install", "uninstall", "use_manager"]
