"""A writer that overwrites a few keys of a history-keeping namespace in
fsync mode, reporting each write it is about to make (``B``) and each one
acknowledged (``A``), for the history crash test to kill at random moments.

usage: history_writer.py ROOT SEED
"""

from __future__ import annotations

import random
import sys

import orjson

from hrm_memory import Keep, MemoryManager, NamespaceSpec

#: Keeps more versions than a round writes: every acknowledged one must stay.
SPEC = NamespaceSpec("crash.kept", history=Keep(versions=100_000))
KEYS = 4


def main() -> None:
    root, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    out = sys.stdout
    with MemoryManager(root, durability="fsync", namespaces=[SPEC]) as mm:
        out.write("READY\n")
        out.flush()
        i = 0
        while True:
            i += 1
            key = f"k{rng.randrange(KEYS)}"
            deleting = rng.random() < 0.05
            value = {"seed": seed, "i": i, "pad": "x" * rng.randrange(900)}
            out.write("B " + orjson.dumps([key, None if deleting else value]).decode() + "\n")
            out.flush()
            if deleting:
                mm.delete(SPEC.name, key)
            else:
                mm.write(SPEC.name, key, value)
            out.write("A\n")
            out.flush()


if __name__ == "__main__":
    main()
