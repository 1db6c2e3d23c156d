"""Import: an export file (:mod:`hrm_memory.history.portable` writes it)
read into a store as a batch of checked writes, with their versions and
timestamps.

Every record line passes the checks a write passes (the namespace declared,
the key, the value's JSON and size limit, the schema, consent) and the
checks of its own fields (versions rising from 1, timestamps that are
integers a datetime can hold), so an import cannot store what a write would
refuse. A line that fails raises :class:`BadImportLine` naming the file and
the line, with the check's own error as its cause.

The file is checked whole before anything is applied when it can be read
twice (a path, or a seekable file): a bad line refuses the file and the
store is unchanged. A stream that cannot be re-read (a pipe) is checked line
by line as it is applied: the lines before the bad one are imported whole,
nothing of the bad one or after it; importing again once fixed is safe
(import is idempotent).

Consent is the caller's decision, never the file's: by default the file's
consent decisions (its ``consent`` lines and its ``focus.consent`` records)
are left out and counted in ``consent_skipped``, and the records of a
namespace gated by a category not granted in this store are held as a
write of them would be, in this process's memory only (counted in
``held``): not one byte of them reaches the backend. ``apply_consent=True``
applies the file's decisions first, through the consent op's own path, so
its granted categories' records persist.

Sealed values (a version 2 file, a namespace with a consent category or
``encrypt=True``) are opened to be checked, with this store's keys or the
keys the file carries (its keys line, unwrapped with the caller's
passphrase); one that neither opens refuses the file with
:class:`KeyUnavailable` or :class:`WrongKey` naming the line, so nothing is
imported as garbage. The file's keys are kept by this store's key provider
and a current value is stored as the file carries it (the same ciphertext);
where the provider cannot keep them (keys from the environment), the values
are sealed again with this store's own key.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime, timezone
from typing import IO, Any, NamedTuple, Union

import orjson

from hrm_memory.core import values
from hrm_memory.core.backend import RECOVER
from hrm_memory.core.errors import (
    BadImportLine,
    BadInput,
    InvalidArgument,
    KeyUnavailable,
    MemoryStoreError,
    NamespaceConflict,
    UnsupportedFormat,
    WrongKey,
)
from hrm_memory.core.ops import ImportOp
from hrm_memory.core.records import Stored
from hrm_memory.core.spec import CONSENT_CATEGORIES, NamespaceSpec, check_key, conflict, key_group
from hrm_memory.core.state import CONSENT_NAMESPACE, Attrs, Core, Handlers
from hrm_memory.history.keeper import History
from hrm_memory.history.portable import FORMAT, VERSION
from hrm_memory.storage.sealed.backend import SealedBackend, parse
from hrm_memory.storage.sealed.keys import DataKey
from hrm_memory.storage.sealed.wrap import Kdf, Passphrase, WrappedKey, unwrap
from hrm_memory.tracing.spans import OpSpan, current_trace_id

#: Records between two calls of the progress callback.
PROGRESS_EVERY = 10_000
#: The last microsecond a datetime can say (9999-12-31T23:59:59.999999Z), in epoch microseconds.
MAX_US = (datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=timezone.utc)
          - datetime(1970, 1, 1, tzinfo=timezone.utc)) // datetime.resolution

#: Records a consent decision: ``(category, grant, purge, trace_id, record)``
#: (:meth:`hrm_memory.core.admin.Admin.decide`).
Decide = Callable[[str, bool, bool, str, "Callable[[], Stored] | None"], Any]


class KeptVersion(NamedTuple):
    """One version of a record line, checked."""

    version: int
    created_us: int
    updated_us: int
    deleted: bool
    value: Any  # the stored (coded) form, as in the file; None for a deletion


class RecordLine(NamedTuple):
    """A ``record`` line, checked: ``versions`` oldest first, the last the
    current one unless ``tier`` is None (the key's current state is a deletion)."""

    lineno: int
    spec: NamespaceSpec
    key: str
    tier: str | None
    cut: int
    versions: tuple[KeptVersion, ...]
    data: bytes | None  # the current value as a write stores it (None: deleted)
    group: str | None = None  # the key group of a sealed namespace's values
    sealed: bytes | None = None  # the current value as the file carries it, sealed

    @property
    def consent_decision(self) -> bool | None:
        """For a record of a consent category, whether it grants; else None."""
        if self.spec.name != CONSENT_NAMESPACE or self.key not in CONSENT_CATEGORIES:
            return None
        value = self.versions[-1].value if self.tier is not None else None
        return type(value) is dict and value.get("granted") is True


class NamespaceLine(NamedTuple):
    lineno: int
    spec: NamespaceSpec
    since: int | None


class ConsentLine(NamedTuple):
    lineno: int
    category: str
    granted: bool | None  # None: never decided


class KeysLine(NamedTuple):
    """The keys line, read (its keys unwrapped into the import's :class:`Carried`)."""

    lineno: int


Line = Union[RecordLine, NamespaceLine, ConsentLine, KeysLine]


class Carried:
    """What one import knows of keys: the file's format version, the keys
    its keys line carries once unwrapped (``(group, key id) -> secret``),
    which are current, and the groups whose keys this store took already."""

    def __init__(self, version: int, passphrase: Passphrase | None) -> None:
        self.version = version
        self.passphrase = passphrase
        self.secrets: dict[tuple[str, str], bytes] = {}
        self.current: set[tuple[str, str]] = set()
        self.wrapped = False  # the file has a keys line
        self.adopted: set[str] = set()
        self._keks: dict[Kdf, bytes] = {}

    def take(self, kdf: Kdf, wrapped: list[WrappedKey]) -> None:
        """Unwrap the keys line's keys (when a passphrase was given)."""
        self.wrapped = True
        if self.passphrase is None:
            return
        kek = self._keks.get(kdf)
        if kek is None:
            kek = self._keks[kdf] = self.passphrase.derive(kdf)
        for w in wrapped:
            self.secrets[(w.group, w.key_id)] = unwrap(kek, w).secret
            if w.current:
                self.current.add((w.group, w.key_id))


class Importer:
    """The import handler: given the core, the kept history and the one way
    consent changes (``decide``)."""

    def __init__(self, core: Core, history: History, decide: Decide, sealed: SealedBackend | None = None) -> None:
        self.core = core
        self.history = history
        self.backend = core.backend
        self.decide = decide
        self.sealed = sealed

    def handlers(self) -> Handlers:
        return {ImportOp: ("import", self._import, False)}

    def close(self) -> None:
        pass

    def _import(self, op: ImportOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self.core.admin_only(scope, "import into the store")
        if type(op.apply_consent) is not bool:
            raise InvalidArgument(f"apply_consent must be True or False, not {op.apply_consent!r}")
        if op.progress is not None and not callable(op.progress):
            raise InvalidArgument("progress must be a function of the count of records imported")
        passphrase = Passphrase.of(op.passphrase)
        trace_id = current_trace_id(span)
        with ExitStack() as stack:
            src = _open_in(op.source, stack)
            where = str(getattr(src, "name", "<stream>"))
            start, version = _header(src, where)
            carried = Carried(version, passphrase)
            if _rereadable(src):
                # Check the whole file first: a bad line refuses it, nothing applied.
                decisions: dict[str, ConsentLine | RecordLine] = {}
                for line in self._lines(src, where, carried):
                    _note_decision(line, decisions)
                src.seek(start)
                counts = self._apply(self._lines(src, where, carried), op.apply_consent, decisions, trace_id,
                                     op.progress, carried)
            else:
                counts = self._apply(self._lines(src, where, carried), op.apply_consent, None, trace_id,
                                     op.progress, carried)
        attrs = None if span is None else {"hrm.memory.records": counts["records"]}
        return counts, attrs

    # -- checking ----------------------------------------------------------------------

    def _lines(self, src: IO[bytes], where: str, carried: Carried) -> Iterator[Line]:
        """The file's lines after the header, each checked; the end line
        checked to be last and present."""
        self.core.load_declared()
        specs: dict[str, NamespaceSpec] = {}  # declared by the file, as it goes
        lineno = 1
        ended = False
        for raw in src:
            lineno += 1
            if ended:
                raise BadImportLine(f"{where}:{lineno}: data after the end line", path=where, line=lineno)
            try:
                item = orjson.loads(raw)
                kind = item["t"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                raise BadImportLine(f"{where}:{lineno}: not an export line", path=where, line=lineno) from None
            try:
                if kind == "record":
                    yield self._record(item, lineno, specs, carried, where)
                elif kind == "keys" and carried.version >= 2:
                    carried.take(Kdf.from_dict(item["kdf"]), [WrappedKey.from_dict(w) for w in item["keys"]])
                    yield KeysLine(lineno)
                elif kind == "namespace":
                    line = self._namespace(item, lineno)
                    specs[line.spec.name] = line.spec
                    yield line
                elif kind == "consent":
                    yield _consent(item, lineno)
                elif kind == "end":
                    ended = True
                else:
                    raise InvalidArgument(f"unknown line type {kind!r}")
            except (BadImportLine, NamespaceConflict, KeyUnavailable):
                raise  # a conflict: the store's declaration wins, said as such; a key: said by its own type
            except (MemoryStoreError, KeyError, TypeError, ValueError, AttributeError) as exc:
                raise BadImportLine(f"{where}:{lineno}: {_reason(exc)}", path=where, line=lineno) from exc
        if not ended:
            raise BadImportLine(f"{where} ends before its end line (truncated?)", path=where, line=lineno)

    def _namespace(self, item: dict[str, Any], lineno: int) -> NamespaceLine:
        spec = NamespaceSpec.from_dict(item["spec"])
        if item.get("name", spec.name) != spec.name:
            raise InvalidArgument(f"namespace line names {item.get('name')!r} but declares {spec.name!r}")
        have = self.core.specs.get(spec.name)
        if have is not None and have != spec:
            raise conflict(spec, have, where="in this store (the export declares it differently)")
        self.core.codecs.for_spec(spec.codec)
        since = item.get("since")
        return NamespaceLine(lineno, spec, _time(since, "since") if since is not None else None)

    def _record(self, item: dict[str, Any], lineno: int, specs: dict[str, NamespaceSpec], carried: Carried,
                where: str) -> RecordLine:
        namespace, key, tier = item["ns"], item["key"], item["tier"]
        spec = specs.get(namespace) if type(namespace) is str else None
        if spec is None:
            spec = self.core.spec(namespace)  # UndeclaredNamespace for one neither here nor in the file
        check_key(key, spec.name)
        if tier not in (None, "warm", "cold"):
            raise InvalidArgument(f"tier must be 'warm', 'cold' or null, not {tier!r}")
        cut = _time(item["cut"], "cut")
        raw = item["versions"]
        if type(raw) is not list or not raw:
            raise InvalidArgument("versions must be a non-empty list")
        versions = tuple(_version(entry) for entry in raw)
        group = key_group(spec) if carried.version >= 2 else None
        sealed = None
        if group is not None:
            if tier is not None and not versions[-1].deleted:
                sealed = orjson.dumps(versions[-1].value)
            versions = tuple(v if v.deleted else v._replace(value=self._opened(group, spec.name, key, v.value, carried,
                                                                               where, lineno))
                             for v in versions)
        for v in versions[:-1] if tier is not None else versions:
            if not v.deleted:  # a kept value as written passes a write's checks: plain JSON, within the limit
                values.encode(self.core.expanded(spec, v.value), limit=spec.max_value_bytes, namespace=spec.name, key=key)
        for older, newer in zip(versions, versions[1:]):
            if newer.version <= older.version:
                raise InvalidArgument(f"versions must rise: {newer.version} after {older.version}")
        data = None
        if tier is not None:
            current = versions[-1]
            if current.deleted:
                raise InvalidArgument("the current version of a live record cannot be a deletion")
            if spec.tier != "hot":
                data, _ = self.core.encode(spec, key, self.core.expanded(spec, current.value))
        return RecordLine(lineno, spec, key, tier, cut, versions, data, group, sealed)

    def _opened(self, group: str, namespace: str, key: str, value: Any, carried: Carried, where: str,
                lineno: int) -> Any:
        """A sealed value of the file, opened (the JSON value it seals)."""
        sealed = orjson.dumps(value)
        try:
            if self.sealed is None:
                raise KeyUnavailable(f"this store has no keys to open {namespace}/{key!r} with",
                                     namespace=namespace, key=key, group=group)
            plain = self.sealed.open_imported(group, namespace, key, sealed, carried.secrets)
        except KeyUnavailable as exc:
            hint = ""
            if not isinstance(exc, WrongKey):
                hint = (" (the file carries keys: give import_() its passphrase)" if carried.wrapped and
                        carried.passphrase is None else " (export with include_keys=True and a passphrase, "
                        "or import where the key is)")
            raise type(exc)(f"{where}:{lineno}: {exc}{hint}; nothing was imported", path=where, line=lineno,
                            namespace=namespace, key=key, group=group,
                            key_id=getattr(exc, "key_id", None)) from None
        return orjson.loads(plain)

    # -- applying ----------------------------------------------------------------------

    def _apply(self, lines: Iterator[Line], apply_consent: bool, decisions: dict[str, ConsentLine | RecordLine] | None,
               trace_id: str, progress: Callable[[int], Any] | None, carried: Carried) -> dict[str, int]:
        counts = {"namespaces": 0, "declared": 0, "consents": 0, "consent_skipped": 0, "records": 0,
                  "existing": 0, "held": 0, "versions": 0}
        if apply_consent and decisions:
            # Known in advance (the file was checked whole): decided before
            # any record, so a granted category's records persist.
            for decision in decisions.values():
                self._decide(decision, trace_id, counts)
        touched: set[str] = set()
        declared_here: set[str] = set()
        try:
            for line in lines:
                if isinstance(line, KeysLine):
                    # Before any write: a group this store has no key for yet takes the file's current one.
                    for group in sorted({g for g, _ in carried.secrets}):
                        self._adopt(group, carried)
                elif isinstance(line, NamespaceLine):
                    self._declare(line, counts)
                    declared_here.add(line.spec.name)
                elif isinstance(line, ConsentLine):
                    if line.granted is None:
                        continue
                    if not apply_consent:
                        counts["consent_skipped"] += 1
                    elif decisions is None and CONSENT_NAMESPACE not in declared_here:
                        # (else the file's consent records carry its decisions)
                        self._decide(line, trace_id, counts)
                elif line.spec.tier != "hot":
                    if line.consent_decision is not None:
                        if not apply_consent:
                            counts["consent_skipped"] += 1
                        elif decisions is None:
                            self._decide(line, trace_id, counts)
                        continue
                    counts["records"] += 1
                    counts["versions"] += len(line.versions)
                    self._record_into(line, counts, carried)
                    touched.add(line.spec.name)
                    if progress is not None and counts["records"] % PROGRESS_EVERY == 0:
                        progress(counts["records"])
        finally:
            self._reindex(touched)
        if progress is not None:
            progress(counts["records"])
        return counts

    def _decide(self, line: ConsentLine | RecordLine, trace_id: str, counts: dict[str, int]) -> None:
        """Apply one of the file's consent decisions (asked for): a consent
        line as a decision made now, a consent record with its version and
        times (unless the store's is as new)."""
        if isinstance(line, ConsentLine):
            if line.granted is not None and self.core.granted(line.category) != line.granted:
                self.decide(line.category, line.granted, False, trace_id, None)
                counts["consents"] += 1
            return
        counts["records"] += 1
        counts["versions"] += len(line.versions)
        live = self.backend.get(CONSENT_NAMESPACE, line.key)
        current = line.versions[-1]
        if line.data is None or (live is not None and live.version >= current.version):
            counts["existing"] += 1
            return

        def record() -> Stored:
            assert line.data is not None
            return self.backend.put(CONSENT_NAMESPACE, line.key, line.data, current.updated_us,
                                    min_version=current.version, created_us=current.created_us)

        self.decide(line.key, bool(line.consent_decision), False, trace_id, record)
        counts["consents"] += 1

    def _declare(self, line: NamespaceLine, counts: dict[str, int]) -> None:
        spec = line.spec
        counts["namespaces"] += 1
        self.core.load_declared()
        have = self.core.specs.get(spec.name)
        if have is not None:
            if have != spec:
                raise conflict(spec, have, where="in this store (the export declares it differently)")
        else:
            stored = self.backend.declare(spec.name, spec.to_dict())
            if stored is not None and stored != spec.to_dict():
                raise conflict(spec, NamespaceSpec.from_dict(stored), where="in this store")
            self.core.declare(spec)
            counts["declared"] += 1
        if spec.history is not None and line.since is not None:
            with self.backend.lock(spec.name):
                mine = self.history.since(spec.name)
                if mine is None or line.since < mine:
                    self.history.set_since(spec.name, line.since)

    def _adopt(self, group: str, carried: Carried) -> None:
        """This store takes the file's keys of ``group`` (once per import;
        where its provider cannot keep them, values are sealed again with its own)."""
        if group in carried.adopted or self.sealed is None:
            return
        carried.adopted.add(group)
        for (g, key_id), secret in sorted(carried.secrets.items()):
            if g == group:
                try:
                    self.sealed.adopt(group, DataKey(key_id, secret), (g, key_id) in carried.current)
                except KeyUnavailable:
                    pass  # not kept here: records under it are sealed again with this store's key

    def _held_here(self, group: str, sealed: bytes) -> bool:
        """Whether this store holds the key ``sealed`` names (so it can store it as it is)."""
        found = parse(sealed)
        return found is not None and self.sealed is not None and self.sealed.provider.get(group, found.key_id) is not None

    def _record_into(self, line: RecordLine, counts: dict[str, int], carried: Carried) -> None:
        spec, key = line.spec, line.key
        if spec.consent is not None and not self.core.granted(spec.consent):
            # As a write would be: held in this process only, its history not kept.
            if line.data is not None and line.tier != "cold":
                with self.backend.lock(spec.name):
                    self.core.commit(spec, key, line.data)
            counts["held"] += 1
            return
        kept = line.versions if line.tier is None else line.versions[:-1]
        changed = False
        if line.group is not None:
            self._adopt(line.group, carried)
        with self.backend.lock(spec.name):
            live = self.backend.get(spec.name, key)
            keeps = spec.history is not None and bool(kept or line.cut)
            # What the store keeps of the key, read from its chain before the write below moves its top.
            have_cut, have = self.history.load(spec, key) if keeps else (0, [])
            if line.data is not None:
                current = line.versions[-1]
                if live is None or live.version < current.version:
                    if (self.sealed is not None and line.group is not None and line.sealed is not None
                            and self._held_here(line.group, line.sealed)):
                        stored = self.sealed.put_sealed(spec.name, key, line.sealed, current.updated_us,
                                                        current.version, current.created_us, line.tier == "cold")
                    else:
                        stored = self.backend.put(spec.name, key, line.data, current.updated_us,
                                                  min_version=current.version, created_us=current.created_us)
                        if line.tier == "cold":
                            self.backend.archive(spec.name, [stored])
                    live = stored
                    changed = True
            if keeps:
                merged = {int(e[0]): e for e in have}
                for v in kept:
                    merged.setdefault(v.version, [v.version, v.created_us, v.updated_us, int(v.deleted), v.value])
                top = live.version if live is not None else None
                entries = [merged[v] for v in sorted(merged) if top is None or v < top]
                new_cut = max(line.cut, have_cut)
                if entries != have or new_cut != have_cut:
                    self.history.store(spec, key, new_cut, entries, live is None, _now_us())
                    changed = True
        if not changed:
            counts["existing"] += 1

    def _reindex(self, namespaces: set[str]) -> None:
        """Tell derived data (the recall index) to look at imported namespaces again."""
        changes = self.backend.changes
        for ns in sorted(namespaces):
            if changes is not None:
                try:
                    changes.append(RECOVER, ns, "", 0, "0" * 32)
                except KeyError:
                    pass  # a log without such notes (Redis): its writes logged themselves, entry by entry
            else:  # no change log: this process's derived data learns of them
                self.core.told_of(ns, [k for k, _, _ in self.backend.keys(ns)])


def _note_decision(line: Line, decisions: dict[str, ConsentLine | RecordLine]) -> None:
    """Collect the file's consent decisions by category: its ``focus.consent``
    records when it has them (they carry versions and times), else its
    consent lines (which come first: a record replaces one)."""
    if isinstance(line, RecordLine):
        if line.consent_decision is not None:
            decisions[line.key] = line
    elif isinstance(line, ConsentLine) and line.granted is not None:
        decisions.setdefault(line.category, line)


def _version(entry: Any) -> KeptVersion:
    if type(entry) is not list or len(entry) != 5:
        raise InvalidArgument(f"a version is [version, created_us, updated_us, deleted, value], not {entry!r:.80}")
    version, created, updated, deleted, value = entry
    if type(version) is not int or not 1 <= version < 2**63:
        raise InvalidArgument(f"version must be an int >= 1, not {version!r}")
    created, updated = _time(created, "created_us"), _time(updated, "updated_us")
    if created > updated:
        raise InvalidArgument(f"created_us {created} is after updated_us {updated}")
    if deleted not in (0, 1) or type(deleted) not in (int, bool):
        raise InvalidArgument(f"deleted must be 0 or 1, not {deleted!r}")
    return KeptVersion(version, created, updated, bool(deleted), None if deleted else value)


def _time(us: Any, field: str) -> int:
    if type(us) is not int or not 0 <= us <= MAX_US:
        raise InvalidArgument(f"{field} must be epoch microseconds between 0 and {MAX_US}, not {us!r:.40}")
    return us


def _consent(item: dict[str, Any], lineno: int) -> ConsentLine:
    category, granted = item["category"], item["granted"]
    if type(category) is not str or category not in CONSENT_CATEGORIES:
        raise InvalidArgument(f"unknown consent category {category!r}")
    if granted is not None and type(granted) is not bool:
        raise InvalidArgument(f"granted must be true, false or null, not {granted!r}")
    return ConsentLine(lineno, category, granted)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"the line has no field {exc.args[0]!r}"
    return f"{type(exc).__name__}: {exc}"


def _header(src: IO[bytes], where: str) -> tuple[int, int]:
    """Check the header line; the offset just after it (or -1 where unknown), and the file's format version."""
    first = src.readline()
    try:
        head = orjson.loads(first)
    except orjson.JSONDecodeError:
        head = None
    if type(head) is not dict or head.get("format") != FORMAT:
        raise UnsupportedFormat(f"{where} is not an hrm-memory export (no header line)", path=where,
                                found=None, supported=VERSION)
    found = head.get("version")
    if type(found) is not int or found > VERSION or found < 1:
        raise UnsupportedFormat(
            f"{where} is an hrm-memory export of format {found!r}; this version reads format {VERSION} "
            "and older: upgrade hrm-memory to import it", path=where, found=found, supported=VERSION)
    return (src.tell() if _rereadable(src) else -1), found


def _rereadable(src: IO[bytes]) -> bool:
    try:
        return bool(src.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def _now_us() -> int:
    return time.time_ns() // 1000


def _open_in(source: Any, stack: ExitStack) -> IO[bytes]:
    if isinstance(source, (str, os.PathLike)):
        try:
            return stack.enter_context(open(os.fspath(source), "rb", buffering=1 << 20))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BadInput(f"no export file at {os.fspath(source)}") from None
    if hasattr(source, "readline"):
        return source  # type: ignore[no-any-return]
    raise InvalidArgument(f"import_() reads from a path or a binary file, not {type(source).__name__}")


__all__ = ["BadImportLine", "Carried", "Importer", "KeptVersion", "RecordLine"]
