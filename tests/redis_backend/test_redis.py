"""The Redis backend on a real redis-server (tests/helpers/redis_server.py).

Spans, consent and purge (not a byte of a gated value in Redis before consent,
none after a purge, not even in the AOF), the change stream's cursors, the
lease (atomic update across processes, fencing of a holder that outlived its
lease), and two "hosts" (different roots, one Redis) seeing each other's
writes and events, with the delivery latency printed.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hrm_memory import (
    CorruptRecord,
    CursorExpired,
    Event,
    InvalidCursor,
    LockTimeout,
    MemoryManager,
    NamespaceSpec,
)
from hrm_memory.storage.redis.backend import RedisBackend
from tests.helpers.mp_workers import release
from tests.helpers.redis_server import RedisServer, fresh_url, require_redis

REPO = Path(__file__).resolve().parents[2]
CANARY = "CANARY-c41e-redis-never"
NS = "altitude.patterns"


@pytest.fixture
def url() -> str:
    require_redis()
    return fresh_url()


@pytest.fixture
def mm(tmp_path: Path, url: str) -> Iterator[MemoryManager]:
    with MemoryManager(tmp_path / "root", backend=url) as manager:
        yield manager


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url.split("?")[0])


def prefix_of(url: str) -> str:
    return url.split("prefix=")[1].split("&")[0]


def dump_prefix(url: str, *, bookkeeping: bool = True) -> bytes:
    """Every byte stored under the store's prefix (keys and values, any type);
    without ``bookkeeping``, leaving out the leases and their waiters lists
    (``l:``/``w:`` keys: a token and a '1', no data, gone within seconds) and
    the purge epochs (``purgegen``, ``purges``: namespace names and counters,
    which every host's recall index reads to learn of a purge)."""
    r = raw(url)
    out = []
    skip = tuple(f"{prefix_of(url)}{t}:".encode() for t in "lw")
    epochs = {f"{prefix_of(url)}{k}".encode() for k in ("purgegen", "purges")}
    for key in r.scan_iter(match=prefix_of(url) + "*"):
        if not bookkeeping and (key.startswith(skip) or key in epochs):
            continue
        out.append(key)
        out.append(r.dump(key) or b"")
        kind = r.type(key)
        if kind == b"hash":
            out.extend(b"%s=%s" % kv for kv in r.hgetall(key).items())
        elif kind == b"stream":
            out.extend(repr(e).encode() for e in r.xrange(key))
        elif kind == b"string":
            out.append(r.get(key) or b"")
    r.close()
    return b"\n".join(out)


def test_spans_say_redis_and_carry_no_values(tmp_path: Path, url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(tmp_path, backend=url, tracer_provider=provider) as mm:
        mm.write(NS, "k", {"note": CANARY})
        mm.read(NS, "k")
        mm.update(NS, "k", lambda v: {**v, "more": CANARY})
        mm.query(NS, where={"note": CANARY})
        mm.delete(NS, "k")
    provider.force_flush()
    spans = exporter.get_finished_spans()
    assert [s.attributes["db.operation.name"] for s in spans] == ["write", "read", "update", "query", "delete"]
    for s in spans:
        assert s.attributes["db.system.name"] == "redis"
        assert CANARY not in repr(dict(s.attributes))
    provider.shutdown()


def test_records_live_in_hashes_keys_never_in_key_names(mm: MemoryManager, url: str) -> None:
    mm.write(NS, "secret-key-name", 1)
    r = raw(url)
    names = [k.decode() for k in r.scan_iter(match=prefix_of(url) + "*")]
    r.close()
    assert names and not any("secret-key-name" in n for n in names)
    assert f"{prefix_of(url)}r:{NS}" in names


def test_consent_nothing_reaches_redis_before_grant_and_purge_removes_it(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as server:
        url = server.fresh_url()
        with MemoryManager(tmp_path / "root", backend=url) as mm:
            ns = "focus.conversation"
            mm.write(ns, "turn", {"text": CANARY})
            assert mm.read(ns, "turn") == {"text": CANARY}
            assert CANARY.encode() not in dump_prefix(url)
            assert not any(CANARY.encode() in p.read_bytes() for p in server.dir.rglob("*") if p.is_file())
            assert mm.consent.grant("conversation")["persisted"] == {ns: 1}
            assert CANARY.encode() not in dump_prefix(url)  # persisted sealed: ciphertext only
            assert b"hrmenc:1:" in dump_prefix(url)
            mm.update(ns, "turn", lambda v: {**v, "again": CANARY})
            result = mm.consent.revoke("conversation", purge=True)
            assert result["purged"][ns]["warm"] == 1 and result["purged"][ns]["rewrite"] >= 1
            assert mm.read(ns, "turn") is None
            assert b"focus.conversation" not in dump_prefix(url, bookkeeping=False)  # records, archive, change log
            r = raw(url)
            deadline = time.monotonic() + 20
            while r.info("persistence")["aof_rewrite_in_progress"] or r.info("persistence")["aof_rewrite_scheduled"]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            r.close()
            files = [p for p in server.dir.rglob("*") if p.is_file() and p.name != "redis.log"]
            assert files and not any(CANARY.encode() in p.read_bytes() for p in files)


def test_versions_tombstones_and_archive(mm: MemoryManager, url: str) -> None:
    mm.write(NS, "k", 1)
    mm.write(NS, "k", 2)
    assert mm.delete(NS, "k") and mm.get_record(NS, "k") is None
    mm.write(NS, "k", 3)
    assert mm.get_record(NS, "k").version == 4  # the tombstone kept version 3
    mm.write("focus.gates", "g", {"gate": 1})
    assert mm.archive(now=time.time() + 400 * 86400) == {"focus.gates": 1}
    r = raw(url)
    cold = r.hgetall(f"{prefix_of(url)}c:focus.gates")
    assert list(cold) == [b"g"]
    mm.write("focus.gates", "g", {"gate": 2})  # a new version supersedes the archived one
    assert mm.get_record("focus.gates", "g").tier == "warm"
    assert r.hlen(f"{prefix_of(url)}c:focus.gates") == 0
    r.close()
    assert mm.check() == []


def test_check_finds_and_quarantines_a_damaged_record(mm: MemoryManager, url: str) -> None:
    mm.write(NS, "good", {"v": 1})
    mm.write(NS, "bad", {"v": 2})
    r = raw(url)
    live = f"{prefix_of(url)}r:{NS}"
    blob = r.hget(live, "bad")
    assert blob is not None
    r.hset(live, "bad", blob[:-2] + b"9}")  # flip a byte of the value: the checksum no longer matches
    with pytest.raises(CorruptRecord):
        mm.read(NS, "bad")
    (finding,) = mm.check()
    assert finding.kind == "corrupt-record" and not finding.fixed
    assert [f.fixed for f in mm.check(fix=True)] == [True]
    assert mm.check() == [] and mm.read(NS, "good") == {"v": 1} and mm.read(NS, "bad") is None
    assert r.hget(f"{prefix_of(url)}q:{NS}", "bad") is not None  # kept aside, not dropped
    r.close()


def test_cursors_expire_and_garbage_is_refused(tmp_path: Path, url: str) -> None:
    trimmed = url + "&stream_maxlen=1000"
    with MemoryManager(tmp_path, backend=trimmed) as mm:
        start = mm.cursor()
        mm.write(NS, "first", 1)
        events, _ = mm.events_since(start)
        assert [(e.op, e.key, e.origin) for e in events] == [("write", "first", "local")]
        for bad in ("", "1:0", "abc-1", "12-", "-1-2"):
            with pytest.raises(InvalidCursor):
                mm.events_since(bad)
        for i in range(3000):  # far past the retention: the first entries are trimmed
            mm.write(NS, f"k{i % 10}", i)
        with pytest.raises(CursorExpired):
            mm.events_since(start)
        recent = mm.cursor()
        mm.write(NS, "last", 1)
        assert [e.key for e in mm.events_since(recent)[0]] == ["last"]


def test_lease_fences_a_holder_that_outlived_it(tmp_path: Path, url: str) -> None:
    short = url + "&lease_ms=200"
    slow = RedisBackend(short, lock_timeout=5)
    other = RedisBackend(short, lock_timeout=5)
    steady = RedisBackend(url + "&lease_ms=10000", lock_timeout=5)
    try:
        slow.put(NS, "k", b"1", 1)
        with slow.lock(NS):
            assert slow.get(NS, "k") is not None  # the first read in a scope takes the lease
            t0 = time.monotonic()
            other.put(NS, "k", b"2", 2)  # waits for the lease to expire (no renewal: the holder is stuck)
            assert 0.05 < time.monotonic() - t0 < 2
            with pytest.raises(LockTimeout, match="expired"):
                slow.put(NS, "k", b"3", 3)  # fenced: not applied
        got = other.get(NS, "k")
        assert got is not None and (got.value, got.version) == (b"2", 2)
        with steady.lock(NS):  # a 10 s lease: only its hand-over can let the waiter in early
            steady.get(NS, "k")
            t0 = time.monotonic()
            done = threading.Event()

            def write() -> None:
                slow.put(NS, "k", b"4", 4)
                done.set()

            thread = threading.Thread(target=write)
            thread.start()
            time.sleep(0.2)
            assert not done.is_set()  # a plain write waits while another holder has the lease
            steady.put(NS, "k", b"x", 5)  # the fenced write ends the lease and wakes the waiter
            thread.join(5)
            assert done.is_set() and time.monotonic() - t0 < 3
        final = slow.get(NS, "k")
        assert final is not None and (final.value, final.version) == (b"4", 4)
    finally:
        slow.close()
        other.close()
        steady.close()


def test_declarations_are_shared(tmp_path: Path, url: str) -> None:
    with MemoryManager(tmp_path / "a", backend=url) as a, MemoryManager(tmp_path / "b", backend=url) as b:
        a.declare(NamespaceSpec("planner.drafts", ttl=60))
        b.write("planner.drafts", "d", 1)  # known to b through Redis
        assert a.read("planner.drafts", "d") == 1
        a.undeclare("planner.drafts", purge=True)
        time.sleep(0.06)  # the recheck interval of run-time namespaces
        assert "planner.drafts" not in {s.name for s in b.namespaces()}


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.redis_server", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_four_processes_update_one_key_2000_times(url: str) -> None:
    procs = [_spawn("counter", url, "500") for _ in range(4)]
    release(procs)
    phases = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        phases.append(json.loads(out.strip().splitlines()[-1]))
    with MemoryManager(None, backend=url) as mm:
        assert mm.read("focus.slow", "n") == 2000
        assert mm.get_record("focus.slow", "n").version == 2000
    wall = max(p["t1"] for p in phases) - min(p["t0"] for p in phases)
    print(f"\n4 x 500 updates through Redis: {wall:.2f} s")


@pytest.mark.slow
def test_two_hosts_see_each_others_writes_and_events(tmp_path: Path, url: str) -> None:
    n = 200
    a = _spawn("host", url, str(tmp_path / "host-a"), "a", str(n), "b")
    b = _spawn("host", url, str(tmp_path / "host-b"), "b", str(n), "a")
    release([a, b])
    results = {}
    for name, p in (("a", a), ("b", b)):
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        results[name] = json.loads(out.strip().splitlines()[-1])
    latencies = []
    for me, peer in (("a", "b"), ("b", "a")):
        got, sent = results[me]["got"], results[peer]["sent"]
        assert sorted(got) == sorted(sent), f"{me} missed events of {peer}"
        assert results[me]["read_peer"] == {"from": peer, "i": n - 1}
        latencies += [got[k] - sent[k] for k in sent]
    q = statistics.quantiles(latencies, n=100)
    print(f"\ncross-host delivery latency over {len(latencies)} events: p50 {q[49] * 1000:.1f} ms, p99 {q[98] * 1000:.1f} ms")


def test_events_between_two_managers_in_commit_order(tmp_path: Path, url: str) -> None:
    with MemoryManager(tmp_path / "a", backend=url) as a, MemoryManager(tmp_path / "b", backend=url) as b:
        got: list[Event] = []
        sub = b.subscribe(NS, got.append)
        for i in range(20):
            a.write(NS, "k", i)
        a.delete(NS, "k")
        deadline = time.monotonic() + 5
        while len(got) < 21 and time.monotonic() < deadline:
            time.sleep(0.01)
        sub.cancel()
        assert [(e.op, e.version) for e in got] == [("write", v) for v in range(1, 21)] + [("delete", 21)]
        assert all(e.origin.startswith("pid:") for e in got)


def test_record_blobs_decode_or_raise_corrupt_record() -> None:
    import zlib

    from hrm_memory.storage.redis.scripts import decode

    value = b'{"a":1}'
    st = decode("k", b"w3:10:20:%08x" % zlib.crc32(value) + value, "warm", NS)
    assert st is not None and (st.version, st.created_us, st.updated_us, st.value) == (3, 10, 20, value)
    assert decode("k", b"t4:10:30:", "warm", NS) is None
    marker = decode("k", b"a3:10:20:", "warm", NS)
    assert marker is not None and marker.tier == "cold"
    for bad in (b"w3:10:20:zzzzzzzz{}", b"garbage", b"w3:10:20:0000", b"x3:1:2:", b"a3:1:2:junk",
                b"w3:10:20:%08x" % zlib.crc32(value) + b'{"a":2}'):
        with pytest.raises(CorruptRecord):
            decode("k", bad, "warm", NS)


def test_recall_finds_what_another_host_remembered(tmp_path: Path, url: str) -> None:
    """The recall index is per process (under each root), caught up from the change stream."""
    with MemoryManager(tmp_path / "a", backend=url) as a, MemoryManager(tmp_path / "b", backend=url) as b:
        done = a.remember("Prefers timeboxed work blocks in the morning", kind="semantic", namespace=NS)
        deadline = time.monotonic() + 5
        hits: list[Any] = []
        while time.monotonic() < deadline and not hits:
            hits = b.recall("timeboxed work blocks", namespaces="altitude.*", k=3)
            time.sleep(0.02)
        assert [h.key for h in hits][:1] == [done.key]
