"""Render time of ``mm.context()`` as the store grows.

Store: ``N`` records (10k and 1M by default) written with
``durability="flush"`` over the indexed namespaces HRM ``altitude`` may read
(its own and ``shared.*``), in the proportions of :data:`SPREAD`. Most values
are ``{"text": sentence}`` (6-18 words from a fixed-seed vocabulary with
Zipfian frequencies); ``shared.people`` holds person documents
(``{"name", "role", "notes", "last_seen"}``); one record in 500 is a
legacy-like document (the shape of ``altitude.context`` / ``altitude.compressed``
/ ``shared.north_stars``: lists of north stars, priorities, pending commits,
active threads, people, scored codes, an ISO timestamp), so the renderer's
document path is exercised as well as the one-entry path.

Per size:

- *build*: the writes, timed (records/s), then the first ``context()`` of the
  process, which brings the recall index up to date with everything written
  (the deferred indexing cost) and fills the line cache;
- *steady state*, per budget (500, 2,000, 8,000 tokens): ``--renders``
  renders timed one by one after one untimed, ``now`` moving 3 s per render
  (a session's renders: the line cache applies, relative dates do not change);
- *cold*: between two timed renders an untimed ``write`` replaces one of the
  newest records of ``altitude.patterns`` (so the render re-reads the index,
  decodes that record and renders its lines again);
- *cold, split*: the same again, but the index sync the write leaves to the
  next read (``sync_index``, the first thing a render does) is called and
  timed on its own before the render, so its share of the cold render shows;
- *new process*: a fresh ``MemoryManager`` on the same root, its first render
  (index current, but the process reconciles it with the store and the line
  cache is empty).

p50/p99 are nearest-rank over the timed renders; ``time.perf_counter_ns``
around each ``mm.context`` call, garbage collector left on. The thread CPU
p50 (``time.thread_time_ns``) is the same renders' CPU time: on a shared,
loaded machine it shows what a render costs without the waits for a CPU.

    python -m benchmarks.bench_context [--sizes 10000,1000000] [--renders 300]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hrm_memory import MemoryManager

from .harness import (
    DEFAULT_BENCH_DIR,
    OtherLoad,
    fmt_num,
    fresh_dir,
    log,
    machine_info,
    md_table,
    percentile,
)

HRM = "altitude"
BUDGETS = (500, 2000, 8000)
#: namespace -> share of the records written there
SPREAD: dict[str, float] = {
    "altitude.memories": 0.30,
    "altitude.patterns": 0.15,
    "altitude.history": 0.002,  # session summaries: capped at 20 warm, one per session
    "altitude.conversations": 0.158,
    "altitude.coaching": 0.05,
    "altitude.context": 0.02,
    "altitude.compressed": 0.02,
    "shared.memories": 0.15,
    "shared.people": 0.08,
    "shared.north_stars": 0.04,
    "shared.priorities": 0.04,
}
LEGACY_EVERY = 500
T0 = 1_795_000_000.0  # fixed clock for the renders (Nov 2026)

_FUNCTION = ["the", "of", "and", "to", "a", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at", "by", "be", "this", "have", "from", "or", "not", "but", "we", "they", "you", "he", "she", "are", "were", "will", "can", "my", "our", "their"]
_NAMES = ("Alice Chen", "Bob Okafor", "Carmen Ruiz", "Dmitri Ivanov", "Emeka Nwosu", "Fatima Zahra",
          "Grace Lee", "Hiro Tanaka", "Ines Costa", "Jonas Berg")
_ROLES = ("manager", "co-founder", "mentor", "client", "partner", "friend", "investor", "engineer")


class Words:
    """Sentences from a fixed-seed vocabulary with Zipfian frequencies."""

    def __init__(self, seed: int = 7, size: int = 20_000) -> None:
        rng = random.Random(seed)
        syll = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
        made: list[str] = []
        seen: set[str] = set()
        while len(made) < size:
            w = "".join(rng.choice(syll) for _ in range(rng.randint(2, 4)))
            if w not in seen:
                seen.add(w)
                made.append(w)
        self.vocab = _FUNCTION + made
        weights = [1 / (r + 1) ** 1.07 for r in range(len(self.vocab))]
        self.cum = list(itertools.accumulate(weights))
        self.rng = random.Random(seed + 1)

    def sentence(self, lo: int = 6, hi: int = 18) -> str:
        n = self.rng.randint(lo, hi)
        words = self.rng.choices(self.vocab, cum_weights=self.cum, k=n)
        return words[0].capitalize() + " " + " ".join(words[1:]) + "."


def legacy_doc(w: Words, i: int) -> dict[str, Any]:
    """A document shaped like the legacy ``altitude.context`` / ``compressed`` ones."""
    rng = w.rng
    return {
        "north_stars": [w.sentence(4, 9) for _ in range(3)],
        "current_priorities": [w.sentence(4, 9) for _ in range(4)],
        "pending_commits": [{"text": w.sentence(4, 10), "due": f"2026-11-2{rng.randint(0, 9)}T09:00:00Z"}
                            for _ in range(3)],
        "active_threads": [w.sentence(5, 12) for _ in range(4)],
        "people": {n: {"role": rng.choice(_ROLES), "notes": w.sentence(4, 10)} for n in rng.sample(_NAMES, 3)},
        "patterns": {f"p{rng.randint(0, 40)}": round(rng.random(), 2) for _ in range(6)},
        "last_updated": f"2026-11-{rng.randint(1, 22):02d}T10:00:00Z",
        "n": i,
    }


def records(n: int, seed: int = 11) -> Iterator[tuple[str, str, Any]]:
    w = Words(seed)
    names = list(SPREAD)
    cum = list(itertools.accumulate(SPREAD.values()))
    pick = random.Random(seed)
    for i in range(n):
        ns = pick.choices(names, cum_weights=cum)[0]
        if i % LEGACY_EVERY == LEGACY_EVERY - 1:
            ns = pick.choice(("altitude.context", "altitude.compressed", "shared.north_stars"))
            yield ns, f"doc-{i:08d}", legacy_doc(w, i)
        elif ns == "shared.people":
            name = f"{pick.choice(_NAMES).split()[0]} {w.sentence(1, 1).rstrip('.')}"
            yield ns, f"person-{i:08d}", {"name": name, "role": pick.choice(_ROLES), "notes": w.sentence(5, 14),
                                          "last_seen": f"2026-11-{pick.randint(1, 22):02d}T{pick.randint(0, 23):02d}:00:00Z"}
        else:
            yield ns, f"rec-{i:08d}", {"text": w.sentence()}


def timed_render(mm: MemoryManager, budget: int, now: float, cpu: list[int]) -> tuple[int, int]:
    c = time.thread_time_ns()
    t = time.perf_counter_ns()
    ctx = mm.context(HRM, budget=budget, now=now)
    dt = time.perf_counter_ns() - t
    cpu.append(time.thread_time_ns() - c)
    assert ctx.tokens <= budget
    return dt, ctx.tokens


def pct(samples: list[int], cpu: list[int]) -> tuple[float, float, float]:
    s = sorted(samples)
    return percentile(s, 50) / 1e6, percentile(s, 99) / 1e6, percentile(sorted(cpu), 50) / 1e6


def run_size(root: Path, n: int, renders: int, cold_renders: int, max_write_s: float) -> dict[str, Any]:
    fresh_dir(root)
    out: dict[Any, Any] = {"n": n, "asked": n}
    mm = MemoryManager(root, durability="flush")
    t = time.perf_counter()
    written = 0
    patterns: list[str] = []
    for ns, key, value in records(n):
        mm.write(ns, key, value)
        if ns == "altitude.patterns" and key.startswith("rec-"):
            patterns = [*patterns[-4:], key]
        written += 1
        if written % 50_000 == 0:
            log(f"  {written:,} written, {time.perf_counter() - t:.0f} s")
            if time.perf_counter() - t > max_write_s:
                log(f"  stopping the writes at {written:,}: over --max-write-s {max_write_s:.0f}")
                break
    out["n"] = written
    out["build_s"] = time.perf_counter() - t
    t = time.perf_counter()
    first = mm.context(HRM, budget=2000, now=T0)
    out["first_s"] = time.perf_counter() - t
    log(f"  build {out['build_s']:.1f} s, first context {out['first_s']:.1f} s ({first.tokens} tokens)")
    now = T0
    texts = {}
    for budget in BUDGETS:
        now += 3
        ctx = mm.context(HRM, budget=budget, now=now)  # untimed: the budget's first render
        texts[budget] = ctx.text
        samples: list[int] = []
        cpu: list[int] = []
        toks = 0
        for _ in range(renders):
            now += 3
            dt, toks = timed_render(mm, budget, now, cpu)
            samples.append(dt)
        again = mm.context(HRM, budget=budget, now=now).text
        out[("steady", budget)] = (*pct(samples, cpu), toks, again == texts[budget])
    # cold: one of the newest patterns replaced between renders
    w = Words(99)
    samples, cpu = [], []
    for i in range(cold_renders):
        key = patterns[i % len(patterns)]  # among the 5 newest patterns: shown
        mm.write("altitude.patterns", key, {"text": w.sentence()})
        now += 3
        dt, _ = timed_render(mm, 2000, now, cpu)
        samples.append(dt)
    out["cold"] = pct(samples, cpu)
    # the same, split in two: the index sync a write leaves to the next read
    # (what the render above does first), timed on its own, then the render
    sync_ns: list[int] = []
    sync_cpu: list[int] = []
    samples, cpu = [], []
    index = next(c.index for c in mm._pipeline.components if type(c).__name__ == "ContextRenderer")
    for i in range(cold_renders):
        key = patterns[i % len(patterns)]
        mm.write("altitude.patterns", key, {"text": w.sentence()})
        now += 3
        c = time.thread_time_ns()
        t = time.perf_counter_ns()
        index.sync()
        sync_ns.append(time.perf_counter_ns() - t)
        sync_cpu.append(time.thread_time_ns() - c)
        dt, _ = timed_render(mm, 2000, now, cpu)
        samples.append(dt)
    out["cold_sync"] = pct(sync_ns, sync_cpu)
    out["cold_synced"] = pct(samples, cpu)
    mm.close()
    mm = MemoryManager(root, durability="flush")
    t = time.perf_counter()
    mm.context(HRM, budget=2000, now=now + 3)
    out["new_process_ms"] = (time.perf_counter() - t) * 1e3
    mm.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--renders", type=int, default=300)
    ap.add_argument("--cold-renders", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=DEFAULT_BENCH_DIR / "context")
    ap.add_argument("--max-write-s", type=float, default=float("inf"),
                    help="stop a size's writes once they have taken this long (the size reached is reported)")
    ap.add_argument("--keep", action="store_true", help="leave the stores on disk")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    info = machine_info(args.dir.parent)
    load = OtherLoad()
    t_all = time.perf_counter()
    results: list[dict[Any, Any]] = []
    for n in sizes:
        log(f"N = {n:,}")
        results.append(run_size(args.dir / f"n{n}", n, args.renders, args.cold_renders, args.max_write_s))
        gc.collect()
    share = load.share()
    rows = []
    for r in results:
        rows.append([f"{r['n']:,}", f"{r['build_s']:.1f} s ({r['n'] / r['build_s']:,.0f}/s)",
                     f"{r['first_s']:.2f} s", f"{r['new_process_ms']:.0f} ms"])
    print(f"\nrevision {info.get('hrm-memory revision', '?')}; {args.renders} steady renders per budget, "
          f"{args.cold_renders} cold; CPU used by other processes {share:.0%} of all CPUs (mean); "
          f"load average {info.get('load average at start (1/5/15 min)', '?')} at start; "
          f"{time.perf_counter() - t_all:.0f} s in all\n")
    print(md_table(["records", "writes", "first context() (index catch-up)", "first render, new process"], rows))
    print()
    rows = []
    for r in results:
        for b in BUDGETS:
            p50, p99, cpu50, toks, same = r[("steady", b)]
            rows.append([f"{r['n']:,}", f"{b:,}", "steady", fmt_num(p50), fmt_num(p99), fmt_num(cpu50), toks,
                         "yes" if same else "NO"])
        rows.append([f"{r['n']:,}", "2,000", "cold (1 record rewritten before each)",
                     fmt_num(r["cold"][0]), fmt_num(r["cold"][1]), fmt_num(r["cold"][2]), "", ""])
        rows.append([f"{r['n']:,}", "", "  of which: the index sync alone (timed apart)",
                     fmt_num(r["cold_sync"][0]), fmt_num(r["cold_sync"][1]), fmt_num(r["cold_sync"][2]), "", ""])
        rows.append([f"{r['n']:,}", "2,000", "  and the render after that sync",
                     fmt_num(r["cold_synced"][0]), fmt_num(r["cold_synced"][1]), fmt_num(r["cold_synced"][2]),
                     "", ""])
    print(md_table(["records", "budget", "render", "p50 ms", "p99 ms", "p50 thread CPU ms", "tokens",
                    "same text on rerun"], rows))
    if len(results) >= 2:
        small, large = results[0], results[-1]
        for bud in BUDGETS:
            print(f"\np50 ratio {large['n']:,} / {small['n']:,} at budget {bud}: "
                  f"{large[('steady', bud)][0] / small[('steady', bud)][0]:.2f}x", end="")
        print(f"\np50 ratio cold: {large['cold'][0] / small['cold'][0]:.2f}x")
    if not args.keep:
        for n in sizes:
            fresh_dir(args.dir / f"n{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
