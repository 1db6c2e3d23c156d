"""The MCP server's latency: a ``recall`` tool call
over stdio, end to end, against the same ``recall()`` in process.

Store: ``--n`` memories (default 2,000) written as records ``{"text", "kind"}``
into ``altitude.memories`` (indexed on ``text``), sentences of 8-14 words
drawn with a fixed seed from 400 made-up words; one ``recall()`` then brings
the on-disk index up to date, so the server opens a current index.

Server: ``hrm-memory --root ROOT mcp`` started as a subprocess by the MCP
SDK's own stdio client (``mcp.client.stdio.stdio_client`` + ``ClientSession``),
as an agent host starts it. Each of ``--calls`` queries (3 words of the
vocabulary, fixed seed) is called once untimed (warm-up), then all of them
are timed one by one, three times: the client's ``call_tool("recall",
{"query": ..., "k": 10})`` from the request until its parsed result is back.
The same queries are timed through ``MemoryManager.recall(query, k=10)`` in
this process on the same store (what the protocol adds is the difference),
and a ``read_record`` tool call of one key gives the transport's floor.

    python -m benchmarks.bench_mcp [--n 2000] [--calls 200]

Prints a Markdown section for BENCHMARKS.md. Wall-clock figures: the load
average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from hrm_memory import MemoryManager

from .harness import md_table

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "ve", "zo", "pi", "sa", "do", "fe", "gu", "hi", "jo", "be"]


def vocabulary(rng: random.Random, size: int = 400) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def seed(root: Path, n: int, rng: random.Random, vocab: list[str]) -> None:
    with MemoryManager(root, durability="flush") as mm:
        for i in range(n):
            text = " ".join(rng.choice(vocab) for _ in range(rng.randint(8, 14)))
            mm.write("altitude.memories", f"m{i:06d}", {"text": text, "kind": "semantic"})
        mm.recall(vocab[0], k=1)


def percentiles(us: list[float]) -> tuple[float, float, float]:
    s = sorted(us)
    return statistics.median(s), s[min(len(s) - 1, int(0.99 * len(s)))], statistics.mean(s)


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter_ns()
    await call()
    return (time.perf_counter_ns() - t0) / 1000


async def over_stdio(root: Path, queries: list[str]) -> tuple[list[float], list[float], float]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "hrm_memory.cli.main", "--root", str(root), "mcp"],
        env={k: v for k, v in os.environ.items() if not k.startswith("HRM_MEMORY_")},
    )
    t0 = time.perf_counter()
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                started = time.perf_counter() - t0
                for q in queries:  # warm-up
                    result = await s.call_tool("recall", {"query": q, "k": 10})
                    assert not result.is_error, result.content
                recall_us: list[float] = []
                for _ in range(3):
                    for q in queries:
                        recall_us.append(await timed(lambda q=q: s.call_tool("recall", {"query": q, "k": 10})))
                read_us: list[float] = []
                for _ in range(3):
                    for _q in queries:
                        read_us.append(await timed(
                            lambda: s.call_tool("read_record", {"namespace": "altitude.memories", "key": "m000001"})))
    return recall_us, read_us, started


def in_process(root: Path, queries: list[str]) -> list[float]:
    with MemoryManager(root) as mm:
        for q in queries:
            mm.recall(q, k=10)
        out = []
        for _ in range(3):
            for q in queries:
                t0 = time.perf_counter_ns()
                mm.recall(q, k=10)
                out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="memories in the store (default 2000)")
    ap.add_argument("--calls", type=int, default=200, help="distinct queries, each timed 3 times (default 200)")
    args = ap.parse_args(argv)
    rng = random.Random(26)
    vocab = vocabulary(rng)
    queries = [" ".join(rng.sample(vocab, 3)) for _ in range(args.calls)]
    tmp = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    try:
        root = tmp / "store"
        seed(root, args.n, rng, vocab)
        load_start = os.getloadavg()
        recall_us, read_us, started = anyio.run(over_stdio, root, queries)
        local_us = in_process(root, queries)
        load_end = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for label, us in (
        ("`recall` tool call over stdio (k=10)", recall_us),
        ("`MemoryManager.recall(k=10)` in process, same queries", local_us),
        ("`read_record` tool call over stdio (one key)", read_us),
    ):
        p50, p99, mean = percentiles(us)
        rows.append((label, len(us), f"{p50:,.0f}", f"{p99:,.0f}", f"{mean:,.0f}"))
    print(f"### {args.n:,} memories (`python -m benchmarks.bench_mcp --n {args.n} --calls {args.calls}`)\n")
    print(f"{args.n:,} memories; revision {revision()}; {os.cpu_count()} CPUs; Python "
          f"{sys.version.split()[0]}; load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end "
          f"(1 min). Server start to initialized session: {started * 1000:,.0f} ms.\n")
    print(md_table(["call", "calls timed", "p50 µs", "p99 µs", "mean µs"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
