"""``MemoryStore``: hrm-memory as a LangGraph ``BaseStore`` (long-term memory for graphs).

    from hrm_memory.integrations.langgraph import MemoryStore
    store = MemoryStore(root="~/.local/share/my-agent")          # or MemoryStore(mm) on a manager
    graph = builder.compile(store=store)

Every LangGraph op (``GetOp``, ``PutOp``, ``SearchOp``, ``ListNamespacesOp``)
becomes hrm-memory operations on one declared namespace (``langgraph.store``
by default), so the items get what every hrm-memory record gets: checksummed
durable writes, spans, cross-process subscriptions, ``check()``. How the
namespaces and keys map, and the search, filter, order and TTL rules, are in
docs/langgraph.md and :mod:`hrm_memory.integrations.langgraph_codec`.

LangGraph is an optional dependency (``pip install 'hrm-memory[langgraph]'``);
``import hrm_memory`` never imports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import (
    BaseStore,
    Embeddings,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from hrm_memory.integrations import langgraph_codec as codec
from hrm_memory.core.errors import InvalidArgument, InvalidKey, InvalidValue
from hrm_memory.core.filters import compile_where
from hrm_memory.integrations.langgraph_ttl import Sweeper
from hrm_memory.manager import MemoryManager
from hrm_memory.core.records import Record
from hrm_memory.core.spec import MAX_VALUE_BYTES, NamespaceSpec

#: The hrm-memory namespace a store keeps its items in, unless told otherwise.
DEFAULT_NAMESPACE = "langgraph.store"

_Vectors = dict[str, list[float]]


class MemoryStore(BaseStore):
    """A LangGraph store whose items are hrm-memory records.

    Parameters
    ----------
    manager:
        The :class:`~hrm_memory.MemoryManager` to keep items in; by default the
        store opens one on ``root`` with ``manager_options`` and closes it in
        :meth:`close`.
    namespace:
        The hrm-memory namespace holding the items (declared if need be);
        stores on different namespaces of one manager do not see each other.
    index:
        LangGraph's index config: ``{"dims", "embed", "fields"}`` (``fields``
        defaults to ``["$"]``, the whole value; SqliteStore's ``text_fields``
        is accepted as a synonym). With an embedder, ``search(query=...)``
        ranks by cosine similarity, per item the best of its fields' vectors,
        exactly as LangGraph's own stores score. Without one, ``query`` goes
        through hrm-memory's lexical ``recall`` (when the manager has it).
    ttl:
        LangGraph's TTL config: ``default_ttl`` (minutes), ``refresh_on_read``
        (default False, as in LangGraph's SQLite and Postgres stores; an
        explicit ``refresh_ttl=`` on a read wins), ``sweep_interval_minutes`` (for :meth:`start_ttl_sweeper`).
    lexical:
        Declare the namespace searchable by hrm-memory's recall (the fields
        of ``index``, else the whole value) so that ``query`` works without
        an embedder. Ignored by a manager without recall.
    query_mode:
        ``"exact"`` (default): with an embedder, the adapter embeds each put
        and ranks a query by exact cosine similarity, as LangGraph's stores
        do. ``"recall"``: every query goes through hrm-memory's recall; the
        embedder (``index["embed"]``) is handed to the manager the store opens
        (``MemoryManager(embed=...)``), so ranking is recall's hybrid of text
        and vectors, with its confidence-weighted score.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        manager: MemoryManager | None = None,
        *,
        root: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        lexical: bool = True,
        query_mode: str = "exact",
        **manager_options: Any,
    ) -> None:
        if query_mode not in ("exact", "recall"):
            raise InvalidArgument(f"query_mode must be 'exact' or 'recall', not {query_mode!r}")
        self.query_mode = query_mode
        self.ttl_config: TTLConfig | None = self._check_ttl(ttl)
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Embeddings | None = None
        self._fields: list[tuple[str, str | list[str]]] = [("$", "$")]
        if index:
            self.index_config = dict(index)
            fields = self.index_config.get("fields") or self.index_config.get("text_fields") or ["$"]
            self._fields = [(p, p if p == "$" else tokenize_path(p)) for p in fields]
            if self.index_config.get("embed") is not None:
                self.embeddings = ensure_embeddings(self.index_config["embed"])
        if query_mode == "recall" and manager is None and self.embeddings is not None:
            manager_options.setdefault("embed", self.embeddings)  # recall's hybrid retrieval
        self._owns_manager = manager is None
        self.manager: MemoryManager = manager if manager is not None else MemoryManager(root, **manager_options)
        self.namespace = namespace
        self.lexical = bool(lexical) or query_mode == "recall"
        self._listed: bool | None = None
        self._recall = getattr(self.manager, "recall", None) if self.lexical else None
        #: The adapter embeds and scores (exact cosine) only in "exact" mode.
        self._vectors = self.embeddings is not None and query_mode == "exact"
        try:
            self._declare()
        except BaseException:
            if self._owns_manager:
                self.manager.close()
            raise
        self._sweeper = Sweeper(self._sweep, lambda: self.manager.closed)

    @staticmethod
    def _check_ttl(ttl: TTLConfig | None) -> TTLConfig | None:
        if ttl is None:
            return None
        for name in ("default_ttl", "sweep_interval_minutes"):
            v: Any = ttl.get(name)
            if v is not None and not (type(v) in (int, float) and math.isfinite(v) and v > 0):
                raise InvalidArgument(f"ttl[{name!r}] must be None or a positive number of minutes, not {v!r}")
        return ttl

    def _declare(self) -> None:
        fields: dict[str, Any] = {}
        if self._recall is not None and "index" in NamespaceSpec.__dataclass_fields__:
            fields["index"] = tuple("v" if p == "$" else "v." + p for p, _ in self._fields)
        spec = NamespaceSpec(
            self.namespace,
            max_value_bytes=MAX_VALUE_BYTES,
            description="LangGraph store items (hrm_memory.integrations.langgraph.MemoryStore)",
            **fields,
        )
        if self.namespace not in {s.name for s in self.manager.namespaces()}:
            self.manager.declare(spec)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the TTL sweeper, and close the manager if the store opened it."""
        self._sweeper.stop()
        if self._owns_manager:
            self.manager.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStore(namespace={self.namespace!r}, manager={self.manager!r})"

    # -- reads: the TTL refresh default --------------------------------------------------

    def _refresh_default(self, refresh_ttl: bool | None) -> bool:
        """An explicit ``refresh_ttl`` wins; else ``ttl_config["refresh_on_read"]``,
        False when unset (as LangGraph's SQLite and Postgres stores do)."""
        if refresh_ttl is not None:
            return bool(refresh_ttl)
        return bool((self.ttl_config or {}).get("refresh_on_read", False))

    def get(self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        return super().get(namespace, key, refresh_ttl=self._refresh_default(refresh_ttl))

    async def aget(self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        return await super().aget(namespace, key, refresh_ttl=self._refresh_default(refresh_ttl))

    def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        return super().search(
            namespace_prefix,
            query=query,
            filter=filter,
            limit=limit,
            offset=offset,
            refresh_ttl=self._refresh_default(refresh_ttl),
        )

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        return await super().asearch(
            namespace_prefix,
            query=query,
            filter=filter,
            limit=limit,
            offset=offset,
            refresh_ttl=self._refresh_default(refresh_ttl),
        )

    # -- batch ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order (each sees the ones before it); one result each.

        Every op is validated before any runs: a namespace LangGraph refuses
        raises :class:`InvalidNamespaceError` and nothing is applied."""
        ops = list(ops)
        self._validate(ops)
        vectors = self._put_vectors(ops, None)
        wanted = self._queries(ops)
        assert self.embeddings is not None or not wanted
        queries = {q: self.embeddings.embed_query(q) for q in wanted} if self.embeddings is not None else {}
        return self._run(ops, vectors, queries)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` for asyncio: embeddings through the embedder's async
        methods, store work on a worker thread."""
        ops = list(ops)
        self._validate(ops)
        texts = self._put_texts(ops)
        vectors = self._put_vectors(ops, await self._aembed_documents(texts)) if texts else {}
        wanted = self._queries(ops)
        qvecs = dict(zip(wanted, await self._aembed_queries(wanted))) if wanted else {}
        return await asyncio.to_thread(self._run, ops, vectors, qvecs)

    def _validate(self, ops: Sequence[Op]) -> None:
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise InvalidArgument(f"unknown operation type: {type(op).__name__}")
            validate_op_namespace(op)
            if isinstance(op, (GetOp, PutOp)):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                if type(op.key) is not str:
                    raise InvalidKey(f"key must be a str, not {type(op.key).__name__}", key=op.key)
            if isinstance(op, PutOp) and op.value is not None:
                if not isinstance(op.value, Mapping):
                    raise InvalidValue(f"a LangGraph item's value is a dict, not {type(op.value).__name__}")
                ttl = op.ttl
                if ttl is not None and not (type(ttl) in (int, float) and math.isfinite(ttl) and ttl > 0):
                    raise InvalidArgument(f"ttl must be None or a positive number of minutes, not {ttl!r}")

    def _run(
        self, ops: Sequence[Op], vectors: Mapping[int, _Vectors], queries: Mapping[str, list[float]]
    ) -> list[Result]:
        results: list[Result] = []
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op, vectors.get(i))
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op, queries))
            else:
                assert isinstance(op, ListNamespacesOp)
                results.append(self._list_namespaces(op))
        return results

    # -- embeddings ----------------------------------------------------------------------

    def _put_texts(self, ops: Sequence[Op]) -> list[tuple[int, str, str]]:
        """``(op index, field path, text)`` of every text the puts of ``ops`` embed."""
        if not self._vectors:
            return []
        out: list[tuple[int, str, str]] = []
        for i, op in enumerate(ops):
            if not isinstance(op, PutOp) or op.value is None or op.index is False:
                continue
            paths = self._fields if op.index is None else [(p, p if p == "$" else tokenize_path(p)) for p in op.index]
            for path, tokens in paths:
                texts = get_text_at_path(op.value, tokens)
                if len(texts) == 1:
                    out.append((i, path, texts[0]))
                else:
                    out.extend((i, f"{path}.{j}", text) for j, text in enumerate(texts))
        return out

    def _put_vectors(self, ops: Sequence[Op], embedded: list[list[float]] | None) -> dict[int, _Vectors]:
        texts = self._put_texts(ops)
        if not texts:
            return {}
        if embedded is None:
            assert self.embeddings is not None
            embedded = self.embeddings.embed_documents([t for _, _, t in texts])
        if len(embedded) != len(texts):
            raise InvalidValue(f"the embedder returned {len(embedded)} vectors for {len(texts)} texts")
        out: dict[int, _Vectors] = {}
        for (i, path, _), vec in zip(texts, embedded):
            out.setdefault(i, {})[path] = list(vec)
        return out

    async def _aembed_documents(self, texts: list[tuple[int, str, str]]) -> list[list[float]]:
        assert self.embeddings is not None
        return await self.embeddings.aembed_documents([t for _, _, t in texts])

    def _queries(self, ops: Sequence[Op]) -> list[str]:
        if not self._vectors:
            return []
        return sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})

    async def _aembed_queries(self, wanted: list[str]) -> list[list[float]]:
        assert self.embeddings is not None
        return list(await asyncio.gather(*(self.embeddings.aembed_query(q) for q in wanted)))

    # -- the ops -------------------------------------------------------------------------

    def _row(self, record: Record, labels: Sequence[str] | None, now: float) -> codec.Row | None:
        """``record`` as a :class:`~hrm_memory.integrations.langgraph_codec.Row`, or None if it is expired or outside ``labels``."""
        env = record.value
        if codec.expired(env, now):
            return None
        ns = tuple(codec.unescape(label) for label in env["n"])
        if labels is not None and ns[: len(labels)] != tuple(labels):
            return None
        return codec.Row(record, env, ns, codec.unescape(env["k"]))

    @staticmethod
    def _item(row: codec.Row, score: float | None = None, search: bool = False) -> Any:
        record, env = row.record, row.env
        u = env.get("u")  # set by a TTL refresh, which must not move updated_at
        updated = record.updated_at if u is None else datetime.fromtimestamp(u / 1e6, tz=timezone.utc)
        if search:
            return SearchItem(row.namespace, row.key, env["v"], record.created_at, updated, score)
        return Item(value=env["v"], key=row.key, namespace=row.namespace, created_at=record.created_at, updated_at=updated)

    def _get(self, op: GetOp) -> Item | None:
        record = self.manager.get_record(self.namespace, codec.hrm_key(op.namespace, op.key))
        row = None if record is None else self._row(record, None, time.time())
        if row is None or row.key != op.key or row.namespace != tuple(op.namespace):
            return None
        if op.refresh_ttl and "t" in row.env:
            self._refresh(row.record)
        item: Item = self._item(row)
        return item

    def _put(self, op: PutOp, vectors: _Vectors | None) -> None:
        hk = codec.hrm_key(op.namespace, op.key)
        if op.value is None:
            self.manager.delete(self.namespace, hk)
            return
        env = codec.envelope(op.namespace, op.key, dict(op.value), time.time(), op.ttl, vectors)
        self.manager.write(self.namespace, hk, env)

    def _refresh(self, read: Record) -> None:
        """Push the expiry of the item read as ``read`` to now + its TTL, unless
        it changed or went meanwhile (under the namespace's lock, so a put or
        a sweep in between is never undone)."""
        with self.manager.backend.lock(self.namespace):
            record = self.manager.get_record(self.namespace, read.key)
            now = time.time()
            if record is None or record.version != read.version or codec.expired(record.value, now):
                return
            new = dict(record.value)
            new["x"] = now + float(new["t"]) * 60.0
            new.setdefault("u", round(record.updated_at.timestamp() * 1e6))
            self.manager.write(self.namespace, read.key, new)

    def _scan(self, labels: Sequence[str], where: dict[str, Any] | None = None) -> list[codec.Row]:
        """The live items under the namespace prefix ``labels`` (and ``where``), unordered.

        Under a non-empty prefix, the keys come from the backend's key list
        (no value is read) and only the matching ones are read, each through
        the pipeline like any read; the whole store is one ``query``."""
        prefix = codec.prefix_of(labels)
        now = time.time()
        records: Iterable[Record | None]
        if prefix and self._keys_listed():
            matches = compile_where(where)
            ns = self.namespace
            keys = [key for key, _, _ in self.manager.backend.keys(ns) if key.startswith(prefix)]
            records = (self.manager.get_record(ns, key) for key in keys)
            if matches is not None:
                records = (r for r in records if r is not None and matches(r.value))
        else:
            records = self.manager.query(self.namespace, prefix + "*", where=where)
        rows = (self._row(record, labels, now) for record in records if record is not None)
        return [row for row in rows if row is not None]

    def _candidates(self, labels: Sequence[str]) -> list[tuple[tuple[str, ...], str, str]]:
        """``(namespace, key, hrm key)`` of every stored item under ``labels``,
        sorted, from the backend's key list (only an over-long, hashed key
        needs its value read)."""
        prefix, want = codec.prefix_of(labels), tuple(labels)
        n = len(want)
        keys = [hk for hk, _, _ in self.manager.backend.keys(self.namespace) if hk.startswith(prefix)]
        out = []
        for hk in keys:
            parsed = codec.parse_key(hk)
            if parsed is None:  # an over-long key: its value says where it belongs
                record = self.manager.get_record(self.namespace, hk)
                if record is None:
                    continue
                env = record.value
                parsed = tuple(codec.unescape(label) for label in env["n"]), codec.unescape(env["k"])
            if parsed[0][:n] == want:  # (a truncated prefix proves less)
                out.append((parsed[0], parsed[1], hk))
        out.sort()
        return out

    def _ordered(self, labels: Sequence[str], where: dict[str, Any] | None, want: int | None) -> list[codec.Row]:
        """The first ``want`` live items under ``labels`` matching ``where`` in
        the default order, reading values only until that many matched."""
        if not self._keys_listed():
            rows = sorted(self._scan(labels, where), key=codec.order)
            return rows if want is None else rows[:want]
        matches = compile_where(where)
        now = time.time()
        out: list[codec.Row] = []
        if want == 0:
            return out
        for _, _, hk in self._candidates(labels):
            record = self.manager.get_record(self.namespace, hk)
            if record is None or (matches is not None and not matches(record.value)):
                continue
            row = self._row(record, labels, now)
            if row is not None:
                out.append(row)
                if want is not None and len(out) >= want:
                    break
        return out

    def _keys_listed(self) -> bool:
        """True when the backend holds every item (the namespace is neither
        hot nor consent-gated, so no value lives in this process only)."""
        if self._listed is None:
            spec = next((s for s in self.manager.namespaces() if s.name == self.namespace), None)
            self._listed = spec is not None and spec.tier != "hot" and spec.consent is None
        return self._listed

    def _search(self, op: SearchOp, queries: Mapping[str, list[float]]) -> list[SearchItem]:
        where = codec.translate_filter(op.filter)
        offset, limit = max(op.offset, 0), max(op.limit, 0)
        ranked: list[tuple[float | None, codec.Row]]
        if op.query and op.query in queries:
            ranked = self._dense(op.namespace_prefix, where, queries[op.query])
        elif op.query and self._recall is not None and not self._vectors:
            ranked = self._lexical(op.namespace_prefix, where, op.query, offset + limit)
        else:
            ranked = [(None, row) for row in self._ordered(op.namespace_prefix, where, offset + limit)]
        out = []
        for score, row in ranked[offset : offset + limit]:
            if op.refresh_ttl and "t" in row.env:
                self._refresh(row.record)
            out.append(self._item(row, score, search=True))
        return out

    def _dense(
        self, labels: Sequence[str], where: dict[str, Any] | None, query: Sequence[float]
    ) -> list[tuple[float | None, codec.Row]]:
        """Every item under ``labels`` matching ``where``: those with vectors by
        cosine similarity (the best field), best first, then those without
        (``score`` None), ties and the unscored in (namespace, key) order."""
        qnorm = codec.norm(query)
        scored: list[tuple[float, codec.Row]] = []
        unscored: list[codec.Row] = []
        for row in self._scan(labels, where):
            vecs = row.env.get("e")
            if vecs:
                scored.append((max(codec.cosine(query, qnorm, codec.unpack(v)) for v in vecs.values()), row))
            else:
                unscored.append(row)
        scored.sort(key=lambda pair: (-pair[0], *codec.order(pair[1])))
        unscored.sort(key=codec.order)
        ranked: list[tuple[float | None, codec.Row]] = [(s, row) for s, row in scored]
        ranked.extend((None, row) for row in unscored)
        return ranked

    def _lexical(
        self, labels: Sequence[str], where: dict[str, Any] | None, query: str, want: int
    ) -> list[tuple[float | None, codec.Row]]:
        """The best ``want`` items for ``query`` by hrm-memory's recall, best
        first (ties in (namespace, key) order); asks again for more when
        expired items or an over-long key's neighbours were left out."""
        assert self._recall is not None
        prefix = codec.prefix_of(labels) or None
        k = max(want, 1) + 8
        while True:
            hits = self._recall(query, namespaces=[self.namespace], k=k, where=where, prefix=prefix)
            now = time.time()
            rows = [(float(hit.score), self._row(hit.record, labels, now)) for hit in hits]
            found = [(score, row) for score, row in rows if row is not None]
            if len(found) >= want or len(hits) < k:
                break
            k *= 2
        found.sort(key=lambda pair: (-pair[0], *codec.order(pair[1])))
        return [(score, row) for score, row in found]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        head: tuple[str, ...] = ()
        for condition in conditions:
            if condition.match_type == "prefix":
                head = codec.literal_head(condition.path)
                break
        found: set[tuple[str, ...]] = set()
        if self._keys_listed():
            # One live item proves a namespace: values are read only until one is found.
            now = time.time()
            for ns, _, hk in self._candidates(head):
                if ns in found or not all(codec.matches(ns, c.match_type, c.path) for c in conditions):
                    continue
                record = self.manager.get_record(self.namespace, hk)
                if record is not None and not codec.expired(record.value, now):
                    found.add(ns)
        else:
            found = {row.namespace for row in self._scan(head)}
        chosen = [ns for ns in found if all(codec.matches(ns, c.match_type, c.path) for c in conditions)]
        if op.max_depth is not None:
            chosen = list({ns[: op.max_depth] for ns in chosen})
        chosen.sort()
        return chosen[op.offset : op.offset + op.limit]

    # -- TTL -----------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete every expired item now; return how many. Reads never return
        an expired item whether or not a sweep ran."""
        return self._sweep()

    def _sweep(self) -> int:
        """Each expired item found is deleted by a read-modify-write of its
        own, as ``update()`` does: under the namespace's lock (on Redis the
        lease, taken by the read and ended by the delete), and only if the
        item is still the version found expired. A put racing the sweep
        (another process or host making the key fresh) is never deleted: one
        lock held over the whole loop did not do it on Redis, whose lease
        ends with the first delete."""
        removed = 0
        now = time.time()
        backend, mm, ns = self.manager.backend, self.manager, self.namespace
        for record in mm.query(ns, "*", where={"x": {"$lte": now}}):
            with backend.lock(ns):
                current = mm.get_record(ns, record.key)  # inside the lock: read and lease in one step
                if current is None or current.version != record.version:
                    continue  # changed since it was found expired: whatever it is now wins
                if mm.delete(ns, record.key):
                    removed += 1
        return removed

    async def asweep_ttl(self) -> int:
        """:meth:`sweep_ttl` on a worker thread."""
        return await asyncio.to_thread(self._sweep)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Sweep expired items every ``sweep_interval_minutes`` (default: the
        TTL config's, else 5) on a daemon thread until :meth:`stop_ttl_sweeper`.
        Returns a future that completes when the sweeper stops."""
        interval = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        return self._sweeper.start(interval)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; True once it has stopped (or none was running)."""
        return self._sweeper.stop(timeout)


class AsyncMemoryStore(BaseStore):
    """:class:`MemoryStore` in the shape of LangGraph's async stores
    (``AsyncSqliteStore``, ``AsyncPostgresStore``): ``sweep_ttl``,
    ``start_ttl_sweeper`` and ``stop_ttl_sweeper`` are coroutines, and it is
    an async context manager. It holds a :class:`MemoryStore` (``.store``,
    built from the same arguments) and hands it every operation; the sync
    methods work too, from any thread."""

    supports_ttl: bool = True

    def __init__(self, manager: MemoryManager | None = None, **options: Any) -> None:
        self.store = MemoryStore(manager, **options)
        self.ttl_config = self.store.ttl_config
        self._sweep_task: asyncio.Task[None] | None = None

    @property
    def manager(self) -> MemoryManager:
        return self.store.manager

    def __getattr__(self, name: str) -> Any:
        # what else a caller reads of a store (index_config, embeddings, namespace, ...) is the MemoryStore's
        if name.startswith("__") or name == "store":
            raise AttributeError(name)
        return getattr(self.store, name)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self.store.batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self.store.abatch(ops)

    async def sweep_ttl(self) -> int:
        """Delete every expired item now (on a worker thread); return how many."""
        return await self.store.asweep_ttl()

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Start the periodic sweep (:meth:`MemoryStore.start_ttl_sweeper`);
        the task completes when the sweeper stops."""
        future = self.store.start_ttl_sweeper(sweep_interval_minutes)

        async def stopped() -> None:
            await asyncio.wrap_future(future)

        task = self._sweep_task = asyncio.create_task(stopped())
        return task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the periodic sweep; True once it has stopped (or none was running)."""
        return await asyncio.to_thread(self.store.stop_ttl_sweeper, timeout)

    async def aclose(self) -> None:
        """Stop the sweeper and close the store (and its manager if it opened it)."""
        await asyncio.to_thread(self.store.close)

    def close(self) -> None:
        self.store.close()

    async def __aenter__(self) -> AsyncMemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> AsyncMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AsyncMemoryStore({self.store!r})"


__all__ = ["DEFAULT_NAMESPACE", "AsyncMemoryStore", "MemoryStore"]
