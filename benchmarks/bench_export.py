"""Export and import at size: time, peak RSS, file size.

    python -m benchmarks.bench_export --records 100000 1000000

For each size: a file store is filled with N records (four namespaces, one
of them keeping history, with a second version for one record in ten), then,
each step in a process of its own so that its peak RSS (``ru_maxrss``) is
its own:

- ``scan``: open the store and walk every record through the backend (what
  any full read costs: the warm tier's per-bucket key index is in memory
  while its bucket is read): the baseline export stands on;
- ``export``: ``mm.export(path)``;
- ``import``: ``mm.import_(path)`` into an empty root.

Export memory is bounded by construction (records stream; the sort keeps
``RUN_LINES`` lines in memory, the rest in temporary runs), so its peak RSS
should follow the scan baseline, not N. Prints a Markdown table (and JSON
with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAMESPACES = ("focus.slow", "focus.lanes", "reasoning.routing", "shared.people")
TEXT = "a record of about a hundred bytes, as an HRM would keep: a decision, a lane, a person"


def _child(step: str, root: str, path: str, n: int) -> dict[str, float]:
    from hrm_memory import MemoryManager

    t0 = time.perf_counter()
    out: dict[str, float] = {}
    if step == "fill":
        with MemoryManager(root, durability="flush", signal_log=False) as mm:
            for i in range(n):
                ns = NAMESPACES[i % len(NAMESPACES)]
                mm.write(ns, f"k{i:08d}", {"text": TEXT, "i": i})
                if ns == "shared.people" and i % 10 == 3:
                    mm.write(ns, f"k{i:08d}", {"text": TEXT, "i": i, "edited": True})
    elif step == "scan":
        with MemoryManager(root, durability="flush", signal_log=False) as mm:
            count = 0
            for ns in NAMESPACES:
                for _ in mm.backend.scan(ns, include_cold=True):
                    count += 1
            out["records"] = count
    elif step == "export":
        with MemoryManager(root, durability="flush") as mm:
            out.update(mm.export(path))
    elif step == "import":
        with MemoryManager(root, durability="flush") as mm:
            out.update(mm.import_(path))
    out["seconds"] = time.perf_counter() - t0
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _step(step: str, root: Path, path: Path, n: int) -> dict[str, float]:
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_export", "--child", step, str(root), str(path), str(n)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run(n: int, work: Path) -> dict[str, object]:
    src, dst, path = work / f"src{n}", work / f"dst{n}", work / f"export{n}.jsonl"
    fill = _step("fill", src, path, n)
    scan = _step("scan", src, path, n)
    export = _step("export", src, path, n)
    imp = _step("import", dst, path, n)
    return {
        "records": n,
        "fill_s": round(fill["seconds"], 1),
        "scan_s": round(scan["seconds"], 1),
        "scan_rss_mib": round(scan["peak_rss_mib"]),
        "export_s": round(export["seconds"], 1),
        "export_rss_mib": round(export["peak_rss_mib"]),
        "import_s": round(imp["seconds"], 1),
        "import_rss_mib": round(imp["peak_rss_mib"]),
        "file_mib": round(path.stat().st_size / 2**20, 1),
        "versions": export.get("versions"),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        step, root, path, n = sys.argv[2:6]
        print(json.dumps(_child(step, root, path, int(n))))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, nargs="+", default=[100_000])
    p.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="hrm-bench-export-", dir=args.dir) as tmp:
        rows = [run(n, Path(tmp)) for n in args.records]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| records | export s | export peak RSS MiB | scan-only peak RSS MiB | import s | import peak RSS MiB | file MiB | load |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['records']:,} | {r['export_s']} | {r['export_rss_mib']} | {r['scan_rss_mib']} | {r['import_s']} | "
              f"{r['import_rss_mib']} | {r['file_mib']} | {r['load']:.1f} |")


if __name__ == "__main__":
    main()
