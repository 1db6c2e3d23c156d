"""Export and import: one line-oriented format for moving a store between
roots and backends (docs/history.md has the format).

An export is JSON Lines, UTF-8, one object per line, in this order:

1. the header: ``{"format": "hrm-memory-export", "version": 2}``;
2. only when asked (``include_keys``), one ``{"t": "keys", "kdf", "keys"}``
   line: the data keys of the sealed namespaces exported, wrapped under a
   key derived from the caller's passphrase (:mod:`hrm_memory.storage.sealed.wrap`),
   first, so an import holds them before it writes anything;
3. one ``{"t": "namespace", ...}`` line per namespace exported (its spec,
   whether it is a seed namespace, since when its history is complete);
4. one ``{"t": "consent", "category", "granted"}`` line per consent category
   (``granted`` null when never decided);
5. one ``{"t": "record", "ns", "key", "tier", "cut", "versions"}`` line per
   key: ``versions`` oldest first, each ``[version, created_us, updated_us,
   deleted, value]`` (the kept history, then the current version; ``tier``
   null when the key's current state is a deletion), values in their stored
   (coded) form, exactly as written; in a sealed namespace every value is
   sealed (``"hrmenc:1:<key id>:..."``): the current one as stored, a kept
   one sealed with the current key and a synthetic nonce;
6. the trailer ``{"t": "end", "namespaces", "records", "versions"}``.

Version 1 files are the same without keys lines and with plaintext values
everywhere; they still import. Version 2 is what a version 1 reader must
refuse: it would take a sealed value for a plain string.

Record lines are sorted bytewise, so an export depends only on what the
store holds (not on the backend, nor on the order it scans in): the same
data exports to the same bytes (the keys line aside: its salt and nonces
are random). Sorting is external (sorted runs of at most ``RUN_LINES``
lines in temporary files, then merged), so memory stays bounded at any size.

Import (:mod:`hrm_memory.history.importer`) reads it back as checked
writes, idempotently.
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

from hrm_memory.core.errors import InvalidArgument
from hrm_memory.core.ops import ExportOp
from hrm_memory.core.spec import CONSENT_CATEGORIES, NamespaceSpec
from hrm_memory.core.state import CONSENT_NAMESPACE, Attrs, Core, Handlers
from hrm_memory.history.keeper import History
from hrm_memory.storage.sealed.backend import SealedBackend
from hrm_memory.storage.sealed.wrap import Kdf, Passphrase
from hrm_memory.tracing.spans import OpSpan

FORMAT = "hrm-memory-export"
#: The format this version writes, and the newest it reads.
VERSION = 2
#: Record lines sorted in memory at a time before they go to a temporary run.
RUN_LINES = 20_000
#: Records between two calls of the progress callback.
PROGRESS_EVERY = 10_000


def _dump(obj: Any) -> bytes:
    return orjson.dumps(obj) + b"\n"


class Portable:
    """The export handler: given the core, the kept history and the sealing
    backend (None: a backend that seals nothing)."""

    def __init__(self, core: Core, history: History, sealed: SealedBackend | None = None) -> None:
        self.core = core
        self.history = history
        self.backend = core.backend
        self.sealed = sealed

    def handlers(self) -> Handlers:
        return {ExportOp: ("export", self._export, False)}

    def close(self) -> None:
        pass

    # -- export ------------------------------------------------------------------------

    def _export(self, op: ExportOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self.core.admin_only(scope, "export the store")
        if not isinstance(op.namespaces, str):
            raise InvalidArgument("namespaces must be a str glob")
        if type(op.include_keys) is not bool:
            raise InvalidArgument(f"include_keys must be True or False, not {op.include_keys!r}")
        passphrase = Passphrase.of(op.passphrase)
        if op.include_keys and passphrase is None:
            raise InvalidArgument("include_keys=True wraps the keys under a passphrase: give passphrase=")
        self.core.load_declared()
        specs = [s for s in self.core.registry if fnmatch.fnmatchcase(s.name, op.namespaces) and s.tier != "hot"]
        keys_line = self._keys_line(specs, passphrase) if op.include_keys and passphrase is not None else None
        with ExitStack() as stack:
            out = _open_out(op.out, stack)
            counts = self._write(out, specs, op.progress, keys_line)
        attrs = None if span is None else {"hrm.memory.records": counts["records"], "db.response.returned_rows": counts["records"]}
        return counts, attrs

    def _keys_line(self, specs: list[NamespaceSpec], passphrase: Passphrase) -> bytes | None:
        """The keys line: every key of the exported sealed namespaces' groups, wrapped."""
        if self.sealed is None:
            return None
        group_of = self.sealed.group_of
        groups = sorted({g for s in specs if (g := group_of(s.name)) is not None})
        if not groups:
            return None
        kdf = Kdf.new()
        wrapped = self.sealed.export_keys(groups, passphrase.derive(kdf))
        return _dump({"t": "keys", "kdf": kdf.to_dict(), "keys": [w.to_dict() for w in wrapped]})

    def _write(self, out: IO[bytes], specs: list[NamespaceSpec], progress: Callable[[int], Any] | None,
               keys_line: bytes | None = None) -> dict[str, int]:
        out.write(_dump({"format": FORMAT, "version": VERSION}))
        if keys_line is not None:
            out.write(keys_line)
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
            sealed = self.sealed
            group = None if sealed is None else sealed.group_of(ns)
            if sealed is None or group is None:
                scan = self.backend.scan(ns, include_cold=True, strict=False)
            else:
                scan = sealed.scan_as_stored(ns, include_cold=True, strict=False)
            for st in scan:
                cut, kept = self.history.exported(spec, st.key, st) if keeps else (0, [])
                value = st.value
                if sealed is not None and group is not None:
                    value = sealed.export_value(group, ns, st.key, value)
                    kept = self._sealed_kept(sealed, group, ns, st.key, kept)
                current = [st.version, st.created_us, st.updated_us, 0, orjson.Fragment(value)]
                yield self._line(ns, st.key, st.tier, cut, [*kept, current]), len(kept) + 1
            if not keeps:
                continue
            for key in sorted(self.history.keys(spec)):
                if self.backend.get(ns, key) is not None:
                    continue  # a live key: written above with its history
                cut, kept = self.history.exported(spec, key, None)
                if sealed is not None and group is not None:
                    kept = self._sealed_kept(sealed, group, ns, key, kept)
                if kept:
                    yield self._line(ns, key, None, cut, kept), len(kept)

    @staticmethod
    def _sealed_kept(sealed: SealedBackend, group: str, ns: str, key: str, kept: list[Any]) -> list[Any]:
        """Kept versions with their values sealed (deletions have none)."""
        return [e if e[3] else [*e[:4], orjson.Fragment(sealed.export_seal(group, ns, key, orjson.dumps(e[4])))]
                for e in kept]

    @staticmethod
    def _line(ns: str, key: str, tier: str | None, cut: int, versions: list[Any]) -> bytes:
        return _dump({"t": "record", "ns": ns, "key": key, "tier": tier, "cut": cut, "versions": versions})


def _open_out(out: Any, stack: ExitStack) -> IO[bytes]:
    if isinstance(out, (str, os.PathLike)):
        fd = os.open(os.fspath(out), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        return stack.enter_context(os.fdopen(fd, "wb", buffering=1 << 20))
    if hasattr(out, "write"):
        return out  # type: ignore[no-any-return]
    raise InvalidArgument(f"export() writes to a path or a binary file, not {type(out).__name__}")


__all__ = ["FORMAT", "VERSION", "Portable"]
