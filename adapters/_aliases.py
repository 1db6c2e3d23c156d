"""Legacy import paths: ``the_assist.*``, ``dopejar.*`` and ``locked_system.*``
resolve to the modules under ``adapters`` (the same module objects).

A meta path finder placed first on ``sys.meta_path`` answers for those names
only; every other import is untouched. ``dopejar`` is the 2026-01-22 name of
``the_assist``, so both map to ``adapters.the_assist`` and
``the_assist.core.memory_v2 is dopejar.core.memory_v2``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: legacy top-level package -> the adapter package that implements it
ALIASES: dict[str, str] = {
    "the_assist": "hrm_memory.adapters.the_assist",
    "dopejar": "hrm_memory.adapters.the_assist",
    "locked_system": "hrm_memory.adapters.locked_system",
}


def target_of(fullname: str) -> str | None:
    """The adapter module name for a legacy module name, or None."""
    head, dot, rest = fullname.partition(".")
    base = ALIASES.get(head)
    if base is None:
        return None
    return base + dot + rest


class _AliasLoader(importlib.abc.Loader):
    """Hands out the already-imported adapter module under the legacy name."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamps the alias spec on the module it got from
        # create_module; give the module its own spec back so that it keeps
        # one identity (reload, pickling, introspection).
        module.__spec__ = self._spec


class LegacyAliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        name = target_of(fullname)
        if name is None:
            return None
        real = sys.modules.get(name)
        if real is None:
            try:
                found = importlib.util.find_spec(name)
            except ModuleNotFoundError:
                found = None
            if found is None:
                return None  # not covered by the adapters: ModuleNotFoundError
            is_package = found.submodule_search_locations is not None
        else:
            is_package = hasattr(real, "__path__")
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(name), is_package=is_package)


_FINDER = LegacyAliasFinder()


def install() -> None:
    """Register the legacy import paths (idempotent)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Remove the finder. Legacy names already imported stay in ``sys.modules``."""
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
