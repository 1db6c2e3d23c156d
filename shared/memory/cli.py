"""The ``hrm-memory`` command line.

Exit codes: 0 success; 1 not found (``get``, ``rm``); 2 bad input (usage, an
invalid namespace, key or value); 3 the store failed (damage, disk, lock
timeout); 4 ``check`` found problems it did not fix.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from .errors import BadInput, MemoryStoreError
from .manager import MemoryManager, default_root
from .textfmt import table

EXIT_OK, EXIT_NOT_FOUND, EXIT_BAD_INPUT, EXIT_STORE, EXIT_FINDINGS = 0, 1, 2, 3, 4


def _dump(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode()


def _parse_value(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    try:
        # The stdlib parser, not orjson: it keeps integers beyond 64 bits as
        # ints (so the store refuses them) instead of rounding them to floats.
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise BadInput(f"VALUE is not valid JSON ({exc}); quote strings as JSON, e.g. '\"text\"'") from None


def _reject_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON value", name, 0)


def _record_row(r: Any) -> dict[str, Any]:
    return {
        "namespace": r.namespace,
        "key": r.key,
        "version": r.version,
        "tier": r.tier,
        "updated": r.updated_at,
        "value": r.value,
    }


def _record_json(r: Any) -> dict[str, Any]:
    row = _record_row(r)
    row["created"] = r.created_at.isoformat()
    row["updated"] = r.updated_at.isoformat()
    return row


# -- commands ---------------------------------------------------------------------


def cmd_get(mm: MemoryManager, args: argparse.Namespace) -> int:
    rec = mm.get_record(args.namespace, args.key, compact=args.compact)
    if rec is None:
        print(f"not found: {args.namespace} {args.key!r}", file=sys.stderr)
        return EXIT_NOT_FOUND
    if args.json:
        print(_dump(_record_json(rec)))
    else:
        print(_dump(rec.value))
        if rec.tier == "cold":
            print(f"(archived: served from the cold tier, version {rec.version})", file=sys.stderr)
    return EXIT_OK


def cmd_put(mm: MemoryManager, args: argparse.Namespace) -> int:
    trace_id = mm.write(args.namespace, args.key, _parse_value(args.value))
    rec = mm.get_record(args.namespace, args.key)
    version = rec.version if rec else None
    persisted = bool(rec and rec.persisted)
    if args.json:
        print(_dump({"trace_id": trace_id, "version": version, "persisted": persisted}))
    else:
        print(f"stored (version {version}, trace {trace_id})")
    if not persisted:
        print(
            f"warning: {args.namespace} keeps this value in memory only (a hot namespace, or its consent "
            "category is not granted); it ends with this command",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_rm(mm: MemoryManager, args: argparse.Namespace) -> int:
    if mm.delete(args.namespace, args.key):
        print(_dump({"deleted": True}) if args.json else "deleted")
        return EXIT_OK
    print(f"not found: {args.namespace} {args.key!r}", file=sys.stderr)
    return EXIT_NOT_FOUND


def cmd_ls(mm: MemoryManager, args: argparse.Namespace) -> int:
    if args.namespace:
        recs = mm.query(args.namespace, "*", include_cold=args.cold)
        rows = [{"namespace": r.namespace, "key": r.key, "version": r.version, "tier": r.tier} for r in recs]
        print(_dump(rows) if args.json else table(rows, ["namespace", "key", "version", "tier"]))
        return EXIT_OK
    per_ns = mm.stats()["namespaces"]
    rows = []
    for spec in mm.namespaces():
        st = per_ns.get(spec.name, {})
        rows.append(
            {
                "namespace": spec.name,
                "tier": spec.tier,
                "ttl_days": None if spec.ttl is None else round(spec.ttl / 86400, 2),
                "max_keys": spec.max_keys,
                "keys": st.get("keys", 0),
                "archived": st.get("archived", 0),
                "description": spec.description,
            }
        )
    cols = ["namespace", "tier", "ttl_days", "max_keys", "keys", "archived", "description"]
    print(_dump(rows) if args.json else table(rows, cols))
    return EXIT_OK


def cmd_query(mm: MemoryManager, args: argparse.Namespace) -> int:
    where: dict[str, Any] = {}
    for item in args.where or []:
        field, sep, raw = item.partition("=")
        if not sep or not field:
            raise BadInput(f"--where expects FIELD=JSON, got {item!r}")
        try:
            where[field] = json.loads(raw)
        except json.JSONDecodeError:
            where[field] = raw  # a bare word means that string
    recs = mm.query(
        args.namespace, args.key, where=where or None, limit=args.limit, include_cold=args.cold, compact=args.compact
    )
    if args.json:
        print(_dump([_record_json(r) for r in recs]))
    else:
        print(table([_record_row(r) for r in recs], ["namespace", "key", "version", "tier", "updated", "value"]))
    return EXIT_OK


def cmd_stats(mm: MemoryManager, args: argparse.Namespace) -> int:
    stats = mm.stats()
    if args.json:
        print(_dump(stats))
        return EXIT_OK
    print(f"root: {stats['root']}  durability: {stats['durability']}  locking: {stats['locking']}")
    rows = [{"namespace": ns, **v} for ns, v in stats["namespaces"].items() if v["keys"] or v["archived"]]
    print(table(rows, ["namespace", "tier", "keys", "archived", "warm_bytes", "cold_bytes"]))
    return EXIT_OK


def cmd_check(mm: MemoryManager, args: argparse.Namespace) -> int:
    findings = mm.check(fix=args.fix)
    if args.json:
        print(_dump([{"kind": f.kind, "namespace": f.namespace, "path": f.path, "detail": f.detail, "fixed": f.fixed} for f in findings]))
    elif not findings:
        print("store is sound: no findings")
    else:
        for f in findings:
            print(f)
    return EXIT_FINDINGS if any(not f.fixed for f in findings) else EXIT_OK


def cmd_archive(mm: MemoryManager, args: argparse.Namespace) -> int:
    moved = mm.archive(now=args.now)
    if args.json:
        print(_dump(moved))
    elif not moved:
        print("nothing to archive: no warm record is past its namespace's TTL")
    else:
        for ns, n in moved.items():
            print(f"{ns}: {n} record(s) moved to the cold tier")
    return EXIT_OK


def cmd_demo(mm: MemoryManager, args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(mm, out=sys.stdout)
    return EXIT_OK


def cmd_trace(mm: MemoryManager, args: argparse.Namespace) -> int:
    from . import telemetry

    path = Path(args.file) if args.file else telemetry.default_trace_file(mm.root if mm.root is not None else default_root())
    if args.trace_command == "show":
        if not path.exists():
            print(f"no trace file at {path} (run commands with --trace jsonl)", file=sys.stderr)
            return EXIT_NOT_FOUND
        spans = telemetry.read_spans(path)
        lines = telemetry.show_trace(spans, args.trace_id.lower())
        if args.json:
            print(_dump([s for s in spans if s.get("trace_id") == args.trace_id.lower()]))
        elif not lines:
            print(f"trace {args.trace_id} not found in {path}", file=sys.stderr)
            return EXIT_NOT_FOUND
        else:
            print(f"trace {args.trace_id}")
            print("\n".join(lines))
        return EXIT_OK
    try:
        for _ in telemetry.tail(path, args.n, args.follow, sys.stdout):
            pass
    except KeyboardInterrupt:
        pass
    return EXIT_OK


COMMANDS = {
    "get": cmd_get,
    "put": cmd_put,
    "rm": cmd_rm,
    "ls": cmd_ls,
    "query": cmd_query,
    "stats": cmd_stats,
    "check": cmd_check,
    "archive": cmd_archive,
    "demo": cmd_demo,
    "trace": cmd_trace,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hrm-memory",
        description="Inspect, query, check and archive an hrm-memory store.",
        epilog=f"Store: --root, else $HRM_MEMORY_ROOT, else {default_root()}.",
    )
    p.add_argument("--root", help="storage root directory")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--durability", choices=["fsync", "flush"], default="fsync")
    p.add_argument("--locking", action="store_true", help="take cross-process file locks for writes")
    p.add_argument(
        "--trace",
        choices=["console", "jsonl", "otlp"],
        help="export a span per operation (jsonl: to --trace-file, read by 'trace tail/show')",
    )
    p.add_argument("--trace-file", help="JSONL span file (default $HRM_MEMORY_TRACE_FILE or ROOT/traces/spans.jsonl)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("demo", help="write and read sample HRM memory (in a temporary store unless --root)")
    s = sub.add_parser("get", help="print the value of a key (readable form)")
    s.add_argument("namespace")
    s.add_argument("key")
    s.add_argument("--compact", action="store_true", help="print the stored compact form, codes unexpanded")
    s = sub.add_parser("put", help="store a JSON value ('-' reads stdin)")
    s.add_argument("namespace")
    s.add_argument("key")
    s.add_argument("value", metavar="VALUE_JSON")
    s = sub.add_parser("rm", help="delete a key")
    s.add_argument("namespace")
    s.add_argument("key")
    s = sub.add_parser("ls", help="list namespaces, or the keys of one namespace glob")
    s.add_argument("namespace", nargs="?")
    s.add_argument("--cold", action="store_true", help="include archived keys")
    s = sub.add_parser("query", help="records matching namespace and key globs")
    s.add_argument("namespace", help="namespace glob, e.g. 'focus.*'")
    s.add_argument("key", nargs="?", default="*", help="key glob (default '*')")
    s.add_argument("--where", action="append", metavar="FIELD=JSON", help="keep records whose FIELD equals JSON")
    s.add_argument("--limit", type=int)
    s.add_argument("--cold", action="store_true", help="include archived records")
    s.add_argument("--compact", action="store_true", help="show the stored compact form, codes unexpanded")
    sub.add_parser("stats", help="counts and sizes per namespace")
    s = sub.add_parser("check", help="walk the store and report damage (exit 4 if any)")
    s.add_argument("--fix", action="store_true", help="move damaged bytes to quarantine/ and repair")
    s = sub.add_parser("archive", help="move warm records past their TTL to the cold tier")
    s.add_argument("--now", type=float, help="pretend the time is this epoch second")
    from hrm_memory.migration.cli import add_cli as add_migrate_cli

    from . import token_report

    token_report.add_cli(sub)
    add_migrate_cli(sub)
    s = sub.add_parser("trace", help="read the JSONL span file: tail, or show one trace as a tree")
    tsub = s.add_subparsers(dest="trace_command", required=True, metavar="tail|show")
    t = tsub.add_parser("tail", help="print the last spans (and follow new ones with -f)")
    t.add_argument("-n", type=int, default=20)
    t.add_argument("-f", "--follow", action="store_true")
    t.add_argument("--file", help="span file")
    t = tsub.add_parser("show", help="one trace as a tree with durations")
    t.add_argument("trace_id")
    t.add_argument("--file", help="span file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "tokens":
        from . import token_report

        return token_report.run_cli(args)
    if args.command == "migrate":  # opens the store itself (plan must not)
        from hrm_memory.migration.cli import run_cli as run_migrate

        return run_migrate(args)
    root: str | Path | None = args.root
    tmp = None
    if args.command == "demo" and root is None:
        tmp = tempfile.TemporaryDirectory(prefix="hrm-memory-demo-")
        root = tmp.name
    provider = None
    try:
        if args.trace:
            from . import telemetry

            trace_root = Path(root) if root is not None else default_root()
            provider = telemetry.setup_tracing(
                args.trace,
                path=args.trace_file or telemetry.default_trace_file(trace_root),
                set_global=False,
            )
        with MemoryManager(root, durability=args.durability, locking=args.locking, tracer_provider=provider) as mm:
            return COMMANDS[args.command](mm, args)
    except BadInput as exc:
        print(f"hrm-memory: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryStoreError as exc:
        print(f"hrm-memory: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(exc, ValueError) else EXIT_STORE
    except OSError as exc:
        print(f"hrm-memory: error: {exc}", file=sys.stderr)
        return EXIT_STORE
    finally:
        if provider is not None:
            provider.shutdown()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

