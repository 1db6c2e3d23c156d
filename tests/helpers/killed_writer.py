"""A writer subprocess to kill with SIGKILL at a random moment, and what it
had acknowledged by then.

The writer (a module of tests/helpers, e.g. ``crash_writer`` or
``history_writer``) prints ``READY`` once its store is open, then ``B <op
JSON>`` before each operation and ``A`` once the operation returned. A
reader thread collects those lines, so the pipe never fills.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[2]


class KilledWriter:
    """Runs ``python -m tests.helpers.<module> ROOT SEED *extra`` and collects its B/A lines."""

    def __init__(self, module: str, root: Path, seed: int, *extra: str) -> None:
        args = [sys.executable, "-m", f"tests.helpers.{module}", str(root), str(seed), *extra]
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

    def kill(self) -> tuple[list[list[Any]], list[Any] | None]:
        """SIGKILL the writer; (acknowledged operations, the one in flight at the kill or None)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.reader.join(timeout=10)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        self.proc.stdout.close()
        self.proc.stderr.close()
        assert "Traceback" not in err, err
        acked: list[list[Any]] = []
        pending = None
        for line in self.lines:
            if line.startswith("B "):
                pending = orjson.loads(line[2:])
            elif line == "A" and pending is not None:
                acked.append(pending)
                pending = None
        return acked, pending
