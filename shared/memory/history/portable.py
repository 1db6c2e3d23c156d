"""Export and import: one line-oriented format for moving a store between
roots and backends (docs/history.md has the format).

An export is JSON Lines, UTF-8, one object per line, in this order:

1. the header: ``{"format": "hrm-memory-export", "version": 1}``;
2. one ``{"t": "namespace", ...}`` line per namespace exported (its spec,
   whether it is a seed namespace, since when its history is complete);
3. one ``{"t": "consent", "category", "granted"}`` line per consent category
   (``granted`` null when never decided);
4. one ``{"t": "record", "ns", "key", "tier", "cut", "versions"}`` line per
   key: ``versions`` oldest first, each ``[version, created_us, updated_us,
   deleted, value]`` (the kept history, then the current version; ``tier``
   null when the key's current state is a deletion), values in their stored
   (coded) form, exactly as written;
5. the trailer ``{"t": "end", "namespaces", "records", "versions"}``.

Record lines are sorted bytewise, so an export depends only on what the
store holds (not on the backend, nor on the order it scans in): the same
data exports to the same bytes. Sorting is external (sorted runs of at most
``RUN_LINES`` lines in temporary files, then merged), so memory stays bounded
at any size.

Import is idempotent: a key whose current version in the store is as new as
the file's is left alone, kept versions are merged by version number. A
namespace declared differently in the store raises
:class:`NamespaceConflict` before any record is written; a file of a newer
format raises :class:`UnsupportedFormat` and imports nothing.
"""

from __future__ import annotations

import fnmatch
import heapq
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import IO, Any

import orjson

from hrm_memory.core import values
from hrm_memory.core.backend import RECOVER
from hrm_memory.core.errors import BadInput, InvalidArgument, UnsupportedFormat
from hrm_memory.core.ops import ExportOp, ImportOp
from hrm_memory.core.spec import CONSENT_CATEGORIES, NamespaceSpec, conflict
from hrm_memory.core.state import CONSENT_NAMESPACE, Attrs, Core, Handlers
from hrm_memory.history.keeper import History
from hrm_memory.tracing.spans import OpSpan

FORMAT = "hrm-memory-export"
#: The format this version writes, and the newest it reads.
VERSION = 1
#: Record lines sorted in memory at a time before they go to a temporary run.
RUN_LINES = 20_000
#: Records between two calls of the progress callback.
PROGRESS_EVERY = 10_000


def _dump(obj: Any) -> bytes:
    return orjson.dumps(obj) + b"\n"


class Portable:
    """The export and import handlers."""

    def __init__(self, core: Core, history: History) -> None:
        self.core = core
        self.history = history
        self.backend = core.backend

    def handlers(self) -> Handlers:
        return {
            ExportOp: ("export", self._export, False),
            ImportOp: ("import", self._import, False),
        }

    def close(self) -> None:
        pass

    # -- export ------------------------------------------------------------------------

    def _export(self, op: ExportOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self.core.admin_only(scope, "export the store")
        if not isinstance(op.namespaces, str):
            raise InvalidArgument("namespaces must be a str glob")
        self.core.load_declared()
        specs = [s for s in self.core.registry if fnmatch.fnmatchcase(s.name, op.namespaces) and s.tier != "hot"]
        with ExitStack() as stack:
            out = _open_out(op.out, stack)
            counts = self._write(out, specs, op.progress)
        attrs = None if span is None else {"hrm.memory.records": counts["records"], "db.response.returned_rows": counts["records"]}
        return counts, attrs

    def _write(self, out: IO[bytes], specs: list[NamespaceSpec], progress: Callable[[int], Any] | None) -> dict[str, int]:
        out.write(_dump({"format": FORMAT, "version": VERSION}))
        for spec in specs:
            since = self.history.since(spec.name) if spec.history is not None else None
            out.write(_dump({"t": "namespace", "name": spec.name, "spec": spec.to_dict(),
                             "seed": spec.name in self.core.seeded, "since": since}))
        for category in CONSENT_CATEGORIES:
            st = self.backend.get(CONSENT_NAMESPACE, category)
            granted = None
            if st is not None and st.tier != "cold":
                value = orjson.loads(st.value)
                granted = type(value) is dict and value.get("granted") is True
            out.write(_dump({"t": "consent", "category": category, "granted": granted}))
        records = versions = 0
        with tempfile.TemporaryDirectory(prefix="hrm-export-") as tmp:
            runs: list[str] = []
            lines: list[bytes] = []

            def spill() -> None:
                lines.sort()
                path = os.path.join(tmp, f"{len(runs):06d}.run")
                with open(path, "wb") as f:
                    f.writelines(lines)
                runs.append(path)
                lines.clear()

            for line, n in self._lines(specs):
                lines.append(line)
                records += 1
                versions += n
                if len(lines) >= RUN_LINES:
                    spill()
                if progress is not None and records % PROGRESS_EVERY == 0:
                    progress(records)
            if runs:
                spill()
                with ExitStack() as files:
                    merged = heapq.merge(*(files.enter_context(open(p, "rb")) for p in runs))
                    for line in merged:
                        out.write(line)
            else:
                lines.sort()
                out.writelines(lines)
        out.write(_dump({"t": "end", "namespaces": len(specs), "records": records, "versions": versions}))
        if progress is not None:
            progress(records)
        return {"namespaces": len(specs), "records": records, "versions": versions}

    def _lines(self, specs: list[NamespaceSpec]) -> Iterator[tuple[bytes, int]]:
        """One record line per key (and its count of versions), in scan order."""
        for spec in specs:
            ns = spec.name
            keeps = spec.history is not None
            for st in self.backend.scan(ns, include_cold=True, strict=False):
                cut, kept = self.history.exported(spec, st.key, st) if keeps else (0, [])
                current = [st.version, st.created_us, st.updated_us, 0, orjson.Fragment(st.value)]
                yield self._line(ns, st.key, st.tier, cut, [*kept, current]), len(kept) + 1
            if not keeps:
                continue
            for key in sorted(self.history.keys(spec)):
                if self.backend.get(ns, key) is not None:
                    continue  # a live key: written above with its history
                cut, kept = self.history.exported(spec, key, None)
                if kept:
                    yield self._line(ns, key, None, cut, kept), len(kept)

    @staticmethod
    def _line(ns: str, key: str, tier: str | None, cut: int, versions: list[Any]) -> bytes:
        return _dump({"t": "record", "ns": ns, "key": key, "tier": tier, "cut": cut, "versions": versions})

    # -- import ------------------------------------------------------------------------

    def _import(self, op: ImportOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self.core.admin_only(scope, "import into the store")
        with ExitStack() as stack:
            src = _open_in(op.source, stack)
            counts = self._read(src, op.progress)
        attrs = None if span is None else {"hrm.memory.records": counts["records"]}
        return counts, attrs

    def _read(self, src: IO[bytes], progress: Callable[[int], Any] | None) -> dict[str, int]:
        counts = {"namespaces": 0, "declared": 0, "consents": 0, "records": 0, "existing": 0, "versions": 0}
        where = getattr(src, "name", "<stream>")
        first = src.readline()
        try:
            head = orjson.loads(first)
        except orjson.JSONDecodeError:
            head = None
        if type(head) is not dict or head.get("format") != FORMAT:
            raise UnsupportedFormat(f"{where} is not an hrm-memory export (no header line)", path=str(where),
                                    found=None, supported=VERSION)
        found = head.get("version")
        if type(found) is not int or found > VERSION or found < 1:
            raise UnsupportedFormat(
                f"{where} is an hrm-memory export of format {found!r}; this version reads format {VERSION} "
                "and older: upgrade hrm-memory to import it", path=str(where), found=found, supported=VERSION)
        touched: set[str] = set()
        declared: set[str] = set()
        ended = False
        lineno = 1
        try:
            for raw in src:
                lineno += 1
                if ended:
                    raise BadInput(f"{where}:{lineno}: data after the end line")
                try:
                    item = orjson.loads(raw)
                    kind = item["t"]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    raise BadInput(f"{where}:{lineno}: not an export line") from None
                if kind == "record":
                    n = self._import_record(item, counts)
                    touched.add(item["ns"])
                    counts["versions"] += n
                    if progress is not None and counts["records"] % PROGRESS_EVERY == 0:
                        progress(counts["records"])
                elif kind == "namespace":
                    self._import_namespace(item, counts)
                    declared.add(item["name"])
                elif kind == "consent":
                    if CONSENT_NAMESPACE not in declared:  # else its records carry the decisions, times and all
                        self._import_consent(item, counts)
                elif kind == "end":
                    ended = True
                else:
                    raise BadInput(f"{where}:{lineno}: unknown line type {kind!r}")
        finally:
            self._reindex(touched)
        if not ended:
            raise BadInput(f"{where} ends before its end line (truncated?): what it held was imported; "
                           "importing it again once complete is safe")
        if progress is not None:
            progress(counts["records"])
        return counts

    def _reindex(self, namespaces: set[str]) -> None:
        """Tell derived data (the recall index) to look at imported namespaces again."""
        changes = self.backend.changes
        for ns in sorted(namespaces):
            if changes is not None:
                try:
                    changes.append(RECOVER, ns, "", 0, "0" * 32)
                except KeyError:
                    pass  # a log without such notes (Redis): its writes logged themselves, entry by entry
            elif ns in self.core.bus.indexed:  # no change log: this process's index learns of them
                self.core.bus.touched.update((ns, k) for k, _, _ in self.backend.keys(ns))
        self.core.index_epoch += 1

    def _import_namespace(self, item: dict[str, Any], counts: dict[str, int]) -> None:
        spec = NamespaceSpec.from_dict(item["spec"])
        counts["namespaces"] += 1
        self.core.load_declared()
        have = self.core.specs.get(spec.name)
        if have is not None:
            if have != spec:
                raise conflict(spec, have, where="in this store (the export declares it differently)")
        else:
            self.core.codecs.for_spec(spec.codec)
            stored = self.backend.declare(spec.name, spec.to_dict())
            if stored is not None and stored != spec.to_dict():
                raise conflict(spec, NamespaceSpec.from_dict(stored), where="in this store")
            self.core.runtime.add(spec.name)
            self.core.registry.declare(spec)
            self.core.refresh_indexed()
            counts["declared"] += 1
        since = item.get("since")
        if spec.history is not None and type(since) is int:
            with self.backend.lock(spec.name):
                mine = self.history.since(spec.name)
                if mine is None or since < mine:
                    self.history.set_since(spec.name, since)

    def _import_consent(self, item: dict[str, Any], counts: dict[str, int]) -> None:
        category, granted = item["category"], item["granted"]
        if category not in CONSENT_CATEGORIES or granted is None:
            return
        with self.backend.lock(CONSENT_NAMESPACE):
            if self.backend.get(CONSENT_NAMESPACE, category) is None:
                self.backend.put(CONSENT_NAMESPACE, category, values.kept(orjson.dumps({"granted": bool(granted)})),
                                 _now_us())
                counts["consents"] += 1

    def _import_record(self, item: dict[str, Any], counts: dict[str, int]) -> int:
        ns, key, tier = item["ns"], item["key"], item["tier"]
        versions: list[list[Any]] = item["versions"]
        cut = int(item["cut"])
        spec = self.core.spec(ns)
        if spec.tier == "hot" or not versions:
            return 0
        counts["records"] += 1
        kept = versions if tier is None else versions[:-1]
        changed = False
        with self.backend.lock(ns):
            live = self.backend.get(ns, key)
            keeps = spec.history is not None and bool(kept or cut)
            # What the store keeps of the key, read from its chain before the write below moves its top.
            have_cut, have = self.history.load(spec, key) if keeps else (0, [])
            if tier is not None:
                v, created, updated, _, value = versions[-1]
                if live is None or live.version < v:
                    # values.kept: orjson's buffer is over-allocated (KiBs); the read cache keeps this one
                    stored = self.backend.put(ns, key, values.kept(orjson.dumps(value)), updated, min_version=v,
                                              created_us=created)
                    if tier == "cold":
                        self.backend.archive(ns, [stored])
                    live = stored
                    changed = True
            if keeps:
                merged = {int(e[0]): e for e in have}
                for e in kept:
                    merged.setdefault(int(e[0]), e)
                top = live.version if live is not None else None
                entries = [merged[v] for v in sorted(merged) if top is None or v < top]
                new_cut = max(cut, have_cut)
                if entries != have or new_cut != have_cut:
                    self.history.store(spec, key, new_cut, entries, live is None, _now_us())
                    changed = True
        if not changed:
            counts["existing"] += 1
        return len(versions)


def _now_us() -> int:
    import time

    return time.time_ns() // 1000


def _open_out(out: Any, stack: ExitStack) -> IO[bytes]:
    if isinstance(out, (str, os.PathLike)):
        fd = os.open(os.fspath(out), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        return stack.enter_context(os.fdopen(fd, "wb", buffering=1 << 20))
    if hasattr(out, "write"):
        return out  # type: ignore[no-any-return]
    raise InvalidArgument(f"export() writes to a path or a binary file, not {type(out).__name__}")


def _open_in(source: Any, stack: ExitStack) -> IO[bytes]:
    if isinstance(source, (str, os.PathLike)):
        try:
            return stack.enter_context(open(os.fspath(source), "rb", buffering=1 << 20))
        except FileNotFoundError:
            raise BadInput(f"no export file at {os.fspath(source)}") from None
    if hasattr(source, "readline"):
        return source  # type: ignore[no-any-return]
    raise InvalidArgument(f"import_() reads from a path or a binary file, not {type(source).__name__}")


__all__ = ["FORMAT", "VERSION", "Portable"]
