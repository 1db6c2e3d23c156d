"""A real Redis Cluster for the tests: 6 ``redis-server`` processes on free
loopback ports (``cluster-enabled yes``), 3 primaries and 3 replicas, joined
with ``redis-cli --cluster create ... --cluster-replicas 1``; stopped and
their directories removed afterwards.

- :func:`shared_cluster` is one cluster per test process (started on first
  use, stopped at exit); tests isolate themselves with a key prefix of their
  own (:meth:`RedisCluster.fresh_url`).
- :class:`RedisCluster` can be started by a test of its own (the failover
  test kills a primary: ``kill(port)`` is SIGKILL, and the cluster's own
  failover promotes that primary's replica within a few
  ``cluster-node-timeout``).

Skips (or, under ``HRM_MEMORY_REQUIRE_REDIS=1``, fails) like the single
server's helper when there is no ``redis-server`` binary.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from collections import defaultdict
from typing import Any

from tests.helpers.redis_server import PortTaken, port_taken, require_redis

REPO = Path(__file__).resolve().parents[2]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port(taken: list[int]) -> int:
    """A free port whose cluster-bus port (port + 10000) is free too; Redis
    wants the port at most 55535."""
    while True:
        port = random.randrange(20000, 45000)
        if all(abs(port - t) != 10000 and port != t for t in taken) and _bindable(port) and _bindable(port + 10000):
            return port


def _cli() -> str:
    server = require_redis()
    found = shutil.which("redis-cli") or str(Path(server).with_name("redis-cli"))
    if not Path(found).exists():
        import pytest

        if os.environ.get("HRM_MEMORY_REQUIRE_REDIS") == "1":
            pytest.fail("HRM_MEMORY_REQUIRE_REDIS=1 but no redis-cli next to redis-server", pytrace=False)
        pytest.skip("no redis-cli binary (needed to create a cluster)")
    return found


def _send(port: int, *words: str, timeout: float = 1.0) -> bytes:
    """One inline command, its raw reply (b'' if the node does not answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall((" ".join(words) + "\r\n").encode())
            out = b""
            s.settimeout(timeout)
            while True:
                chunk = s.recv(65536)
                out += chunk
                if not chunk or (out.startswith((b"+", b"-", b":")) and out.endswith(b"\r\n")):
                    return out
                if out.startswith(b"$"):
                    head, _, rest = out.partition(b"\r\n")
                    if len(rest) >= int(head[1:]) + 2:
                        return out
    except (OSError, ValueError):
        return b""


def _pid(port: int) -> int | None:
    """The process id of the server answering on ``port``."""
    for line in _send(port, "INFO", "server").split(b"\r\n"):
        if line.startswith(b"process_id:"):
            return int(line.split(b":", 1)[1])
    return None


class RedisCluster:
    """Six nodes on 127.0.0.1 (3 primaries, 3 replicas) under ``directory``."""

    def __init__(self, directory: Path, *, node_timeout_ms: int = 1500, appendonly: bool = False) -> None:
        self.binary = require_redis()
        self.cli = _cli()
        self.dir = Path(directory)
        self.node_timeout_ms = node_timeout_ms
        self.appendonly = appendonly
        self.ports: list[int] = []
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:3]) + "/0"

    def fresh_url(self, **query: str) -> str:
        query.setdefault("prefix", f"t{uuid.uuid4().hex[:12]}:")
        return self.url + "?" + "&".join(f"{k}={v}" for k, v in query.items())

    def _start_node(self, port: int) -> None:
        d = self.dir / str(port)
        d.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(d),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            # a replica's full sync starts at once (Redis 7 waits 5 s by default
            # for more replicas to share one diskless transfer)
            "--repl-diskless-sync-delay", "0",
            "--daemonize", "no",
            "--logfile", str(d / "redis.log"),
        ]
        self.procs[port] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)

    def start(self, timeout: float = 60.0) -> RedisCluster:
        self.dir.mkdir(parents=True, exist_ok=True)
        # The ports are checked free when chosen, yet another process (a test
        # worker beside this one, an outgoing connection) may take one before
        # its node binds it: the nodes then start again on other ports.
        for _ in range(5):
            while len(self.ports) < 6:
                self.ports.append(free_cluster_port(self.ports))
            try:
                return self._start(timeout)
            except PortTaken:
                for p in self.ports:
                    shutil.rmtree(self.dir / str(p), ignore_errors=True)
                self.ports = []
        return self._start(timeout)

    def _start(self, timeout: float) -> RedisCluster:
        for p in self.ports:
            self._start_node(p)
        deadline = time.monotonic() + timeout
        try:
            for p in self.ports:
                while not (_send(p, "PING").startswith(b"+PONG") and _pid(p) == self.procs[p].pid):
                    if self.procs[p].poll() is not None and port_taken(self.log(p)):
                        raise PortTaken(p)
                    if self.procs[p].poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"cluster node {p} did not start: {self.log(p)}")
                    time.sleep(0.02)
            subprocess.run(
                [self.cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports), "--cluster-replicas", "1",
                 "--cluster-yes"],
                check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout,
            )
            self.wait_ok(deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        return self

    def log(self, port: int) -> str:
        f = self.dir / str(port) / "redis.log"
        return f.read_text(errors="replace")[-2000:] if f.exists() else ""

    def info(self, port: int) -> str:
        return _send(port, "CLUSTER", "INFO").decode(errors="replace")

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says cluster_state:ok and sees 3 primaries
        with their slots, and every replica has finished its first sync."""
        deadline = time.monotonic() + timeout
        while True:
            live = [p for p in self.ports if p in self.procs]
            if all("cluster_state:ok" in self.info(p) for p in live) and all(self._synced(p) for p in live):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok: "
                                   + " | ".join(f"{p}: {self.info(p)[:80]!r}" for p in live))
            time.sleep(0.05)

    def _synced(self, port: int) -> bool:
        rep = _send(port, "INFO", "replication").decode(errors="replace")
        if "role:master" in rep:
            return True
        return "master_link_status:up" in rep and "master_sync_in_progress:0" in rep

    def role(self, port: int) -> str:
        rep = _send(port, "INFO", "replication").decode(errors="replace")
        return "primary" if "role:master" in rep else "replica"

    def primaries(self) -> list[int]:
        return [p for p in self.ports if p in self.procs and self.role(p) == "primary"]

    def replica_of(self, port: int) -> int:
        """The port of the live replica whose primary is ``port``."""
        for p in self.ports:
            if p in self.procs and p != port:
                rep = _send(p, "INFO", "replication").decode(errors="replace")
                if f"master_port:{port}\r\n" in rep:
                    return p
        raise LookupError(f"no replica of {port}")

    def kill(self, port: int) -> None:
        """SIGKILL one node (no shutdown, no final write)."""
        proc = self.procs.pop(port)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def restart(self, port: int, timeout: float = 30.0) -> None:
        """Start a killed node again on its port and directory: it reads its
        nodes.conf, learns it was failed over and rejoins as a replica."""
        self._start_node(port)
        deadline = time.monotonic() + timeout
        while not _send(port, "PING").startswith(b"+PONG"):
            if self.procs[port].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"cluster node {port} did not restart: {self.log(port)}")
            time.sleep(0.02)

    def stop(self) -> None:
        for port, proc in list(self.procs.items()):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            del self.procs[port]

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: warm, ungated, unindexed seed namespaces (cheap to write)
CANDIDATES = ["focus.slow", "focus.lanes", "focus.interactions", "focus.bridge", "altitude.agents",
              "altitude.integrity", "altitude.sessions", "reasoning.routing", "reasoning.hrm"]


def py_client(cluster: RedisCluster) -> Any:
    """redis-py's own cluster client on the cluster (for checks from outside the store)."""
    from redis.cluster import RedisCluster as PyCluster

    return PyCluster(host="127.0.0.1", port=cluster.ports[0], decode_responses=False)


def owner(client: Any, key: str) -> int:
    return int(client.get_node_from_key(key).port)


def spread(cluster: RedisCluster, prefix: str, per_shard: int = 1) -> dict[int, list[str]]:
    """Candidate namespaces by the port of the primary that owns them."""
    from hrm_memory.storage.redis.keys import KeyLayout

    client = py_client(cluster)
    try:
        out: dict[int, list[str]] = defaultdict(list)
        for ns in CANDIDATES:
            out[owner(client, KeyLayout(prefix, True).of(ns).live)].append(ns)
        return {port: names[:per_shard] for port, names in out.items()}
    finally:
        client.close()


def prefix_on_every_shard(cluster: RedisCluster) -> str:
    """A fresh prefix under which the candidates cover all 3 primaries."""
    while True:
        prefix = f"t{uuid.uuid4().hex[:10]}:"
        if len(spread(cluster, prefix)) == 3:
            return prefix


def prefix_with_registry(client: Any, namespace: str, *, same_shard: bool) -> str:
    """A fresh prefix under which the store's namespace registry
    (``{<prefix>}namespaces``) is on the primary that owns ``namespace``, or
    on another one (``client``: :func:`py_client`'s)."""
    from hrm_memory.storage.redis.keys import KeyLayout

    while True:
        prefix = f"t{uuid.uuid4().hex[:10]}:"
        layout = KeyLayout(prefix, True)
        if (owner(client, layout.namespaces) == owner(client, layout.of(namespace).live)) == same_shard:
            return prefix


def worker(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.cluster_workers", *args], cwd=REPO, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")


def run_failover(tmp: Path, wait: int) -> dict[str, Any]:
    """4 writers on namespaces of all 3 shards; a primary SIGKILLed after 1.5 s;
    its replica promoted by the cluster (node timeout 1000 ms); the dead node
    restarted (it rejoins as a replica); the writers go on for 2 s after the
    cluster is whole again. Returns the figures."""
    from hrm_memory import MemoryManager

    with RedisCluster(tmp / f"cluster-wait{wait}", node_timeout_ms=1000) as cluster:
        prefix = prefix_on_every_shard(cluster)
        by_shard = spread(cluster, prefix)
        namespaces = [names[0] for names in by_shard.values()]
        url = cluster.fresh_url(prefix=prefix, wait=str(wait), wait_timeout="500", lease_ms="1500",
                                socket_timeout="1")
        writers = [worker("writer", url, f"w{i}", ",".join(namespaces)) for i in range(4)]
        for w in writers:
            ready(w)
        for w in writers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        time.sleep(1.5)
        victim = next(port for port, names in by_shard.items())
        victim_ns = by_shard[victim][0]
        replica = cluster.replica_of(victim)
        killed_at = time.monotonic()
        cluster.kill(victim)
        deadline = time.monotonic() + 30
        while cluster.role(replica) != "primary":
            assert time.monotonic() < deadline, "the replica was not promoted"
            time.sleep(0.05)
        promoted_at = time.monotonic()
        # The shard has no replica now: wait=1 writes there raise NotReplicated
        # until the operator brings one back. The dead node, restarted, rejoins
        # as the replica of its promoted one.
        cluster.restart(victim)
        cluster.wait_ok(30)
        time.sleep(2.0)
        outs = []
        for w in writers:
            assert w.stdin is not None
            w.stdin.close()  # all stop at once
            w.stdin = None
        for w in writers:
            out, err = w.communicate(timeout=60)
            assert w.returncode == 0, err[-3000:]
            outs.append(out)
        acked_u: dict[str, set[str]] = defaultdict(set)
        acked_w: dict[tuple[str, str], int] = {}
        errors: dict[str, int] = defaultdict(int)
        victim_ok: list[float] = []
        for out in outs:
            for line in out.splitlines():
                parts = line.split()
                if parts[0] == "A" and parts[1] == "U":
                    acked_u[parts[2]].add(parts[3])
                elif parts[0] == "A":
                    acked_w[(parts[2], parts[3])] = int(parts[3].rsplit("-", 1)[1])
                else:
                    errors[parts[4]] += 1
                if parts[0] == "A" and parts[2] == victim_ns:
                    victim_ok.append(float(parts[-1]))
        # the longest stretch without an acknowledged op on the killed shard's namespace
        times = sorted(t for t in victim_ok if t > killed_at - 1.0)
        gap = max(b - a for a, b in zip(times, times[1:]))
        lost_u = lost_w = 0
        with MemoryManager(None, backend=url) as mm:
            for ns in namespaces:
                value = mm.read(ns, "counter")
                ops = value["ops"]
                assert value["n"] == len(ops) == len(set(ops))  # no increment lost in the value, none twice
                lost_u += len(acked_u[ns] - set(ops))
            for (ns, key), i in acked_w.items():
                if mm.read(ns, key) != {"i": i, "by": key.rsplit("-", 1)[0]}:
                    lost_w += 1
        figures = {
            "wait": wait,
            "acknowledged_updates": sum(len(s) for s in acked_u.values()),
            "acknowledged_writes": len(acked_w),
            "lost_updates": lost_u,
            "lost_writes": lost_w,
            "failed_calls": dict(errors),
            "unavailable_s": round(gap, 2),
            "promoted_after_s": round(promoted_at - killed_at, 2),
        }
        print(json.dumps(figures))
        return figures


_shared: RedisCluster | None = None


def shared_cluster() -> RedisCluster:
    """One cluster for this test process (started on first use, stopped at exit)."""
    global _shared
    if _shared is None or not _shared.procs:
        directory = Path(tempfile.mkdtemp(prefix="hrm-cluster-"))
        cluster = RedisCluster(directory).start()
        _shared = cluster

        def stop() -> None:
            cluster.stop()
            shutil.rmtree(directory, ignore_errors=True)

        atexit.register(stop)
    return _shared


__all__ = ["CANDIDATES", "RedisCluster", "owner", "prefix_on_every_shard", "prefix_with_registry", "py_client", "ready",
           "run_failover", "shared_cluster", "spread", "worker"]
