"""Sealed (encrypted) namespaces: what a gated write and read pay for the cipher.

    python -m benchmarks.bench_crypto [--records 3000] [--rounds 3]

Rows, each the best batch of 50 operations over ``--rounds`` runs on a
fresh file store (``durability="flush"``, so the disk's fsync does not hide
the cipher):

- ``gated sealed``: a namespace with a consent category, granted: every
  value sealed with AES-256-GCM on write, opened on read;
- ``ungated``: the same namespace without the category (stored as it is);
- ``wrapper get``: the backend's own ``get`` of one cached record, bare and
  through the sealing wrapper, for an ungated namespace (the pass-through cost).

Rows run interleaved, round after round. ``--no-wrapper`` imports nothing
of the sealing layer, so the same command under the interpreter of a
checkout without it gives the figures to compare against (there the gated
row is gated without encryption). Prints a Markdown table; ``--json`` too.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

VALUE = {"text": "a turn of conversation, about a hundred bytes long, as an HRM would keep it", "n": 0}


def _run(consent: str | None, n: int) -> dict[str, float]:
    from hrm_memory import MemoryManager, NamespaceSpec

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HRM_MEMORY_KEYS"] = str(Path(tmp) / "keys")
        with MemoryManager(Path(tmp) / "store", durability="flush", signal_log=False) as mm:
            mm.declare(NamespaceSpec("bench.turns", consent=consent, owner="bench"))
            if consent:
                mm.consent.grant(consent)
            mm.write("bench.turns", "warmup", VALUE)
            # The best batch of 50, not the mean: on a shared machine the
            # best batch is the one no other process interrupted.
            write = read = float("inf")
            for b in range(0, n, 50):
                t0 = time.perf_counter()
                for i in range(b, b + 50):
                    mm.write("bench.turns", f"k{i}", {**VALUE, "n": i})
                write = min(write, (time.perf_counter() - t0) / 50)
            for _ in range(3):
                for b in range(0, n, 50):
                    t0 = time.perf_counter()
                    for i in range(b, b + 50):
                        mm.read("bench.turns", f"k{i}")
                    read = min(read, (time.perf_counter() - t0) / 50)
    return {"write_us": write * 1e6, "read_us": read * 1e6}


def _wrapper() -> dict[str, float]:
    from hrm_memory.storage import FileBackend
    from hrm_memory.storage.sealed.keys import EnvKeys
    from hrm_memory.storage.sealed.backend import SealedBackend

    with tempfile.TemporaryDirectory() as tmp:
        fb = FileBackend(Path(tmp) / "store", durability="flush", signal_log=False)
        sealed = SealedBackend(fb, lambda ns: None, EnvKeys("HRM_BENCH_NO_KEYS"))
        fb.put("bench.plain", "k", b'{"a":1}', time.time_ns() // 1000)
        out = {}
        from hrm_memory.storage.sealed.keys import DataKey, make_keyring
        from hrm_memory.storage.sealed.backend import Cipher

        os.environ["HRM_BENCH_KEYS"] = make_keyring({"g": [DataKey("k1", os.urandom(32))]})
        cipher = Cipher(EnvKeys("HRM_BENCH_KEYS"))
        plain = json.dumps(VALUE).encode()
        sealed_value = cipher.seal("g", "bench.turns", "k", plain)
        for name, fn in (("seal_ns", lambda: cipher.seal("g", "bench.turns", "k", plain)),
                         ("open_ns", lambda: cipher.open("g", "bench.turns", "k", sealed_value))):
            best = float("inf")
            for _ in range(300):
                t0 = time.perf_counter_ns()
                for _ in range(300):
                    fn()
                best = min(best, (time.perf_counter_ns() - t0) / 300)
            out[name] = best
        for name, get in (("bare_get_ns", fb.get), ("wrapped_get_ns", sealed.get)):
            best = float("inf")
            for _ in range(300):
                t0 = time.perf_counter_ns()
                for _ in range(1000):
                    get("bench.plain", "k")
                best = min(best, (time.perf_counter_ns() - t0) / 1000)
            out[name] = best
        fb.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ungated-only", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-wrapper", dest="wrapper", action="store_false", help="skip the wrapper row (another checkout has none)")
    args = ap.parse_args(argv)
    rows: dict[str, dict[str, float]] = {}
    gated = "gated (sealed when this checkout seals)"
    kinds = [("ungated", None)] if args.ungated_only else [(gated, "conversation"), ("ungated", None)]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in kinds}
    for _ in range(args.rounds):  # interleaved, so a busy moment of the machine hits every row alike
        for name, consent in kinds:
            runs[name].append(_run(consent, args.records))
    for name, got in runs.items():
        rows[name] = {k: min(r[k] for r in got) for k in got[0]}
    print(f"| row ({args.records} records, best of {args.rounds}) | write µs/op | read µs/op |")
    print("|---|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['write_us']:.1f} | {r['read_us']:.2f} |")
    extra: dict[str, Any] = {}
    if not args.ungated_only and args.wrapper:
        extra = _wrapper()
        print(f"\nbackend get of a cached ungated record: bare {extra['bare_get_ns']:.0f} ns, "
              f"through the sealing wrapper {extra['wrapped_get_ns']:.0f} ns")
        print(f"cipher alone, a {len(json.dumps(VALUE))}-byte value: seal {extra['seal_ns'] / 1000:.1f} µs, "
              f"open {extra['open_ns'] / 1000:.1f} µs")
    if args.json:
        print(json.dumps({"rows": rows, **extra}))


if __name__ == "__main__":
    main()
