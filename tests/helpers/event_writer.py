"""Writes N records to one namespace and prints how many it wrote.

usage: event_writer.py ROOT NAME N [--go FILE]   (waits for FILE to exist first)
"""

from __future__ import annotations

import os
import sys
import time

from hrm_memory import MemoryManager, NamespaceSpec


def main() -> None:
    root, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    go = sys.argv[sys.argv.index("--go") + 1] if "--go" in sys.argv else None
    with MemoryManager(root, durability="flush", locking=True, namespaces=[NamespaceSpec("ev.data")]) as mm:
        while go and not os.path.exists(go):
            time.sleep(0.001)
        for i in range(n):
            # A few keys shared by both writers, so per-key order is tested
            # under contention; every value names its writer and sequence.
            mm.update("ev.data", f"shared{i % 5}", lambda v, i=i: (v or []) + [[name, i]])
            mm.write("ev.data", f"{name}-{i % 50}", {"w": name, "i": i, "t": time.time_ns()})
    print(n)


if __name__ == "__main__":
    main()
