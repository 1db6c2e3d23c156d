"""Token reports: legacy files against their compact form, and a live store.

"Legacy form" is a file's text as an LLM would read it (the_assist injected
JSON files and the ``CompressedMemory.build_context()`` text; see
LEGACY_API.md). "Compact form" is what hrm-memory stores and returns: the
value after its codec's :meth:`~hrm_memory.core.codes.Codec.compact`, as compact
JSON (orjson, no indentation, UTF-8 instead of ``\\uXXXX``). For legacy files
it is the record migrate stores (``migration.figures``: text files hold
their exact text and the parsed entries), so ``tokens --legacy`` and
``migrate plan/apply/verify`` report the same figures. Every compact form is checked to
expand back to exactly the parsed file before it is counted, so no figure
comes from dropped data; the build_context view is reported beside the totals,
not in them, because that text is lossy.

Token counts come from :mod:`hrm_memory.core.tokens`; every report names the
counter (exact o200k_base with its vocabulary sha256, or the labelled estimate).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from hrm_memory.core.codes import Codec
from hrm_memory.core.errors import InvalidValue, MemoryStoreError, NoLegacyFiles
from hrm_memory.core.tokens import get_counter

if TYPE_CHECKING:
    from hrm_memory.manager import MemoryManager

#: The saving the project set as its goal: 75% fewer tokens on average in the
#: compact form than in the legacy form (the proposal before it asked 65%).
TARGET_SAVED_PCT = 75.0
#: Where that target comes from, printed with it.
TARGET_SOURCE = "the project's goal: 75% fewer tokens on average than the legacy form; the proposal asked 65%"



@dataclass(frozen=True)
class Row:
    """Token and byte counts of one kind (or namespace) in both forms."""

    kind: str
    files: int
    namespace: str | None
    codec: str | None
    legacy_tokens: int
    compact_tokens: int
    legacy_bytes: int
    compact_bytes: int
    note: str = ""

    @property
    def saved_pct(self) -> float:
        """Percent fewer tokens in the compact form (negative: it is larger)."""
        return 100.0 * (1 - self.compact_tokens / self.legacy_tokens) if self.legacy_tokens else 0.0


@dataclass(frozen=True)
class Report:
    """Rows per kind, their total, and views shown beside the total."""

    title: str
    legacy_label: str
    compact_label: str
    rows: list[Row]
    total: Row
    tokenizer: dict[str, Any]
    views: list[Row] = field(default_factory=list)

    @property
    def mean_saved_pct(self) -> float:
        """The unweighted mean of the per-kind savings."""
        return sum(r.saved_pct for r in self.rows) / len(self.rows) if self.rows else 0.0


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


def _sum_rows(kind: str, rows: Iterable[Row], note: str = "") -> Row:
    rows = list(rows)
    namespaces = {r.namespace for r in rows}
    codecs = {r.codec for r in rows}
    return Row(
        kind,
        sum(r.files for r in rows),
        namespaces.pop() if len(namespaces) == 1 else None,
        codecs.pop() if len(codecs) == 1 else None,
        sum(r.legacy_tokens for r in rows),
        sum(r.compact_tokens for r in rows),
        sum(r.legacy_bytes for r in rows),
        sum(r.compact_bytes for r in rows),
        note,
    )


def text_value(text: str) -> dict[str, Any]:
    """The raw part of the record a legacy text file becomes (migration/formats.py
    stores ``{"raw": ...}`` and the parsed entries beside it)."""
    return {"raw": text}


def compact_form(text: str, is_json: bool, codec: Codec | None) -> bytes:
    """The stored bytes for one legacy file's text (JSON parsed, else
    :func:`text_value`), after checking they expand back to exactly what
    the file holds. Raises :class:`InvalidValue` if not."""
    return lossless_form(orjson.loads(text) if is_json else text_value(text), codec)


def lossless_form(value: Any, codec: Codec | None) -> bytes:
    """``value`` as stored (``migration.figures.would_store``), after checking
    the stored form expands back to exactly ``value``. Raises :class:`InvalidValue` if not."""
    from hrm_memory.migration.figures import would_store

    stored = would_store(None, value, codec)
    back = orjson.loads(stored)
    if codec is not None:
        back = codec.expand(back)
    if _json(back) != _json(value):  # bytes compare types (1, 1.0, true) and key order
        raise InvalidValue("compact form does not expand back to the file's data", path="$")
    return stored


#: Kind of a file the migration's layout does not know: no record (migrate
#: keeps its bytes in its manifest only), so nothing stored and no tokens after.
UNMAPPED = "unmapped"


def legacy_report(legacy_dir: str | Path, codecs: Mapping[str, Codec] | None = None) -> Report:
    """Count every file under ``legacy_dir`` (e.g. shared/legacy/data) in its
    legacy form and as migrate stores it, per file kind: the same figures as
    ``migrate plan``/``apply``/``verify`` (``migration.figures``: the record
    value migrate writes, in its namespace codec's compact form, as compact
    JSON). Kinds, namespaces and record values come from the migration
    (``layout.place_of``, ``formats.decode_value``), each namespace's codec
    from its seed spec (``codecs`` maps codec names to replacements, for tests).
    A file the layout does not know is counted under ``unmapped`` with nothing
    stored, as migrate does. The compressed state's ``build_context()`` text is
    an extra view, outside the totals.

    Raises ``FileNotFoundError``/``NotADirectoryError`` if the folder is not
    one, :class:`~hrm_memory.core.errors.NoLegacyFiles` (with the folder to
    pass instead) if it holds no file the layout knows, exactly as migrate does,
    ``UnicodeDecodeError``/``ValueError`` for a file that is not UTF-8 or a
    ``.json`` file that is not JSON, :class:`InvalidValue` if a compact form is
    not lossless (naming the file)."""
    from hrm_memory.migration import figures
    from hrm_memory.migration.inventory import check_root, read_file
    from hrm_memory.migration.layout import place_of
    from hrm_memory.namespaces import seed

    root = Path(legacy_dir)
    rels, _skipped = check_root(root)
    specs = {s.name: s for s in seed()}
    count = get_counter().count
    acc: dict[str, list[Row]] = {}
    views: list[Row] = []
    for rel in rels:
        place = place_of(rel)
        raw = read_file(root, rel)
        text = raw.decode("utf-8")  # strict: a file that is not text is named, not miscounted
        if rel.endswith(".json"):
            orjson.loads(text)  # a .json file that is not JSON is named, not miscounted
        if place is None:
            row = Row(UNMAPPED, 1, None, None, count(text), 0, len(raw), 0,
                      "no layout rule: no record (migrate keeps the bytes in its manifest only)")
            acc.setdefault(UNMAPPED, []).append(row)
            continue
        spec = specs.get(place.namespace)
        codec_name = spec.codec if spec is not None else None
        codec = figures.codec_of(spec)
        if codecs is not None and codec_name is not None and codec_name in codecs:
            codec = codecs[codec_name]
        try:
            stored = lossless_form(figures.record_value(place.kind, raw), codec)
        except InvalidValue as exc:
            raise InvalidValue(f"{rel}: {exc}", path=rel) from None
        row = Row(place.kind, 1, place.namespace, codec_name if codec is not None else None,
                  count(text), count(stored.decode()), len(raw), len(stored))
        acc.setdefault(place.kind, []).append(row)
        if rel == "the_assist/memory/store/compressed/state.json":
            injected = build_context(orjson.loads(text))
            views.append(
                Row(
                    f"{place.kind} (legacy build_context text)",
                    1,
                    place.namespace,
                    row.codec,
                    count(injected),
                    row.compact_tokens,
                    len(injected.encode()),
                    row.compact_bytes,
                    "legacy = the lossy text the_assist injected; compact = the whole state, lossless",
                )
            )
    rows = sorted((_sum_rows(kind, group) for kind, group in acc.items()), key=lambda r: (r.namespace or "~", r.kind))
    return Report(
        title=f"legacy data: {root}",
        legacy_label="legacy file text",
        compact_label="the record migrate stores (" + figures.AFTER.removeprefix("after = ") + ")",
        rows=rows,
        total=_sum_rows("TOTAL", rows),
        tokenizer=get_counter().info,
        views=views,
    )


def store_report(
    mm: MemoryManager,
    codecs: Mapping[str, Codec] | None = None,
    *,
    include_cold: bool = False,
) -> Report:
    """Per namespace of a live store: tokens of the readable (expanded) values
    against their stored compact form (what ``mm.query(..., compact=True)`` returns), each
    serialized as compact JSON. A namespace's codec is its ``spec.codec``,
    else the seed mapping ``namespaces.codecs.NAMESPACE_CODECS``. Raises
    :class:`InvalidValue` if a value does not round-trip."""
    from hrm_memory.namespaces.codecs import CODECS, NAMESPACE_CODECS

    codecs = CODECS if codecs is None else codecs
    count = get_counter().count
    declared = {spec.name: spec.codec or NAMESPACE_CODECS.get(spec.name) for spec in mm.namespaces()}
    acc: dict[str, list[Row]] = {}
    for rec in mm.query("*", "*", include_cold=include_cold, compact=True):
        codec_name = declared.get(rec.namespace)
        codec = codecs[codec_name] if codec_name is not None else None
        stored = rec.value
        readable = stored if codec is None else codec.expand(stored)
        r_bytes, s_bytes = _json(readable), _json(stored)
        if codec is not None and _json(codec.expand(stored)) != r_bytes:
            raise InvalidValue(f"{rec.namespace} {rec.key!r}: value does not round-trip", path="$")
        row = Row(rec.namespace, 1, rec.namespace, codec_name, count(r_bytes.decode()),
                  count(s_bytes.decode()), len(r_bytes), len(s_bytes))
        acc.setdefault(rec.namespace, []).append(row)
    rows = [_sum_rows(ns, rs) for ns, rs in sorted(acc.items())]
    return Report(
        title=f"store: {mm.root}",
        legacy_label="readable JSON",
        compact_label="compact stored JSON",
        rows=rows,
        total=_sum_rows("TOTAL", rows),
        tokenizer=get_counter().info,
    )


# -- the legacy context text -----------------------------------------------------------


def build_context(state: Mapping[str, Any]) -> str:
    """The text legacy ``CompressedMemory.build_context()`` made of a state
    (LEGACY_API.md section 2): one line per non-empty part, no trailing newline."""
    from hrm_memory.namespaces.codecs import COACHING_CODES

    people = state["people"]
    coaching = state.get("coaching") or {}
    prefs = state.get("preferences") or {}
    parts = [
        ("NORTH:", ",".join(state["north_stars"])),
        ("PRIO:", ",".join(state["priorities"])),
        ("ACTIVE:", "|".join(state["active"])),
        ("COMMITS:", "|".join(state["commits"])),
        ("PEOPLE:", "|".join(f"{n}({p.get('r', '?')}):{','.join(p.get('t', []))}" for n, p in people.items())),
        ("PATTERNS:", ",".join(c for c, v in state["patterns"].items() if v >= 0.7)),
        ("COACHING:", "|".join(f"{c}:{COACHING_CODES.get(c, c)[:40]}" for c, v in coaching.items() if v >= 0.7)),
        ("PREFS:", "|".join(f"{k}:{v[:30]}" for k, v in prefs.items())),
    ]
    return "\n".join(head + body for head, body in parts if body)


# -- output ----------------------------------------------------------------------------


def tokenizer_line(info: Mapping[str, Any]) -> str:
    if info.get("counter") == "exact":
        return (
            f"tokens: {info['encoding']}, EXACT ({info['engine']}; vocabulary "
            f"{info.get('vocab_package') or info['vocab_path']}, sha256 {info['vocab_sha256']})"
        )
    return (
        f"tokens: {info.get('encoding')}, ESTIMATE ({info.get('method')}); "
        f"exact unavailable: {info.get('fallback_reason')}"
    )


def format_report(report: Report) -> str:
    """A readable table: one row per kind, the total, then the extra views."""
    head = ["kind", "namespace", "codec", "files", "legacy tok", "compact tok", "saved", "legacy B", "compact B"]

    def cells(r: Row) -> list[str]:
        return [r.kind, r.namespace or "-", r.codec or "-", str(r.files), f"{r.legacy_tokens:,}",
                f"{r.compact_tokens:,}", f"{r.saved_pct:.1f}%", f"{r.legacy_bytes:,}", f"{r.compact_bytes:,}"]

    body = [cells(r) for r in report.rows]
    total = cells(report.total)
    views = [cells(r) for r in report.views]
    widths = [max(len(row[i]) for row in [head, *body, total, *views]) for i in range(len(head))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    rule = "-" * len(line(head))
    if not report.rows:  # no totals of nothing, no verdict on nothing
        return "\n".join([report.title, tokenizer_line(report.tokenizer), "",
                          "nothing to count: no records (write some first, or count legacy files with --legacy DIR)",
                          target_line(report)])
    out = [
        report.title,
        tokenizer_line(report.tokenizer),
        f"legacy = {report.legacy_label}; compact = {report.compact_label} (lossless: checked per value)",
        "",
        line(head),
        rule,
        *map(line, body),
        rule,
        line(total),
        "",
        f"saved overall: {report.total.saved_pct:.1f}% of tokens (pooled); mean of the {len(report.rows)} "
        f"kinds: {report.mean_saved_pct:.1f}%",
        target_line(report),
    ]
    if report.views:
        out += ["", "beside the total (not counted in it):", *map(line, views)]
        out += [f"  {r.kind}: {r.note}" for r in report.views if r.note]
    return "\n".join(out)


def target_met(report: Report) -> bool:
    """The mean per-kind saving (the goal's "on average") reaches :data:`TARGET_SAVED_PCT`."""
    return bool(report.rows) and report.mean_saved_pct >= TARGET_SAVED_PCT


def target_line(report: Report) -> str:
    """The target, where it comes from, and whether this report meets it."""
    if not report.rows:
        return f"target {TARGET_SAVED_PCT:.0f}% saved ({TARGET_SOURCE}): not measured (nothing counted)"
    verdict = "met" if target_met(report) else "NOT met"
    return (f"target {TARGET_SAVED_PCT:.0f}% saved ({TARGET_SOURCE}): {verdict}; the compact form is lossless, "
            "so codes shorten field names and coded values, not prose or timestamps")


def report_json(report: Report) -> dict[str, Any]:
    """The report as plain JSON data."""

    def row(r: Row) -> dict[str, Any]:
        return {**asdict(r), "saved_pct": round(r.saved_pct, 2)}

    return {
        "title": report.title,
        "tokenizer": dict(report.tokenizer),
        "legacy": report.legacy_label,
        "compact": report.compact_label,
        "rows": [row(r) for r in report.rows],
        "total": row(report.total),
        "mean_saved_pct": round(report.mean_saved_pct, 2),
        "target_saved_pct": TARGET_SAVED_PCT,
        "target_source": TARGET_SOURCE,
        "target_met": target_met(report),
        "views": [row(r) for r in report.views],
    }


# -- command line ----------------------------------------------------------------------


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tokens [--legacy DIR] [--json] [--require-exact]`` to a CLI's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "tokens", help="token counts: readable vs compact form (of the store, or of legacy files with --legacy)"
    )
    p.add_argument("--legacy", metavar="DIR", help="report on legacy data files instead of the store")
    # Its own dest: a sub-command's --json default would overwrite a global --json.
    p.add_argument("--json", dest="tokens_json", action="store_true", help="print JSON")
    p.add_argument("--require-exact", action="store_true",
                   help="fail (exit 3) instead of falling back to the estimate")
    p.add_argument("--cold", action="store_true", help="include archived records (store report)")
    return p


def run_cli(args: argparse.Namespace, mm: MemoryManager | None = None) -> int:
    """Run the ``tokens`` command: 0 done, 2 bad input, 3 no exact tokenizer
    with ``--require-exact`` or a store failure. Without ``--legacy`` it
    reports on ``mm`` (or opens ``args.root`` itself if ``mm`` is None)."""
    as_json = bool(getattr(args, "tokens_json", False) or getattr(args, "json", False))
    try:
        get_counter(require_exact=bool(getattr(args, "require_exact", False)))
        if args.legacy:
            report = legacy_report(args.legacy)
        elif mm is not None:
            report = store_report(mm, include_cold=bool(getattr(args, "cold", False)))
        else:
            from hrm_memory.manager import MemoryManager

            with MemoryManager(getattr(args, "root", None)) as own:
                report = store_report(own, include_cold=bool(getattr(args, "cold", False)))
    except (FileNotFoundError, NotADirectoryError, NoLegacyFiles) as exc:
        # The folder is not a legacy root: migrate's own check and message (migration.inventory.check_root).
        print(f"hrm-memory: error: {exc}", file=sys.stderr)
        return 2
    except MemoryStoreError as exc:
        print(f"hrm-memory: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 3
    print(orjson.dumps(report_json(report), option=orjson.OPT_INDENT_2).decode() if as_json else format_report(report))
    return 0


__all__ = [
    "TARGET_SAVED_PCT",
    "TARGET_SOURCE",
    "UNMAPPED",
    "Report",
    "Row",
    "add_cli",
    "build_context",
    "compact_form",
    "format_report",
    "legacy_report",
    "lossless_form",
    "report_json",
    "run_cli",
    "store_report",
    "target_line",
    "target_met",
    "text_value",
]
