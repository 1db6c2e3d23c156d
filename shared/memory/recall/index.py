"""The recall index's upkeep: what the index holds, kept in line with the store.

The index (SQLite FTS5, :mod:`hrm_memory.recall.textindex`) holds the
readable text of every record of a namespace declared with ``index=``. It is
derived data and is treated as such:

- **kept current lazily**: a write only notes its key (the core tells the
  index of each key committed to an indexed namespace, ``Core.on_commit``:
  one set insert into the index's own set of dirty keys); the next
  recall indexes what changed since, here and in other processes (read from
  the change log, from a cursor kept in the index), so the write path pays
  nothing for the index;
- **rebuilt, not trusted**: the first recall in a process compares the index
  with the store's key list and re-indexes what differs (a crash between a
  commit and its log entry leaves nothing missing); a change log that no
  longer reaches back to the index's cursor means a full rebuild;
- **gated text stays in memory**: hot-tier records and consent-gated values
  awaiting consent are indexed in a second, in-memory index only;
- **purged with the data**: the core tells it when a namespace is purged,
  and when a key is erased (``Core.on_purge``, ``Core.on_erase``).

Its :attr:`RecallIndex.epoch` changes whenever what recall and context can
see may have changed (rows written or dropped, namespaces declared): a
render is reused only while it stays the same.

:class:`RecallIndex` is given the core (to read the store and the change log)
and the two indexes and the optional embedder; recall, remember and context
are given the RecallIndex.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

from hrm_memory.core.backend import RECOVER
from hrm_memory.core.errors import CursorExpired, InvalidArgument, InvalidCursor
from hrm_memory.core.records import Stored
from hrm_memory.core.spec import KINDS, NamespaceSpec
from hrm_memory.core.state import Core
from hrm_memory.recall import purges
from hrm_memory.recall import text as rt


#: Keys indexed per transaction when the index catches up (a whole store on
#: its first recall): the records of one batch are what indexing holds.
INDEX_BATCH = 2000


class Doc(NamedTuple):
    """One record as the index holds it: its text, its context and, with an
    embedder, its normalised vector (float32 bytes)."""

    ns: str
    key: str
    version: int
    created_us: int
    updated_us: int
    tier: str
    kind: str | None
    importance: float
    body: str
    ctx: str
    vec: bytes | None = None
    #: the passages' text (:func:`hrm_memory.recall.text.passages`); none: ``body`` is one passage
    parts: tuple[str, ...] = ()


class SearchIndex(Protocol):
    """What recall needs of an index (``hrm_memory.recall.textindex.TextIndex``)."""

    @property
    def persistent(self) -> bool: ...

    def apply(self, upserts: Sequence[Doc], removals: Iterable[tuple[str, str]], meta: dict[str, str] | None = None,
              purged: Callable[[], set[str] | None] | None = None) -> None: ...
    def purge(self, namespace: str) -> int: ...
    def opened(self) -> bool: ...
    def peek(self, name: str) -> str | None: ...
    def touch(self, ids: Iterable[int]) -> None: ...
    def meta(self, name: str) -> str | None: ...
    def versions(self, namespace: str) -> dict[str, tuple[int, int, str]]: ...
    def search(self, match: str, namespaces: Sequence[str], *, cold: bool, limit: int,
               kinds: Sequence[str] | None = None, since_us: int | None = None, prefix: str | None = None,
               text: bool = True, newest: int | None = None) -> list[Any]: ...
    def vectors(self, namespaces: Sequence[str], *, cold: bool) -> list[tuple[int, str, str, bytes]]: ...
    def rows(self, ids: Sequence[int]) -> dict[int, Any]: ...
    def selective(self, terms: Sequence[str], budget: int | None = None) -> list[str]: ...
    def window(self, terms: Sequence[str], budget: int | None = None) -> int | None: ...
    def exact(self, words: Sequence[str], namespaces: Sequence[str], *, cold: bool, limit: int,
              kinds: Sequence[str] | None = None, since_us: int | None = None,
              prefix: str | None = None) -> list[Any]: ...
    def fill(self, terms: Sequence[str], namespaces: Sequence[str], *, cold: bool, limit: int, budget: int,
             kinds: Sequence[str] | None = None, since_us: int | None = None,
             prefix: str | None = None) -> list[Any] | None: ...
    def weights(self, terms: Sequence[str]) -> dict[str, float]: ...
    def newest(self, namespace: str, n: int) -> list[tuple[str, int]]: ...
    def close(self) -> None: ...
    def check(self, fix: bool) -> list[Any]: ...
    def namespaces(self) -> set[str]: ...
    def exists(self) -> bool: ...
    def erase(self, namespace: str, key: str) -> int: ...


class Embedder:
    """A callable ``texts -> vectors`` or a LangChain ``Embeddings``, normalised."""

    def __init__(self, embed: Any) -> None:
        if hasattr(embed, "embed_documents") and hasattr(embed, "embed_query"):
            self._docs: Callable[[list[str]], Any] = embed.embed_documents
            self._query: Callable[[str], Any] = embed.embed_query
        elif callable(embed):
            self._docs = embed
            self._query = lambda text: embed([text])[0]
        else:
            raise InvalidArgument("embed must be a callable (list of texts -> list of vectors) or a LangChain Embeddings")

    @staticmethod
    def pack(vector: Any) -> bytes:
        v = [float(x) for x in vector]
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return array("f", [x / norm for x in v]).tobytes()

    def documents(self, texts: list[str]) -> list[bytes]:
        vectors = list(self._docs(texts))
        if len(vectors) != len(texts):
            raise InvalidArgument(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        return [self.pack(v) for v in vectors]

    def query(self, text: str) -> array[float]:
        return array("f", self.pack(self._query(text)))


class RecallIndex:
    """The persisted and the in-memory index of one store, and their upkeep."""

    def __init__(self, core: Core, disk: SearchIndex | None, mem: SearchIndex | None, embed: Any = None) -> None:
        self.core = core
        self.disk, self.mem = disk, mem
        self.embedder = None if embed is None else Embedder(embed)
        self._reconciled = False
        #: id(index) -> (cold, the vectors of the indexed namespaces), until the index changes
        self._dense_cache: dict[int, tuple[int, list[tuple[int, str, str, bytes]]]] = {}
        #: id(index) -> the matrix made of those vectors (numpy), kept with the rows it was made from
        self.matrices: dict[int, Any] = {}
        self._accessed: list[int] = []
        #: keys of indexed namespaces changed in this process since the last sync
        self._dirty: set[tuple[str, str]] = set()
        self._epoch = 0
        self._indexed: frozenset[str] = frozenset()
        core.on_declared(self._declared)
        core.on_commit(self._committed, _indexed)
        core.on_purge(self.purge)
        core.on_erase(self._erased)
        core.on_check(self.check)
        self._declared()

    @property
    def epoch(self) -> int:
        """Changes whenever what recall and context can see may have changed."""
        return self._epoch

    def _declared(self) -> None:
        self._indexed = frozenset(s.name for s in self.core.registry if s.index)
        self._epoch += 1

    def _committed(self, namespace: str, key: str) -> None:
        self._dirty.add((namespace, key))

    def stale(self, namespace: str, key: str) -> None:
        """A row found not to match the store: indexed again on the next sync."""
        self._dirty.add((namespace, key))

    def changed(self, index: SearchIndex) -> None:
        """``index``'s rows changed: its cached vectors go, and the epoch moves."""
        self._epoch += 1
        self._dense_cache.pop(id(index), None)

    def check(self, fix: bool) -> list[Any]:
        """The persisted index file: a damaged one is found and set aside (shared/memory/recall/index_health.py)."""
        return [] if self.disk is None else self.disk.check(fix)

    def indexes(self) -> Iterable[tuple[SearchIndex, bool]]:
        """``(index, session)``: the in-memory one first (its copies supersede the persisted ones)."""
        for index, session in ((self.mem, True), (self.disk, False)):
            if index is not None:
                yield index, session

    def close(self) -> None:
        """Catch up with purges made elsewhere (while the store is open), then
        write the access counts and close both indexes."""
        purges.at_close(self)  # a purge elsewhere since the last recall: its text does not stay in this index
        if self.disk is not None and self._accessed:
            self.disk.touch(self._accessed)
        for index in (self.disk, self.mem):
            if index is not None:
                index.close()

    # -- keeping the index current ----------------------------------------------

    def _doc(self, spec: NamespaceSpec, st: Stored) -> Doc:
        value = self.core.decode(spec, st, False)
        kind = spec.kind
        importance = 0.5
        if isinstance(value, dict):
            if value.get("kind") in KINDS:
                kind = value["kind"]
            imp = value.get("importance")
            if isinstance(imp, (int, float)) and not isinstance(imp, bool) and 0 <= imp <= 1:
                importance = float(imp)
        assert spec.index is not None
        body = rt.extract(value, spec.index)
        parts = tuple(p.text for p in rt.passages(value, spec.index))
        return Doc(spec.name, st.key, st.version, st.created_us, st.updated_us, st.tier, kind, importance,
                   body, rt.context(spec.name, st.key, kind), None, parts)

    def _index_keys(self, pending: set[tuple[str, str]], meta: dict[str, str] | None = None,
                    streams: Sequence[Iterable[list[tuple[str, str]]]] = ()) -> None:
        """Bring the index rows of ``pending`` keys, then of the keys the
        ``streams`` yield (sorted batches, :meth:`stale_batches`), in line with
        the store (leaving out namespaces purged since they were read:
        purges.py), in batches of :data:`INDEX_BATCH` keys, one transaction
        each, so that indexing a whole store holds one batch of records and
        one namespace's stale keys in memory, not the store's; ``meta`` (the
        change-log cursor) is written with the last batch only, so a process
        that dies part way leaves the cursor where it was (the next one
        compares versions and indexes the rest)."""
        ordered = sorted(pending)
        first = (ordered[i:i + INDEX_BATCH] for i in range(0, len(ordered), INDEX_BATCH))
        rest = ([k for k in batch if k not in pending] for stream in streams for batch in stream)
        held: list[tuple[str, str]] | None = None
        for batch in itertools.chain(first, rest):
            if not batch:
                continue
            if held is not None:
                self._index_batch(held, None)
            held = batch
        self._index_batch(held or [], meta)

    def _index_batch(self, pending: list[tuple[str, str]], meta: dict[str, str] | None) -> None:
        purged = purges.purged_since_now(self.core.backend) if self.disk is not None else None
        specs = self.core.specs
        for index, persisted in ((self.disk, True), (self.mem, False)):
            if index is None:
                continue
            upserts: list[Doc] = []
            removals: list[tuple[str, str]] = []
            for ns, key in pending:
                spec = specs.get(ns)
                if spec is None or not spec.index:
                    removals.append((ns, key))
                    continue
                if persisted:
                    st = None if spec.tier == "hot" else self.core.backend.get(ns, key)
                else:
                    st = self.core.hot.get(ns, key) if (spec.tier == "hot" or spec.consent is not None) else None
                if st is None:
                    removals.append((ns, key))
                else:
                    upserts.append(self._doc(spec, st))
            if upserts and self.embedder is not None:
                vecs = self.embedder.documents([d.body for d in upserts])
                upserts = [d._replace(vec=v) for d, v in zip(upserts, vecs, strict=True)]
            if upserts or removals or (meta and persisted):
                index.apply(upserts, removals, *((meta, purged) if persisted else (None, None)))
                self.changed(index)

    def sync(self) -> None:
        """Index every change made since the last recall, here or elsewhere."""
        pending, self._dirty = self._dirty, set()
        disk, changes = self.disk, self.core.backend.changes
        again, purge_meta = purges.catch_up(self)  # rows of namespaces purged elsewhere dropped
        pending |= again
        meta: dict[str, str] | None = purge_meta or None
        #: stale keys found by comparing the index with the store, streamed (a whole store's, on a first recall)
        streams: list[Iterable[list[tuple[str, str]]]] = []

        def indexed() -> list[NamespaceSpec]:  # (only when keys are compared with the store: rarely)
            return [s for s in self.core.registry if s.index and s.tier != "hot"]

        if disk is not None and changes is not None:
            start = disk.meta("cursor")
            end = None
            if start is not None:
                try:
                    if changes.changed(start):
                        events, end = changes.read(start, skip_own=False)
                        if any(e.namespace not in self.core.specs and e.namespace[:1] != "_" for e in events):
                            # declared by another process since: load it before its
                            # events are filtered, or they are skipped for good
                            self.core.load_declared()
                        indexed_now = self._indexed
                        pending.update((e.namespace, e.key) for e in events
                                       if e.namespace in indexed_now and e.op != RECOVER)
                        # A writer died: its last commits may have no entry; look again.
                        dead = {e.namespace for e in events if e.op == RECOVER}
                        if dead:
                            streams.append(self.stale_batches([s for s in indexed() if s.name in dead], full=False))
                except (CursorExpired, InvalidCursor):
                    start = None
            if start is None:
                end = changes.cursor()
                streams.append(self.stale_batches(indexed(), full=True))
                self._reconciled = True
            if end is not None and end != start:
                meta = {**(meta or {}), "cursor": end}
        if not self._reconciled and disk is not None and changes is None:
            # No change log: other processes' writes are seen once per process.
            streams.append(self.stale_batches(indexed(), full=False))
            self._reconciled = True
        if pending or meta or streams:
            self._index_keys(pending, meta, streams)
        if len(self._accessed) >= 256 and disk is not None:
            accessed, self._accessed = self._accessed, []
            disk.touch(accessed)

    def stale_keys(self, specs: list[NamespaceSpec], *, full: bool) -> set[tuple[str, str]]:
        """Keys whose index rows differ from the store (:meth:`stale_batches`), as one set."""
        return {k for batch in self.stale_batches(specs, full=full) for k in batch}

    def stale_batches(self, specs: list[NamespaceSpec], *, full: bool) -> Iterator[list[tuple[str, str]]]:
        """Keys whose index rows differ from the store, in sorted batches of
        :data:`INDEX_BATCH`, one namespace at a time (so a whole store's keys
        are never held at once): every record (archived ones too) when
        ``full``, else the live keys' update times."""
        for spec in specs:
            keys = self._stale(spec, full)
            for i in range(0, len(keys), INDEX_BATCH):
                yield [(spec.name, k) for k in keys[i:i + INDEX_BATCH]]

    def _stale(self, spec: NamespaceSpec, full: bool) -> list[str]:
        """The sorted keys of one namespace whose index rows differ from the
        store: the store's records are streamed against the index's versions."""
        assert self.disk is not None
        have = self.disk.versions(spec.name)
        live: Iterable[tuple[str, int]]
        if full:
            live = ((st.key, st.updated_us) for st in self.core.backend.scan(spec.name, include_cold=True, strict=False))
        else:
            live = ((k, updated) for k, _, updated in self.core.backend.keys(spec.name))
        out: list[str] = []
        for k, updated in live:
            row = have.pop(k, None)
            if row is None or row[1] != updated:
                out.append(k)
        out.extend(k for k, (_, _, tier) in have.items() if full or tier != "cold")
        out.sort()
        return [k for i, k in enumerate(out) if not i or out[i - 1] != k]

    def purge(self, namespace: str) -> None:
        self._epoch += 1
        for index in (self.disk, self.mem):
            if index is not None:
                index.purge(namespace)
                self._dense_cache.pop(id(index), None)
        # What this session still holds (session-only copies awaiting consent)
        # stays readable, so it is indexed again, in memory.
        self._dirty.update((namespace, st.key) for st in self.core.hot.scan(namespace))

    def erase(self, namespace: str, key: str) -> int:
        """Remove every row of ``key`` from both indexes, leaving none of its
        text in the index file (``MemoryManager.forget``); rows removed."""
        self._epoch += 1
        self._dirty.discard((namespace, key))
        removed = 0
        for index in (self.disk, self.mem):
            if index is not None:
                removed += index.erase(namespace, key)
                self._dense_cache.pop(id(index), None)
        self.matrices.clear()
        return removed

    def _erased(self, namespace: str, key: str) -> dict[str, int]:
        return {"index": self.erase(namespace, key)}

    # -- access counts and vectors -------------------------------------------------

    def touch(self, ids: Iterable[int]) -> None:
        """Count the accesses; written with the next index update (or at close)."""
        self._accessed.extend(ids)

    def vectors(self, index: SearchIndex, cold: bool) -> list[tuple[int, str, str, bytes]]:
        cached = self._dense_cache.get(id(index))
        if cached is None or cached[0] != int(cold):
            names = sorted(self._indexed)
            cached = (int(cold), index.vectors(names, cold=cold))
            self._dense_cache[id(index)] = cached
        return cached[1]


def _indexed(spec: NamespaceSpec) -> bool:
    return bool(spec.index)


__all__ = ["Doc", "Embedder", "RecallIndex", "SearchIndex"]
