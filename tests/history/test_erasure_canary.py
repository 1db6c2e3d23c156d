"""Canaries: after ``forget`` and after ``consent.revoke(cat, purge=True)``, not
one byte of the key or of the value stays anywhere a backend keeps data.

Each test writes records whose key and value are high-entropy canaries (a hit
can only be a copy), in a plain namespace archived to the cold tier, in a
namespace that keeps history (``shared.people``) and in a consent-gated one
after consent is granted (``learning.patterns``, which keeps history too, and
``learning.feedback``); then erases them and greps:

- every file under the store root (cold frames inflated first);
- on Redis, every key of the server (``SCAN``, then ``DUMP`` and the contents
  read back by type: hash fields and values, set members, stream entries),
  on every node of a cluster, replicas included;
- the server's persistence files: the AOF (base and increments) and
  ``dump.rdb``, right after the call returned (the backend redoes them and
  waits) and again after a ``BGREWRITEAOF`` + ``BGSAVE`` of our own.

Backends: files; one Redis server with AOF and RDB snapshots on; a Redis
Cluster (3 primaries, 3 replicas) with AOF and RDB snapshots on.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from hrm_memory import CorruptRecord, MemoryManager, MemoryStoreError, NamespaceSpec, setup_tracing
from tests.helpers.canary import files_holding, redis_key_parts
from tests.helpers.redis_server import RedisServer, require_redis

#: Places under the root left out of the file grep: none. The recall index
#: (with its -wal/-shm) and the span files are searched like every other file.
NOT_YET_CLEAN: tuple[str, ...] = ()

GATED = ("learning.patterns", "learning.feedback")  # both gated by "preferences"


@dataclass(frozen=True)
class Canary:
    key: str
    value: str

    @property
    def needles(self) -> tuple[bytes, bytes]:
        return self.key.encode(), self.value.encode()


def _canary() -> Canary:
    return Canary("k" + secrets.token_hex(16), "v" + secrets.token_hex(16))


# -- where bytes can hide ---------------------------------------------------------------


def files_holding_canary(root: Path, canary: Canary, *, skip: tuple[str, ...] = NOT_YET_CLEAN) -> list[str]:
    """Each file under ``root`` holding the canary's key or value (cold frames inflated)."""
    return [
        f"{rel} holds {needle.decode()[:1]}-canary"
        for needle in canary.needles
        for rel in files_holding(root, needle, skip=skip)
    ]


def keys_holding(client: redis.Redis, canary: Canary) -> list[str]:
    """Every key of one node (all prefixes: nothing may leak outside ours)."""
    hits = []
    for name in client.scan_iter(match="*", count=1000):
        parts = [name, *redis_key_parts(client, name)]
        hits += [f"{name.decode(errors='replace')} holds {n.decode()[:1]}-canary" for n in canary.needles
                 if any(n in part for part in parts)]
    return hits


def _persistence(client: redis.Redis) -> dict[str, Any]:
    return client.info("persistence")


def rewrite_and_wait(client: redis.Redis, timeout: float = 60.0) -> None:
    """``BGREWRITEAOF`` and ``BGSAVE`` of our own, each waited for."""
    deadline = time.monotonic() + timeout

    def idle() -> bool:
        p = _persistence(client)
        return not (p["aof_rewrite_in_progress"] or p["aof_rewrite_scheduled"] or p["rdb_bgsave_in_progress"])

    while not idle():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    before = _persistence(client)
    client.execute_command("BGREWRITEAOF")
    while not (idle() and _persistence(client)["aof_rewrites"] > before["aof_rewrites"]):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    client.execute_command("BGSAVE")
    while not (idle() and _persistence(client)["rdb_saves"] > before["rdb_saves"]):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    after = _persistence(client)
    assert after["aof_last_bgrewrite_status"] == "ok" and after["rdb_last_bgsave_status"] == "ok"


# -- the stores --------------------------------------------------------------------------


class Store:
    """A backend under test: how to open a manager on it and where to look."""

    def __init__(self, root: Path, url: str | None, nodes: list[tuple[redis.Redis, Path]]) -> None:
        self.root, self.url, self.nodes = root, url, nodes
        self.providers: list[Any] = []

    def open(self) -> MemoryManager:
        # Spans go to a JSONL file under the root, as the CLI's --trace jsonl does.
        provider = setup_tracing("jsonl", path=self.root / "traces" / "spans.jsonl", set_global=False)
        self.providers.append(provider)
        if self.url is None:
            return MemoryManager(self.root, durability="flush", tracer_provider=provider)
        return MemoryManager(self.root, backend=self.url, tracer_provider=provider)

    def holders(self, canary: Canary) -> list[str]:
        """Every place that still holds the canary: files under the root,
        keys and persistence files of every server."""
        found = files_holding_canary(self.root, canary) if self.root.exists() else []
        for client, directory in self.nodes:
            port = client.connection_pool.connection_kwargs["port"]
            found += [f"node {port}: {h}" for h in keys_holding(client, canary)]
            found += [f"node {port} file: {h}" for h in files_holding_canary(directory, canary, skip=())]
        return found

    def rewrite(self) -> None:
        for client, _ in self.nodes:
            rewrite_and_wait(client)


def _file_store(tmp_path: Path) -> Iterator[Store]:
    yield Store(tmp_path / "root", None, [])


def _redis_store(tmp_path: Path) -> Iterator[Store]:
    require_redis()
    # AOF on, and RDB snapshots on ("save"), uncompressed so a copy is visible.
    server = RedisServer(tmp_path / "redis", appendonly=True,
                         extra=("--save", "3600 1", "--rdbcompression", "no"))
    with server:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        assert client.config_get("save")["save"] == "3600 1" and client.config_get("appendonly")["appendonly"] == "yes"
        client.execute_command("BGSAVE", "SCHEDULE")  # a dump.rdb exists from the start
        try:
            yield Store(tmp_path / "root", server.fresh_url(), [(client, server.dir)])
        finally:
            client.close()


def _cluster_store(tmp_path: Path) -> Iterator[Store]:
    from tests.helpers.redis_cluster import RedisCluster

    with RedisCluster(tmp_path / "cluster", appendonly=True) as cluster:
        nodes = []
        for port in cluster.ports:
            client = redis.Redis(host="127.0.0.1", port=port)
            client.execute_command("READONLY")  # a replica answers reads of its own copy
            client.config_set("save", "3600 1")
            client.config_set("rdbcompression", "no")
            try:
                client.execute_command("BGSAVE", "SCHEDULE")  # after the AOF rewrite a new node may be doing
            except redis.ResponseError as exc:
                if "already in progress" not in str(exc):  # a replica's first sync may be saving already
                    raise
            nodes.append((client, cluster.dir / str(port)))
        try:
            yield Store(tmp_path / "root", cluster.fresh_url(wait="1"), nodes)
        finally:
            for client, _ in nodes:
                client.close()


STORES = {"file": _file_store, "redis": _redis_store, "redis-cluster": _cluster_store}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    for opened in STORES[request.param](tmp_path):
        try:
            yield opened
        finally:
            for provider in opened.providers:
                provider.shutdown()


# -- the canaries ------------------------------------------------------------------------


def _written_everywhere(mm: MemoryManager, canary: Canary) -> None:
    """The canary as key and value in every kind of namespace, with others beside it."""
    key, value = canary.key, canary.value
    mm.declare(NamespaceSpec("canary.archived", ttl=60.0, index=("$",)))
    for i in range(5):
        mm.write("canary.archived", f"other{i}", {"text": f"an ordinary note {i}"})
    mm.write("canary.archived", key, {"text": f"archived {value}"})
    mm.archive(now=time.time() + 3600)
    assert mm.get_record("canary.archived", key).tier == "cold"
    mm.write("shared.people", key, {"note": f"first {value}"})
    mm.write("shared.people", key, {"note": f"second {value}"})  # the first is kept as history
    mm.write("shared.people", "ann", {"note": "an ordinary person"})
    assert len(mm.history("shared.people", key)) == 2
    mm.consent.grant("preferences")
    for ns in GATED:
        mm.write(ns, key, {"pattern": f"first {value}"})
        mm.write(ns, key, {"pattern": f"second {value}"})
        mm.write(ns, "plain", {"pattern": "an ordinary pattern"})
    assert all(mm.get_record(ns, key).persisted for ns in GATED)
    assert mm.recall(value)  # indexed


def _gone(mm: MemoryManager, canary: Canary, namespaces: tuple[str, ...]) -> None:
    for ns in namespaces:
        assert mm.read(ns, canary.key) is None and mm.history(ns, canary.key) == []


def test_forget_leaves_no_byte_of_key_or_value(store: Store) -> None:
    canary = _canary()
    spaces = ("canary.archived", "shared.people", *GATED)
    with store.open() as mm:
        _written_everywhere(mm, canary)
        assert store.holders(canary)  # the grep sees them before
        for ns in spaces:
            counts = mm.forget(ns, canary.key)
            assert counts["warm"] == 1, (ns, counts)
        assert store.holders(canary) == []  # the backend redid its files before returning
        store.rewrite()
        assert store.holders(canary) == []
        # Asking for the key again is a new operation, whose span names it
        # (and may reach the span file at the batch's next export): the
        # files were checked first.
        _gone(mm, canary, spaces)
        assert mm.read("shared.people", "ann") == {"note": "an ordinary person"}
        assert mm.read("canary.archived", "other3") == {"text": "an ordinary note 3"}
        assert mm.read("learning.patterns", "plain") == {"pattern": "an ordinary pattern"}
    with store.open() as mm:  # and after a reopen
        _gone(mm, canary, spaces)


def test_revoke_with_purge_leaves_no_byte_of_key_or_value(store: Store) -> None:
    canary = _canary()
    with store.open() as mm:
        _written_everywhere(mm, canary)
        for ns in ("canary.archived", "shared.people"):
            mm.forget(ns, canary.key)  # this test is about the gated namespaces
        assert store.holders(canary)
        result = mm.consent.revoke("preferences", purge=True)
        assert set(result["purged"]) == set(GATED)
        _gone(mm, canary, GATED)
        assert mm.read(GATED[0], "plain") is None  # the whole namespace went
        assert mm.read("shared.people", "ann") == {"note": "an ordinary person"}
        assert store.holders(canary) == []
        store.rewrite()
        assert store.holders(canary) == []
    with store.open() as mm:
        _gone(mm, canary, GATED)


@pytest.mark.parametrize("where", ["redis", "redis-cluster"])
def test_a_redis_failure_in_forget_is_typed(tmp_path: Path, where: str) -> None:
    """A key of the namespace holding the wrong type makes the erase refuse:
    the caller gets a typed error (never redis-py's), and nothing changed."""
    from hrm_memory.storage.redis.keys import KeyLayout

    raw: Any
    if where == "redis":
        from tests.helpers.redis_server import shared_server

        url = shared_server().fresh_url()
        raw = redis.Redis.from_url(shared_server().url)
    else:
        from tests.helpers.redis_cluster import py_client, shared_cluster

        url = shared_cluster().fresh_url()
        raw = py_client(shared_cluster())
    with MemoryManager(None, backend=url) as mm:
        mm.write("focus.slow", "k", 1)
        quarantine = KeyLayout(mm.backend.prefix, where == "redis-cluster").of("focus.slow").quarantine
        try:
            raw.set(quarantine, b"not a hash")
            with pytest.raises(MemoryStoreError) as info:
                mm.forget("focus.slow", "k")
            assert isinstance(info.value, CorruptRecord)
            assert mm.read("focus.slow", "k") == 1  # refused whole: nothing half-erased
        finally:
            raw.delete(quarantine)
            raw.close()
        assert mm.forget("focus.slow", "k")["warm"] == 1
