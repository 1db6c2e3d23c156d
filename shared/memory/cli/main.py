"""The ``hrm-memory`` command line.

Exit codes: 0 success; 1 not found (``get``, ``rm``, ``trace show``); 2 bad
input (usage, an invalid namespace, key or value); 3 the store failed (damage,
disk, lock timeout); 4 ``check`` found problems it did not fix. When stdout is
closed early (``hrm-memory query ... | head -1``) the command ends quietly with
141, the status of a process ended by SIGPIPE: no message, no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from hrm_memory.cli import portable as cli_portable
from hrm_memory.cli import recall as cli_recall
from hrm_memory.cli import trace as cli_trace
from hrm_memory.core.errors import BadInput, MemoryStoreError, Unsupported
from hrm_memory.manager import MemoryManager, default_root
from hrm_memory.core.spec import CONSENT_CATEGORIES, TIERS, NamespaceSpec
from hrm_memory.integrations import mcp_server
from hrm_memory.cli.textfmt import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_FINDINGS,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STORE,
    table,
)
from hrm_memory.cli.textfmt import dump_json as _dump

#: Why a legacy file cannot be counted by ``tokens --legacy`` (see _legacy_file_problem).
_TOKENS_LEGACY_NOTE = (
    "With --legacy DIR every file must be UTF-8 text and every .json file valid JSON: "
    "the first one that is not is reported by name and the command exits 2 without a "
    "report (a skipped file would make the totals wrong). DIR is the folder holding the_assist/ "
    "and locked_system/; another folder is refused as migrate refuses it. The compact figures "
    "are the records migrate stores (the same as migrate plan/apply/verify report)."
)


def _parse_value(text: str) -> Any:
    if text == "-":
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError as exc:
            raise BadInput(f"VALUE on stdin is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return _parse_json(text, "VALUE")


def _parse_json(text: str, what: str) -> Any:
    try:
        # The stdlib parser, not orjson: it keeps integers beyond 64 bits as
        # ints (so the store refuses them) instead of rounding them to floats.
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} is not valid JSON ({exc}); quote strings as JSON, e.g. '\"text\"'") from None
    except RecursionError:
        raise BadInput(f"{what} is nested too deeply (the store keeps values up to 254 levels deep)") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise BadInput(f"{what} cannot be read as JSON ({exc})") from None


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
            where[field] = json.loads(raw, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            if raw.lstrip()[:1] in ('{', '[', '"'):  # meant as JSON: say what is wrong, never match nothing
                raise BadInput(f"--where {field}=...: the JSON is not valid ({exc.msg} at character {exc.pos})") from None
            where[field] = raw  # a bare word means that string
        except (RecursionError, ValueError):
            raise BadInput(f"--where {field}=...: the JSON is nested too deeply or too large") from None
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
    print(_stats_header(stats))
    rows = [{"namespace": ns, **v} for ns, v in stats["namespaces"].items() if v["keys"] or v["archived"]]
    print(table(rows, ["namespace", "tier", "keys", "archived", "warm_bytes", "cold_bytes"]))
    return EXIT_OK


#: The figures of the store itself that head ``stats``, in this order: the
#: file store's (root, durability, locking) and a Redis store's (its URL
#: without a password, prefix, cluster, replicas waited for, persistence).
_STATS_HEAD = ("root", "url", "prefix", "cluster", "durability", "locking", "wait", "appendonly", "appendfsync")


def _stats_header(stats: dict[str, Any]) -> str:
    """One line of the figures the backend gives about itself (whichever it is)."""
    return "  ".join(f"{name}: {stats[name]}" for name in _STATS_HEAD if name in stats)


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
    from hrm_memory.cli.demo import run_demo

    run_demo(mm, out=sys.stdout)
    return EXIT_OK


def cmd_compact(mm: MemoryManager, args: argparse.Namespace) -> int:
    reclaimed = mm.compact(args.namespace)
    if args.json:
        print(_dump({"namespace": args.namespace, "reclaimed_bytes": reclaimed}))
    else:
        print(f"reclaimed {reclaimed} bytes" + (f" in {args.namespace}" if args.namespace else ""))
    return EXIT_OK


def cmd_consent(mm: MemoryManager, args: argparse.Namespace) -> int:
    if args.consent_command == "status":
        status = mm.consent.status()
        if args.json:
            print(_dump(status))
        else:
            # A hot namespace's category gates nothing on disk (it is never
            # persisted, granted or not): listed, and said so.
            hot = {c: [f"{s.name} (hot: memory only either way)" for s in mm.namespaces()
                       if s.consent == c and s.tier == "hot"] for c in status}
            rows = [
                {"category": c, "granted": g, "namespaces": ", ".join(mm.consent.namespaces(c) + hot[c]) or "-"}
                for c, g in status.items()
            ]
            print(table(rows, ["category", "granted", "namespaces"]))
        return EXIT_OK
    if args.consent_command == "grant":
        result = mm.consent.grant(args.category)
        if args.json:
            print(_dump(result))
        else:
            print(f"granted {args.category}: its namespaces are persisted from now on")
        return EXIT_OK
    result = mm.consent.revoke(args.category, purge=args.purge)
    if args.json:
        print(_dump(result))
    elif args.purge:
        gone = sum(_items_purged(per_place) for per_place in result["purged"].values())
        print(f"revoked {args.category} and purged its stored data ({gone} item(s) removed)")
    else:
        print(f"revoked {args.category}: its namespaces are kept in memory only from now on "
              "(stored data stays; --purge removes it)")
    return EXIT_OK


#: Counts of a purge that are not items removed: on Redis, ``rewrite`` is the
#: persistence files (AOF, RDB) redone so no old copy stays in them.
_NOT_ITEMS = frozenset({"rewrite"})


def _items_purged(counts: dict[str, int]) -> int:
    """The items a purge removed (records, archive copies, quarantined blobs, events)."""
    return sum(n for place, n in counts.items() if place not in _NOT_ITEMS)


def cmd_declare(mm: MemoryManager, args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {"tier": args.tier, "description": args.description}
    if args.ttl is not None:
        fields["ttl"] = args.ttl
    if args.consent is not None:
        fields["consent"] = args.consent
    if args.max_keys is not None:
        fields["max_keys"] = args.max_keys
    spec = mm.declare(NamespaceSpec(args.namespace, **fields))
    if args.json:
        print(_dump(spec.to_dict()))
    else:
        extra = "".join(
            f", {label} {value}"
            for label, value in (("ttl", spec.ttl), ("consent", spec.consent), ("max keys", spec.max_keys))
            if value is not None
        )
        print(f"declared {spec.name} (tier {spec.tier}{extra})")
    return EXIT_OK


def cmd_undeclare(mm: MemoryManager, args: argparse.Namespace) -> int:
    purged = mm.undeclare(args.namespace, purge=args.purge)
    if args.json:
        print(_dump({"namespace": args.namespace, "undeclared": True, "purged": purged}))
    else:
        gone = _items_purged(purged)
        print(f"undeclared {args.namespace}" + (f" ({gone} item(s) purged)" if gone else ""))
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
    "compact": cmd_compact,
    "consent": cmd_consent,
    "declare": cmd_declare,
    "undeclare": cmd_undeclare,
    "recall": cli_recall.cmd_recall,
    "context": cli_recall.cmd_context,
    **cli_portable.COMMANDS,
}


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hrm-memory")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree without installing
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``: prints ``hrm-memory <version>`` (from the installed
    distribution's metadata, looked up only when asked) and exits 0."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"hrm-memory {_package_version()}")
        parser.exit()


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """An argument parser that keeps what the global options need: the
    options of the whole command (:meth:`add_global`) and its groups of
    subcommands (every subcommand's parser is one of these too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.global_options: list[argparse.Action] = []
        self.subcommand_groups: list[Any] = []

    def add_global(self, *flags: str, **kwargs: Any) -> argparse.Action:
        """An option of the whole command, which may also follow a command's name."""
        action = self.add_argument(*flags, **kwargs)
        self.global_options.append(action)
        return action

    def add_subparsers(self, **kwargs: Any) -> Any:
        group = super().add_subparsers(**kwargs)
        self.subcommand_groups.append(group)
        return group


def build_parser() -> _Parser:
    p = _Parser(
        prog="hrm-memory",
        description="Inspect, query, check and archive an hrm-memory store.",
        epilog=f"Store: --backend (or $HRM_MEMORY_BACKEND) for a Redis store, else --root, else $HRM_MEMORY_ROOT, "
        f"else {default_root()}. Options may come before or after the command.",
    )
    p.add_argument("--version", action=_VersionAction, help="print 'hrm-memory VERSION' and exit")
    p.add_global("--root", help="storage root directory")
    p.add_global(
        "--backend",
        metavar="URL",
        help="a shared store on Redis, e.g. redis://host:6379/0?prefix=hrm: (default $HRM_MEMORY_BACKEND; "
        "without either, the files under the root)",
    )
    p.add_global("--json", action="store_true", help="print JSON instead of tables")
    p.add_global("--durability", choices=["fsync", "flush"], default="fsync")
    p.add_global("--locking", action="store_true", help="take cross-process file locks for writes")
    p.add_global(
        "--trace",
        choices=["console", "jsonl", "otlp"],
        help="export a span per operation (jsonl: to --trace-file, read by 'trace tail/show'; "
        "console: to stderr; otlp: needs pip install 'hrm-memory[otlp]')",
    )
    p.add_global(
        "--trace-file",
        help="JSONL span file, written with --trace jsonl and read by 'trace tail/show' "
        "(default $HRM_MEMORY_TRACE_FILE or ROOT/traces/spans.jsonl)",
    )
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
    cli_recall.register(sub)
    cli_recall.register_context(sub)
    cli_portable.register(sub)
    sub.add_parser("stats", help="counts and sizes per namespace")
    s = sub.add_parser("check", help="walk the store and report damage (exit 4 if any)")
    s.add_argument("--fix", action="store_true", help="move damaged bytes to quarantine/ and repair")
    s = sub.add_parser("archive", help="move warm records past their TTL to the cold tier")
    s.add_argument("--now", type=float, help="pretend the time is this epoch second")
    s = sub.add_parser("compact", help="rewrite warm logs without superseded lines; print the bytes reclaimed")
    s.add_argument("namespace", nargs="?", help="only this namespace (default: all)")
    s = sub.add_parser("consent", help="show, grant or revoke consent per category")
    csub = s.add_subparsers(dest="consent_command", required=True, metavar="status|grant|revoke")
    csub.add_parser("status", help="every category, whether it is granted, and the namespaces it gates")
    c = csub.add_parser("grant", help="persist the category's namespaces from now on")
    c.add_argument("category", choices=CONSENT_CATEGORIES)
    c = csub.add_parser("revoke", help="keep the category's namespaces in memory only from now on")
    c.add_argument("category", choices=CONSENT_CATEGORIES)
    c.add_argument("--purge", action="store_true", help="also remove the category's stored data")
    s = sub.add_parser("declare", help="declare a namespace at run time (remembered in the store)")
    s.add_argument("namespace")
    s.add_argument("--tier", choices=TIERS, default="warm", help="home tier (default warm)")
    s.add_argument("--ttl", type=_positive_seconds, metavar="SECONDS",
                   help="seconds after the last update before archive moves a record to the cold tier")
    s.add_argument("--consent", choices=CONSENT_CATEGORIES, help="consent category gating persistence")
    s.add_argument("--max-keys", type=cli_recall.int_in(1), metavar="N", help="keep at most N keys")
    s.add_argument("--description", default="", metavar="TEXT")
    s = sub.add_parser("undeclare", help="forget a run-time namespace (refused while it holds data, unless --purge)")
    s.add_argument("namespace")
    s.add_argument("--purge", action="store_true", help="remove its data first")
    from hrm_memory.migration.cli import add_cli as add_migrate_cli

    from hrm_memory.cli import token_report

    tp = token_report.add_cli(sub)
    tp.description = f"Token counts of the readable and compact forms. {_TOKENS_LEGACY_NOTE}"
    add_migrate_cli(sub)
    mcp_server.add_cli(sub)
    s = sub.add_parser("trace", help="read the JSONL span file: tail, or show one trace as a tree")
    tsub = s.add_subparsers(dest="trace_command", required=True, metavar="tail|show")
    t = tsub.add_parser("tail", help="print the last spans (and follow new ones with -f)")
    t.add_argument("-n", type=int, default=20)
    t.add_argument("-f", "--follow", action="store_true")
    t.add_argument("--file", help="span file (default --trace-file, else the default span file)")
    t = tsub.add_parser("show", help="one trace as a tree with durations")
    t.add_argument("trace_id", help="a trace id, or a unique prefix of one (as 'trace tail' prints)")
    t.add_argument("--file", help="span file (default --trace-file, else the default span file)")
    return p


def _legacy_file_problem(legacy_dir: str) -> str | None:
    """The first file under ``legacy_dir`` that ``tokens --legacy`` cannot
    count (not UTF-8, or a .json file that is not JSON), said as an error."""
    root = Path(legacy_dir)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"{rel}: not UTF-8 text ({exc.reason} at byte {exc.start}); every legacy file must be UTF-8"
        except OSError as exc:
            return f"{rel}: cannot be read ({exc.strerror or exc})"
        if path.suffix == ".json":
            try:
                orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                return f"{rel}: not valid JSON ({exc})"
    return None


def _run_tokens(args: argparse.Namespace) -> int:
    from hrm_memory.cli import token_report

    try:
        return token_report.run_cli(args)
    except (UnicodeDecodeError, ValueError) as exc:
        if not args.legacy:
            raise
        problem = _legacy_file_problem(args.legacy) or f"a legacy file cannot be counted ({exc})"
        print(f"hrm-memory: error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _command_span(provider: Any, command: str) -> Any:
    from hrm_memory.tracing.setup import command_span

    return command_span(provider, command)


def _setup_tracing(args: argparse.Namespace, root: str | Path | None) -> Any:
    from hrm_memory.tracing import setup as telemetry

    trace_root = Path(root) if root is not None else default_root()
    _check_trace_file(args.trace_file, trace_root)
    try:
        return telemetry.setup_tracing(
            args.trace,
            path=args.trace_file or telemetry.default_trace_file(trace_root),
            set_global=False,
            # Spans never go to stdout: it carries the command's output (JSON with --json).
            out=sys.stderr,
        )
    except Unsupported:
        if args.trace == "otlp":
            raise BadInput(
                "--trace otlp needs the OTLP exporter, which is not installed: pip install 'hrm-memory[otlp]'"
            ) from None
        raise


def backend_url(args: argparse.Namespace) -> str | None:
    """``--backend``, else ``$HRM_MEMORY_BACKEND``, else None (the file store)."""
    url = getattr(args, "backend", None) or os.environ.get("HRM_MEMORY_BACKEND") or None
    return url.strip() if url else None


#: Library spellings in error hints, and what a CLI user types instead.
_CLI_SPEAK = (
    ("MemoryManager.declare(NamespaceSpec(...))", "'hrm-memory declare NAMESPACE'"),
    ("undeclare(..., purge=True)", "'hrm-memory undeclare NAMESPACE --purge'"),
    ("revoke(..., purge=True)", "'hrm-memory consent revoke CATEGORY --purge'"),
    ("check(fix=True)", "'hrm-memory check --fix'"),
    ("index=('text',)", "an index (NamespaceSpec(index=('text',)) in Python)"),
)


def cli_speak(message: str) -> str:
    """An error's hint said as the command to type, not the Python call."""
    for python, command in _CLI_SPEAK:
        message = message.replace(python, command)
    return message


def _accept_global_options_anywhere(parser: _Parser) -> None:
    """Give every subcommand (nested ones too) the global options (those
    ``add_global`` made: ``hrm-memory get --json NS KEY``), with defaults
    suppressed, so that one given after the command sets the same
    attribute as before it, and one not given leaves the value from before it."""
    globals_ = parser.global_options
    pending = [parser]
    while pending:
        for group in pending.pop().subcommand_groups:
            for sub in dict.fromkeys(group.choices.values()):
                for g in globals_:
                    kwargs: dict[str, Any] = {"dest": g.dest, "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
                    if g.nargs == 0 and g.const is True:  # a store_true flag
                        kwargs["action"] = "store_true"
                    else:
                        kwargs.update(choices=g.choices, metavar=g.metavar)
                    try:
                        sub.add_argument(*g.option_strings, **kwargs)
                    except argparse.ArgumentError:
                        pass  # the subcommand has an option of that name of its own
                pending.append(sub)


def _check_trace_file(path: str | None, root: Path) -> None:
    """A span file named on the command line is a file, in a directory that
    exists or under the store's root (whose folders the store creates)."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise BadInput(f"--trace-file {path}: that is a directory; name a file, e.g. {p / 'spans.jsonl'}")
    parent = p.parent.absolute()
    if not parent.is_dir() and not parent.is_relative_to(root.absolute()):
        raise BadInput(f"--trace-file {path}: the directory {p.parent} does not exist (it is not created for you)")


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    _accept_global_options_anywhere(parser)
    args = parser.parse_args(argv)
    if args.command == "tokens":
        return _run_tokens(args)
    if args.command == "migrate":  # opens the store itself (plan must not)
        from hrm_memory.migration.cli import run_cli as run_migrate

        return run_migrate(args)
    root: str | Path | None = args.root
    tmp = None
    provider = None
    try:
        if args.command == "trace":  # reads a span file: no store, no tracing
            return cli_trace.cmd_trace(args)
        if args.command == "demo" and root is None:
            tmp = tempfile.TemporaryDirectory(prefix="hrm-memory-demo-")
            root = tmp.name
        if args.trace:
            provider = _setup_tracing(args, root)
        if args.command == "mcp":  # opens the store itself (it may be a Redis backend)
            return mcp_server.run_cli(args, provider)
        backend = backend_url(args)
        # One trace per command: a root span its operations' spans are children of.
        with _command_span(provider, args.command), MemoryManager(
            root, durability=args.durability, locking=args.locking, tracer_provider=provider, backend=backend
        ) as mm:
            return COMMANDS[args.command](mm, args)
    except BadInput as exc:
        print(f"hrm-memory: error: {cli_speak(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryStoreError as exc:
        print(f"hrm-memory: error: {type(exc).__name__}: {cli_speak(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(exc, ValueError) else EXIT_STORE
    except BrokenPipeError:
        raise  # stdout closed by its reader: main() ends quietly
    except OSError as exc:
        print(f"hrm-memory: error: {exc}", file=sys.stderr)
        return EXIT_STORE
    finally:
        if provider is not None:
            provider.shutdown()
        if tmp is not None:
            tmp.cleanup()


def _silence_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so the interpreter's final
    flush of what is still buffered does not fail a second time."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a real file (in-process callers, tests)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (argparse exits 2 on usage errors,
    0 for --help and --version)."""
    try:
        try:
            return _run(argv)
        finally:
            # Flush here, not at interpreter exit, so a reader that closed the
            # pipe is noticed while it can still be handled.
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

