"""Instructions per operation under callgrind, this checkout against another revision.

    python -m benchmarks.bench_instructions --base-python /path/to/other/checkout/.venv/bin/python

Timing on a shared 2-vCPU VM drifts by tens of percent between runs (see
``bench_ab``); an instruction count does not: ``valgrind --tool=callgrind``
gives the same total for the same binary, input and environment. Each figure
is (instructions of a process doing N operations - instructions of the same
process doing none) / N, so start-up and imports cancel out. Tracing off (no
SDK); user-space instructions only, so the ``write`` syscalls of the warm
tier are not in the count (they are the same in both revisions).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

N = 5000
CASES = [("bench.hot", "read"), ("bench.hot", "write"), ("bench.hot", "update"), ("bench.warm", "read"),
         ("bench.warm", "write"), ("bench.warm", "update"), ("bench.warm", "query"),
         ("bench.notes", "recall"), ("bench.notes", "context")]
#: Operations counted per call over fewer calls (each is thousands of times a read).
HEAVY = {"query": 50, "recall": 10, "context": 10}
WORDS = ("plan review budget launch patent session gaurav design sprint metrics customer retro hiring "
         "roadmap pricing demo onboarding migration incident dashboard").split()


def worker(namespace: str, op: str, n: int) -> None:
    try:
        from hrm_memory import MemoryManager, NamespaceSpec
    except ImportError:  # the round-1 layout
        from shared.memory import MemoryManager, NamespaceSpec  # type: ignore[no-redef]
    specs = [NamespaceSpec("bench.hot", tier="hot"), NamespaceSpec("bench.warm"),
             NamespaceSpec("bench.notes", index=("text",))]
    with tempfile.TemporaryDirectory() as tmp, MemoryManager(tmp, durability="flush", namespaces=specs) as mm:
        if op in ("recall", "context"):  # 300 notes of 8 words each, then one recall/render to warm up
            for i in range(300):
                text = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(8))
                mm.write(namespace, f"n{i}", {"text": f"note {i}: {text}"})
            mm.recall("patent session")
            mm.context("bench", budget=400)
            for i in range(n // HEAVY[op]):
                if op == "recall":
                    mm.recall(f"{WORDS[i % len(WORDS)]} {WORDS[(i * 5 + 1) % len(WORDS)]}")
                else:  # a new budget each time: a real render, not the render cache
                    mm.context("bench", budget=300 + i)
            return
        mm.write(namespace, "k", {"a": 1})
        for i in range(50):
            mm.write(namespace, f"q{i}", {"a": i})
        if op == "read":
            for _ in range(n):
                mm.read(namespace, "k")
        elif op == "write":
            for _ in range(n):
                mm.write(namespace, "k", {"a": 1})
        elif op == "update":
            for _ in range(n):
                mm.update(namespace, "n", lambda v: (v or 0) + 1)
        elif op == "query":  # 50 records a query
            for _ in range(n // 50):
                mm.query(namespace, "q*")


def instructions(python: str, cwd: str, namespace: str, op: str, n: int) -> int:
    # (imported here: another checkout's Python runs this file as a script, as the worker)
    from benchmarks.harness import callgrind

    return callgrind([python, __file__, "--worker", namespace, op, str(n)], cwd=cwd)


def per_op(python: str, cwd: str, namespace: str, op: str) -> float:
    heavy = HEAVY.get(op)
    n = N if heavy is None else (N * 10 if op == "query" else 500)
    per = n if heavy is None else n // heavy
    return (instructions(python, cwd, namespace, op, n) - instructions(python, cwd, namespace, op, 0)) / per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-python", required=True)
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parent.parent)
    base_cwd = str(Path(args.base_python).resolve().parent.parent.parent)
    print("| operation | base instructions/op | new instructions/op | new / base |")
    print("|---|---|---|---|")
    for namespace, op in CASES:
        base = per_op(args.base_python, base_cwd, namespace, op)
        new = per_op(sys.executable, here, namespace, op)
        unit = {"query": "query (50 records)", "recall": "recall (300 notes)", "context": "context (300 notes)"}.get(op, op)
        print(f"| {namespace.split('.')[1]} {unit} | {base:,.0f} | {new:,.0f} | {new / base:.3f} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
