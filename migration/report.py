"""The report every migrate command ends with: per file, per kind, per
anomaly code, the consent carried over; token counts when
:mod:`hrm_memory.core.tokens` is available.

Rows are added with :meth:`Report.add`, which counts a row's tokens at once
(when :meth:`Report.use_tokens` was called) and drops its bytes, so a report
stays small whatever the size of the tree."""

from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hrm_memory.cli.textfmt import table as _table

from .anomalies import Anomaly
from .figures import AFTER


@dataclass
class Row:
    """One legacy file as a command handled it."""

    path: str
    kind: str
    namespace: str | None
    key: str | None
    size: int
    sha256: str
    action: str
    anomalies: list[Anomaly] = field(default_factory=list)
    note: str = ""
    legacy: bytes | None = field(default=None, repr=False)  # the file's bytes (tokens "before"); dropped by Report.add
    stored: bytes | None = field(default=None, repr=False)  # the record's compact JSON (tokens "after"); dropped by Report.add
    tokens_before: int | None = None
    tokens_after: int | None = None
    stored_size: int | None = None  # len(stored), kept when the bytes are dropped

    @property
    def stored_bytes(self) -> int | None:
        return self.stored_size if self.stored_size is not None else (len(self.stored) if self.stored is not None else None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "namespace": self.namespace,
            "key": self.key,
            "size": self.size,
            "sha256": self.sha256,
            "action": self.action,
            "stored_bytes": self.stored_bytes,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "anomalies": [a.to_dict() for a in self.anomalies],
            "note": self.note,
        }


@dataclass
class Report:
    command: str
    source: str | None = None
    target: str | None = None
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    tokenizer: dict[str, Any] | None = None
    tokens_note: str = ""
    #: consent carried over from the legacy consent.json (apply; plan says what it would do):
    #: {"category", "flag", "legacy", "before", "after", "action"}
    consent: list[dict[str, Any]] = field(default_factory=list)
    counter: Any = field(default=None, repr=False)  # the token counter, once use_tokens() found one

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def add(self, row: Row) -> None:
        """Append ``row``: count its tokens now (if counting) and drop its bytes."""
        if self.counter is not None:
            if row.tokens_before is None and row.legacy is not None:
                row.tokens_before = self.counter.count(row.legacy.decode("utf-8", "replace"))
            if row.tokens_after is None and row.stored is not None:
                row.tokens_after = self.counter.count(row.stored.decode("utf-8"))
        if row.stored is not None and row.stored_size is None:
            row.stored_size = len(row.stored)
        row.legacy = row.stored = None
        self.rows.append(row)

    # -- figures -------------------------------------------------------------------

    def use_tokens(self) -> bool:
        """Count tokens from now on if :mod:`hrm_memory.core.tokens` imports;
        otherwise say why the columns are missing. True if counting."""
        try:
            tokens = importlib.import_module("hrm_memory.core.tokens")
        except ImportError as exc:
            self.tokens_note = f"token columns omitted: hrm_memory.core.tokens is not importable ({exc})"
            return False
        counter = tokens.get_counter()
        self.counter = counter
        self.tokenizer = dict(counter.info)
        self.tokens_note = (
            f"tokens: {counter.info['counter']} {counter.info['encoding']}; before = the legacy file's text; {AFTER}"
        )
        return True

    def count_tokens(self) -> None:
        """:meth:`use_tokens`, and count the rows appended to ``rows``
        directly that still hold their bytes."""
        if self.counter is None and not self.use_tokens():
            return
        held, self.rows = self.rows, []
        for r in held:
            self.add(r)

    def by_kind(self) -> list[dict[str, Any]]:
        groups: dict[str, list[Row]] = {}
        for r in self.rows:
            groups.setdefault(r.kind, []).append(r)
        out = [self._sum(kind, rows) for kind, rows in sorted(groups.items())]
        out.append(self._sum("TOTAL", self.rows))
        return out

    def _sum(self, kind: str, rows: list[Row]) -> dict[str, Any]:
        counted = self.tokenizer is not None
        return {
            "kind": kind,
            "files": len(rows),
            "records": sum(1 for r in rows if r.namespace is not None),
            "bytes": sum(r.size for r in rows),
            "stored_bytes": sum(r.stored_bytes or 0 for r in rows),
            "tokens_before": sum(r.tokens_before or 0 for r in rows) if counted else None,
            "tokens_after": sum(r.tokens_after or 0 for r in rows) if counted else None,
            "anomalies": sum(a.count for r in rows for a in r.anomalies),
        }

    def by_code(self) -> list[dict[str, Any]]:
        files: Counter[str] = Counter()
        count: Counter[str] = Counter()
        detail: dict[str, str] = {}
        example: dict[str, str] = {}
        for r in self.rows:
            for a in r.anomalies:
                files[a.code] += 1
                count[a.code] += a.count
                detail.setdefault(a.code, a.detail)
                if a.where:
                    example.setdefault(a.code, f"{r.path.rsplit('/', 1)[-1]}: {a.where[0]}")
        return [
            {"code": c, "files": files[c], "count": count[c], "detail": detail[c], "example": example.get(c, "")}
            for c in sorted(count)
        ]

    def actions(self) -> dict[str, int]:
        return dict(Counter(r.action for r in self.rows).most_common())

    # -- output --------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "ok": self.ok,
            "source": self.source,
            "target": self.target,
            "actions": self.actions(),
            "by_kind": self.by_kind(),
            "anomalies": self.by_code(),
            "failures": self.failures,
            "warnings": self.warnings,
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
            "tokenizer": self.tokenizer,
            "tokens_note": self.tokens_note,
            "consent": self.consent,
            "files": [r.to_dict() for r in self.rows],
        }

    def consent_line(self) -> str:
        """``consent: granted conversation, signals; kept preferences`` (actions in order)."""
        groups: dict[str, list[str]] = {}
        for c in self.consent:
            groups.setdefault(c["action"], []).append(c["category"])
        return "consent: " + "; ".join(f"{action} {', '.join(cats)}" for action, cats in groups.items())

    def to_text(self, verbose: bool = False, limit: int = 20) -> str:
        """The report as text. Without ``verbose``: a summary (no line per
        file, at most ``limit`` warnings and failures, then a count)."""
        head = f"migrate {self.command}"
        if self.source:
            head += f": {self.source}"
        if self.target:
            head += f" -> {self.target}"
        lines = [head, ""]
        if verbose:
            lines += [_table([_file_cells(r) for r in self.rows], ["path", "kind", "target", "size", "sha256", "action", "anomalies"]), ""]
        elif self.rows:
            lines += [f"{len(self.rows)} files (-v lists them one per line, --json in full)", ""]
        cols = ["kind", "files", "records", "bytes", "stored_bytes"]
        if self.tokenizer is not None:
            cols += ["tokens_before", "tokens_after"]
        lines += [_table(self.by_kind(), [*cols, "anomalies"]), ""]
        lines.append("actions: " + (", ".join(f"{k} {v}" for k, v in self.actions().items()) or "none"))
        codes = self.by_code()
        if codes:
            lines += ["", "anomalies (kept as they are, flagged in the manifest, never fixed):",
                      _table(codes, ["code", "files", "count", "example"])]
        if self.tokens_note:
            lines += ["", self.tokens_note]
        if self.consent:
            lines.append(self.consent_line() + " (from the legacy consent.json)")
        if self.timings:
            lines.append("timings: " + ", ".join(f"{k} {v:.3f}s" for k, v in self.timings.items()))
        lines += _capped("warning: ", self.warnings, None if verbose else limit, "warnings")
        lines += _capped("FAILED: ", self.failures, None if verbose else limit, "failures")
        lines.append(f"result: {'OK' if self.ok else f'FAILED ({len(self.failures)} problem(s))'}")
        return "\n".join(lines)


def _capped(prefix: str, items: list[str], limit: int | None, what: str) -> list[str]:
    shown = items if limit is None else items[:limit]
    lines = [prefix + i for i in shown]
    if len(items) > len(shown):
        lines.append(f"... and {len(items) - len(shown)} more {what} (-v or --json lists them all)")
    return lines


def _file_cells(r: Row) -> dict[str, Any]:
    return {
        "path": r.path,
        "kind": r.kind,
        "target": f"{r.namespace}/{r.key}" if r.namespace else "(manifest only)",
        "size": r.size,
        "sha256": r.sha256[:12],
        "action": r.action,
        "anomalies": ",".join(f"{a.code}x{a.count}" if a.count > 1 else a.code for a in r.anomalies) or "-",
    }


__all__ = ["Report", "Row"]
