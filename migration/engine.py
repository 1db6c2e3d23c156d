"""The five migrate operations: plan, apply, verify, export, rollback.

Each returns a :class:`~migration.report.Report`; ``report.ok`` is False on
any failure. The legacy tree is only ever opened for reading, and its hashes
are checked again after apply and verify.

Apply is idempotent and resumable. Per file it writes the record first and
its manifest entry second; the run marker says ``applying`` before the first
write and ``complete`` after the last. A re-run compares each file's sha256
and each record's digest with the manifest and writes only what is missing
or stale, so a run killed at any point is completed by the next one, and a
run with nothing to do writes nothing at all.

Records are compared in their readable form: a namespace with a codec stores
a compact form (``get_record(...).value``), and ``mm.expand`` gives back the
legacy value, which is what is digested, compared and exported.

The raw copy and anomaly details of a file whose record is consent-gated go
to a namespace gated by the same category (:mod:`~migration.manifest`), so a
purge removes them. After the files, apply carries the legacy consent.json
over to ``mm.consent`` (:func:`consent_changes`).

Memory: the tree is scanned one file at a time and only facts are kept;
apply reads a file again to write it, verify compares sha256 digests, and
report rows keep token counts rather than bytes. ``progress(phase, done,
total)`` (every command) follows the files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hrm_memory import (
    BadInput,
    InvalidKey,
    InvalidNamespace,
    InvalidValue,
    MemoryManager,
    Record,
)
from hrm_memory.core import values
from hrm_memory.core.spec import NamespaceSpec

from . import manifest
from .anomalies import Anomaly
from .consent import (
    CONSENT_FLAGS,
    carry_consent,
    consent_changes,
    legacy_consent,
)
from .figures import stored_json, would_store
from .files import default_format, inside, safe_rel, write_file
from .formats import Decoded, render
from .inventory import (
    Inventory,
    LegacyChanged,
    LegacyFile,
    NoLegacyFiles,
    OnFile,
    Progress,
    hash_tree,
    scan,
    sha256,
    value_digest,
)
from .layout import RULES, path_of, place_of
from .manifest import Entry
from .report import Report, Row

#: Errors that fail one file (bad key, value or namespace) rather than the run.
FILE_ERRORS = (InvalidKey, InvalidNamespace, InvalidValue)


@contextmanager
def _timed(report: Report, name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        report.timings[name] = report.timings.get(name, 0.0) + time.perf_counter() - start


def _scan(report: Report, legacy_dir: str | os.PathLike[str], progress: Progress | None, on_file: OnFile | None = None) -> Inventory:
    try:
        with _timed(report, "scan"):
            inv = scan(legacy_dir, counter=report.counter, on_file=on_file, progress=progress)
    except (FileNotFoundError, NotADirectoryError, NoLegacyFiles) as exc:
        raise BadInput(str(exc)) from None
    for problem in inv.problems:
        report.fail(f"{problem}: not migrated")
    return inv


def _new_report(command: str, tokens: bool, source: str | None = None, target: str | None = None) -> Report:
    report = Report(command, source=source, target=target)
    if tokens:
        report.use_tokens()
    return report


def _step(progress: Progress | None, phase: str, done: int, total: int) -> None:
    if progress is not None:
        progress(phase, done, total)


@dataclass(frozen=True)
class Current:
    """A record as stored (``record.value`` is the compact form when the
    namespace has a codec) and its readable value (the legacy value)."""

    record: Record
    value: Any

    @property
    def stored(self) -> bytes:
        return stored_json(self.record.value)

    @property
    def digest(self) -> str:
        return value_digest(self.value)


def current(mm: MemoryManager, namespace: str, key: str) -> Current | None:
    rec = mm.get_record(namespace, key, compact=True)  # the stored form; expanded once below
    return None if rec is None else Current(rec, mm.expand(namespace, rec.value))


def _row(f: LegacyFile, action: str, note: str = "", stored: bytes | None = None) -> Row:
    return Row(
        f.rel, f.kind, f.place.namespace if f.place else None, f.place.key if f.place else None,
        f.size, f.sha256, action, f.anomalies, note, None, stored, tokens_before=f.tokens_before,
    )


def _entry_row(e: Entry, action: str, note: str = "", legacy: bytes | None = None, stored: bytes | None = None) -> Row:
    anomalies = [Anomaly.from_dict(a) for a in e.anomalies or []]
    return Row(e.path, e.kind, e.namespace, e.key, e.size, e.sha256, action, anomalies, note, legacy, stored)


def _check_legacy_unchanged(report: Report, inv: Inventory, progress: Progress | None) -> None:
    """The legacy files still hash as they did when read."""
    with _timed(report, "rehash"):
        now = hash_tree(inv.root, [f.rel for f in inv.files], progress)
    for f in inv.files:
        if now[f.rel] != f.sha256:
            report.fail(f"{f.rel}: the legacy file changed while the command ran")


# -- plan --------------------------------------------------------------------------


def plan(
    legacy_dir: str | os.PathLike[str],
    specs: dict[str, NamespaceSpec] | None = None,
    *,
    tokens: bool = False,
    progress: Progress | None = None,
) -> Report:
    """Inventory of the legacy tree and what apply would do; touches no store.
    ``tokens`` fills the token columns; ``progress(phase, done, total)``
    follows the files."""
    if specs is None:
        from hrm_memory.namespaces import seed

        specs = {s.name: s for s in seed()}
    known = specs
    report = _new_report("plan", tokens, source=str(Path(legacy_dir)))

    def look(f: LegacyFile, data: bytes, decoded: Decoded) -> None:
        """What plan reports of the value, found while it is in memory."""
        problem = _target_problem(f, decoded.value, known)
        f.extra["problem"] = problem
        if f.place and not problem:
            stored = would_store(known.get(f.place.namespace), decoded.value)
            f.extra["stored_size"] = len(stored)
            if report.counter is not None:
                f.extra["tokens_after"] = report.counter.count(stored.decode("utf-8"))
        if f.kind == "consent":
            f.extra["consent"] = decoded.value

    inv = _scan(report, legacy_dir, progress, look)
    for f in inv.files:
        problem = f.extra.get("problem")
        if problem:
            report.fail(f"{f.rel}: {problem}")
        action = "fail" if problem else ("import" if f.place else "keep raw in manifest")
        note = ""
        if f.place and f.raw_needed:
            category = _consent_of(specs, f.place.namespace)
            note = f"raw bytes kept (in {manifest.private_namespace(category)})" if category else "raw bytes kept"
        row = _row(f, action, note)
        row.stored_size, row.tokens_after = f.extra.get("stored_size"), f.extra.get("tokens_after")
        report.add(row)
    _check_caps(report, inv, specs)
    report.warnings += [f"{f.rel}: no layout rule; its bytes go to the manifest only" for f in inv.files if not f.place]
    legacy = legacy_consent(report, inv)
    if legacy is not None:
        for flag, category, wanted in legacy:
            report.consent.append({"category": category, "flag": flag, "legacy": wanted, "before": None, "after": wanted,
                                   "action": "would grant" if wanted else "would deny"})
    return report


def _consent_of(specs: dict[str, NamespaceSpec], namespace: str | None) -> str | None:
    """The consent category gating ``namespace`` (None: not gated)."""
    spec = specs.get(namespace) if namespace else None
    return spec.consent if spec is not None else None


def _target_problem(f: LegacyFile, value: Any, specs: dict[str, NamespaceSpec]) -> str | None:
    if f.place is None:
        return None
    spec = specs.get(f.place.namespace)
    if spec is None:
        return f"namespace {f.place.namespace} is not declared"
    try:
        values.encode(value, limit=spec.max_value_bytes, namespace=spec.name, key=f.place.key)
    except InvalidValue as exc:
        return str(exc)
    return None


def _check_caps(report: Report, inv: Inventory, specs: dict[str, NamespaceSpec]) -> None:
    per_ns: dict[str, int] = {}
    for f in inv.files:
        if f.place:
            per_ns[f.place.namespace] = per_ns.get(f.place.namespace, 0) + 1
    for ns, n in per_ns.items():
        spec = specs.get(ns)
        if spec is not None and spec.max_keys is not None and n > spec.max_keys:
            report.fail(f"{ns}: {n} files but max_keys={spec.max_keys}; the cap would move records out of view")


# -- apply -------------------------------------------------------------------------


@dataclass
class Step:
    file: LegacyFile
    action: str  # import | update | adopt | overwrite | unchanged | kept | conflict
    write_record: bool = False
    write_entry: bool = False
    note: str = ""
    category: str | None = None  # the consent category gating the record, if any
    moved: bool = False  # the entry held gated bytes or details inline (written before they had their own namespace)

    @property
    def writes(self) -> bool:
        return self.write_record or self.write_entry


def _placed(entry: Entry, category: str | None) -> bool:
    """The entry keeps what it should where it should: for a gated record,
    its raw copy and anomaly details in the gated namespace."""
    return category is None or (entry.private == manifest.private_namespace(category) and entry.private_found)


def _decide(mm: MemoryManager, f: LegacyFile, entry: Entry | None, overwrite: bool, category: str | None = None) -> Step:
    """What apply must do for one file, given the store and the manifest."""
    same_file = entry is not None and entry.sha256 == f.sha256
    if f.place is None:
        return Step(f, "unchanged") if same_file else Step(f, "import", write_entry=True)
    cur = current(mm, f.place.namespace, f.place.key)
    if cur is None:
        return Step(f, "import", True, True)
    if cur.digest == f.value_sha256:
        if same_file and entry is not None and entry.value_sha256 == cur.digest and entry.version == cur.record.version:
            if _placed(entry, category):
                return Step(f, "unchanged")
            note = f"raw copy and anomaly details moved to {manifest.private_namespace(category or '')} (purged with consent {category!r})"
            return Step(f, "adopt", write_entry=True, note=note, moved=entry.private is None)
        return Step(f, "adopt", write_entry=True, note="record already holds this file; manifest entry written",
                    moved=entry is not None and category is not None and entry.private is None)
    if entry is not None and cur.digest == entry.value_sha256:
        return Step(f, "update", True, True, "the legacy file changed since the last apply",
                    moved=category is not None and entry.private is None)
    if overwrite:
        return Step(f, "overwrite", True, True, "the record differed from the legacy file; overwritten (--overwrite)",
                    moved=entry is not None and category is not None and entry.private is None)
    if same_file:
        return Step(f, "kept", note="record changed in the store since import; kept (legacy file unchanged)")
    return Step(f, "conflict", note="a different record is already stored; not overwritten (use --overwrite)")


def apply(
    mm: MemoryManager,
    legacy_dir: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    tokens: bool = False,
    progress: Progress | None = None,
) -> Report:
    """Import every legacy file (see the module docstring for the guarantees),
    then carry the legacy consent.json over to ``mm.consent`` (see
    :func:`consent_changes`)."""
    report = _new_report("apply", tokens, source=str(Path(legacy_dir)), target=str(mm.root))

    def look(f: LegacyFile, data: bytes, decoded: Decoded) -> None:
        if f.kind == "consent":
            f.extra["consent"] = decoded.value

    inv = _scan(report, legacy_dir, progress, look)
    specs = {s.name: s for s in mm.namespaces()}
    capped = len(report.failures)
    _check_caps(report, inv, specs)
    if len(report.failures) > capped:
        return report  # writing would push imported records out of view: nothing written
    with _timed(report, "plan"):
        manifest.declare(mm)
        old = manifest.entries(mm)
        run = manifest.marker(mm)
        decided = [_decide_safely(report, mm, f, old.get(f.rel), overwrite, _consent_of(specs, f.place.namespace if f.place else None))
                   for f in inv.files]
        legacy = legacy_consent(report, inv)
        changes = consent_changes(mm, legacy, run) if legacy is not None else []
    steps = [s for s in decided if s is not None]
    consent_writes = any(c["action"] in ("granted", "revoked") for c in changes)
    settled = manifest.is_current(run, inv) and not any(s.writes for s in steps) and not report.failures and not consent_writes
    with _timed(report, "write"):
        if not settled:
            manifest.write_marker(mm, "applying", inv)
        _step(progress, "import", 0, len(steps))
        for i, step in enumerate(steps, 1):
            _execute(report, mm, step, inv.root)
            _step(progress, "import", i, len(steps))
        if any(s.moved for s in steps):
            mm.compact(manifest.NAMESPACE)  # the superseded entries still held the gated bytes
        made = carry_consent(report, mm, changes, run)
    for rel in sorted(set(old) - {f.rel for f in inv.files}):
        report.warnings.append(f"{rel}: in the manifest but no longer in the legacy folder (record kept)")
    _check_legacy_unchanged(report, inv, progress)
    if not settled:
        with _timed(report, "write"):
            manifest.write_marker(mm, "complete" if report.ok else "incomplete", inv, failures=report.failures[:50], consent=made)
    return report


def _decide_safely(report: Report, mm: MemoryManager, f: LegacyFile, entry: Entry | None, overwrite: bool, category: str | None) -> Step | None:
    try:
        step = _decide(mm, f, entry, overwrite, category)
    except FILE_ERRORS as exc:
        report.fail(f"{f.rel}: {type(exc).__name__}: {exc}")
        report.add(_row(f, "failed", str(exc)))
        return None
    step.category = category
    return step


def _execute(report: Report, mm: MemoryManager, step: Step, root: Path) -> None:
    f = step.file
    try:
        data: bytes | None = None
        value: Any = None
        if step.write_record or (step.write_entry and f.raw_needed):
            data, value = f.load(root, value=step.write_record)  # one file's bytes at a time
        rec = None
        if f.place is not None:
            if step.write_record:
                mm.write(f.place.namespace, f.place.key, value, imported=True)
            # The stored (compact) form: what the token columns count (figures.AFTER).
            rec = mm.get_record(f.place.namespace, f.place.key, compact=True)
        if step.write_entry:
            manifest.write_entry(mm, Entry.of(f, rec.version if rec is not None else None, data), step.category)
    except LegacyChanged as exc:
        report.fail(f"{f.rel}: {exc}")
        report.add(_row(f, "failed", str(exc)))
        return
    except FILE_ERRORS as exc:
        report.fail(f"{f.rel}: {type(exc).__name__}: {exc}")
        report.add(_row(f, "failed", str(exc)))
        return
    if step.action == "conflict":
        report.fail(f"{f.rel}: {step.note}")
    elif step.action == "kept":
        report.warnings.append(f"{f.rel}: {step.note}")
    report.add(_row(f, step.action, step.note, _stored(rec)))


# -- consent carried over ------------------------------------------------------------


def file_bytes(mm: MemoryManager, entry: Entry) -> tuple[bytes | None, str, Current | None]:
    """The legacy file ``entry`` describes, rebuilt from the store: (bytes or
    None, a note, the record). The raw copy is used only while the record
    still holds exactly what was imported; otherwise the record's current
    value is written in the file's format."""
    if entry.namespace is None or entry.key is None:
        return entry.raw, "", None
    purged = f" (purged: consent {_category_of_private(entry.private)!r} was revoked with purge)" if entry.purged else ""
    cur = current(mm, entry.namespace, entry.key)
    if cur is None:
        return None, "the record is missing from the store" + purged, None
    changed = cur.digest != entry.value_sha256
    if entry.raw_base64 is not None and not changed:
        return entry.raw, "", cur
    if not entry.exact and not changed:
        return None, "the raw copy of the file is missing" + purged, cur
    try:
        data = render(cur.value, entry.fmt)
    except (ValueError, TypeError, KeyError) as exc:
        return None, f"cannot be written back: {exc}", cur
    return data, "the record changed since import; written from its current value" if changed else "", cur


def _stored(rec: Record | Current | None) -> bytes | None:
    """The record's stored (compact) JSON, for the token columns
    (:data:`~migration.figures.AFTER`); ``rec`` must be read with ``compact=True``."""
    if isinstance(rec, Current):
        return rec.stored
    return stored_json(rec.value) if rec is not None else None


def _category_of_private(namespace: str | None) -> str | None:
    for category, spec in manifest.PRIVATE_SPECS.items():
        if spec.name == namespace:
            return category
    return None


def export(
    mm: MemoryManager,
    out_dir: str | os.PathLike[str],
    *,
    flat: bool = False,
    tokens: bool = False,
    progress: Progress | None = None,
) -> Report:
    """Write the legacy tree back from the store under ``OUT_DIR/<name of
    the imported folder>/`` (``OUT_DIR`` itself with ``flat``), so the
    legacy ``SHA256SUMS`` checks from ``OUT_DIR``."""
    run = manifest.marker(mm) or {}
    base = Path(out_dir) if flat else Path(out_dir) / (run.get("source_name") or "data")
    report = _new_report("export", tokens, source=str(mm.root), target=str(base))
    source = run.get("source")
    if source and inside(base, Path(source)):
        raise BadInput(f"{base} is the legacy folder itself (or inside it); export elsewhere")
    entries = manifest.entries(mm)
    if not entries:
        report.fail("nothing to export: the store holds no migration manifest (run apply first)")
    with _timed(report, "export"):
        _step(progress, "export", 0, len(entries))
        for i, e in enumerate(sorted(entries.values(), key=lambda e: e.path), 1):
            data, note, rec = file_bytes(mm, e)
            _step(progress, "export", i, len(entries))
            if data is None:
                report.fail(f"{e.path}: {note}")
                report.add(_entry_row(e, "failed", note))
                continue
            write_file(base / safe_rel(e.path), data)
            if note:
                report.warnings.append(f"{e.path}: {note}")
            report.add(_entry_row(e, "written", note, data, _stored(rec)))
        _export_new_records(report, mm, base, set(entries))
    return report


def _export_new_records(report: Report, mm: MemoryManager, base: Path, known: set[str]) -> None:
    """Records in the legacy namespaces that apply did not import (written
    later through the adapters) whose key maps back to a legacy path."""
    for ns in sorted({ns for _, _, ns, _ in RULES}):
        for rec in mm.query(ns, "*", include_cold=True):
            rel = path_of(ns, rec.key)
            if rel is None or rel in known:
                continue
            place = place_of(rel)
            kind = place.kind if place else "unmapped"
            try:
                data = render(rec.value, default_format(kind))  # reads return the value as written
            except (ValueError, TypeError, KeyError) as exc:
                report.warnings.append(f"{ns}/{rec.key}: not exported ({exc})")
                continue
            write_file(base / safe_rel(rel), data)
            note = "created after import; written in the default legacy format"
            report.warnings.append(f"{rel}: {note}")
            stored = _stored(mm.get_record(ns, rec.key, compact=True))  # the stored form, as every report counts it
            report.add(Row(rel, kind, ns, rec.key, len(data), "", "written (new)", [], note, data, stored))


# -- verify ----------------------------------------------------------------------------


def verify(
    mm: MemoryManager,
    legacy_dir: str | os.PathLike[str],
    *,
    tokens: bool = False,
    progress: Progress | None = None,
) -> Report:
    """Re-read every record through the manager and compare it with the
    legacy files: the rebuilt bytes (the export path, in memory, compared by
    sha256 with the file as scanned) and the value, type for type; then run
    ``mm.check()``."""
    report = _new_report("verify", tokens, source=str(Path(legacy_dir)), target=str(mm.root))
    inv = _scan(report, legacy_dir, progress)
    run = manifest.marker(mm)
    if run is None:
        report.fail("no migration in this store (run apply first)")
    elif run.get("state") != "complete":
        report.fail(f"the last apply did not complete (state {run.get('state')!r}); run apply again")
    entries = manifest.entries(mm)
    with _timed(report, "compare"):
        _step(progress, "compare", 0, len(inv.files))
        for i, f in enumerate(inv.files, 1):
            problems, cur = _verify_file(mm, f, entries.get(f.rel))
            for p in problems:
                report.fail(f"{f.rel}: {p}")
            report.add(_row(f, "mismatch" if problems else "ok", "; ".join(problems), _stored(cur)))
            _step(progress, "compare", i, len(inv.files))
    for rel in sorted(set(entries) - {f.rel for f in inv.files}):
        report.fail(f"{rel}: imported, but no longer in the legacy folder")
    with _timed(report, "check"):
        for finding in mm.check():
            report.fail(f"store check: {finding}")
    _check_legacy_unchanged(report, inv, progress)
    return report


def _verify_file(mm: MemoryManager, f: LegacyFile, entry: Entry | None) -> tuple[list[str], Current | None]:
    if entry is None:
        return ["not imported"], None
    if entry.sha256 != f.sha256:
        return ["the legacy file changed since apply (run apply again)"], None
    data, note, cur = file_bytes(mm, entry)
    problems = []
    if data is None or len(data) != f.size or sha256(data) != f.sha256:
        problems.append(f"rebuilt bytes differ from the legacy file{': ' + note if note else ''}")
    if f.place is not None and cur is not None:
        if value_digest(mm.read(f.place.namespace, f.place.key)) != f.value_sha256:
            problems.append("the record's value differs from the parsed legacy file")
        if not cur.record.persisted:
            problems.append("the record is not persisted (session-only copy)")
    return problems, cur


# -- rollback ---------------------------------------------------------------------------


def rollback(mm: MemoryManager, *, force: bool = False, tokens: bool = False, progress: Progress | None = None) -> Report:
    """Delete what apply imported (the records listed in the manifest), then
    the manifest. Records changed since import are kept unless ``force``.
    Idempotent; a killed rollback is finished by the next one. Consent
    decisions apply carried over are left as they are."""
    report = _new_report("rollback", tokens, target=str(mm.root))
    entries = manifest.entries(mm)
    run = manifest.marker(mm)
    if not entries and run is None:
        report.warnings.append("nothing to roll back: no migration in this store")
        return report
    with _timed(report, "delete"):
        if run is None or run.get("state") != "rolling-back":
            manifest.write_marker(mm, "rolling-back")
        _step(progress, "rollback", 0, len(entries))
        for i, e in enumerate(sorted(entries.values(), key=lambda e: e.path), 1):
            _rollback_entry(report, mm, e, force)
            _step(progress, "rollback", i, len(entries))
        if report.ok:
            manifest.delete_marker(mm)
    for category, made in sorted(((run or {}).get("consent") or {}).items()):
        # Consent is the user's decision (carried over, not imported data): it stays.
        granted = mm.consent.granted(category)
        report.consent.append({"category": category, "flag": made.get("flag"), "legacy": made.get("granted"),
                               "before": granted, "after": granted, "action": "kept"})
    return report


def _rollback_entry(report: Report, mm: MemoryManager, e: Entry, force: bool) -> None:
    cur = current(mm, e.namespace, e.key) if e.namespace and e.key else None
    stored = _stored(cur)
    if cur is not None and cur.digest != e.value_sha256 and not force:
        note = "changed in the store since import; kept (use --force to delete it anyway)"
        report.fail(f"{e.path}: {note}")
        report.add(_entry_row(e, "kept", note, None, stored))
        return
    if cur is not None and e.namespace and e.key:
        mm.delete(e.namespace, e.key)
    manifest.delete_entry(mm, e.path, e.private)
    report.add(_entry_row(e, "removed" if cur is not None else "removed (entry only)", "", None, stored))


__all__ = ["CONSENT_FLAGS", "apply", "default_format", "export", "file_bytes", "plan", "rollback", "verify"]
