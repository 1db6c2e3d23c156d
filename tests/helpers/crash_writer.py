"""A writer that reports every operation it is about to make (``B``) and every
one acknowledged (``A``), for the crash tests to kill at random moments.

usage: crash_writer.py ROOT SEED [--locking]
"""

from __future__ import annotations

import random
import sys
import time

import orjson

from hrm_memory.storage.file.warm import tier as warm_tier
from hrm_memory import MemoryManager, NamespaceSpec

# Compact often, so that kills also land inside compactions.
warm_tier.COMPACT_MIN_GARBAGE = 4096

SPECS = [NamespaceSpec("crash.data"), NamespaceSpec("crash.aged", ttl=1.0)]


def main() -> None:
    root, seed = sys.argv[1], int(sys.argv[2])
    locking = "--locking" in sys.argv
    rng = random.Random(seed)
    out = sys.stdout
    with MemoryManager(root, durability="fsync", locking=locking, namespaces=SPECS) as mm:
        out.write("READY\n")
        out.flush()
        i = 0
        while True:
            i += 1
            ns = "crash.aged" if rng.random() < 0.2 else "crash.data"
            key = f"k{rng.randrange(60)}"
            roll = rng.random()
            if roll < 0.1:
                op: list[object] = ["del", ns, key]
            elif roll < 0.13:
                op = ["archive"]
            else:
                op = ["put", ns, key, {"seed": seed, "i": i, "pad": "x" * rng.randrange(600)}]
            out.write("B " + orjson.dumps(op).decode() + "\n")
            out.flush()
            if op[0] == "put":
                mm.write(ns, key, op[3])
            elif op[0] == "del":
                mm.delete(ns, key)
            else:
                mm.archive(now=time.time() + 3600)
            out.write("A\n")
            out.flush()


if __name__ == "__main__":
    main()
