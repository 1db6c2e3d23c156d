"""A purge on the file backend reaches every process.

The cold frame cache is keyed by what a frame holds, not by
``segment:offset``: after process A purges a namespace, consents again and
archives new records (a new segment, at the same offsets), process B never
serves the purged frame from its cache (the purged value for a key written
again, ``CorruptRecord`` for a sound record, a ``dangling-archive-marker``
from its check(), a sound record tombstoned by its check(fix=True)). An index
update racing a purge does not write the text back; a purge leaves no key in
its own tombstones or the change log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from hrm_memory import MemoryManager
from tests.helpers.canary import files_holding

REPO = Path(__file__).resolve().parent.parent.parent
NS = "altitude.history"
YEAR = 365 * 86400

_READER = """
import json, sys
from hrm_memory import MemoryManager
mm = MemoryManager(sys.argv[1], durability="flush")
print("READY", flush=True)
for line in sys.stdin:
    ns, keys = json.loads(line)
    out = {}
    for k in keys:
        try:
            rec = mm.get_record(ns, k)
            out[k] = None if rec is None else [rec.tier, rec.value]
        except Exception as exc:
            out[k] = ["error", type(exc).__name__]
    out["check"] = [f.kind for f in mm.check()]
    print(json.dumps(out), flush=True)
mm.close()
"""


def _ask(p: subprocess.Popen[str], ns: str, keys: list[str]) -> dict[str, object]:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(json.dumps([ns, keys]) + "\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())  # type: ignore[no-any-return]


def test_cold_frames_cached_before_a_purge_are_not_served_after_it(root: Path) -> None:
    """B reads "s1" as its new value (not the purged one) and "s2" as
    written (not CorruptRecord), and its check() is clean (no
    dangling-archive-marker)."""
    with MemoryManager(root, durability="flush") as mm:
        mm.consent.grant("conversation")
        mm.write(NS, "s1", {"v": "before the purge"})
        mm.write(NS, "s0", {"v": "also before"})
        mm.archive(now=time.time() + YEAR)
        assert mm.get_record(NS, "s1").tier == "cold"  # type: ignore[union-attr]
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "READY"
        for rnd in range(3):
            seen = _ask(reader, NS, ["s0", "s1"])  # B caches the frame
            assert seen["s1"] == ["cold", {"v": "before the purge"} if rnd == 0 else {"v": f"after, round {rnd - 1}"}]
            with MemoryManager(root, durability="flush") as mm:
                mm.consent.revoke("conversation", purge=True)
                mm.consent.grant("conversation")
                mm.write(NS, "s2", {"v": f"a sound record, round {rnd}"})
                mm.write(NS, "s1", {"v": f"after, round {rnd}"})
                mm.write(NS, "s0", {"v": "before again"})
                mm.archive(now=time.time() + YEAR)
                assert mm.get_record(NS, "s2").tier == "cold"  # type: ignore[union-attr]
                assert mm.check() == []
            seen = _ask(reader, NS, ["s2", "s1"])  # s2 first: a key the cached frame does not hold
            assert seen["s1"] == ["cold", {"v": f"after, round {rnd}"}], seen
            assert seen["s2"] == ["cold", {"v": f"a sound record, round {rnd}"}], seen
            assert seen["check"] == [], seen
    finally:
        assert reader.stdin is not None
        reader.stdin.close()
        reader.wait(timeout=60)


def test_a_purged_value_is_never_served_from_another_process_cache(root: Path) -> None:
    """The same after undeclare(purge=True) and a new declaration: the key
    written again is read as its new value, never the purged one (a cache
    checked by version alone serves the purged value whenever the versions
    meet again, so this holds only if the cache is keyed by content)."""
    from hrm_memory import NamespaceSpec

    spec = NamespaceSpec("t.archived", ttl=60.0)
    with MemoryManager(root, durability="flush") as mm:
        mm.declare(spec)
        mm.write(spec.name, "k", {"secret": "PURGED-4f1c"})
        mm.archive(now=time.time() + YEAR)
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "READY"
        assert _ask(reader, spec.name, ["k"])["k"] == ["cold", {"secret": "PURGED-4f1c"}]
        with MemoryManager(root, durability="flush") as mm:
            mm.undeclare(spec.name, purge=True)
            mm.declare(spec)
            mm.write(spec.name, "k", {"secret": "new"})
            mm.archive(now=time.time() + YEAR)
            rec = mm.get_record(spec.name, "k")
            assert rec is not None and rec.tier == "cold"
        assert _ask(reader, spec.name, ["k"])["k"] == ["cold", {"secret": "new"}]
    finally:
        assert reader.stdin is not None
        reader.stdin.close()
        reader.wait(timeout=60)


CANARY_WORD = "zqpurgecanary"

_SLOW_INDEXER = """
import os, sys, time
from pathlib import Path
from hrm_memory import MemoryManager
root, flags = sys.argv[1], Path(sys.argv[2])

def embed(texts):
    # A real embedder takes seconds: this one waits, while holding what it
    # read, until the test has purged (deterministic, no sleep race).
    if any("%(word)s" in t for t in texts):
        (flags / "embedding").touch()
        deadline = time.monotonic() + 60
        while not (flags / "purged").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return [[1.0, float(len(t) %% 7), 0.5] for t in texts]

mm = MemoryManager(root, durability="flush", embed=embed)
print("READY", flush=True)
sys.stdin.readline()
hits = mm.recall("%(word)s", k=50)
print("HITS", sorted({h.namespace for h in hits}), flush=True)
mm.close()
""" % {"word": CANARY_WORD}


def test_an_index_update_racing_a_purge_does_not_write_the_text_back(root: Path, tmp_path: Path) -> None:
    """Process R's recall reads the changed records (the canary), embeds
    them (slowly), and meanwhile this process purges: R's index write does
    not put the purged text back into recall.db (R's hits are checked
    anyway; what matters is the text on disk)."""
    for rnd in range(3):
        flags = tmp_path / f"flags{rnd}"
        flags.mkdir()
        with MemoryManager(root, durability="flush") as mm:
            mm.consent.grant("conversation")
            mm.write("altitude.patterns", "keep", {"note": f"an ungated pattern, round {rnd}"})
            for i in range(5):
                mm.write("altitude.history", f"s{i}", {"summary": f"{CANARY_WORD} session {i} round {rnd}"})
        r = subprocess.Popen([sys.executable, "-c", _SLOW_INDEXER, str(root), str(flags)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert r.stdout is not None and r.stdin is not None
            assert r.stdout.readline().strip() == "READY"
            r.stdin.write("go\n")
            r.stdin.flush()
            deadline = time.monotonic() + 60
            while not (flags / "embedding").exists():
                assert time.monotonic() < deadline and r.poll() is None, "the indexer never embedded the canary"
                time.sleep(0.01)
            with MemoryManager(root, durability="flush") as mm:
                mm.consent.revoke("conversation", purge=True)
            (flags / "purged").touch()
            assert "altitude.history" not in r.stdout.readline()  # hits are checked against the store
        finally:
            r.stdin.close() if r.stdin else None
            assert r.wait(timeout=60) == 0
        assert files_holding(root, CANARY_WORD) == [], f"round {rnd}: purged text written back"
        with MemoryManager(root, durability="flush") as mm:
            assert mm.recall(CANARY_WORD) == []
            assert [h.key for h in mm.recall("ungated pattern")] == ["keep"]
        assert files_holding(root, CANARY_WORD) == []


def _keys_and_values(mm: MemoryManager, ns: str, n: int) -> list[str]:
    import secrets

    out = []
    for _ in range(n):
        key, value = "k" + secrets.token_hex(12), secrets.token_hex(24)
        mm.write(ns, key, {"text": value})
        out += [key, value]
    return out


def _everything_on_disk(root: Path) -> bytes:
    return b"".join(p.name.encode() + p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_revoke_with_purge_leaves_no_key_on_disk(root: Path) -> None:
    """No purged key stays in the purge's own tombstone lines
    (warm/<ns>/*.log) or in events/*.log."""
    with MemoryManager(root, durability="flush") as mm, MemoryManager(root, durability="flush") as other:
        mm.consent.grant("conversation")
        canaries = _keys_and_values(mm, "focus.conversation", 30)
        mm.update("focus.conversation", canaries[0], lambda v: {**v, "again": 1})
        cursor = other.cursor()
        assert any(c.encode() in _everything_on_disk(root) for c in canaries)
        mm.consent.revoke("conversation", purge=True)
        disk = _everything_on_disk(root)
        assert [c for c in canaries if c.encode() in disk] == [], "purged keys or values left on disk"
        assert mm.check() == [] and other.check() == []
        # The log reads on from a cursor taken before the purge; other processes read on too.
        mm.write("altitude.patterns", "after", 1)
        events, _ = other.events_since(cursor)
        assert [(e.namespace, e.key) for e in events] == [("focus.consent", "conversation"), ("altitude.patterns", "after")]
        assert other.read("focus.conversation", canaries[0]) is None
        mm.consent.grant("conversation")
        mm.write("focus.conversation", canaries[0], {"text": "new"})
        assert other.read("focus.conversation", canaries[0]) == {"text": "new"}


def test_undeclare_with_purge_leaves_no_key_on_disk(root: Path) -> None:
    from hrm_memory import NamespaceSpec

    with MemoryManager(root, durability="flush") as mm:
        mm.declare(NamespaceSpec("t.gone", index=("$",)))
        canaries = _keys_and_values(mm, "t.gone", 30)
        mm.undeclare("t.gone", purge=True)
        disk = _everything_on_disk(root)
        assert [c for c in canaries if c.encode() in disk] == [], "purged keys or values left on disk"
        assert mm.check() == []
