"""A real redis-server for the tests: started on a free loopback port in a
temporary directory, stopped afterwards. No mocks, no fakeredis.

- :func:`require_redis` skips a test (with the reason) when there is no
  ``redis-server`` binary, and fails it instead when ``HRM_MEMORY_REQUIRE_REDIS=1``
  (CI sets it: a missing server must not turn the Redis tests into skips).
- :func:`shared_server` is one server per test process, started on first use
  and stopped at exit; tests isolate themselves with a key prefix of their own
  (:func:`fresh_url`), so they can share it.
- :class:`RedisServer` is a server of a test's own, for the fault tests
  (``kill()`` is SIGKILL, ``restart()`` starts it again on the same port and
  directory, ``pause()``/``resume()`` are SIGSTOP/SIGCONT).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

BINARY_ENV = "HRM_MEMORY_REDIS_SERVER"  # a redis-server to use instead of the one on PATH
REQUIRE_ENV = "HRM_MEMORY_REQUIRE_REDIS"


def binary() -> str | None:
    return os.environ.get(BINARY_ENV) or shutil.which("redis-server")


def require_redis() -> str:
    """The redis-server binary, or skip (fail under HRM_MEMORY_REQUIRE_REDIS=1)."""
    found = binary()
    if found is None:
        reason = "no redis-server binary on PATH (apt-get install redis-server; .ci/run installs it)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PortTaken(RuntimeError):
    """A redis-server could not bind its port: another process holds it."""


def port_taken(log: str) -> bool:
    """The server's log says, since its last start, that a port it wanted was in use."""
    return "Address already in use" in log.rsplit("Redis is starting", 1)[-1]


class RedisServer:
    """One redis-server process on 127.0.0.1 with its data in ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        port: int | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.binary = require_redis()
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        # A port this helper chose may be taken by another process (a test
        # worker beside this one, an outgoing connection) before the server
        # binds it: start() then moves to another free port. A port the
        # caller named is kept.
        self.chose_port = port is None
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def fresh_url(self, **query: str) -> str:
        """The URL with a key prefix no other test uses (plus more query options)."""
        query.setdefault("prefix", f"t{uuid.uuid4().hex[:12]}:")
        return self.url + "?" + "&".join(f"{k}={v}" for k, v in query.items())

    def start(self, timeout: float = 15.0) -> RedisServer:
        for _ in range(5):
            try:
                return self._start(timeout)
            except PortTaken:
                if not self.chose_port:
                    raise
                self.port = free_port()
        return self._start(timeout)

    def _start(self, timeout: float) -> RedisServer:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--daemonize", "no",
            "--logfile", str(self.dir / "redis.log"),
            *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                if port_taken(log):
                    raise PortTaken(self.port)
                raise RuntimeError(f"redis-server exited with {code}:\n{log}")
            if self.ping():
                if self.serving_pid() == self.proc.pid:
                    return self
                # Another process's server answers on the port: ours cannot
                # bind it and is about to exit (the poll above sees it).
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout} s")

    def ping(self) -> bool:
        """PING answered with PONG (and the data loaded: no LOADING reply)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def serving_pid(self) -> int | None:
        """The process id of the server answering on the port (INFO server)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"INFO server\r\n")
                reply = b""
                while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
        except OSError:
            return None
        for line in reply.split(b"\r\n"):
            if line.startswith(b"process_id:"):
                return int(line.split(b":", 1)[1])
        return None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final fsync."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> RedisServer:
        self.kill()
        return self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)  # in case it was paused
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_shared: RedisServer | None = None


def shared_server() -> RedisServer:
    """One server for this test process (started on first use, stopped at exit)."""
    global _shared
    if _shared is None or _shared.proc is None or _shared.proc.poll() is not None:
        directory = Path(tempfile.mkdtemp(prefix="hrm-redis-"))
        server = RedisServer(directory).start()
        _shared = server

        def stop() -> None:
            server.stop()
            shutil.rmtree(directory, ignore_errors=True)

        atexit.register(stop)
    return _shared


def fresh_url(**query: str) -> str:
    """A URL on the shared server with a key prefix of its own."""
    return shared_server().fresh_url(**query)


@contextlib.contextmanager
def primary_with_replica(directory: Path, timeout: float = 15.0) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A server of the test's own and a replica of it (``--replicaof``), in
    sub-folders of ``directory``, given once the replica's link to the
    primary is up (a replica still in its first sync refuses to confirm);
    both stopped after."""
    import redis

    with RedisServer(directory / "primary") as primary:
        with RedisServer(directory / "replica", extra=("--replicaof", "127.0.0.1", str(primary.port))) as replica:
            deadline = time.monotonic() + timeout
            client = redis.Redis(host="127.0.0.1", port=replica.port)
            try:
                while client.info("replication").get("master_link_status") != "up":
                    assert time.monotonic() < deadline, "the replica did not sync"
                    time.sleep(0.05)
            finally:
                client.close()
            yield primary, replica


__all__ = ["REQUIRE_ENV", "PortTaken", "RedisServer", "binary", "fresh_url", "free_port", "port_taken", "primary_with_replica", "require_redis",
           "shared_server"]


# -- worker processes -------------------------------------------------------------
#
# python -m tests.helpers.redis_server counter URL N
#     Print READY, wait for a line on stdin, do N update(+1) on focus.slow/n,
#     print {"t0": ..., "t1": ...} (time.monotonic()).
# python -m tests.helpers.redis_server host URL ROOT NAME N PEER
#     A "host": its own root, the shared Redis. Subscribe to altitude.*, print
#     READY, wait for a line, write N keys NAME-<i> (5 ms apart; each write's
#     wall-clock time kept), then wait until the N events of PEER's keys came
#     in and its last key reads back; print {"sent": {key: t}, "got": {key: t},
#     "read_peer": value}.
# python -m tests.helpers.redis_server acked URL
#     Write {"i": i} to k<i % 50> in a loop until stdin closes; print
#     "ACK key i" after each acknowledged write and "ERR Type" after
#     each failure (then retry after 10 ms).


def _counter(url: str, n: int) -> None:
    import json
    import sys

    from hrm_memory import MemoryManager

    with MemoryManager(None, backend=url) as mm:
        print("READY", flush=True)
        sys.stdin.readline()
        t0 = time.monotonic()
        for _ in range(n):
            mm.update("focus.slow", "n", lambda v: (v or 0) + 1)
        print(json.dumps({"t0": t0, "t1": time.monotonic()}), flush=True)


def _host(url: str, root: str, name: str, n: int, peer: str) -> None:
    import json
    import sys
    import threading

    from hrm_memory import Event, MemoryManager

    got: dict[str, float] = {}
    done = threading.Event()

    def on_event(ev: Event) -> None:
        if ev.key.startswith(peer + "-") and ev.origin != "local":
            got[ev.key] = time.time()
            if len(got) >= n:
                done.set()

    with MemoryManager(root, backend=url, poll_interval=0.002) as mm:
        sub = mm.subscribe("altitude.*", on_event)
        print("READY", flush=True)
        sys.stdin.readline()
        sent = {}
        for i in range(n):
            key = f"{name}-{i}"
            sent[key] = time.time()
            mm.write("altitude.patterns", key, {"from": name, "i": i})
            time.sleep(0.005)
        done.wait(60)
        read_peer = mm.read("altitude.patterns", f"{peer}-{n - 1}")
        sub.cancel()
        print(json.dumps({"sent": sent, "got": got, "read_peer": read_peer}), flush=True)


def _acked(url: str) -> None:
    import sys
    import threading

    from hrm_memory import MemoryManager, MemoryStoreError

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    with MemoryManager(None, backend=url + "&socket_timeout=1") as mm:
        print("READY", flush=True)
        i = 0
        while not stop.is_set():
            key = f"k{i % 50}"
            try:
                mm.write("altitude.patterns", key, {"i": i})
            except MemoryStoreError as exc:
                print(f"ERR {type(exc).__name__}", flush=True)
                time.sleep(0.01)
                continue
            print(f"ACK {key} {i}", flush=True)
            i += 1


if __name__ == "__main__":
    import sys

    cmd, *rest = sys.argv[1:]
    if cmd == "counter":
        _counter(rest[0], int(rest[1]))
    elif cmd == "host":
        _host(rest[0], rest[1], rest[2], int(rest[3]), rest[4])
    elif cmd == "acked":
        _acked(rest[0])
    else:
        raise SystemExit(f"unknown command {cmd!r}")
