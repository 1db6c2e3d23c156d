"""Several hosts on one Redis (real redis-server, tests/helpers/redis_server.py):
what one host sweeps or purges is right for the others.

``MemoryStore.sweep_ttl()`` holds its lease for the whole sweep, so it never
deletes a put another host makes meanwhile; a purge on one host empties the
other hosts' own recall indexes, and leaves no key or value in the change
stream, the AOF or dump.rdb.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hrm_memory.integrations.langgraph import MemoryStore
from tests.helpers.canary import files_holding
from tests.helpers.redis_server import fresh_url, require_redis

REPO = Path(__file__).resolve().parent.parent.parent
N = 300
ROUNDS = 20

_WORKER = """
import sys, time
from hrm_memory.integrations.langgraph import MemoryStore
role, url, root = sys.argv[1:4]
store = MemoryStore(root=root, backend=url)
print("READY", flush=True)
for line in sys.stdin:
    rnd = int(line)
    if role == "sweep":
        print("SWEPT", store.sweep_ttl(), flush=True)
    else:
        acked = []
        for i in range(%(n)d):
            store.put(("race",), f"k{i}", {"round": rnd, "fresh": True})  # no TTL: never expires
            acked.append(i)
        print("ACKED", len(acked), flush=True)
store.close()
""" % {"n": N}


def _spawn(role: str, url: str, root: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", _WORKER, role, url, str(root)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    return p


def _say(p: subprocess.Popen[str], text: str) -> None:
    assert p.stdin is not None
    p.stdin.write(text + "\n")
    p.stdin.flush()


def _answer(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    return p.stdout.readline().strip()


def test_sweep_never_deletes_a_put_racing_it(tmp_path: Path) -> None:
    """Every put acknowledged while another host sweeps is there after the
    sweep, in every round (a lease ended by the sweep's first delete would
    lose about 40% of them)."""
    require_redis()
    url = fresh_url()
    sweeper = _spawn("sweep", url, tmp_path / "a")
    putter = _spawn("put", url, tmp_path / "b")
    lost: dict[int, int] = {}
    try:
        with MemoryStore(root=str(tmp_path / "main"), backend=url) as store:
            for rnd in range(ROUNDS):
                for i in range(N):  # expired by the time the sweep looks
                    store.put(("race",), f"k{i}", {"round": rnd, "fresh": False}, ttl=0.0001)
                time.sleep(0.02)
                _say(sweeper, str(rnd))
                _say(putter, str(rnd))
                swept, acked = _answer(sweeper), _answer(putter)
                assert swept.startswith("SWEPT") and acked == f"ACKED {N}", (swept, acked)
                gone = [i for i in range(N) if store.get(("race",), f"k{i}") is None]
                if gone:
                    lost[rnd] = len(gone)
                for i in range(N):
                    item = store.get(("race",), f"k{i}")
                    assert item is None or item.value == {"round": rnd, "fresh": True}
    finally:
        for p in (sweeper, putter):
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=60)
    assert lost == {}, f"acknowledged puts deleted by the sweep (round: count): {lost}"


CANARY_WORD = "zqhostbcanary"


@pytest.mark.parametrize("then", ["recall", "context", "close"])
def test_another_hosts_recall_index_drops_purged_text(tmp_path: Path, then: str) -> None:
    """Host A purges; host B's own index/recall.db, which held the full text,
    drops the namespace's rows at B's next recall, context or close (the
    store's purge epoch moved), and they stay gone through a reopen."""
    from hrm_memory import MemoryManager

    require_redis()
    url = fresh_url()
    with MemoryManager(tmp_path / "a", backend=url) as a, MemoryManager(tmp_path / "b", backend=url) as b:
        a.consent.grant("conversation")
        a.write("altitude.patterns", "keep", {"note": "an ungated pattern stays"})
        for i in range(5):
            a.write("altitude.history", f"s{i}", {"summary": f"{CANARY_WORD} session {i}"})
        assert len(b.recall(CANARY_WORD, k=10)) == 5
        assert files_holding(tmp_path / "b", CANARY_WORD), "B's own index holds the text (the grep sees it)"
        a.consent.revoke("conversation", purge=True)
        if then == "recall":
            assert b.recall(CANARY_WORD) == []
            assert [h.key for h in b.recall("ungated pattern")] == ["keep"]
        elif then == "context":
            assert CANARY_WORD not in b.context("altitude").text
    # (B is closed here in every case)
    assert files_holding(tmp_path / "b", CANARY_WORD) == []
    with MemoryManager(tmp_path / "b", backend=url) as b:
        assert b.recall(CANARY_WORD) == []
        assert [h.key for h in b.recall("ungated pattern")] == ["keep"]
    assert files_holding(tmp_path / "b", CANARY_WORD) == []


def _server_files(server_dir: Path) -> list[Path]:
    return [p for p in server_dir.rglob("*") if p.is_file() and p.name != "redis.log"]


def _fill_gated(mm: object, n: int) -> list[str]:
    """n records of focus.conversation under high-entropy keys and values
    (random hex: nothing LZF could fold away), consented; their canaries."""
    import secrets

    canaries = []
    for _ in range(n):
        key, value = "k" + secrets.token_hex(12), secrets.token_hex(24)
        mm.write("focus.conversation", key, {"text": value})  # type: ignore[attr-defined]
        canaries += [key, value]
    return canaries


@pytest.mark.parametrize("persistence", ["aof", "rdb"])
def test_purge_leaves_no_key_or_value_in_the_stream_or_the_files(tmp_path: Path, persistence: str) -> None:
    """After a purge the purged keys and values are in none of
    ``DUMP <prefix>events`` (XDEL alone only flags entries), the rewritten
    AOF and dump.rdb, and do not come back after a restart; with RDB-only
    persistence the purge's BGSAVE waits out a snapshot forked before the
    purge ("already in progress"), so the values do not stay in it."""
    import redis as redis_py

    from hrm_memory import MemoryManager
    from tests.helpers.redis_server import RedisServer

    extra = ("--rdbcompression", "no", "--save", "3600 1") if persistence == "rdb" else ("--rdbcompression", "no")
    with RedisServer(tmp_path / "redis", appendonly=persistence == "aof", appendfsync="always", extra=extra) as server:
        url = server.fresh_url()
        r = redis_py.Redis(port=server.port)
        try:
            with MemoryManager(tmp_path / "root", backend=url) as mm:
                mm.consent.grant("conversation")
                mm.write("altitude.patterns", "keep", {"note": "stays"})
                canaries = _fill_gated(mm, 40)
                for i in range(300):  # other keys, so that a snapshot takes a while
                    mm.write("altitude.patterns", f"filler{i}", {"i": i})
                if persistence == "rdb":
                    r.save()
                    r.config_set("rdb-key-save-delay", 3000)  # a slow snapshot, forked before the purge
                    r.bgsave()
                else:
                    r.bgrewriteaof()
                dump = r.dump(prefix_of_url(url) + "events") or b""
                assert any(c.encode() in dump for c in canaries), "the canary greps the stream"
                result = mm.consent.revoke("conversation", purge=True)
                r.config_set("rdb-key-save-delay", 0)
                assert result["purged"]["focus.conversation"]["rewrite"] >= 1
                dump = r.dump(prefix_of_url(url) + "events") or b""
                assert [c for c in canaries if c.encode() in dump] == [], "purged keys left in the stream"
                files = _server_files(server.dir)
                assert files
                assert [(p.name, c) for p in files for c in canaries if c.encode() in p.read_bytes()] == []
                assert mm.read("altitude.patterns", "keep") == {"note": "stays"}
                cursor = mm.cursor()
                mm.write("altitude.patterns", "after", 1)
                assert [e.key for e in mm.events_since(cursor)[0]] == ["after"]
            r.close()
            server.restart()  # SIGKILL and start: what the files hold is what comes back
            r = redis_py.Redis(port=server.port)
            everything = b"".join((k + (r.dump(k) or b"")) for k in r.scan_iter())
            assert [c for c in canaries if c.encode() in everything] == [], "purged keys came back after a restart"
            with MemoryManager(tmp_path / "root", backend=url) as mm:
                assert mm.read("altitude.patterns", "keep") == {"note": "stays"}
        finally:
            r.close()


def prefix_of_url(url: str) -> str:
    return url.split("prefix=")[1].split("&")[0]
