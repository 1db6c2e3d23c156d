"""What a new user met in a first hour with a fresh clone: each step as they
took it (the console script, the README's own calls), and what they should
have seen. Redis runs as a real redis-server (tests/helpers/redis_server.py)
and a real 6-node cluster (tests/helpers/redis_cluster.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from hrm_memory import MemoryManager

SCRIPT = Path(sys.executable).parent / "hrm-memory"
REPO = Path(__file__).resolve().parents[2]


def hrm(*args: str, root: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user types it."""
    env = dict(os.environ)
    env.pop("HRM_MEMORY_BACKEND", None)
    argv = [str(SCRIPT), *(["--root", str(root)] if root is not None else []), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, input=stdin, timeout=120)


# -- stats on Redis -------------------------------------------------------------------


def _stats_on(url: str, tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "host", backend=url) as mm:
        mm.write("altitude.patterns", "timeboxing", {"s": 0.8})
    out = hrm("--backend", url, "stats")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and out.stderr == ""
    head, *table = out.stdout.splitlines()
    prefix = url.rsplit("prefix=", 1)[1]
    assert f"prefix: {prefix}" in head and "url: redis" in head
    assert any(line.split()[:3] == ["altitude.patterns", "warm", "1"] for line in table), out.stdout


def test_stats_on_a_redis_server_prints_its_table(tmp_path: Path) -> None:
    from tests.helpers.redis_server import fresh_url

    _stats_on(fresh_url(), tmp_path)


def test_stats_on_a_redis_cluster_prints_its_table(tmp_path: Path) -> None:
    from tests.helpers.redis_cluster import shared_cluster

    _stats_on(shared_cluster().fresh_url(), tmp_path)
