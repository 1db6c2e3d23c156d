"""The test servers' helpers (tests/helpers/redis_server.py, redis_cluster.py)
under port contention, as when test processes run side by side: a port the
helper chose but another process took is left for another free one, and a
server answering on that port is never taken for the helper's own."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.helpers.redis_cluster as redis_cluster
import tests.helpers.redis_server as redis_server
from tests.helpers.redis_server import PortTaken, RedisServer, require_redis


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process listens on (here: a plain socket)."""
    require_redis()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _first_then_free(port: int) -> object:
    handed: list[int] = []
    real = redis_server.free_port

    def choose() -> int:
        if not handed:
            handed.append(port)
            return port
        return real()

    return choose


def test_a_server_whose_chosen_port_is_taken_starts_on_another(
        tmp_path: Path, held_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_server, "free_port", _first_then_free(held_port))
    with RedisServer(tmp_path / "redis") as server:
        assert server.port != held_port
        assert server.proc is not None and server.serving_pid() == server.proc.pid


def test_a_server_never_takes_another_server_on_its_port_for_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with RedisServer(tmp_path / "first") as first:
        monkeypatch.setattr(redis_server, "free_port", _first_then_free(first.port))
        with RedisServer(tmp_path / "second") as second:
            assert second.port != first.port
            assert second.proc is not None and second.serving_pid() == second.proc.pid
        assert first.proc is not None and first.serving_pid() == first.proc.pid


def test_a_port_the_caller_named_is_kept_even_when_taken(tmp_path: Path, held_port: int) -> None:
    with pytest.raises(PortTaken):
        RedisServer(tmp_path / "redis", port=held_port).start()


def test_a_cluster_whose_chosen_port_is_taken_starts_on_others(
        tmp_path: Path, held_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = redis_cluster.free_cluster_port
    handed: list[int] = []

    def choose(taken: list[int]) -> int:
        if not handed:
            handed.append(held_port)
            return held_port
        return real(taken)

    monkeypatch.setattr(redis_cluster, "free_cluster_port", choose)
    with redis_cluster.RedisCluster(tmp_path / "cluster") as cluster:
        assert held_port not in cluster.ports and len(cluster.ports) == 6
        assert len(cluster.primaries()) == 3
