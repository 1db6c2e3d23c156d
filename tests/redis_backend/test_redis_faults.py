"""The Redis server fails under the store.

- SIGKILL and restart mid-run with ``appendonly yes`` + ``appendfsync always``:
  every acknowledged write is there afterwards, and the writer carries on.
- A server that stops answering (SIGSTOP) or is gone (SIGKILL): operations
  raise :class:`BackendUnavailable` within a bounded time (the socket
  timeout), nothing is corrupted (``check()`` is clean), and work resumes
  when the server is back, subscriptions included.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hrm_memory import BackendUnavailable, Event, MemoryManager
from tests.helpers.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
NS = "altitude.patterns"


@pytest.mark.slow
def test_sigkill_and_restart_loses_no_acknowledged_write(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as server:
        url = server.fresh_url()
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.redis_server", "acked", url],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None and writer.stdout.readline().strip() == "READY"
        time.sleep(1.5)
        server.kill()  # no shutdown, no final fsync
        time.sleep(0.5)
        server.start()
        time.sleep(1.5)
        out, _ = writer.communicate("", timeout=60)  # closing stdin stops it
        assert writer.returncode == 0, out[-2000:]
        lines = out.splitlines()
        acked: dict[str, int] = {}
        errors = 0
        restarted_at = None
        for n, line in enumerate(lines):
            if line.startswith("ACK "):
                _, key, i = line.split()
                acked[key] = int(i)
            elif line.startswith("ERR "):
                assert line == "ERR BackendUnavailable", line  # typed, never a raw redis-py error
                errors += 1
                restarted_at = n
        assert errors > 0, "the writer never saw the outage"
        assert restarted_at is not None and any(x.startswith("ACK ") for x in lines[restarted_at:]), "no write after restart"
        with MemoryManager(None, backend=url) as mm:
            for key, i in acked.items():
                got = mm.read(NS, key)
                # the last acknowledged write, or a later one whose answer was lost
                assert got is not None and got["i"] >= i, (key, i, got)
            assert mm.check() == []
        print(f"\nSIGKILL + restart: {sum(1 for x in lines if x.startswith('ACK '))} acknowledged writes, "
              f"{errors} refused during the outage, none lost")


def test_unavailable_server_raises_typed_errors_in_bounded_time_and_work_resumes(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always") as server:
        url = server.fresh_url(socket_timeout="1", socket_connect_timeout="1")
        with MemoryManager(tmp_path / "a", backend=url) as mm, MemoryManager(tmp_path / "b", backend=url) as other:
            got: list[Event] = []
            sub = other.subscribe(NS, got.append)
            mm.write(NS, "before", {"v": 1})
            mm.update("focus.slow", "n", lambda v: (v or 0) + 1)

            server.pause()  # the server stops answering: the socket timeout bounds every call
            for call in (lambda: mm.write(NS, "during", 1), lambda: mm.read(NS, "before"),
                         lambda: mm.update("focus.slow", "n", lambda v: v + 1)):
                t0 = time.monotonic()
                with pytest.raises(BackendUnavailable) as info:
                    call()
                assert time.monotonic() - t0 < 3.0
                assert isinstance(info.value, ConnectionError) and "127.0.0.1" in str(info.value)
            server.resume()
            assert mm.read(NS, "before") == {"v": 1}

            server.kill()  # gone: refused at once
            t0 = time.monotonic()
            with pytest.raises(BackendUnavailable):
                mm.write(NS, "gone", 1)
            with pytest.raises(BackendUnavailable):
                mm.query(NS)
            assert time.monotonic() - t0 < 3.0

            server.start()
            mm.write(NS, "after", {"v": 2})
            assert mm.read(NS, "before") == {"v": 1} and mm.read(NS, "after") == {"v": 2}
            n = mm.read("focus.slow", "n")
            assert n in (1, 2)  # the update during the pause either reached the server or not; never half
            assert mm.update("focus.slow", "n", lambda v: v + 1) == n + 1
            assert mm.check() == []
            deadline = time.monotonic() + 10
            while not any(e.key == "after" for e in got) and time.monotonic() < deadline:
                time.sleep(0.01)
            sub.cancel()
            assert any(e.key == "after" for e in got), "the other manager's subscription did not resume"


def test_opening_against_no_server_is_a_typed_error(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")  # never started: nothing listens on its port
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable):
        MemoryManager(tmp_path, backend=server.url + "?socket_connect_timeout=1")
    assert time.monotonic() - t0 < 3.0


def test_a_lease_holder_killed_mid_update_blocks_others_only_until_its_lease_expires(tmp_path: Path) -> None:
    from tests.helpers.redis_server import fresh_url

    url = fresh_url(lease_ms="600")
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\n"
            "from hrm_memory.storage.redis.backend import RedisBackend\n"
            f"b = RedisBackend({url!r})\n"
            "b.put('altitude.patterns', 'k', b'1', 1)\n"
            "with b.lock('altitude.patterns'):\n"
            "    b.get('altitude.patterns', 'k')  # takes the lease\n"
            "    print('HOLDING', flush=True)\n"
            "    time.sleep(60)\n"
        )],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "HOLDING"
    holder.kill()  # dies holding the lease: nobody releases it
    holder.wait(10)
    with MemoryManager(None, backend=url) as mm:
        t0 = time.monotonic()
        assert mm.update(NS, "k", lambda v: v + 1) == 2
        waited = time.monotonic() - t0
        assert waited < 3.0  # the lease (600 ms) expired; no manual cleanup needed
        assert mm.check() == []
