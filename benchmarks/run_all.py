"""Run the benchmarks and write ``BENCHMARKS.md`` at the repository root.

    python -m benchmarks.run_all [--quick] [--n 10000] [--reps 5] [--max-n 1000000]
                                 [--dir bench-data] [--out BENCHMARKS.md] [--note TEXT]
                                 [--seed-n 20000] [--seed-reps 5] [--seed-only]

The raw figures go to ``<dir>/results.json`` as well. ``--seed-only`` runs
only the seed-namespace benchmark (``bench_seed``: the hot path on seed
namespaces, untraced and traced through the global provider, beside its
peers) and replaces only its section of the report, the other
sections kept as they were.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import time
from pathlib import Path

import orjson
from opentelemetry import trace

from . import bench_open, bench_peers, bench_seed, bench_tracing
from .harness import REPO_ROOT, OtherLoad, log, machine_info, md_table, wait_until_quiet


def tracing_mode() -> str:
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return "OpenTelemetry API installed, no SDK configured (the default): hrm-memory starts no spans"
    return f"global tracer provider {type(provider).__name__}"


def command_line(argv: list[str]) -> str:
    return "python -m benchmarks.run_all" + "".join(" " + shlex.quote(a) for a in argv)


# -- the report ------------------------------------------------------------------------


def previous_targets(old_report: str) -> dict[str, str]:
    """target -> measured figure, from the targets table of the report being replaced."""
    out = {}
    for line in old_report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[1].startswith((">", "<")) and cells[0] != "target":
            out[cells[0]] = cells[2]
    return out


def kept_sections(old_report: str, new_report: str) -> str:
    """The ``## `` sections of the old report that this run does not write
    (other benchmarks' sections: Redis, recall, LangGraph, context, ...), kept
    as they were, in their order."""
    new_heads = {line for line in new_report.splitlines() if line.startswith("## ")}
    parts = old_report.split("\n## ")
    kept = ["## " + part.rstrip() for part in parts[1:] if "## " + part.split("\n", 1)[0] not in new_heads]
    return "\n\n".join(kept)


def targets_section(
    peers: list[bench_peers.CaseResult],
    opened: bench_open.OpenResults,
    traced: bench_tracing.WallResults | None,
    previous: dict[str, str] | None = None,
    seed: bench_seed.SeedResults | None = None,
) -> str:
    previous = previous or {}
    rows = [
        (t.text, f">= {t.required:g}x", f"{t.measured:.2f}x", "yes" if t.met else "**no**")
        for t in bench_peers.target_outcomes(peers)
    ]
    fp = bench_open.hrm_footprint(opened)
    if fp is not None:
        limit = bench_open.FOOTPRINT_TARGET
        for kind, ratio in (("allocated", fp.allocated_ratio), ("apparent", fp.apparent_ratio)):
            rows.append(
                (
                    f"bytes on disk ({kind}) at {fp.n:,} records <= {limit:g}x their JSON bytes",
                    f"<= {limit:g}x",
                    f"{ratio:.2f}x" + _footprint_parts(fp, kind),
                    "yes" if ratio <= limit else "**no**",
                )
            )
    rows += _open_rows(opened)
    if traced is not None:
        rows += [
            (text, f"< {limit:g} µs", f"{value:+.2f} µs", "yes" if value < limit else "**no**")
            for text, value, limit in bench_tracing.wall_outcomes(traced)
        ]
    if seed is not None:
        rows += [(t, need, got, "yes" if ok else "**no**") for t, need, got, ok in bench_seed.outcomes(seed)]
    met = sum(r[3] == "yes" for r in rows)
    table = md_table(
        ["target", "required", "measured", "met?", "previous run"],
        [(*r, previous.get(r[0], "-")) for r in rows],
    )
    return (
        f"{met} of {len(rows)} targets met on this run. A throughput ratio is the median over "
        "reps of (hrm-memory ops/s / peer ops/s), the two measured back to back in each rep; "
        "a tracing figure is the mean over reps of what an OpenTelemetry SDK adds to an operation "
        "(see its section); *previous run* is the figure of the report this one replaced.\n\n" + table
    )


#: The targets of opening: the first read after open at 1M records under 1 ms,
#: open flat.
FIRST_READ_LIMIT_US = 1000.0
OPEN_FLAT_LIMIT = 1.5


def _open_rows(opened: bench_open.OpenResults) -> list[tuple[str, str, str, str]]:
    """The first reads after open at the largest store built (p99 of the
    keys timed, each read the first of its process's manager), and open
    time there against an empty store's."""
    if not opened.sizes:
        return []
    biggest = max(opened.sizes, key=lambda r: r.filled.n)
    rows = []
    if biggest.filled.n >= 1_000_000:
        for kind, reads in (("warm", biggest.warm), ("cold", biggest.cold)):
            if reads is not None:
                p99 = reads.first.p99_us
                rows.append(
                    (
                        f"first read after open at {biggest.filled.n:,} records, {kind} key, p99 < 1 ms",
                        f"< {FIRST_READ_LIMIT_US:g} µs",
                        f"{p99:,.0f} µs (p50 {reads.first.p50_us:,.0f})",
                        "yes" if p99 < FIRST_READ_LIMIT_US else "**no**",
                    )
                )
    empty = next((r for r in opened.sizes if r.filled.n == 0), None)
    if empty is not None and biggest is not empty:
        ratio = biggest.open.p50_us / empty.open.p50_us
        rows.append(
            (
                f"open+close at {biggest.filled.n:,} records <= {OPEN_FLAT_LIMIT:g}x an empty store's (p50)",
                f"<= {OPEN_FLAT_LIMIT:g}x",
                f"{ratio:.2f}x ({biggest.open.p50_us:,.0f} / {empty.open.p50_us:,.0f} µs)",
                "yes" if ratio <= OPEN_FLAT_LIMIT else "**no**",
            )
        )
    return rows


def _footprint_parts(fp: bench_open.Footprint, kind: str) -> str:
    """`` (warm/ 1.33x, events/ 0.63x)``: the main directories' shares."""
    parts = sorted(
        ((getattr(u, kind) / fp.json_bytes, name) for name, u in fp.parts.items()), reverse=True
    )
    shown = [f"{name}/ {share:.2f}x" for share, name in parts if share >= 0.01]
    return f" ({', '.join(shown)})" if shown else ""


def machine_section(info: dict[str, str], load_end: tuple[float, float, float], note: str | None) -> str:
    rows = [(k, v) for k, v in info.items()]
    rows.append(("load average at end (1/5/15 min)", " / ".join(f"{x:.2f}" for x in load_end)))
    text = md_table(["", ""], rows)
    if note:
        text += f"\n\n**Noise:** {note}"
    return text


def peers_section(results: list[bench_peers.CaseResult], cfg: bench_peers.Config) -> str:
    return f"""Records: ~206-byte JSON-like dicts (orjson size; a few str/int/float/list
fields) over 5 namespaces. N = {cfg.n:,} per case (¹ fsync-per-write cases:
N = {cfg.fsync_n:,}), {cfg.reps} reps per case, interleaved (rep 1 of every case,
then rep 2, ...; each hrm-memory case runs right after the peer it is compared
with); each cell is the **median over reps** (² spread: half the range of
ops/s over the reps, relative to the median). The ratio column is the median
of the per-rep ratios (paired), not the ratio of the medians. Latencies are per
operation (`time.perf_counter_ns` around each call, nearest-rank percentiles);
ops/s is N over the wall time of the timed loop, so it includes the ~0.1 µs of
the two clock reads (visible only for the dict).

- Writes: fresh empty store, {cfg.warmup:,} untimed warm-up writes of other keys
  (creates files, tables, hrm-memory's 64 bucket logs per namespace), then N
  timed writes of new keys in a shuffled order.
- Reads: fresh store filled with the N records (untimed), then N timed reads in
  a shuffled order; a sample of values is checked afterwards. "after reopen":
  the store was closed and opened again before reading, so no in-process cache
  is warm (the OS page cache is; nothing was dropped). For hrm-memory "cold
  cache" each bucket's index is also built on its first read, inside the timing.
- Persistent peers store `orjson.dumps(value)` and decode on read (as
  hrm-memory does). dict and InMemoryStore keep the caller's dict (InMemoryStore
  a shallow copy) and hand the same object back; hrm-memory's hot tier checks on
  write that the value round-trips exactly, keeps its JSON bytes and a private
  copy, and hands every read a fresh copy of that (nothing a caller does to a
  value it wrote or read changes what is stored).
- diskcache runs with its defaults (SQLite WAL, `synchronous=NORMAL`: no fsync
  per write). lmdb: one sub-database per namespace, one transaction per op.
- hrm-memory: `MemoryManager(locking=False)`; tracing: {tracing_mode()}.
  ³ "OTel SDK on" rows pass `tracer_provider=` an SDK `TracerProvider` whose
  spans all go through a `SimpleSpanProcessor` to an exporter that discards
  them. hrm-memory may finish spans on a background thread: their ops/s
  include a final `provider.force_flush()` (p50/p99 do not).

{bench_peers.table(results)}"""


def open_section(results: bench_open.OpenResults, cfg: bench_open.Config) -> str:
    built = [r.filled.n for r in results.sizes]
    skipped = [n for n in bench_open.SIZES if n not in built]
    skip_note = f" Not built on this run (`--max-n {cfg.max_n:,}`): {', '.join(f'{n:,}' for n in skipped)}." if skipped else ""
    return f"""One warm namespace declared with `ttl=1.0`, filled with `durability="flush"`.
From {cfg.archive_from:,} records on, all but the last {cfg.warm_tail:,} are written, then
moved to the cold tier by `archive(now=time.time() + 10**9)`, then the last
{cfg.warm_tail:,} are written (they stay warm).{skip_note}

- open+close: `MemoryManager(root)` then `close()`, {cfg.open_reps} times
  (p99 of {cfg.open_reps} samples is their maximum).
- first read: open, time one `read` of a random key, close; {cfg.open_reps} keys.
  It includes building that key's bucket index (a scan of one of 64 log files).
- bytes/record: everything under the root (files and directories) after
  close; allocated = `st_blocks * 512`.

{bench_open.sizes_table(results)}

### Bytes on disk at {min(cfg.footprint_n, cfg.max_n):,} records

The same records (spread over 5 namespaces) in each store, measured after
close. JSON bytes = sum of `len(orjson.dumps(value))`.

{bench_open.footprint_table(results)}"""


SEED_HEAD = "## Seed namespaces, tracing set up globally (`benchmarks/bench_seed.py`)"


def seed_section(res: bench_seed.SeedResults, argv: list[str] | None = None) -> str:
    ran = "" if argv is None else f"\n\n```\n{command_line(argv)}\n```"
    targets = md_table(
        ["target (seed namespaces)", "required", "measured: median or mean (min-max over reps)", "met?"],
        [(t, need, got, "yes" if ok else "**no**") for t, need, got, ok in bench_seed.outcomes(res)],
    )
    return f"""{SEED_HEAD}

Where HRMs live: seed namespaces with their codecs, hot
(`focus.fast`, `altitude.session`) and warm (`altitude.patterns`,
`reasoning.strategies`, `durability="flush"`), untraced (no SDK) and traced
the standard way: `trace.set_tracer_provider(TracerProvider())` with a
`BatchSpanProcessor` to an exporter that discards, the manager built without
`tracer_provider=`. Each figure: a tight loop of N operations of a ~200-byte
dict, then `provider.force_flush()` (every span built and exported inside the
time), per operation. Peers (LangGraph `InMemoryStore`, `diskcache`) run in the
same process right before the rows compared with them; a ratio is
ops/s(ours) / ops/s(peer) in one process, median over reps. Each rep runs one
process per mode (a global provider is set once per process), the modes
interleaved; *added* is traced minus untraced of processes run back to back.
Values: `make_record` (which no seed codec shortens: stored as its own JSON,
tokens_saved 0) and, on the *coded* rows, a focus interaction record the codec
shortens (six aliases, three stance codes; tokens_saved counted with o200k).
The last column is the baseline, the same rows measured before the hot-path
work on seed namespaces (one run).{ran}

{bench_seed.table(res)}

{targets}
"""


def render(
    argv: list[str],
    info: dict[str, str],
    load_end: tuple[float, float, float],
    note: str | None,
    peers: list[bench_peers.CaseResult],
    peers_cfg: bench_peers.Config,
    opened: bench_open.OpenResults,
    open_cfg: bench_open.Config,
    traced: bench_tracing.WallResults | None,
    elapsed_s: float,
    previous: dict[str, str] | None = None,
    seed: bench_seed.SeedResults | None = None,
) -> str:
    seeded = "" if seed is None else "\n" + seed_section(seed)
    tracing = (
        ""
        if traced is None
        else f"""
## Tracing, wall clock (`benchmarks/bench_tracing.py --wall`)

What an OpenTelemetry SDK adds to a hot read and write when every span is
delivered (to an exporter that discards it). *Caller p50*: the median of
2,000 calls timed one by one. *Total*: a loop of N operations and the final
`provider.force_flush()`, per operation, every thread's work included (a
batch of 256 spans is finished on the caller's thread by the operation that
fills it, so the p99 call carries one). Limits: caller < 2 µs,
total < 5 µs. `python -m benchmarks.bench_tracing --wall --reps {traced.reps}`

{bench_tracing.wall_table(traced)}
"""
    )
    return f"""# Benchmarks

Generated by `benchmarks/run_all.py` in {elapsed_s / 60:.1f} minutes; rerun it to refresh this file.

```
{command_line(argv)}
```

## Where we stand against the targets

{targets_section(peers, opened, traced, previous, seed)}

## Machine

{machine_section(info, load_end, note)}

## hrm-memory against its peers (`benchmarks/bench_peers.py`)

{peers_section(peers, peers_cfg)}

## Open time, first read and size on disk (`benchmarks/bench_open.py`)

{open_section(opened, open_cfg)}
{tracing}{seeded}"""


# -- command line ------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_peers.add_arguments(p)  # --n --fsync-n --reps --warmup --quick --dir
    bench_open.add_arguments(p)  # --max-n --open-reps --footprint-n --no-peers-footprint
    p.add_argument("--out", type=Path, default=REPO_ROOT / "BENCHMARKS.md", help="report to write")
    p.add_argument("--note", help="a remark on the conditions of the run, printed under Machine")
    p.add_argument(
        "--tracing-reps", type=int, default=5, help="reps of the tracing wall-clock run (0: leave it out)"
    )
    p.add_argument("--seed-n", type=int, default=20_000, help="ops per row of the seed-namespace run")
    p.add_argument("--seed-reps", type=int, default=5, help="reps of the seed-namespace run (0: leave it out)")
    p.add_argument(
        "--seed-only",
        action="store_true",
        help="run only the seed-namespace benchmark and replace only its section of the report",
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="MINUTES",
        help="first wait up to this long for other processes to use < 25%% of the CPUs",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    args.dir = args.dir.absolute()
    args.dir.mkdir(parents=True, exist_ok=True)
    peers_cfg = bench_peers.config_from(args)
    open_cfg = bench_open.config_from(args)
    if args.wait_quiet > 0:
        share = wait_until_quiet(args.wait_quiet * 60)
        log(f"starting; other processes used {share:.0%} of the CPUs over the last 10 s")
    if args.seed_only:
        return seed_only(args, argv)
    info = machine_info(args.dir)
    start = time.perf_counter()
    load = OtherLoad()
    peers = bench_peers.run(peers_cfg)
    info["CPU used by other processes: peers run"] = f"{load.share():.0%} of all CPUs (mean)"
    log("peers done:\n" + bench_peers.table(peers))
    load = OtherLoad()
    opened = bench_open.run(open_cfg)
    info["CPU used by other processes: open run"] = f"{load.share():.0%} of all CPUs (mean)"
    traced = None
    if args.tracing_reps > 0:
        load = OtherLoad()
        traced = bench_tracing.run_wall(10_000 if args.quick else 100_000, args.tracing_reps)
        info["CPU used by other processes: tracing run"] = f"{load.share():.0%} of all CPUs (mean)"
    seed = None
    if args.seed_reps > 0:
        seed = bench_seed.run(args.seed_n, args.seed_reps)
        info["CPU used by other processes: seed-namespace run"] = f"{seed.load:.0%} of all CPUs (mean)"
    elapsed = time.perf_counter() - start
    old = args.out.read_text() if args.out.exists() else ""
    report = render(argv, info, os.getloadavg(), args.note, peers, peers_cfg, opened, open_cfg, traced, elapsed,
                    previous_targets(old), seed)
    kept = kept_sections(old, report)
    args.out.write_text(report.rstrip() + ("\n\n" + kept + "\n" if kept else "\n"))
    raw = {"peers": bench_peers.to_json(peers), "open": bench_open.to_json(opened), "machine": info}
    if traced is not None:
        raw["tracing"] = {f"{op} {mode}": runs for (mode, op), runs in traced.got.items()}
    (args.dir / "results.json").write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2, default=str))
    log(f"wrote {args.out} and {args.dir / 'results.json'}")
    print(targets_section(peers, opened, traced, previous_targets(old)))
    return 0


def seed_only(args: argparse.Namespace, argv: list[str]) -> int:
    """``--seed-only``: the seed-namespace section alone, replaced in (or
    added to) the report; every other section kept as it was."""
    seed = bench_seed.run(args.seed_n, args.seed_reps or 5)
    info = machine_info(args.dir)
    note = f"\n\n**Noise:** {args.note}" if args.note else ""
    section = seed_section(seed, argv).rstrip() + (
        f"\n\nRun {info['date']} on {info['cpu']}, {info['python']}, revision {info['hrm-memory revision']}; "
        f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())} at the end.{note}\n"
    )
    old = args.out.read_text() if args.out.exists() else "# Benchmarks\n"
    head, *parts = old.split("\n## ")
    kept = ["## " + p.rstrip() for p in parts if not ("## " + p).startswith(SEED_HEAD)]
    # The seed section goes right after the targets (the headline), the others after it in their order.
    at = 1 if kept and kept[0].startswith("## Where we stand") else 0
    if at:
        kept[0] = _with_seed_rows(kept[0], bench_seed.outcomes(seed))
    kept.insert(at, section.rstrip())
    args.out.write_text(head.rstrip() + "\n\n" + "\n\n".join(kept) + "\n")
    log(f"wrote the seed-namespace section of {args.out}")
    print(section)
    return 0


def _with_seed_rows(targets: str, outcomes: list[tuple[str, str, str, bool]]) -> str:
    """The targets section with the seed benchmark's rows replaced by this
    run's (what they measured before moves to *previous run*; a new target
    is added), and its count of targets met taken again."""
    lines = targets.split("\n")
    for text, need, got, ok in outcomes:
        at = next((i for i, line in enumerate(lines) if line.startswith(f"| {text} |")), None)
        before = lines[at].split(" | ")[2] if at is not None else "-"
        row = f"| {text} | {need} | {got} | {'yes' if ok else '**no**'} | {before} |"
        if at is None:
            at = max(i for i, line in enumerate(lines) if line.startswith("| ")) + 1
            lines.insert(at, row)
        else:
            lines[at] = row
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and not line.startswith("| target")]
    rows = [r for r in rows if len(r) >= 5 and r[3] in ("yes", "**no**")]
    met = sum(r[3] == "yes" for r in rows)
    out = "\n".join(lines)
    return re.sub(r"^\d+ of \d+ targets met on this run\.", f"{met} of {len(rows)} targets met on this run.", out, count=1, flags=re.MULTILINE)


if __name__ == "__main__":
    sys.exit(main())
