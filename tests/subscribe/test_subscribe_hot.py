"""Which changes reach another process's subscription, as README and
docs/storage.md say: changes to persisted namespaces do; changes whose
records live only in the writing process's memory (hot namespaces such as
``focus.fast`` and ``altitude.session``, and gated values held for lack of
consent) are delivered in that process only."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hrm_memory import Event, MemoryManager

REPO = Path(__file__).resolve().parents[2]

WRITER = """
import sys
from hrm_memory import MemoryManager
with MemoryManager(sys.argv[1], durability="flush") as mm:
    for i in range(3):
        mm.write("focus.fast", "turn", {"step": i})        # hot
    mm.update("focus.fast", "counter", lambda v: (v or 0) + 1)
    mm.delete("focus.fast", "turn")
    mm.write("altitude.session", "s", {"mood": "ok"})     # hot
    mm.write("focus.conversation", "c", {"text": "hi"})  # gated, no consent: memory only
    mm.write("focus.slow", "marker", 1)                    # persisted
"""


@pytest.mark.parametrize("notifications", [True, False])
def test_hot_changes_stay_in_their_process_persisted_ones_cross(root: Path, notifications: bool) -> None:
    got: list[Event] = []
    lock = threading.Lock()

    def collect(e: Event) -> None:
        with lock:
            got.append(e)

    with MemoryManager(root, notifications=notifications) as mm:
        with mm.subscribe("focus.*", collect), mm.subscribe("altitude.*", collect):
            subprocess.run([sys.executable, "-c", WRITER, str(root)], cwd=REPO, check=True, timeout=60)
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # anything else would arrive now
            assert [(e.op, e.namespace, e.key, e.origin.startswith("pid:")) for e in got] == [
                ("write", "focus.slow", "marker", True)
            ]
            got.clear()
            # In the writing process, every change is an event, hot ones included.
            mm.write("focus.fast", "mine", 1)
            mm.write("altitude.session", "mine", 1)
            assert [(e.namespace, e.key, e.origin) for e in got] == [
                ("focus.fast", "mine", "local"), ("altitude.session", "mine", "local")
            ]
