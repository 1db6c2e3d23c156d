"""Sealed namespaces on a real Redis Cluster (3 primaries, 3 replicas, AOF
and RDB on every node): no node ever holds a gated canary's plaintext, and a
replica stopped before a revoke with purge (its files as they were) yields
nothing after it with what is left on the machine, while the key saved before
still opens the same bytes."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from hrm_memory import FileKeys, KeyUnavailable, MemoryManager
from hrm_memory.storage.redis.keys import KeyLayout
from hrm_memory.storage.sealed.backend import Cipher
from tests.helpers.sealed import CANARY, NS, SPEC, fill, store_key_file, needs_redis

SEALED = re.compile(rb"hrmenc:1:[0-9a-f]+:[A-Za-z0-9+/]+=*")


def _node_bytes(client: Any, directory: Path) -> bytes:
    """What one node holds: every key's DUMP and contents (hash fields,
    stream entries, strings, set members), and every AOF and RDB file."""
    parts: list[bytes] = []
    for k in client.scan_iter(count=1000):
        parts.append(client.dump(k) or b"")
        kind = client.type(k)
        if kind == b"hash":
            parts.extend(b for kv in client.hgetall(k).items() for b in kv)
        elif kind == b"stream":
            parts.extend(b for _, fields in client.xrange(k) for kv in fields.items() for b in kv)
        elif kind == b"string":
            parts.append(client.get(k) or b"")
        elif kind == b"set":
            parts.extend(client.smembers(k))
    parts.extend(p.read_bytes() for p in directory.rglob("*") if p.is_file() and p.name != "redis.log")
    return b"".join(parts)


def _no_plaintext(nodes: list[tuple[Any, Path]]) -> None:
    for client, directory in nodes:
        assert CANARY.encode() not in _node_bytes(client, directory), f"plaintext on {directory.name}"


def _save(nodes: list[tuple[Any, Path]]) -> None:
    for client, _ in nodes:
        client.save()  # an RDB on every node, beside its AOF


def _openable(cipher: Cipher, blob: bytes, candidates: list[tuple[str, str]]) -> bytes | None:
    """The plaintext of a sealed value found in a file, tried as each record it may be; None if none opens it."""
    value = b'"' + blob + b'"'
    for ns, key in candidates:
        try:
            return cipher.open("conversation", ns, key, value)
        except KeyUnavailable:
            continue
    return None


@needs_redis
def test_a_cluster_holds_no_plaintext_and_a_stopped_replica_yields_nothing_after_the_purge(tmp_path: Path) -> None:
    from tests.helpers.redis_cluster import RedisCluster, owner, py_client

    with RedisCluster(tmp_path / "cluster", appendonly=True) as cluster:
        nodes = []
        for port in cluster.ports:
            client = redis.Redis(host="127.0.0.1", port=port)
            client.execute_command("READONLY")  # a replica answers reads of its own copy
            client.config_set("rdbcompression", "no")  # a plaintext canary would be visible in the RDB
            nodes.append((client, cluster.dir / str(port)))
        url = cluster.fresh_url()
        prefix = url.split("prefix=")[1]
        try:
            with MemoryManager(tmp_path / "root", backend=url) as mm:
                mm.declare(SPEC)
                mm.write(NS, "early", {"text": CANARY + " before consent"})  # held: not persisted at all
                _save(nodes)
                _no_plaintext(nodes)
                expected = fill(mm)
                assert mm.archive(now=time.time() + 7200)[NS] == 7
                assert mm.read(NS, "early") == {"text": CANARY + " before consent"}  # persisted on grant
                _save(nodes)
                _no_plaintext(nodes)  # every key, stream, AOF and RDB of the 6 nodes: ciphertext only
                key_file = store_key_file(mm)
                saved_keys = tmp_path / "saved-keys.json"
                shutil.copy2(key_file, saved_keys)
                live = KeyLayout(prefix, True).of(NS).live
                pc = py_client(cluster)
                try:
                    primary = owner(pc, live)
                finally:
                    pc.close()
                replica = cluster.replica_of(primary)
                primary_client = redis.Redis(host="127.0.0.1", port=primary)
                assert primary_client.execute_command("WAIT", 1, 10_000) >= 1  # the replica has every write
                primary_client.close()
                _save(nodes)
                _no_plaintext(nodes)  # the replica's copy included

                stopped_dir = cluster.dir / str(replica)
                copy = tmp_path / "replica-copy"
                shutil.copytree(stopped_dir, copy, ignore=shutil.ignore_patterns("redis.log"))
                cluster.kill(replica)  # down during the purge: its files keep what it had
                mm.consent.revoke("conversation", purge=True)
                assert mm.keys.ids("conversation") == []
                nodes = [(c, d) for c, d in nodes if d != stopped_dir]
                _save(nodes)
                _no_plaintext(nodes)

            # The stopped replica's files, and the copy of them, hold the gated
            # records, sealed: no canary byte, and nothing left on the machine opens them.
            candidates = [(NS, k) for k in [*expected, "early"]] + [("focus.conversation", "turn")]
            left = Cipher(FileKeys(key_file))
            before = Cipher(FileKeys(saved_keys))
            for where in (stopped_dir, copy):
                data = b"".join(p.read_bytes() for p in where.rglob("*") if p.is_file() and p.name != "redis.log")
                assert CANARY.encode() not in data
                found = set(SEALED.findall(data))
                assert len(found) >= len(expected)
                assert all(_openable(left, blob, candidates) is None for blob in found)
                opened = [_openable(before, blob, candidates) for blob in found]
                assert sum(CANARY.encode() in (p or b"") for p in opened) >= len(expected)

            # Restarted, the replica rejoins, resyncs from its primary and holds none of it.
            cluster.restart(replica)
            cluster.wait_ok(60)
            back = redis.Redis(host="127.0.0.1", port=replica)
            back.execute_command("READONLY")
            deadline = time.monotonic() + 30
            while back.exists(live) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not back.exists(live)
            back.save()
            _no_plaintext([(back, stopped_dir)])
            back.close()
        finally:
            for client, _ in nodes:
                client.close()
