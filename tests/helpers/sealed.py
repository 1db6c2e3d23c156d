"""A sealed namespace filled with canaries, and where its key file is: shared
by the tests of sealing, sealed exports, rotation and the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from hrm_memory import FileKeys, Keep, MemoryManager, NamespaceSpec
from hrm_memory.storage.sealed.keys import keys_dir
from tests.helpers.redis_server import binary

CANARY = "CANARY-sealed-7f3a9c"
NS = "crypto.notes"  # gated, with kept history and a TTL (so records reach the cold archive)
SPEC = NamespaceSpec(NS, consent="conversation", ttl=3600, history=Keep(versions=5), owner="crypto")

needs_redis = pytest.mark.skipif(binary() is None, reason="redis-server not installed")


def fill(mm: MemoryManager, n: int = 6) -> dict[str, object]:
    """Gated records, some superseded (kept history), some archived."""
    mm.declare(SPEC)
    mm.consent.grant("conversation")
    expected: dict[str, object] = {}
    for i in range(n):
        mm.write(NS, f"k{i}", {"text": f"{CANARY} first {i}"})
        mm.write(NS, f"k{i}", {"text": f"{CANARY} now {i}"})
        expected[f"k{i}"] = {"text": f"{CANARY} now {i}"}
    mm.write("focus.conversation", "turn", {"text": CANARY})
    expected["turn"] = {"text": CANARY}
    return expected


def store_key_file(mm: MemoryManager) -> Path:
    """The store's default key file: under $HRM_MEMORY_KEYS, named by the store's id, 0600."""
    provider = mm.keys
    assert isinstance(provider, FileKeys)
    path = provider.path
    assert path.parent == keys_dir().absolute() and path.is_file()
    assert path.stat().st_mode & 0o777 == 0o600
    return path
