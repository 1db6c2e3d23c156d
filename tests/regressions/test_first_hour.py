"""Issue 22, "a new user's first hour": each promise a new user met broken."""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path

import pytest

from hrm_memory import AsyncMemoryManager, MemoryManager
from hrm_memory.aio import AsyncConsent, AsyncScope
from hrm_memory.manager import Consent, Scope

#: Sync names whose async twin has another name, or that stay sync on both
#: (building a handle, a property).
RENAMED = {"close": "aclose"}
SYNC_ON_BOTH = {"scope", "closed"}


def _public(cls: type) -> dict[str, inspect.Signature | None]:
    out: dict[str, inspect.Signature | None] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            out[name] = None
        elif callable(member) or isinstance(member, (staticmethod, classmethod)):
            out[name] = inspect.signature(getattr(cls, name))
    return out


@pytest.mark.parametrize(
    ("sync_cls", "async_cls"),
    [(MemoryManager, AsyncMemoryManager), (Scope, AsyncScope), (Consent, AsyncConsent)],
)
def test_every_public_sync_operation_has_an_async_twin(sync_cls: type, async_cls: type) -> None:
    sync, aio = _public(sync_cls), _public(async_cls)
    missing, differ = [], []
    for name, sig in sync.items():
        twin = RENAMED.get(name, name)
        if twin not in aio:
            missing.append(name)
            continue
        if name in SYNC_ON_BOTH or sig is None:
            continue
        assert inspect.iscoroutinefunction(getattr(async_cls, twin)), f"{async_cls.__name__}.{twin} is not a coroutine"
        theirs = aio[twin]
        assert theirs is not None
        mine, its = list(sig.parameters.values()), list(theirs.parameters.values())
        # The same parameters; an async twin may make a required one optional
        # (subscribe's callback: without one, the subscription is iterated).
        if [(p.name, p.kind) for p in mine] != [(p.name, p.kind) for p in its] or any(
            a.default != b.default and not (a.default is inspect.Parameter.empty and b.default is None)
            for a, b in zip(mine, its, strict=True)
        ):
            differ.append(f"{name}{sig} vs {twin}{theirs}")
    assert missing == [] and differ == []


def test_async_recall_remember_and_context_give_the_sync_results(tmp_path: Path) -> None:
    async def main() -> tuple[object, ...]:
        async with AsyncMemoryManager(tmp_path, durability="flush") as amm:
            done = await amm.remember("Gaurav prefers written agendas before every planning meeting", kind="semantic")
            hits = await amm.recall("what does Gaurav prefer before meetings")
            scoped = amm.scope("altitude")
            ctx = await scoped.context(budget=200)
            return done, [h.key for h in hits], ctx.tokens <= 200, await amm.consent.namespaces("conversation")

    done, keys, within, gated = asyncio.run(main())
    with MemoryManager(tmp_path, durability="flush") as mm:
        assert keys == [h.key for h in mm.recall("what does Gaurav prefer before meetings")]
        assert keys and keys[0] == done.key  # type: ignore[attr-defined]
        assert gated == mm.consent.namespaces("conversation")
    assert within
