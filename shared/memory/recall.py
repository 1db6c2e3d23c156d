"""Recall: find memories by meaning across namespaces.

The index (SQLite FTS5, :mod:`hrm_memory.storage.textindex`) holds the
readable text of every record of a namespace declared with ``index=``. It is
derived data and is treated as such:

- **kept current lazily**: a write only notes its key (the event bus collects
  the keys of indexed namespaces it is told about, one set insert); the next
  recall indexes what changed since, here and in other processes (read from
  the change log, from a cursor kept in the index), so the write path pays
  nothing for the index;
- **checked before it is served**: every candidate is looked up in the store
  and dropped (and re-indexed) unless the store still has that version, so a
  deleted, superseded, purged or archived record is never returned as live;
- **rebuilt, not trusted**: the first recall in a process compares the index
  with the store's key list and re-indexes what differs (a crash between a
  commit and its log entry leaves nothing missing); a change log that no
  longer reaches back to the index's cursor means a full rebuild;
- **gated text stays in memory**: hot-tier records and consent-gated values
  awaiting consent are indexed in a second, in-memory index only.

Ranking: bm25 over the record's text and its context (key words, namespace,
kind), Porter-stemmed, stopwords left out of the query; optionally fused
with a dense retriever (``MemoryManager(embed=...)``) by document, weighted
scores by default (measured on LoCoMo) or reciprocal rank.
Queries are classified (:func:`hrm_memory.recall_text.classify`) and routed
to the kinds that answer them, then cascade to every kind and to the cold
tier while the best confidence stays under :data:`CASCADE_BELOW`.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import recall_purges as purges
from . import recall_text as rt
from .backend import RECOVER
from .errors import CursorExpired, InvalidArgument, InvalidCursor
from .filters import compile_where
from .ops import RecallOp
from .records import Record, Stored
from .spec import KINDS, NamespaceSpec
from .search_index import Doc, SearchIndex
from .steps import Attrs, Steps
from .tracing import OpSpan

#: Confidence weights: relevance, source quality, recency, consistency,
#: completeness (Athena's documented 35/25/15/15/10, applied as documented).
WEIGHTS = (0.35, 0.25, 0.15, 0.15, 0.10)
#: Below this best confidence, recall widens its search (kinds, then cold).
CASCADE_BELOW = 0.5
#: Half-life of the recency signal, in days.
RECENCY_HALF_LIFE_DAYS = 30.0
#: Reciprocal-rank fusion constant.
RRF_K = 60
#: How text and dense results are fused (``MemoryManager(fusion=...)``),
#: the default first: on LoCoMo with all-MiniLM-L6-v2 (BENCHMARKS.md),
#: weighted 0.9/0.1 gives recall@1/5/10 0.312/0.542/0.620 against lexical
#: 0.311/0.534/0.617 and dense 0.095/0.265/0.346; equal-weight RRF (recall@5
#: 0.376) or an equal weighted mean (0.472) lets a weaker dense list pull
#: good text hits down.
FUSIONS = ("weighted", "rrf")
#: Weighted fusion: the text score (bm25 over the best one) and the cosine
#: (min-max over the dense list) weigh this much each.
FUSION_WEIGHTS = (0.9, 0.1)


@dataclass(frozen=True, slots=True)
class Hit:
    """One recalled memory: the record, its rank score (higher is better) and
    a confidence in [0, 1]; ``why`` says how it ranked (``explain=True``)."""

    namespace: str
    key: str
    record: Record
    score: float
    confidence: float
    why: dict[str, Any] | None = None


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


class Recalling(Steps):
    """The recall handler and the upkeep of its index; mixed into the pipeline."""

    disk_index: SearchIndex | None = None
    mem_index: SearchIndex | None = None
    embedder: Embedder | None = None
    fusion = FUSIONS[0]
    _reconciled = False
    _dense_cache: dict[int, tuple[int, list[tuple[int, str, str, bytes]]]] = {}  # noqa: RUF012  (per instance: setup_recall)

    def setup_recall(self, disk: SearchIndex | None, mem: SearchIndex | None, embed: Any = None,
                     fusion: str = FUSIONS[0]) -> None:
        if fusion not in FUSIONS:
            raise InvalidArgument(f"fusion must be one of {FUSIONS}, not {fusion!r}")
        self.fusion = fusion
        self.disk_index, self.mem_index = disk, mem
        self.embedder = None if embed is None else Embedder(embed)
        self._reconciled = False
        self._dense_cache = {}
        self._accessed: list[int] = []

    def close(self) -> None:
        purges.at_close(self)  # a purge elsewhere since the last recall: its text does not stay in this index
        super().close()
        if self.disk_index is not None and self._accessed:
            self.disk_index.touch(self._accessed)
        for index in (self.disk_index, self.mem_index):
            if index is not None:
                index.close()

    # -- keeping the index current ----------------------------------------------

    def _doc(self, spec: NamespaceSpec, st: Stored) -> Doc:
        value = self.decode(spec, st, False)
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
        return Doc(spec.name, st.key, st.version, st.created_us, st.updated_us, st.tier, kind, importance,
                   body, rt.context(spec.name, st.key, kind))

    def _index_keys(self, pending: set[tuple[str, str]], meta: dict[str, str] | None = None) -> None:
        """Bring the index rows of ``pending`` keys in line with the store (leaving
        out namespaces purged since they were read: recall_purges.py)."""
        purged = purges.purged_since_now(self.backend) if self.disk_index is not None else None
        specs = self._specs
        for index, persisted in ((self.disk_index, True), (self.mem_index, False)):
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
                    st = None if spec.tier == "hot" else self.backend.get(ns, key)
                else:
                    st = self.hot.get(ns, key) if (spec.tier == "hot" or spec.consent is not None) else None
                if st is None:
                    removals.append((ns, key))
                else:
                    upserts.append(self._doc(spec, st))
            if upserts and self.embedder is not None:
                vecs = self.embedder.documents([d.body for d in upserts])
                upserts = [d._replace(vec=v) for d, v in zip(upserts, vecs, strict=True)]
            if upserts or removals or (meta and persisted):
                index.apply(upserts, removals, *((meta, purged) if persisted else (None, None)))
                self.index_epoch += 1  # what recall and context can see may have changed
                self._dense_cache.pop(id(index), None)

    def sync_index(self) -> None:
        """Index every change made since the last recall, here or elsewhere."""
        pending = self.bus.take_touched()
        meta = None
        disk, changes = self.disk_index, self.backend.changes
        again, purge_meta = purges.catch_up(self)  # rows of namespaces purged elsewhere dropped
        pending |= again
        meta = purge_meta or None
        indexed = [s for s in self.registry if s.index and s.tier != "hot"]
        if disk is not None and changes is not None:
            start = disk.meta("cursor")
            end = None
            if start is not None:
                try:
                    if changes.changed(start):
                        events, end = changes.read(start, skip_own=False)
                        if any(e.namespace not in self._specs for e in events):
                            # declared by another process since: load it before its
                            # events are filtered, or they are skipped for good
                            self._load_declared()
                        indexed_now = self.bus.indexed
                        pending.update((e.namespace, e.key) for e in events
                                       if e.namespace in indexed_now and e.op != RECOVER)
                        # A writer died: its last commits may have no entry; look again.
                        dead = {e.namespace for e in events if e.op == RECOVER}
                        pending.update(self._rebuild([s for s in indexed if s.name in dead], full=False))
                except (CursorExpired, InvalidCursor):
                    start = None
            if start is None:
                end = changes.cursor()
                pending.update(self._rebuild(indexed, full=True))
                self._reconciled = True
            if end is not None and end != start:
                meta = {**(meta or {}), "cursor": end}
        if not self._reconciled and disk is not None and changes is None:
            # No change log: other processes' writes are seen once per process.
            pending.update(self._rebuild(indexed, full=False))
            self._reconciled = True
        if pending or meta:
            self._index_keys(pending, meta)
        if len(self._accessed) >= 256 and disk is not None:
            accessed, self._accessed = self._accessed, []
            disk.touch(accessed)

    def _rebuild(self, specs: list[NamespaceSpec], *, full: bool) -> set[tuple[str, str]]:
        """Keys whose index rows differ from the store: every record (archived
        ones too) when ``full``, else the live keys' update times."""
        assert self.disk_index is not None
        out: set[tuple[str, str]] = set()
        for spec in specs:
            have = self.disk_index.versions(spec.name)
            if full:
                live = {st.key: st.updated_us for st in self.backend.scan(spec.name, include_cold=True, strict=False)}
            else:
                live = {k: updated for k, _, updated in self.backend.keys(spec.name)}
            out.update((spec.name, k) for k, updated in live.items() if have.get(k, (0, -1, ""))[1] != updated)
            out.update((spec.name, k) for k, (_, _, tier) in have.items() if k not in live and (full or tier != "cold"))
        return out

    def purge_index(self, namespace: str) -> None:
        self.index_epoch += 1
        for index in (self.disk_index, self.mem_index):
            if index is not None:
                index.purge(namespace)
                self._dense_cache.pop(id(index), None)
        # What this session still holds (session-only copies awaiting consent)
        # stays readable, so it is indexed again, in memory.
        self.bus.touched.update((namespace, st.key) for st in self.hot.scan(namespace))

    # -- recall ---------------------------------------------------------------------

    def _recall(self, op: RecallOp, scope: str | None, span: OpSpan | None) -> tuple[list[Hit], Attrs]:
        query, namespaces, kinds, k, since, explain, include_cold, where, prefix = op
        if not isinstance(query, str):
            raise InvalidArgument(f"recall() takes a query str, not {type(query).__name__}")
        if type(k) is not int or not 1 <= k <= 1000:
            raise InvalidArgument(f"k must be an int in 1..1000, not {k!r}")
        if kinds is not None:
            if not isinstance(kinds, (str, list, tuple, set, frozenset)):
                raise InvalidArgument(f"kinds must be a str or a sequence of str, not {type(kinds).__name__}")
            kinds = [kinds] if isinstance(kinds, str) else list(kinds)
            bad = [x for x in kinds if x not in KINDS]
            if bad:
                raise InvalidArgument(f"unknown kind(s) {bad}; expected some of {KINDS}")
        if prefix is not None and not isinstance(prefix, str):
            raise InvalidArgument("prefix must be a str")
        if prefix and not prefix.isascii() and any("\ud800" <= c <= "\udfff" for c in prefix):  # keys never do
            raise InvalidArgument("prefix holds a lone surrogate: no key starts with it")
        since_us = _since_us(since)
        matches = compile_where(where)
        if not isinstance(namespaces, (str, list, tuple)):
            raise InvalidArgument(f"namespaces must be a glob or a list of globs, not {type(namespaces).__name__}")
        patterns = [namespaces] if isinstance(namespaces, str) else list(namespaces)
        specs: dict[str, NamespaceSpec] = {}
        for pattern in patterns:
            for spec in self._visible(scope, pattern, self.match(pattern)):
                specs[spec.name] = spec
        searched = [s for s in specs.values() if s.index]
        qtype = rt.classify(query)
        terms = rt.query_terms(query)
        hits: list[Hit] = []
        path: list[dict[str, Any]] = []
        if searched and terms:
            self.sync_index()
            route = rt.ROUTES.get(qtype, ()) if kinds is None else kinds
            # A stage that cannot find more than the one before is skipped:
            # routing when no searched namespace can hold a routed kind, the
            # cold tier when none can archive (no TTL, no cap).
            typed = {s.kind for s in searched}
            stages: list[tuple[str, Sequence[str] | None, bool]] = []
            # (Nor is it run when every searched namespace's kind is routed:
            # it would be the next stage, run twice.)
            if kinds is None and route and (None in typed or typed & set(route)) and not typed <= set(route):
                stages.append(("routed", route, include_cold))
            stages.append(("all kinds" if kinds is None else "kinds", kinds, include_cold))
            if not include_cold and any(s.ttl is not None or s.max_keys is not None for s in searched):
                stages.append(("cold", kinds, True))
            for name, stage_kinds, cold in stages:
                hits = self._search(searched, query, terms, qtype, stage_kinds, cold, k, since_us, prefix, matches)
                best = max((h.confidence for h in hits), default=0.0)
                path.append({"stage": name, "kinds": list(stage_kinds) if stage_kinds else None, "cold": cold,
                             "hits": len(hits), "confidence": round(best, 3)})
                # A routed stage is a narrowing: it ends the search only with
                # k confident hits; fewer, and every kind is searched.
                if best >= CASCADE_BELOW and (len(hits) >= k or name != "routed"):
                    break
            self._touch(hits)
            hits = [_with(h, {**(h.why or {}), "type": qtype, "path": path}, explain=explain) for h in hits]
        attrs = None
        if span is not None:
            attrs = {
                "db.response.returned_rows": len(hits),
                "hrm.memory.query_type": qtype,
                "hrm.memory.query_terms": len(terms),
                "hrm.memory.namespaces": len(searched),
                "hrm.memory.stages": len(path),
                "hrm.memory.confidence": round(hits[0].confidence, 3) if hits else 0.0,
            }
        return hits, attrs

    def _touch(self, hits: list[Hit]) -> None:
        """Count the accesses; written with the next index update (or at close)."""
        for h in hits:
            if h.why and h.why.get("id") is not None:
                self._accessed.append(h.why["id"])

    def _search(self, specs: list[NamespaceSpec], query: str, terms: list[str], qtype: str,
                kinds: Sequence[str] | None, cold: bool, k: int, since_us: int | None, prefix: str | None,
                matches: Callable[[Any], bool] | None) -> list[Hit]:
        names = [s.name for s in specs]
        want = candidates_for(k, dense=self.embedder is not None)
        candidates: dict[tuple[str, str], tuple[Any, bool]] = {}
        lexical: list[tuple[str, str]] = []
        for index, session in ((self.mem_index, True), (self.disk_index, False)):
            if index is None:
                continue
            selective = index.selective(terms)  # words in most documents are not worth scoring
            if not selective:
                continue
            match = rt.fts_query(selective)
            for row in index.search(match, names, cold=cold, limit=want, kinds=kinds, since_us=since_us, prefix=prefix,
                                    text=False):
                ref = (row.ns, row.key)
                if ref not in candidates:  # a session copy supersedes the persisted one
                    candidates[ref] = (row, session)
                    lexical.append(ref)
        lexical.sort(key=lambda ref: candidates[ref][0].score)
        dense = self._dense(query, names, cold, want, candidates) if self.embedder is not None else []
        fused = _fuse(lexical, dense, candidates, self.fusion)
        top_lex = -candidates[lexical[0]][0].score if lexical else 1.0
        routes = rt.ROUTES.get(qtype, ())
        # Ranked by everything the index knows, then checked against the store
        # best first, until k are live: a look-up per hit, not per candidate.
        ranked = []
        for ref, fscore in fused:
            row, session = candidates[ref]
            routed = row.kind is not None and row.kind in routes
            boost = (1 + 0.1 * (row.importance - 0.5)) * (1 + 0.03 * math.log1p(row.hits)) * (1.1 if routed else 1.0)
            ranked.append((fscore * boost, row, session))
        ranked.sort(key=lambda f: (-f[0], f[1].ns, f[1].key))
        found: list[tuple[float, Any, bool, Stored, Any]] = []
        for score, row, session in ranked:
            spec = self._specs.get(row.ns)
            if spec is None:
                continue
            st = self.lookup(spec, row.key)
            if st is None or st.version != row.version or (st.tier == "cold" and not cold):
                if not session or st is None:
                    self.bus.touched.add((row.ns, row.key))  # stale row: re-indexed on the next recall
                continue
            value = self.decode(spec, st, False)
            if matches is not None and not matches(value):
                continue
            found.append((score, row, session, st, value))
            if len(found) >= k:
                break
        now = time.time()
        dense_refs = [r for r, _ in dense]
        cover = rt.coverer(terms)
        hits: list[Hit] = []
        for score, row, session, st, value in found[:k]:
            ref = (row.ns, row.key)
            age_days = max(0.0, now - st.updated_us / 1e6) / 86400
            why = {
                "id": None if session else row.id,
                "relevance": min(1.0, max(0.0, -row.score) / top_lex) if row.score else 0.0,
                "coverage": cover(rt.extract(value, self._specs[row.ns].index or ("$",)) + " "
                                  + rt.context(row.ns, row.key, row.kind)),
                "recency": 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS),
                "quality": 0.5 * {"hot": 0.9, "warm": 1.0, "cold": 0.7}.get(st.tier, 0.8) + 0.5 * row.importance,
                "routed": row.kind is not None and row.kind in routes,
                "lexical_rank": _rank(lexical, ref),
                "dense_rank": _rank(dense_refs, ref),
                "hits": row.hits,
            }
            record = Record.from_stored(row.ns, st, value, st.tier != "hot")
            hits.append(Hit(row.ns, row.key, record, score, 0.0, why))
        # Consistency: how many of the other hits from the same namespace also
        # match some of the query's words.
        agreeing: dict[str, int] = {}
        for h in hits:
            if (h.why or {}).get("coverage", 0) > 0:
                agreeing[h.namespace] = agreeing.get(h.namespace, 0) + 1
        return [_with(h, h.why, confidence=_confidence(h, len(hits) - 1, agreeing.get(h.namespace, 0))) for h in hits]

    def _dense(self, query: str, names: list[str], cold: bool, want: int,
               candidates: dict[tuple[str, str], tuple[Any, bool]]) -> list[tuple[tuple[str, str], float]]:
        assert self.embedder is not None
        q = self.embedder.query(query)
        scored: list[tuple[float, int, str, str, bool]] = []
        wanted = set(names)
        for index, session in ((self.mem_index, True), (self.disk_index, False)):
            if index is None:
                continue
            vecs = self._vectors(index, cold)
            np = _numpy()
            if np is not None:  # one matrix product over the vectors, kept with the rows it was made from
                cache: dict[int, Any] = self.__dict__.setdefault("_dense_np", {})
                got = cache.get(id(index))
                if got is None or got[0] is not vecs or got[1] != len(q):
                    got = cache[id(index)] = (vecs, len(q), *_matrix(np, vecs, len(q)))
                _, _, mat, keep, by_ns = got
                pick = [by_ns[ns] for ns in dict.fromkeys(names) if ns in by_ns]
                if pick:
                    sel = np.concatenate(pick)
                    sims = mat[sel] @ np.frombuffer(q.tobytes(), dtype=np.float32)
                    best = np.argsort(-sims, kind="stable")[:want]
                    for i in best.tolist():
                        rid, ns, key, _ = vecs[keep[int(sel[i])]]
                        scored.append((float(sims[i]), rid, ns, key, session))
                continue
            for rid, ns, key, blob in vecs:
                if ns in wanted:
                    v = array("f")
                    v.frombytes(blob)
                    if len(v) == len(q):
                        scored.append((sum(a * b for a, b in zip(q, v)), rid, ns, key, session))
        scored.sort(reverse=True)
        top = scored[:want]
        out = []
        for index, session in ((self.mem_index, True), (self.disk_index, False)):
            if index is None:
                continue
            rows = index.rows([rid for _, rid, _, _, s in top if s is session])
            for cos, rid, ns, key, s in top:
                if s is session and rid in rows and (ns, key) not in candidates:
                    candidates[(ns, key)] = (rows[rid], session)
        for cos, rid, ns, key, s in top:
            out.append(((ns, key), cos))
        return out

    def _vectors(self, index: SearchIndex, cold: bool) -> list[tuple[int, str, str, bytes]]:
        cached = self._dense_cache.get(id(index))
        if cached is None or cached[0] != int(cold):
            names = sorted(self.bus.indexed)
            cached = (int(cold), index.vectors(names, cold=cold))
            self._dense_cache[id(index)] = cached
        return cached[1]


def candidates_for(k: int, *, dense: bool) -> int:
    """Lexical candidates a search for ``k`` hits takes: enough for the boosts
    to reorder and stale rows to be dropped, more when a dense list is fused
    with them."""
    return max(50, 4 * k) if dense else max(20, 2 * k)


def _numpy() -> Any:
    """numpy if it is installed (dense retrieval is then one matrix product;
    without it, a pure-Python loop gives the same ranking, slower)."""
    try:
        import numpy  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return numpy


def _matrix(np: Any, rows: list[tuple[int, str, str, bytes]], dim: int) -> tuple[Any, list[int], dict[str, Any]]:
    """The vectors of ``dim`` floats among ``rows`` as one float32 matrix,
    the row each comes from, and each namespace's matrix rows."""
    keep = [i for i, row in enumerate(rows) if len(row[3]) == 4 * dim]
    mat = np.frombuffer(b"".join(rows[i][3] for i in keep), dtype=np.float32).reshape(len(keep), dim)
    groups: dict[str, list[int]] = {}
    for j, i in enumerate(keep):
        groups.setdefault(rows[i][1], []).append(j)
    return mat, keep, {ns: np.asarray(js, dtype=np.intp) for ns, js in groups.items()}


def _rank(refs: list[tuple[str, str]], ref: tuple[str, str]) -> int | None:
    try:
        return refs.index(ref) + 1
    except ValueError:
        return None


def _fuse(lexical: list[tuple[str, str]], dense: list[tuple[tuple[str, str], float]],
          candidates: dict[tuple[str, str], tuple[Any, bool]], how: str = FUSIONS[0]) -> list[tuple[tuple[str, str], float]]:
    """Order candidates: by bm25 alone, or fused with the dense list by
    document (never by list position): reciprocal rank (``"rrf"``), or the
    each list's score scaled to [0, 1], weighted by :data:`FUSION_WEIGHTS`
    (``"weighted"``)."""
    if not dense:
        return [(ref, -candidates[ref][0].score) for ref in lexical]
    scores: dict[tuple[str, str], float] = {}
    if how == "rrf":
        for i, ref in enumerate(lexical):
            scores[ref] = scores.get(ref, 0.0) + 1.0 / (RRF_K + i + 1)
        for i, (ref, _) in enumerate(dense):
            scores[ref] = scores.get(ref, 0.0) + 1.0 / (RRF_K + i + 1)
    else:
        w_text, w_dense = FUSION_WEIGHTS
        top = -candidates[lexical[0]][0].score if lexical else 1.0
        for ref in lexical:
            scores[ref] = w_text * (-candidates[ref][0].score / top if top else 0.0)
        lo, hi = min(c for _, c in dense), max(c for _, c in dense)
        for ref, cos in dense:
            scores[ref] = scores.get(ref, 0.0) + w_dense * ((cos - lo) / (hi - lo) if hi > lo else 1.0)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def _confidence(hit: Hit, others: int, agreeing: int) -> float:
    """Relevance, source quality, recency, consistency (the share of the
    ``others`` hits, ``agreeing`` of them from this hit's namespace, that
    corroborate the query words) and completeness (share of the query's
    words it covers), weighted by :data:`WEIGHTS`."""
    why = hit.why or {}
    consistency = 1.0
    if others:
        agree = agreeing - (1 if why.get("coverage", 0) > 0 else 0)  # the others only
        consistency = 0.5 + 0.5 * agree / others
    parts = (why.get("relevance", 0.0), why.get("quality", 0.5), why.get("recency", 0.5), consistency,
             why.get("coverage", 0.0))
    return round(float(sum(w * p for w, p in zip(WEIGHTS, parts, strict=True))), 4)


def _with(hit: Hit, why: dict[str, Any] | None, *, confidence: float | None = None, explain: bool = True) -> Hit:
    return Hit(hit.namespace, hit.key, hit.record, round(hit.score, 6),
               hit.confidence if confidence is None else confidence, why if explain else None)


def _since_us(since: Any) -> int | None:
    if since is None:
        return None
    if isinstance(since, datetime):
        if since.tzinfo is None:
            raise InvalidArgument("since must be timezone-aware (or epoch seconds)")
        return int(since.timestamp() * 1_000_000)
    if type(since) in (int, float) and math.isfinite(since):
        return int(since * 1_000_000)
    raise InvalidArgument(f"since must be a datetime or epoch seconds, not {since!r}")


__all__ = ["CASCADE_BELOW", "WEIGHTS", "Embedder", "Hit", "Recalling", "SearchIndex", "candidates_for"]
