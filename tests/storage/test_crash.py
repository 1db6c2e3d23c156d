"""Must-show 2: a writer in fsync mode is killed with SIGKILL at random moments,
over 24 rounds on one store; after each, every acknowledged record reads back
intact and check() reports nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from hrm_memory import MemoryManager, NamespaceSpec

REPO = Path(__file__).resolve().parents[2]
SPECS = [NamespaceSpec("crash.data"), NamespaceSpec("crash.aged", ttl=1.0)]
ROUNDS = 24


class Writer:
    """Runs the writer and collects its B/A lines on a thread."""

    def __init__(self, root: Path, seed: int, locking: bool = False) -> None:
        args = [sys.executable, "-m", "tests.helpers.crash_writer", str(root), str(seed)]
        if locking:
            args.append("--locking")
        self.proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode().rstrip("\n")
            if line == "READY":
                self.ready.set()
            else:
                self.lines.append(line)
        self.ready.set()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.reader.join(timeout=10)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        self.proc.stdout.close()
        self.proc.stderr.close()
        assert "Traceback" not in err, err

    def operations(self) -> tuple[list[list[Any]], list[Any] | None]:
        """(acknowledged operations, the one in flight at the kill or None)."""
        acked: list[list[Any]] = []
        pending = None
        for line in self.lines:
            if line.startswith("B "):
                pending = orjson.loads(line[2:])
            elif line == "A" and pending is not None:
                acked.append(pending)
                pending = None
        return acked, pending


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
        writer = Writer(root, seed=round_)
        assert writer.ready.wait(30), "writer did not start"
        time.sleep(rng.uniform(0.02, 0.4))
        writer.kill()
        acked, in_flight = writer.operations()
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
