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
from typing import IO, Any

import orjson

REPO = Path(__file__).resolve().parents[2]


class ChildLines:
    """The lines a child process prints, collected by a thread of their own
    so that its pipe never fills; ``ready`` is set at its ``READY`` line (or
    at its end, so that a waiter never waits for a child that died first)."""

    def __init__(self, stdout: IO[bytes] | IO[str]) -> None:
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(stdout,), daemon=True)
        self.thread.start()

    def _read(self, stdout: IO[bytes] | IO[str]) -> None:
        for raw in stdout:
            line = (raw.decode() if isinstance(raw, bytes) else raw).rstrip("\n")
            if line == "READY":
                self.ready.set()
            else:
                self.lines.append(line)
        self.ready.set()


class KilledWriter:
    """Runs ``python -m tests.helpers.<module> ROOT SEED *extra`` and collects its B/A lines."""

    def __init__(self, module: str, root: Path, seed: int, *extra: str) -> None:
        args = [sys.executable, "-m", f"tests.helpers.{module}", str(root), str(seed), *extra]
        self.proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.child = ChildLines(self.proc.stdout)
        self.lines = self.child.lines
        self.ready = self.child.ready

    def kill(self) -> tuple[list[list[Any]], list[Any] | None]:
        """SIGKILL the writer; (acknowledged operations, the one in flight at the kill or None)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.child.thread.join(timeout=10)
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
