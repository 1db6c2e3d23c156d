"""A writer in fsync mode is killed with SIGKILL at random moments,
over 24 rounds on one store; after each, every acknowledged record reads back
intact and check() reports nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hrm_memory import MemoryManager, NamespaceSpec
from tests.helpers.killed_writer import KilledWriter

REPO = Path(__file__).resolve().parents[2]
SPECS = [NamespaceSpec("crash.data"), NamespaceSpec("crash.aged", ttl=1.0)]
ROUNDS = 24
NOTES = "t.notes"


def apply(model: dict[tuple[str, str], Any], op: list[Any]) -> None:
    if op[0] == "put":
        model[(op[1], op[2])] = op[3]
    elif op[0] == "del":
        model.pop((op[1], op[2]), None)


@pytest.mark.slow
def test_sigkill_loses_no_acknowledged_write(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rng = random.Random(int(os.environ.get("HRM_CRASH_SEED", "20261122")))
    model: dict[tuple[str, str], Any] = {}
    total_acked = 0
    for round_ in range(ROUNDS):
        writer = KilledWriter("crash_writer", root, round_)
        assert writer.ready.wait(30), "writer did not start"
        time.sleep(rng.uniform(0.02, 0.4))
        acked, in_flight = writer.kill()
        total_acked += len(acked)
        for op in acked:
            apply(model, op)
        with MemoryManager(root, namespaces=SPECS) as mm:
            got = {(r.namespace, r.key): r.value for r in mm.query("crash.*", include_cold=True)}
            if in_flight is None or in_flight[0] == "archive":
                assert got == model, f"round {round_}"
            else:
                # The operation in flight may or may not have committed, and
                # nothing else may differ.
                committed = dict(model)
                apply(committed, in_flight)
                assert got in (model, committed), f"round {round_}"
                model = got
            assert mm.check() == [], f"round {round_}"
    assert total_acked > ROUNDS * 5, "the writer barely ran; the test proves little"


def test_kill_during_compact_leaves_no_temp_after_reopen(root: Path) -> None:
    """A SIGKILL during compact() leaves a ``.NN.log.PID.compact`` temp behind;
    the next open removes it, and the last version reads back."""
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NOTES)]) as mm:
        for i in range(300):
            mm.write(NOTES, "k", {"i": i, "pad": "x" * 2000})
    code = f"""
import os, signal
from hrm_memory.storage.file.warm import upkeep as warm_upkeep
from hrm_memory import MemoryManager, NamespaceSpec
real = warm_upkeep._write_all
def die(fd, data):
    real(fd, data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
warm_upkeep._write_all = die
with MemoryManager({str(root)!r}, durability="flush", namespaces=[NamespaceSpec({NOTES!r})]) as mm:
    mm.compact()
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO)
    assert proc.returncode == -signal.SIGKILL
    temps = list((root / "warm" / NOTES).glob(".*.compact"))
    assert temps, "the kill should have left a compaction temp behind"
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NOTES)]) as mm:
        assert list((root / "warm" / NOTES).glob(".*.compact")) == []
        assert mm.read(NOTES, "k") == {"i": 299, "pad": "x" * 2000}
        assert mm.check() == []
