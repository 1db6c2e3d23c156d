"""The Redis backend on a real Redis Cluster (6 redis-server processes: 3
primaries, 3 replicas; tests/helpers/redis_cluster.py): URL and key layout,
composite cursors, the replicated mode, purge on every node, update() across
processes, a cross-shard subscription through a subscriber restart, and a
primary SIGKILLed under 4 writers. The conformance suite runs on the cluster
too (tests/conformance, driver ``redis-cluster-sync``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hrm_memory import (
    BackendUnavailable,
    CursorExpired,
    InvalidArgument,
    InvalidCursor,
    Keep,
    MemoryManager,
    MemoryStoreError,
    NamespaceSpec,
    NotReplicated,
)
from hrm_memory.storage.redis.cluster import decode_cursor, topology
from hrm_memory.storage.redis.keys import KeyLayout

from tests.helpers.mp_workers import release
from tests.helpers.redis_cluster import (
    owner,
    prefix_on_every_shard,
    py_client,
    ready,
    run_failover,
    shared_cluster,
    spread,
    worker,
)

REPO = Path(__file__).resolve().parents[2]
# -- URL, key layout ---------------------------------------------------------------------------


def test_cluster_urls_are_read_and_bad_ones_refused() -> None:
    top = topology("redis+cluster://u:s3cret@10.0.0.1:7000,10.0.0.2:7001/0?prefix=a:&wait=1&wait_timeout=250")
    assert top.cluster and top.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert (top.wait, top.wait_timeout_ms, top.settings.prefix) == (1, 250, "a:")
    assert "s3cret" not in top.settings.shown and top.settings.shown == "redis+cluster://10.0.0.1:7000,10.0.0.2:7001/0"
    assert topology("rediss+cluster://h:7000").settings.url.startswith("rediss://")
    assert not topology("redis://h:6379/0?wait=1").cluster
    for bad in ("redis+cluster://h:7000/1", "redis+cluster://h:notaport", "redis+cluster://h:7000?prefix={x}:",
                "redis+cluster://h:7000?wait=x", "redis+cluster://h:7000?wait=1&wait_timeout=0", "cluster://h:7000"):
        with pytest.raises(InvalidArgument):
            topology(bad)
    with pytest.raises(InvalidArgument):
        MemoryManager(None, backend="memcached://h:1")
    with pytest.raises(InvalidArgument, match="shorter than socket_timeout"):
        topology("redis+cluster://h:7000?wait=1&wait_timeout=2000&socket_timeout=1")


def test_single_server_layout_is_unchanged() -> None:
    """Stores written by earlier versions on one server are read as they are."""
    keys = KeyLayout("hrm:", False).of("focus.slow")
    assert keys == ("hrm:r:focus.slow", "hrm:c:focus.slow", "hrm:q:focus.slow", "hrm:l:focus.slow",
                    "hrm:w:focus.slow", "hrm:events", "hrm:namespaces")


def test_every_key_of_a_namespace_is_on_one_slot_and_namespaces_spread_over_all_shards() -> None:
    cluster = shared_cluster()
    prefix = prefix_on_every_shard(cluster)
    url = cluster.fresh_url(prefix=prefix)
    by_shard = spread(cluster, prefix)
    client = py_client(cluster)
    try:
        with MemoryManager(None, backend=url) as mm:
            for names in by_shard.values():
                for ns in names:
                    mm.write(ns, "k", {"v": 1})
                    mm.update(ns, "n", lambda v: (v or 0) + 1)
            found: dict[str, set[int]] = defaultdict(set)
            owners: dict[str, set[int]] = defaultdict(set)
            meta: list[bytes] = []
            for node in client.get_primaries():
                r = client.get_redis_connection(node)
                for key in r.scan_iter(match="{" + prefix + "*", count=1000):
                    ns = key.decode()[1 + len(prefix): key.decode().index("}")]
                    if not ns:  # the one store-wide key, written off the write path
                        meta.append(key)
                        continue
                    found[ns].add(client.keyslot(key))
                    owners[ns].add(int(node.port))
            # records, stream, marker (and no global key on the write path but the registry)
            assert set(found) == {ns for names in by_shard.values() for ns in names}
            assert all(len(slots) == 1 for slots in found.values()), found
            assert meta == [("{" + prefix + "}namespaces").encode()]
            assert {p for ports in owners.values() for p in ports} == set(cluster.primaries())
    finally:
        client.close()


# -- cursors -----------------------------------------------------------------------------------


def test_cluster_cursors_are_typed_and_expire_per_namespace() -> None:
    cluster = shared_cluster()
    url = cluster.fresh_url(stream_maxlen="1000")
    with MemoryManager(None, backend=url) as mm:
        start = mm.cursor()
        assert start == "n1:"
        for bad in ("0-0", "n1:focus.slow", "n1:Focus=1-0", "n1:focus.slow=1-x", "n1:a.b=1-0,a.b=2-0"):
            with pytest.raises(InvalidCursor):
                mm.events_since(bad)
        mm.write("focus.slow", "a", 1)
        mm.write("focus.lanes", "b", 2)
        events, cur = mm.events_since(start)
        # no total order across namespaces on a cluster (same millisecond: by name)
        assert sorted((e.namespace, e.key) for e in events) == [("focus.lanes", "b"), ("focus.slow", "a")]
        assert set(decode_cursor(cur)) == {"focus.slow", "focus.lanes"}
        assert mm.events_since(cur)[0] == []
        for i in range(3000):  # trims focus.slow's stream past `cur`
            mm.write("focus.slow", f"x{i}", i)
        with pytest.raises(CursorExpired):
            mm.events_since(cur)
        # the oldest cursor still readable never expires: each namespace's oldest entry kept on
        oldest = mm.backend.changes.oldest()
        events, _ = mm.events_since(oldest)
        assert [e.key for e in events if e.namespace == "focus.lanes"] == ["b"]
        slow = [e.key for e in events if e.namespace == "focus.slow"]
        assert 1000 <= len(slow) < 3001 and slow[-1] == "x2999"


# -- replicated mode ---------------------------------------------------------------------------


def test_replicated_write_that_no_replica_confirms_raises_not_replicated() -> None:
    """wait=1: the write returns once a replica has it; with the replica
    stopped (SIGSTOP, well under the node timeout) it raises NotReplicated
    after wait_timeout, and the value is on the primary. The wait is 1 s:
    the writes before and after must be confirmed within it, which a loaded
    machine's replica can take longer than 200 ms to do."""
    cluster = shared_cluster()
    url = cluster.fresh_url(wait="1", wait_timeout="1000")
    client = py_client(cluster)
    try:
        with MemoryManager(None, backend=url) as mm:
            mm.write("focus.slow", "a", 1)
            primary = owner(client, KeyLayout(mm.backend.prefix, True).of("focus.slow").live)
            replica = cluster.replica_of(primary)
            cluster.procs[replica].send_signal(19)  # SIGSTOP
            try:
                t0 = time.monotonic()
                with pytest.raises(NotReplicated) as info:
                    mm.write("focus.slow", "a", 2)
                assert time.monotonic() - t0 >= 0.99
                assert isinstance(info.value, BackendUnavailable) and isinstance(info.value, ConnectionError)
                assert (info.value.acked, info.value.wanted) == (0, 1)
            finally:
                cluster.procs[replica].send_signal(18)  # SIGCONT
            assert mm.read("focus.slow", "a") == 2
            mm.write("focus.slow", "a", 3)  # confirmed again once the replica is back
    finally:
        client.close()


#: Another process's manager: for each URL on stdin, the value of focus.slow/a as one JSON line.
_READER = """
import json, sys
from hrm_memory import MemoryManager
open_ = {}
print("READY", flush=True)
for line in sys.stdin:
    url = line.strip()
    mm = open_.get(url) or open_.setdefault(url, MemoryManager(None, backend=url))
    print(json.dumps(mm.read("focus.slow", "a")), flush=True)
for mm in open_.values():
    mm.close()
"""


def test_a_read_after_not_replicated_sees_that_write_in_every_manager() -> None:
    """wait=1, a replica stopped (SIGSTOP): manager B's write raises
    NotReplicated, and from then on every read of the key (B's, manager A's,
    a manager's in another process, a manager opened after) gives B's value:
    while the replica is still stopped and at once after SIGCONT, a few
    times each. B's first write in a namespace also registers the namespace
    in the store's registry, a write of its own that may be on the stopped
    shard. Cases: A wrote the key first (B's registration changes nothing,
    B's record is what the stopped shard does not confirm), or B's write is
    the namespace's first (its registration is a change too); the registry
    on the stopped shard with the namespace, on another shard, or alone on
    the stopped shard (then the record is confirmed and the registration
    is what raises)."""
    from tests.helpers.redis_cluster import prefix_with_registry

    cluster = shared_cluster()
    client = py_client(cluster)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    other = subprocess.Popen([sys.executable, "-c", _READER], cwd=REPO, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        ready(other)

        def elsewhere(url: str) -> Any:
            assert other.stdin is not None and other.stdout is not None
            other.stdin.write(url + "\n")
            other.stdin.flush()
            return json.loads(other.stdout.readline())

        # (registry on the namespace's shard, the namespace's shard is the stopped one, A writes first)
        cases = [(True, True, True), (False, True, True), (True, True, False), (False, False, False)] * 2
        for i, (same_shard, stop_namespace_shard, a_first) in enumerate(cases):
            prefix = prefix_with_registry(client, "focus.slow", same_shard=same_shard)
            layout = KeyLayout(prefix, True)
            url = cluster.fresh_url(prefix=prefix, wait="1", wait_timeout="1000")
            with MemoryManager(None, backend=url) as a, \
                    MemoryManager(None, backend=url.replace("wait_timeout=1000", "wait_timeout=200")) as b:
                if a_first:
                    a.write("focus.slow", "a", {"by": "A"})
                assert elsewhere(url) == ({"by": "A"} if a_first else None)
                mine = {"by": "B", "case": i}
                stopped = cluster.replica_of(owner(client, layout.of("focus.slow").live if stop_namespace_shard
                                                   else layout.namespaces))
                cluster.procs[stopped].send_signal(19)  # SIGSTOP
                try:
                    with pytest.raises(NotReplicated) as info:
                        b.write("focus.slow", "a", mine)
                    assert info.value.operation == ("a replicated write" if stop_namespace_shard
                                                    else "registering a namespace")
                    seen = [m.read("focus.slow", "a") for _ in range(3) for m in (b, a)] + [elsewhere(url)]
                    assert seen == [mine] * 7, (cases[i], seen)
                finally:
                    cluster.procs[stopped].send_signal(18)  # SIGCONT
                seen = [m.read("focus.slow", "a") for _ in range(3) for m in (b, a)] + [elsewhere(url)]
                with MemoryManager(None, backend=url) as c:
                    seen.append(c.read("focus.slow", "a"))
                assert seen == [mine] * 8, (cases[i], seen)
                # The namespace is listed: a later write registers it again, confirmed now.
                b.write("focus.slow", "a", mine)
                assert client.sismember(layout.namespaces, "focus.slow")
    finally:
        if other.stdin is not None:
            other.stdin.close()
        other.wait(timeout=30)
        client.close()


def test_purge_on_a_cluster_leaves_no_byte_on_any_node() -> None:
    cluster = shared_cluster()
    url = cluster.fresh_url(wait="1")
    canary = f"canary-{uuid.uuid4().hex}"
    with MemoryManager(None, backend=url) as mm:
        mm.write("focus.slow", "secret", {"text": canary})
        mm.write("focus.lanes", "other", {"text": "kept"})

        def holders() -> list[int]:
            out = []
            for port in cluster.procs:
                r = _single(port)
                try:
                    r.execute_command("READONLY")  # a replica answers reads of its own copy
                    for key in r.scan_iter(match="*", count=1000):
                        if r.type(key) == b"hash" and any(canary.encode() in v for v in r.hvals(key)):
                            out.append(port)
                finally:
                    r.close()
            return out

        deadline = time.monotonic() + 5
        while len(holders()) < 2 and time.monotonic() < deadline:  # primary and its replica
            time.sleep(0.05)
        assert len(holders()) == 2
        counts = mm.backend.purge("focus.slow")
        assert counts["warm"] == 1 and counts["events"] == 1
        assert holders() == []  # wait=1: the replica had the purge before it returned
        assert mm.read("focus.lanes", "other") == {"text": "kept"}
        assert "focus.slow" not in mm.backend.stats() and "focus.lanes" in mm.backend.stats()

    # wait=1: a purge no replica confirmed is not reported done (waiting 1 s:
    # the write before it must be confirmed)
    with MemoryManager(None, backend=url + "&wait_timeout=1000") as mm:
        mm.write("focus.slow", "again", {"text": canary})
        client = py_client(cluster)
        try:
            replica = cluster.replica_of(owner(client, KeyLayout(mm.backend.prefix, True).of("focus.slow").live))
        finally:
            client.close()
        cluster.procs[replica].send_signal(19)  # SIGSTOP, well under the node timeout
        try:
            with pytest.raises(NotReplicated):
                mm.backend.purge("focus.slow")
        finally:
            cluster.procs[replica].send_signal(18)
        assert mm.read("focus.slow", "again") is None  # done on the primary


def _single(port: int) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port)


# -- across processes ----------------------------------------------------------------------------


def test_four_processes_update_one_key_on_the_cluster() -> None:
    cluster = shared_cluster()
    url = cluster.fresh_url(wait="1")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.helpers.redis_server", "counter", url, "150"], cwd=REPO,
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    release(procs)
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    with MemoryManager(None, backend=url) as mm:
        assert mm.read("focus.slow", "n") == 600


def test_cross_shard_subscription_every_event_once_in_order_across_a_restart() -> None:
    """3 writers on namespaces owned by 3 different primaries; a subscriber to
    "*" reads with events_since() and is SIGKILLed midway; a new subscriber
    subscribe("*", since=<last cursor it printed>) gets the rest: every event
    exactly once, each namespace's in write order."""
    cluster = shared_cluster()
    prefix = prefix_on_every_shard(cluster)
    url = cluster.fresh_url(prefix=prefix)
    namespaces = [names[0] for names in spread(cluster, prefix).values()]
    n = 150
    with MemoryManager(None, backend=url) as mm:
        start = mm.cursor()
    writers = [worker("events", url, ns, str(n)) for ns in namespaces]
    for w in writers:
        ready(w)
    follower = worker("follow", url, start)
    assert follower.stdout is not None
    first = json.loads(follower.stdout.readline())
    assert first["cursor"] == start
    for w in writers:
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    seen: list[list[Any]] = []
    cursor = start
    while len(seen) < n:  # kill it once it has seen some, mid-run
        batch = json.loads(follower.stdout.readline())
        seen += batch["events"]
        cursor = batch["cursor"]
    follower.kill()
    follower.wait(timeout=10)
    total = 3 * n - len(seen)
    sub = worker("subscribe", url, cursor, str(total))
    assert sub.stdout is not None
    for w in writers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0 and out.strip().endswith("DONE"), err
    rest = []
    for line in sub.stdout:
        if line.strip() == "DONE":
            break
        rest.append(json.loads(line))
    sub.wait(timeout=30)
    got = seen + rest
    assert len(got) == 3 * n, (len(seen), len(rest))
    for ns in namespaces:
        keys = [k for (space, k, _) in got if space == ns]
        assert keys == [f"k{i}" for i in range(n)]  # every event once, in order per namespace
    assert {space for space, _, _ in got} == set(namespaces)


# -- failover ----------------------------------------------------------------------------------


def test_failover_replicated_mode_loses_no_acknowledged_write(tmp_path: Path) -> None:
    figures = run_failover(tmp_path, wait=1)
    assert figures["acknowledged_updates"] > 50 and figures["acknowledged_writes"] > 50
    assert figures["lost_updates"] == 0 and figures["lost_writes"] == 0
    assert figures["failed_calls"], "the failover was not seen by any writer"
    assert set(figures["failed_calls"]) <= {"BackendUnavailable", "NotReplicated", "LockTimeout"}


def test_failover_asynchronous_mode_figures(tmp_path: Path) -> None:
    """wait=0: replication is asynchronous; what a failover costs is reported
    (BENCHMARKS.md), not asserted, beyond the values staying consistent."""
    figures = run_failover(tmp_path, wait=0)
    assert figures["acknowledged_updates"] > 50


def test_opening_a_cluster_that_is_not_there_is_backend_unavailable() -> None:
    from tests.helpers.redis_cluster import free_cluster_port

    port = free_cluster_port([])
    with pytest.raises(BackendUnavailable) as info:
        MemoryManager(None, backend=f"redis+cluster://u:pw@127.0.0.1:{port}/0")
    assert isinstance(info.value, MemoryStoreError) and "pw" not in str(info.value)


# -- the rest of the API on a cluster ----------------------------------------------------------


def test_recall_context_and_declarations_across_two_hosts_on_the_cluster(tmp_path: Path) -> None:
    """Each "host" (its own root) keeps its own recall index, caught up from
    the per-namespace change streams; run-time declarations are shared."""
    url = shared_cluster().fresh_url()
    with MemoryManager(tmp_path / "a", backend=url) as a, MemoryManager(tmp_path / "b", backend=url) as b:
        a.write("shared.people", "bella", {"name": "Bella", "note": "cheer competition winner"})
        assert [h.key for h in b.recall("competitions")] == ["bella"]
        b.write("shared.people", "gaurav", {"name": "Gaurav", "note": "work bottleneck"})
        assert [h.key for h in a.recall("bottleneck")] == ["gaurav"]
        assert "Gaurav" in a.context("altitude", budget=200, now=1_760_000_000).text
        a.delete("shared.people", "bella")
        assert b.recall("competitions") == []
        a.declare("focus.extra", description="declared at run time")
        b.write("focus.extra", "k", {"v": 1})
        assert a.read("focus.extra", "k") == {"v": 1}


def test_check_finds_and_quarantines_a_damaged_record_on_the_cluster() -> None:
    cluster = shared_cluster()
    url = cluster.fresh_url()
    client = py_client(cluster)
    try:
        with MemoryManager(None, backend=url) as mm:
            mm.write("focus.slow", "good", {"v": 1})
            mm.write("focus.slow", "bad", {"v": 2})
            keys = KeyLayout(mm.backend.prefix, True).of("focus.slow")
            blob = client.hget(keys.live, "bad")
            client.hset(keys.live, "bad", blob[:-2] + b"9}")
            (finding,) = mm.check()
            assert finding.kind == "corrupt-record" and not finding.fixed
            assert [f.fixed for f in mm.check(fix=True)] == [True]
            assert mm.check() == [] and mm.read("focus.slow", "good") == {"v": 1}
            assert client.hget(keys.quarantine, "bad") is not None
    finally:
        client.close()


def test_langgraph_store_on_the_cluster(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.store.base", reason="langgraph-checkpoint is not installed")
    from hrm_memory.integrations.langgraph import MemoryStore

    url = shared_cluster().fresh_url(wait="1")
    with MemoryStore(root=str(tmp_path / "s"), backend=url) as store:
        store.put(("users", "u1"), "prefs", {"theme": "dark", "n": 3})
        store.put(("users", "u2"), "prefs", {"theme": "light", "n": 5})
        assert store.get(("users", "u1"), "prefs").value == {"theme": "dark", "n": 3}
        assert [i.key for i in store.search(("users",), filter={"theme": "light"})] == ["prefs"]
        assert sorted(store.list_namespaces(prefix=("users",))) == [("users", "u1"), ("users", "u2")]
        store.delete(("users", "u1"), "prefs")
        assert store.get(("users", "u1"), "prefs") is None
    with MemoryStore(root=str(tmp_path / "other"), backend=url) as again:  # another host
        assert again.get(("users", "u2"), "prefs").value["n"] == 5


def test_replicated_mode_on_one_server_with_a_replica(tmp_path: Path) -> None:
    """wait=1 on one server (not a cluster) with a replica: a write returns
    once the replica has it; with the replica stopped, NotReplicated, and
    the write is read back by its manager and another one, the replica
    stopped and just resumed."""
    import redis
    from tests.helpers.redis_server import primary_with_replica

    with primary_with_replica(tmp_path) as (primary, replica):
        r = redis.Redis(host="127.0.0.1", port=replica.port)
        # A live replica confirms as soon as it is scheduled, which on a
        # loaded machine can take longer than a short wait: 4 s (under the
        # 5 s socket timeout WAIT answers within) for the write that must
        # succeed. A paused replica never confirms, so 200 ms is enough to
        # see NotReplicated (the same prefix: the same data).
        url = primary.fresh_url(wait="1", wait_timeout="4000")
        with MemoryManager(None, backend=url) as mm:
            mm.write("focus.slow", "a", {"v": 1})
            prefix = mm.backend.prefix
            assert r.hget(f"{prefix}r:focus.slow", "a") is not None  # on the replica when write() returned
        with MemoryManager(None, backend=url.replace("wait_timeout=4000", "wait_timeout=200")) as mm, \
                MemoryManager(None, backend=url) as other:
            assert mm.backend.prefix == prefix
            assert other.read("focus.slow", "a") == {"v": 1}
            replica.pause()
            try:
                with pytest.raises(NotReplicated):
                    mm.write("focus.slow", "a", {"v": 2})
                # the write is on the primary: every manager reads it, the replica still stopped
                assert [m.read("focus.slow", "a") for _ in range(3) for m in (mm, other)] == [{"v": 2}] * 6
            finally:
                replica.resume()
            assert [m.read("focus.slow", "a") for _ in range(3) for m in (mm, other)] == [{"v": 2}] * 6
        r.close()


def test_a_read_after_not_replicated_sees_the_write_in_a_namespace_keeping_history(tmp_path: Path) -> None:
    """wait=1 on one server with a replica, a namespace that keeps history
    (``focus.notes``): an overwrite and a delete first write the kept
    version on a key of their own. With the replica paused, that write
    raises NotReplicated; the record is written (or deleted) all the same,
    every manager reads it so, the replica paused and resumed, and the
    version it replaced is in the key's history."""
    from tests.helpers.redis_server import primary_with_replica

    with primary_with_replica(tmp_path) as (primary, replica):
        url = primary.fresh_url(wait="1", wait_timeout="4000")  # (see the test above for the two waits)
        with MemoryManager(None, backend=url) as a:
            a.write("focus.notes", "n", {"by": "A"})
            a.write("focus.notes", "gone", {"by": "A"})
        with MemoryManager(None, backend=url.replace("wait_timeout=4000", "wait_timeout=200")) as b, \
                MemoryManager(None, backend=url) as other:  # fmt: skip
            replica.pause()
            try:
                with pytest.raises(NotReplicated):
                    b.write("focus.notes", "n", {"by": "B"})
                with pytest.raises(NotReplicated):
                    b.delete("focus.notes", "gone")
                for m in (b, other, b, other):
                    assert m.read("focus.notes", "n") == {"by": "B"}
                    assert m.read("focus.notes", "gone") is None
            finally:
                replica.resume()
            for m in (b, other):
                assert m.read("focus.notes", "n") == {"by": "B"}
                assert m.read("focus.notes", "gone") is None
                assert [v.value for v in m.history("focus.notes", "n")] == [{"by": "B"}, {"by": "A"}]
            b.write("focus.notes", "n", {"by": "B", "again": True})  # confirmed once the replica is back


def test_a_grant_whose_kept_versions_are_not_replicated_moves_every_session_copy_first() -> None:
    """wait=1 on the cluster, two gated namespaces that keep history, each
    with copies held in the session while consent was revoked: the grant
    keeps each replaced version on the history's own key, and the shard
    holding one namespace's history has its replica stopped. The grant
    raises NotReplicated only after every copy of both namespaces is in the
    store: another manager reads each of them, and the versions they
    replaced are in their history once the replica is back."""
    cluster = shared_cluster()
    client = py_client(cluster)
    names = ("crypto.one", "crypto.two")
    try:
        while True:  # one history on a shard that holds none of the records nor the consent record
            prefix = f"t{uuid.uuid4().hex[:10]}:"
            layout = KeyLayout(prefix, True)
            history = owner(client, layout.of("_h." + names[0]).live)
            others = {owner(client, layout.of(n).live) for n in (*names, "focus.consent")}
            if history not in others:
                break
        url = cluster.fresh_url(prefix=prefix, wait="1", wait_timeout="1000")
        specs = [NamespaceSpec(n, consent="conversation", history=Keep(versions=3), owner="crypto") for n in names]
        with MemoryManager(None, backend=url) as a, MemoryManager(None, backend=url) as other:
            for spec in specs:
                a.declare(spec)
            a.consent.grant("conversation")
            for n in names:
                for k in ("k0", "k1"):
                    a.write(n, k, {"v": 1})
            a.consent.revoke("conversation")
            for n in names:
                for k in ("k0", "k1"):
                    a.write(n, k, {"v": 2})  # held in this session
            stopped = cluster.replica_of(history)
            cluster.procs[stopped].send_signal(19)  # SIGSTOP
            try:
                with pytest.raises(NotReplicated):
                    a.consent.grant("conversation")
                assert other.consent.granted("conversation")
                assert [other.read(n, k) for n in names for k in ("k0", "k1")] == [{"v": 2}] * 4
            finally:
                cluster.procs[stopped].send_signal(18)  # SIGCONT
            for m in (a, other):
                for n in names:
                    for k in ("k0", "k1"):
                        assert [v.value for v in m.history(n, k)] == [{"v": 2}, {"v": 1}], (n, k)
    finally:
        client.close()


def test_a_rotation_stopped_by_not_replicated_leaves_every_record_and_its_history_readable(tmp_path: Path) -> None:
    """wait=1 on one server with a replica, a sealed namespace that keeps
    history: a key rotation run while the replica is paused stops at its
    first unconfirmed write (a kept version's slot moved ahead of a reseal,
    or a reseal) and ``wait()`` raises NotReplicated. No key is destroyed;
    every record reads its value and its history in every manager, paused
    and resumed; a rotation once the replica is back reseals them all and
    destroys the older keys."""
    from tests.helpers.redis_server import primary_with_replica

    ns = "crypto.rot"
    with primary_with_replica(tmp_path) as (primary, replica):
        url = primary.fresh_url(wait="1", wait_timeout="4000")
        with MemoryManager(None, backend=url) as a:
            a.declare(NamespaceSpec(ns, owner="crypto", encrypt=True, history=Keep(versions=3)))
            for i in range(5):
                a.write(ns, f"k{i}", {"i": i, "v": 1})
                a.write(ns, f"k{i}", {"i": i, "v": 2})
            first = a.keys.ids(f"ns:{ns}")

        def all_readable(*managers: MemoryManager) -> None:
            for m in managers:
                for i in range(5):
                    assert m.read(ns, f"k{i}") == {"i": i, "v": 2}
                    assert [v.value for v in m.history(ns, f"k{i}")] == [{"i": i, "v": 2}, {"i": i, "v": 1}]

        with MemoryManager(None, backend=url.replace("wait_timeout=4000", "wait_timeout=200")) as b, \
                MemoryManager(None, backend=url) as other:  # fmt: skip
            replica.pause()
            try:
                rotation = b.rotate_keys(ns)
                with pytest.raises(NotReplicated):
                    rotation.wait(60)
                assert rotation.destroyed == []
                assert set(first) < set(b.keys.ids(f"ns:{ns}"))  # the older key stays, beside the new one
                all_readable(b, other)
            finally:
                replica.resume()
            all_readable(b, other)
            before = b.keys.ids(f"ns:{ns}")
            again = b.rotate_keys(ns, wait=True)
            assert sorted(again.destroyed) == sorted(before)
            assert b.keys.ids(f"ns:{ns}") not in ([], before)
            all_readable(b, other)


@pytest.mark.parametrize("wait", ["0", "1"])
def test_a_manual_failover_is_followed_without_an_error(wait: str) -> None:
    """CLUSTER FAILOVER on a replica (primary and replica swap, nothing lost):
    the store's cached slot map is stale; the next write gets MOVED from the
    old primary and follows it (redis-py's redirection, or the replicated
    path's own), with no error to the caller."""
    from tests.helpers.redis_cluster import _send

    cluster = shared_cluster()
    with MemoryManager(None, backend=cluster.fresh_url(wait=wait)) as mm:
        mm.write("focus.slow", "a", 1)
        client = py_client(cluster)
        try:
            primary = owner(client, KeyLayout(mm.backend.prefix, True).of("focus.slow").live)
        finally:
            client.close()
        replica = cluster.replica_of(primary)
        # A manual failover that does not complete in time (the replica still
        # catching up on a loaded machine) is aborted by Redis: ask again, as
        # an operator would, for up to a minute.
        deadline = time.monotonic() + 60
        swapped = False
        while not swapped:
            assert time.monotonic() < deadline, "the manual failover did not happen"
            if cluster.role(replica) == "primary" and cluster.role(primary) == "replica":
                break  # done just after the last look
            assert _send(replica, "CLUSTER", "FAILOVER").startswith(b"+OK")
            asked = time.monotonic()
            while time.monotonic() - asked < 10:
                if cluster.role(replica) == "primary" and cluster.role(primary) == "replica":
                    swapped = True
                    break
                time.sleep(0.05)
        cluster.wait_ok(20)
        for i in range(20):
            mm.write("focus.slow", "a", i)
            mm.update("focus.slow", "n", lambda v: (v or 0) + 1)
        assert mm.read("focus.slow", "a") == 19 and mm.read("focus.slow", "n") == 20


def test_a_cluster_node_behind_a_plain_url_says_to_use_the_cluster_url() -> None:
    from hrm_memory import StorageError

    cluster = shared_cluster()
    url = f"redis://127.0.0.1:{cluster.primaries()[0]}/0?prefix=t{uuid.uuid4().hex[:8]}:"
    with pytest.raises(StorageError, match=r"redis\+cluster://"):
        with MemoryManager(None, backend=url) as mm:
            mm.write("focus.slow", "a", 1)
