"""Sealed namespaces: consent-gated values are ciphertext at rest, and
forgetting (revoke with purge) reaches every copy by destroying the key.

Real files, real redis-server with AOF and RDB, real AES-GCM; the key files
live under the run's HRM_MEMORY_KEYS folder (tests/conftest.py)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from hrm_memory import (
    EnvKeys,
    FileKeys,
    Keep,
    KeyUnavailable,
    MemoryManager,
    MemoryStoreError,
    NamespaceSpec,
    WrongKey,
)
from hrm_memory.core.spec import HISTORY_PREFIX, Registry, key_group
from hrm_memory.storage.sealed.keys import DataKey, keys_dir, make_keyring
from hrm_memory.storage.sealed.backend import parse
from tests.helpers.redis_server import RedisServer, binary
from tests.helpers.canary import files_holding
from tests.helpers.sealed import CANARY, NS, SPEC, fill, store_key_file, needs_redis



def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] in ("warm", "cold", "quarantine")
    }


# -- 2. ciphertext only ------------------------------------------------------------------


def test_a_gated_canary_is_in_no_file_before_or_after_consent(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MemoryManager(root) as mm:
        mm.declare(SPEC)
        mm.write(NS, "a", {"text": CANARY})
        assert files_holding(root, CANARY) == []
        mm.consent.grant("conversation")
        mm.write(NS, "a", {"text": CANARY + " again"})  # the first version goes to kept history
        mm.write(NS, "b", {"text": CANARY})
        assert mm.archive(now=time.time() + 7200)[NS] == 2  # cold frames hold them now
        mm.write(NS, "c", {"text": CANARY})
        assert mm.read(NS, "a") == {"text": CANARY + " again"}
        assert [v.value for v in mm.history(NS, "a")] == [{"text": CANARY + " again"}, {"text": CANARY}]
        assert files_holding(root, CANARY) == []  # warm logs, cold frames (decompressed), history
        raw = [st.value for st in mm.backend.scan(NS, include_cold=True)]
        assert len(raw) == 3 and all(parse(v) is not None for v in raw)
    with MemoryManager(root) as mm:  # another session reads it back with the key file
        assert mm.read(NS, "b") == {"text": CANARY}
        assert mm.check() == []


def test_ungated_namespaces_are_stored_as_they_are_and_opt_in_seals(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MemoryManager(root) as mm:
        mm.declare(NamespaceSpec("crypto.plain", owner="crypto"))
        mm.declare(NamespaceSpec("crypto.secret", owner="crypto", encrypt=True))
        mm.write("crypto.plain", "k", {"text": CANARY + "-plain"})
        mm.write("crypto.secret", "k", {"text": CANARY + "-secret"})
        assert files_holding(root, CANARY + "-plain")
        assert files_holding(root, CANARY + "-secret") == []
        assert mm.read("crypto.secret", "k") == {"text": CANARY + "-secret"}
        spec = [s for s in mm.namespaces() if s.name == "crypto.secret"][0]
        assert spec.encrypt is True and NamespaceSpec.from_dict(spec.to_dict()) == spec
        assert "encrypt" not in NamespaceSpec("crypto.plain").to_dict()
        # undeclaring with purge destroys the namespace's own key
        ids = mm.keys.ids("ns:crypto.secret")
        assert len(ids) == 1
        mm.undeclare("crypto.secret", purge=True)
        assert mm.keys.ids("ns:crypto.secret") == []


def test_a_namespace_sealed_after_it_was_plain_is_sealed_in_every_manager(tmp_path: Path) -> None:
    """Which namespaces are sealed follows every change of the declarations:
    undeclared and declared again with ``encrypt=True`` in one manager, and
    declared at run time by another manager on the same root."""
    root = tmp_path / "store"
    with MemoryManager(root) as a, MemoryManager(root) as b:
        a.declare(NamespaceSpec("crypto.later", owner="crypto"))
        a.write("crypto.later", "k", {"text": CANARY + "-plain"})
        assert files_holding(root, CANARY + "-plain")
        a.undeclare("crypto.later", purge=True)
        a.declare(NamespaceSpec("crypto.later", owner="crypto", encrypt=True))
        a.write("crypto.later", "k", {"text": CANARY + "-a"})
        a.declare(NamespaceSpec("crypto.other", owner="crypto", encrypt=True, history=Keep(versions=2)))
        b.write("crypto.other", "k", {"text": CANARY + "-b1"})  # b learns of it from the store
        b.write("crypto.other", "k", {"text": CANARY + "-b2"})  # the first version goes to kept history
        assert b.read("crypto.later", "k") == {"text": CANARY + "-a"}
        assert [v.value for v in a.history("crypto.other", "k")] == [{"text": CANARY + "-b2"}, {"text": CANARY + "-b1"}]
    for tag in ("-a", "-b1", "-b2"):
        assert files_holding(root, CANARY + tag) == [], tag


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["declare", "remove"]), st.sampled_from(["aa.one", "aa.two", "bb.three"]),
                          st.sampled_from([None, "conversation", "signals"]), st.booleans())))
def test_the_registry_names_the_key_group_of_every_sealed_namespace_and_its_history(
        steps: list[tuple[str, str, str | None, bool]]) -> None:
    """``Registry.groups`` (the sealing backend's look-up) answers as the rule
    itself for every name, declared or not, and for the kept history's
    ``_h.<name>``, whatever declarations came and went before."""
    registry = Registry()
    for action, name, consent, encrypt in steps:
        if action == "remove":
            registry.remove(name)
        elif name not in registry:
            registry.declare(NamespaceSpec(name, consent=consent, encrypt=encrypt))
    for name in ("aa.one", "aa.two", "bb.three", "cc.never"):
        spec = registry.specs.get(name)
        group = None if spec is None else (spec.consent or (f"ns:{name}" if spec.encrypt else None))
        assert registry.groups.get(name) == group == (None if spec is None else key_group(spec))
        assert registry.groups.get(HISTORY_PREFIX + name) == group
    assert len(registry.groups) == 2 * sum(key_group(s) is not None for s in registry)


@needs_redis
def test_redis_never_holds_a_gated_canary(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as server:
        url = server.fresh_url()
        with MemoryManager(tmp_path / "root", backend=url) as mm:
            expected = fill(mm)
            assert mm.archive(now=time.time() + 7200)[NS] == 6
            for k, v in expected.items():
                ns = "focus.conversation" if k == "turn" else NS
                assert mm.read(ns, k) == v
            r = redis.Redis.from_url(url.split("?")[0])
            r.save()  # an RDB as well as the AOF
            dump = b"".join(r.dump(k) or b"" for k in r.scan_iter())
            streams = b"".join(json.dumps([[i.decode(), {a.decode(): b.decode() for a, b in f.items()}]
                                           for i, f in r.xrange(k)]).encode()
                               for k in r.scan_iter(_type="stream"))
            r.close()
            assert CANARY.encode() not in dump and CANARY.encode() not in streams
            files = [p for p in server.dir.rglob("*") if p.is_file() and p.name != "redis.log"]
            assert any(p.suffix == ".rdb" for p in files) and any("aof" in str(p) for p in files)
            assert not any(CANARY.encode() in p.read_bytes() for p in files)


# -- 1. a copy made before the purge is unreadable after it ---------------------------------


def test_a_folder_copied_before_revoke_yields_nothing_after_it(tmp_path: Path) -> None:
    root, backup = tmp_path / "store", tmp_path / "backup"
    with MemoryManager(root) as mm:
        expected = fill(mm)
        assert mm.archive(now=time.time() + 7200)[NS] == 6
        key_file = store_key_file(mm)
        shutil.copytree(root, backup)
        saved_keys = tmp_path / "saved-keys.json"
        shutil.copy2(key_file, saved_keys)  # what a user's key backup would be
        result = mm.consent.revoke("conversation", purge=True)
        assert set(result["purged"]) >= {NS, "focus.conversation"}
        assert mm.keys.ids("conversation") == []
        assert "conversation" not in json.loads(key_file.read_text())["groups"]

    # No file of the copy holds a canary byte, and the copy opened with what
    # is left on the machine (the same default key file) reads none of it.
    assert files_holding(backup, CANARY) == []
    with MemoryManager(backup) as copy:
        for k in expected:
            ns = "focus.conversation" if k == "turn" else NS
            with pytest.raises(KeyUnavailable) as info:
                copy.read(ns, k)
            assert isinstance(info.value, LookupError) and isinstance(info.value, MemoryStoreError)
        with pytest.raises(KeyUnavailable):
            copy.history(NS, "k0")
        findings = copy.check()
        assert {f.kind for f in findings} == {"sealed-unreadable"}
        assert len(findings) >= len(expected)

    # The same copy with the key saved before the revoke still opens.
    with MemoryManager(backup, keys=FileKeys(saved_keys)) as copy:
        for k, v in expected.items():
            ns = "focus.conversation" if k == "turn" else NS
            assert copy.read(ns, k) == v
        assert [v.value["text"] for v in copy.history(NS, "k0")] == [f"{CANARY} now 0", f"{CANARY} first 0"]


@needs_redis
def test_redis_files_copied_before_revoke_yield_nothing_after_it(tmp_path: Path) -> None:
    copy_dir = tmp_path / "redis-copy"
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as server:
        url = server.fresh_url()
        prefix = url.split("prefix=")[1]
        with MemoryManager(tmp_path / "root", backend=url) as mm:
            expected = fill(mm)
            key_file = store_key_file(mm)
            saved_keys = tmp_path / "saved-keys.json"
            shutil.copy2(key_file, saved_keys)
            r = redis.Redis.from_url(url.split("?")[0])
            r.save()
            r.close()
            shutil.copytree(server.dir, copy_dir, ignore=shutil.ignore_patterns("redis.log"))
            mm.consent.revoke("conversation", purge=True)
            assert mm.keys.ids("conversation") == []
    assert not any(CANARY.encode() in p.read_bytes() for p in copy_dir.rglob("*") if p.is_file())
    # A server started on the copied RDB and AOF (a backup, or a replica that
    # missed the purge) holds every record, readable by no one without the key.
    for aof in (True, False):
        with RedisServer(copy_dir, appendonly=aof) as old:
            copy_url = f"{old.url}?prefix={prefix}"
            with MemoryManager(tmp_path / "root2", backend=copy_url) as copy:
                for k in expected:
                    ns = "focus.conversation" if k == "turn" else NS
                    with pytest.raises(KeyUnavailable):
                        copy.read(ns, k)
            with MemoryManager(tmp_path / "root2", backend=copy_url, keys=FileKeys(saved_keys)) as copy:
                for k, v in expected.items():
                    ns = "focus.conversation" if k == "turn" else NS
                    assert copy.read(ns, k) == v


def test_a_grant_after_a_shredding_revoke_makes_a_new_key(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "store") as mm:
        mm.declare(SPEC)
        mm.consent.grant("conversation")
        mm.write(NS, "a", 1)
        first = mm.keys.ids("conversation")
        mm.consent.revoke("conversation")  # no purge: the key stays, the data stays
        assert mm.keys.ids("conversation") == first and mm.read(NS, "a") == 1
        mm.consent.revoke("conversation", purge=True)
        assert mm.keys.ids("conversation") == []
        mm.consent.grant("conversation")
        mm.write(NS, "b", 2)
        second = mm.keys.ids("conversation")
        assert len(second) == 1 and second != first
        assert mm.read(NS, "b") == 2 and mm.read(NS, "a") is None


# -- 4. wrong or missing key ------------------------------------------------------------------


def test_missing_and_wrong_keys_are_typed_errors_and_change_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    with MemoryManager(root) as mm:
        expected = fill(mm, 3)
        mm.write("shared.people", "ann", {"n": 1})  # ungated: unaffected by any key
        key_file = store_key_file(mm)
        store_key = json.loads(key_file.read_text())["groups"]["conversation"]
    before = _tree_digest(root)

    monkeypatch.setenv("HRM_MEMORY_KEYS", str(tmp_path / "elsewhere"))  # opened without its keys
    with MemoryManager(root) as mm:
        with pytest.raises(KeyUnavailable) as info:
            mm.read(NS, "k0")
        assert info.value.namespace == NS and info.value.key == "k0" and info.value.group == "conversation"
        with pytest.raises(KeyUnavailable):
            mm.query(NS)
        with pytest.raises(KeyUnavailable):
            mm.update(NS, "k0", lambda v: {"text": "overwritten"})
        assert mm.read("shared.people", "ann") == {"n": 1}
        findings = mm.check()
        assert findings and {f.kind for f in findings} == {"sealed-unreadable"}
        assert {f.extra["reason"] for f in findings} == {"no-key"}
        assert {f.extra["key"] for f in findings if f.namespace == NS} == {"k0", "k1", "k2"}
        mm.check(fix=True)
    after = _tree_digest(root)
    assert {p: d for p, d in after.items() if "_store" not in p} == {
        p: d for p, d in before.items() if "_store" not in p
    }

    # The right key id with another secret: WrongKey, nothing overwritten.
    kid = store_key["current"]
    forged = make_keyring({"conversation": [DataKey(kid, os.urandom(32))]})
    monkeypatch.setenv("HRM_MEMORY_KEYRING", forged)
    with MemoryManager(root, keys=EnvKeys()) as mm:
        with pytest.raises(WrongKey):
            mm.read(NS, "k1")
        assert {f.extra["reason"] for f in mm.check()} == {"wrong-key"}
    assert _tree_digest(root) == after

    # The real key from the environment opens everything.
    real = {"conversation": {"current": kid, "keys": {kid: store_key["keys"][kid]}}}
    monkeypatch.setenv("HRM_MEMORY_KEYRING", json.dumps(real))
    with MemoryManager(root, keys=EnvKeys()) as mm:
        for k, v in expected.items():
            assert mm.read("focus.conversation" if k == "turn" else NS, k) == v
        assert mm.check() == []


def test_a_sealed_value_moved_to_another_key_does_not_open(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "store") as mm:
        mm.declare(SPEC)
        mm.consent.grant("conversation")
        mm.write(NS, "alice", {"text": "alice's"})
        mm.write(NS, "bob", {"text": "bob's"})
        sealed_alice = mm.backend.get(NS, "alice")
        assert sealed_alice is not None
        mm.backend.put(NS, "bob", sealed_alice.value, time.time_ns() // 1000)  # a copy at the storage level
        with pytest.raises(WrongKey):
            mm.read(NS, "bob")
        assert mm.read(NS, "alice") == {"text": "alice's"}


def test_env_keys_cannot_make_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HRM_MEMORY_KEYRING", raising=False)
    with MemoryManager(tmp_path / "store", keys=EnvKeys()) as mm:
        mm.declare(SPEC)
        mm.write(NS, "a", 1)  # held in this process: no key needed yet
        with pytest.raises(KeyUnavailable):
            mm.consent.grant("conversation")  # persisting needs a key the application must provide


# -- 3. key rotation ----------------------------------------------------------------------------


def test_rotation_reseals_while_reads_and_writes_go_on(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "store", durability="flush") as mm:
        mm.declare(SPEC)
        mm.consent.grant("conversation")
        for i in range(200):
            mm.write(NS, f"k{i}", {"i": i})
        old = mm.keys.ids("conversation")
        rotation = mm.rotate_keys("conversation")
        n = 0
        while not rotation.done:  # no pause: every read and write answers meanwhile
            mm.write(NS, f"new{n}", {"n": n})
            assert mm.read(NS, f"k{n % 200}") == {"i": n % 200}
            n += 1
        assert rotation.wait()
        assert rotation.destroyed == old and rotation.resealed >= 200
        (current,) = mm.keys.ids("conversation")
        assert current not in old
        for st in mm.backend.scan(NS):
            sealed = parse(st.value)
            assert sealed is not None and sealed.key_id == current
        for i in range(200):
            assert mm.read(NS, f"k{i}") == {"i": i}
        for j in range(n):
            assert mm.read(NS, f"new{j}") == {"n": j}
        assert mm.check() == []


_ROTATOR = r"""
import sys
from hrm_memory import Keep, MemoryManager, NamespaceSpec
root = sys.argv[1]
mm = MemoryManager(root)
mm.rotate_keys("conversation")
print("rotating", flush=True)
i = 0
while True:
    mm.write("crypto.notes", f"w{sys.argv[2]}-{i}", {"i": i})
    print(f"ack w{sys.argv[2]}-{i}", flush=True)
    i += 1
"""


@pytest.mark.slow
def test_rotation_survives_sigkill_at_any_point(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MemoryManager(root) as mm:
        mm.declare(SPEC)
        mm.consent.grant("conversation")
        for i in range(150):
            mm.write(NS, f"k{i}", {"i": i})
        key_file = store_key_file(mm)
    acked: dict[str, dict[str, int]] = {f"k{i}": {"i": i} for i in range(150)}
    rng = random.Random(os.environ.get("HRM_TEST_SEED", "40"))
    mid_rotation = 0
    for rnd in range(20):
        proc = subprocess.Popen([sys.executable, "-c", _ROTATOR, str(root), str(rnd)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "rotating"
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        for line in out.splitlines():
            if line.startswith("ack "):
                key = line[4:]
                acked[key] = {"i": int(key.rsplit("-", 1)[1])}
        # Every acknowledged record reads back; every sealed record names a key that still exists.
        kept = set(json.loads(key_file.read_text())["groups"]["conversation"]["keys"])
        mid_rotation += len(kept) > 1  # killed before the older keys went
        with MemoryManager(root) as mm:
            for k, v in acked.items():
                assert mm.read(NS, k) == v, f"round {rnd}: {k}"
            for st in mm.backend.scan(NS):
                sealed = parse(st.value)
                assert sealed is not None and sealed.key_id in kept, f"round {rnd}: {st.key} under a destroyed key"
    assert mid_rotation >= 5, f"only {mid_rotation} of 20 kills landed mid-rotation"
    with MemoryManager(root) as mm:  # a rotation left to finish: one key, everything under it
        mm.rotate_keys("conversation", wait=True)
        (current,) = json.loads(key_file.read_text())["groups"]["conversation"]["keys"]
        assert all(parse(st.value).key_id == current for st in mm.backend.scan(NS))  # type: ignore[union-attr]
        for k, v in acked.items():
            assert mm.read(NS, k) == v
        assert mm.check() == []


def test_the_async_twin_rotates_too(tmp_path: Path) -> None:
    import asyncio

    from hrm_memory import AsyncMemoryManager

    async def run() -> None:
        async with AsyncMemoryManager(tmp_path / "store") as am:
            await am.declare(SPEC)
            await am.consent.grant("conversation")
            await am.write(NS, "a", {"text": CANARY})
            old = am.manager.keys.ids("conversation")
            rotation = await am.rotate_keys("conversation", wait=True)
            assert rotation.destroyed == old and rotation.resealed >= 1  # the record, and its history's bookkeeping
            assert await am.read(NS, "a") == {"text": CANARY}

    asyncio.run(run())
