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
import re
import subprocess
import sys
import tempfile
from pathlib import Path

N = 5000
CASES = [("bench.hot", "read"), ("bench.hot", "write"), ("bench.hot", "update"), ("bench.warm", "read"),
         ("bench.warm", "write"), ("bench.warm", "update"), ("bench.warm", "query")]


def worker(namespace: str, op: str, n: int) -> None:
    try:
        from hrm_memory import MemoryManager, NamespaceSpec
    except ImportError:  # the round-1 layout
        from shared.memory import MemoryManager, NamespaceSpec  # type: ignore[no-redef]
    specs = [NamespaceSpec("bench.hot", tier="hot"), NamespaceSpec("bench.warm")]
    with tempfile.TemporaryDirectory() as tmp, MemoryManager(tmp, durability="flush", namespaces=specs) as mm:
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
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, __file__, "--worker", namespace, op, str(n)],
        cwd=cwd, capture_output=True, text=True, check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1))


def per_op(python: str, cwd: str, namespace: str, op: str) -> float:
    n = N if op != "query" else N * 10
    per = n if op != "query" else n // 50
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
        unit = "query (50 records)" if op == "query" else op
        print(f"| {namespace.split('.')[1]} {unit} | {base:,.0f} | {new:,.0f} | {new / base:.3f} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
