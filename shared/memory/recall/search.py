"""Recall: find memories by meaning across namespaces.

The index (:mod:`hrm_memory.recall.index`) holds the readable text of every
record of a namespace declared with ``index=``, kept current lazily. What it
answers is **checked before it is served**: every candidate is looked up in
the store and dropped (and re-indexed) unless the store still has that
version, so a deleted, superseded, purged or archived record is never
returned as live.

Ranking: bm25 over the record's text and its context (key words, namespace,
kind), Porter-stemmed, stopwords left out of the query; optionally fused
with a dense retriever (``MemoryManager(embed=...)``) by document, weighted
scores by default (measured on LoCoMo) or reciprocal rank.
Queries are classified (:func:`hrm_memory.recall.text.classify`) and routed
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

import orjson

from hrm_memory.core.errors import InvalidArgument
from hrm_memory.core.filters import compile_where
from hrm_memory.core.ops import RecallOp
from hrm_memory.core.records import Record, Stored
from hrm_memory.core.spec import KINDS, NamespaceSpec
from hrm_memory.core.state import Attrs, Core, Handlers
from hrm_memory.recall import text as rt
from hrm_memory.recall.index import Doc, RecallIndex
from hrm_memory.tracing.keys import capturing_content
from hrm_memory.tracing.spans import OpSpan

#: Confidence weights: relevance, source quality, recency, consistency,
#: completeness (Athena's documented 35/25/15/15/10, applied as documented).
WEIGHTS = (0.35, 0.25, 0.15, 0.15, 0.10)
#: Below this best confidence, recall widens its search (kinds, then cold).
CASCADE_BELOW = 0.5
#: Half-life of the recency signal, in days.
RECENCY_HALF_LIFE_DAYS = 30.0
#: How much a passage that says when (a date, a weekday, a time) is lifted
#: for a question about time (chosen on LoCoMo conversations 0-4 and the
#: legacy data's own questions, tests/recall/test_recall_passages.py).
TIME_BOOST = 1.25
#: How much a passage that is the entry of whom or what a question about
#: someone asks ("who is Bella?": the entry under "bella" in a map of people)
#: is lifted, above passages that only mention the name (the legacy data's
#: own question, tests/newcomer/test_new_user_hour.py).
ENTITY_BOOST = 1.25
#: When passages holding every word of the question were found, the others
#: (holding fewer) only fill the hits after them: they are ranked among this
#: many postings of the question's rarest words (the newest when one word
#: alone has more), where the index's POSTINGS bound the search when none
#: hold them all. FTS5's bm25 costs a few microseconds a posting: this bounds
#: the filling to a millisecond or less, at any size (and a single word with
#: more passages than this is not ranked by FTS5 at all: see TextIndex.fill).
FILL_POSTINGS = 200
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
    """One recalled memory: the record; ``score``, its rank score as a share
    of the best hit's of the same recall (the first hit 1.0, the others in
    (0, 1], best first: it orders one recall's hits); ``confidence`` in
    [0, 1], how well it answers, comparable across queries (the one to
    filter on); and ``snippet``: the passage of the record that
    answers (a message, a list or map entry, a paragraph; at most
    :data:`~hrm_memory.recall.text.SNIPPET_CHARS` characters of it, as
    written); ``why`` says how it ranked (``explain=True``)."""

    namespace: str
    key: str
    record: Record
    score: float
    confidence: float
    why: dict[str, Any] | None = None
    snippet: str = ""


class Recall:
    """The ``recall`` handler: given the core and the recall index."""

    def __init__(self, core: Core, index: RecallIndex, fusion: str = FUSIONS[0]) -> None:
        if fusion not in FUSIONS:
            raise InvalidArgument(f"fusion must be one of {FUSIONS}, not {fusion!r}")
        self.core = core
        self.index = index
        self.fusion = fusion

    def handlers(self) -> Handlers:
        return {RecallOp: ("recall", self.recall, False)}

    def close(self) -> None:
        self.index.close()

    # -- recall ---------------------------------------------------------------------

    def recall(self, op: RecallOp, scope: str | None, span: OpSpan | None) -> tuple[list[Hit], Attrs]:
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
            for spec in self.core.visible(scope, pattern, self.core.match(pattern)):
                specs[spec.name] = spec
        searched = [s for s in specs.values() if s.index]
        qtype = rt.classify(query)
        terms = rt.query_terms(query)
        hits: list[Hit] = []
        path: list[dict[str, Any]] = []
        if searched and terms:
            self.index.sync()
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
            memo: dict[tuple[Any, ...], Any] = {}  # what each index found for the query, shared by the stages
            for name, stage_kinds, cold in stages:
                hits = self._search(searched, query, terms, qtype, stage_kinds, cold, k, since_us, prefix, matches,
                                    memo)
                best = max((h.confidence for h in hits), default=0.0)
                path.append({"stage": name, "kinds": list(stage_kinds) if stage_kinds else None, "cold": cold,
                             "hits": len(hits), "confidence": round(best, 3)})
                # A routed stage is a narrowing: it ends the search only with
                # k confident hits; fewer, and every kind is searched.
                if best >= CASCADE_BELOW and (len(hits) >= k or name != "routed"):
                    break
            self.index.touch(h.why["id"] for h in hits if h.why and h.why.get("id") is not None)
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
            if capturing_content() and not any(s.consent is not None for s in specs.values()):
                # Opted in, and no namespace searched is consent-gated.
                attrs["gen_ai.memory.query.text"] = query
                attrs["gen_ai.memory.records"] = orjson.dumps(
                    [{"id": h.key, "content": h.snippet, "score": round(h.score, 4),
                      "metadata": {"namespace": h.namespace}} for h in hits]
                ).decode()  # fmt: skip
        return hits, attrs

    def _search(self, specs: list[NamespaceSpec], query: str, terms: list[str], qtype: str,
                kinds: Sequence[str] | None, cold: bool, k: int, since_us: int | None, prefix: str | None,
                matches: Callable[[Any], bool] | None,
                memo: dict[tuple[Any, ...], Any] | None = None) -> list[Hit]:
        names = [s.name for s in specs]
        want = candidates_for(k, dense=self.index.embedder is not None)
        candidates: dict[tuple[str, str], tuple[Any, bool]] = {}
        lexical: list[tuple[str, str]] = []
        every = list(dict.fromkeys(rt.tokens(query)))[:32]  # the stopwords the terms leave out too
        memo = {} if memo is None else memo
        for index, session in self.index.indexes():
            plan = memo.get(("plan", id(index)))
            if plan is None:  # (the same for every stage)
                selective = index.selective(terms)  # words in most documents are not worth scoring
                plan = memo[("plan", id(index))] = (selective, index.window(selective) if selective else None)
            selective, newest = plan
            rows: list[Any] = []
            filling = False  # passages holding every word were found: the others only fill the hits after them
            if len(every) > 1 or selective != terms or newest is not None:
                # The passages holding every word of the question come first,
                # found from the rarest word's postings, whatever words were
                # left out of the ranked search below to bound its cost (and
                # when some are found, the others are ranked within a smaller
                # budget, below).
                held = memo.get(("exact", id(index), cold))
                if held is None:  # (kinds are filtered below: the stages differ by kinds alone)
                    held = index.exact(every, names, cold=cold, limit=want, since_us=since_us, prefix=prefix)
                    if not held and every != terms and newest is not None:
                        # the budget left one common word to rank in a window: without the
                        # stopwords, the passages holding every term come first
                        held = index.exact(terms, names, cold=cold, limit=want, since_us=since_us, prefix=prefix)
                    memo[("exact", id(index), cold)] = held
                rows = held if kinds is None else [r for r in held if r.kind in kinds]
                # A stage narrowed to some kinds is cut short when passages hold
                # every word: the next stage ranks them above all the others, and
                # this one must not end the search with hits holding fewer.
                if kinds is not None and held:
                    selective = []
                elif rows and selective and len(rows) < want:
                    # the rest only fill the hits after these: ranked within a smaller budget
                    fill = memo.get(("fill", id(index)))
                    if fill is None:
                        kept = index.selective(terms, FILL_POSTINGS)
                        fill = memo[("fill", id(index))] = (kept, index.window(kept, FILL_POSTINGS) if kept else None)
                    selective, newest = fill
                    filling = True
            # The words kept are ranked too (within the posting budget) unless
            # every candidate needed holds all the words already.
            if selective and len(rows) < want:
                # A single word left in more passages than the filling's budget is
                # not ranked by FTS5, whose bm25 would count all its postings first:
                # its newest passages are scored from the counts already made
                # (unless the filter passes too few of them).
                got = index.fill(selective, names, cold=cold, limit=want, budget=FILL_POSTINGS, kinds=kinds,
                                 since_us=since_us, prefix=prefix) if filling and newest is not None else None
                ranked = got if got is not None else index.search(
                    rt.fts_query(selective), names, cold=cold, limit=want, kinds=kinds, since_us=since_us,
                    prefix=prefix, text=False, newest=newest)
                # below every passage holding all the words, whatever its bm25 over the words kept
                floor = min([0.0, *(r.score for r in ranked)])
                rows = [r._replace(score=r.score + floor) for r in rows] + ranked
            for row in rows:
                ref = (row.ns, row.key)
                if ref not in candidates:  # a session copy supersedes the persisted one
                    candidates[ref] = (row, session)
                    lexical.append(ref)
        lexical.sort(key=lambda ref: candidates[ref][0].score)
        dense = self._dense(query, names, cold, want, candidates) if self.index.embedder is not None else []
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
        found: list[tuple[float, Any, bool, Stored, Any, str, int, float]] = []
        cover = rt.coverer(terms, self._weights(terms)) if ranked else rt.coverer([])
        # A question about time ("when is ...", "what is due") is answered by a
        # passage that says when: those are looked at among a few more
        # candidates and lifted by TIME_BOOST.
        timely = qtype in rt.TIMELY
        about = qtype == "relational"  # who: the entry named by the query lifted by ENTITY_BOOST
        enough = min(len(ranked), max(k, 2 * k if timely or about else k))
        for score, row, session in ranked:
            spec = self.core.specs.get(row.ns)
            if spec is None:
                continue
            st = self.core.lookup(spec, row.key)
            if st is None or st.version != row.version or (st.tier == "cold" and not cold):
                if not session or st is None:
                    self.index.stale(row.ns, row.key)  # re-indexed on the next recall
                continue
            value = self.core.decode(spec, st, False)
            if matches is not None and not matches(value):
                continue
            parts = rt.passages(value, spec.index or ("$",))
            if row.score:  # found by its words: the passage bm25 ranked best
                part = min(row.part, len(parts) - 1)
            else:  # found by the embedder alone: the passage holding most of the query
                part = max(range(len(parts)), key=lambda i: (cover(parts[i].text), -i))
            coverage = cover(f"{parts[part].text} {rt.context(row.ns, row.key, row.kind)}")
            if row.score and not coverage:
                # its words matched only in what was written before it (the
                # near column ranks a passage, it never finds one alone)
                continue
            if timely and rt.says_when(parts[part].text):
                score *= TIME_BOOST
            if about and rt.named_by(parts[part].text, terms):
                score *= ENTITY_BOOST
            found.append((score, row, session, st, value, parts[part].shown, part, coverage))
            if len(found) >= enough:
                break
        if timely or about:
            found.sort(key=lambda f: (-f[0], f[1].ns, f[1].key))
        # A hit's score is its share of the best one's: 1.0 for the first hit.
        top = max((f[0] for f in found), default=0.0)
        now = time.time()
        dense_refs = [r for r, _ in dense]
        shown_hits: list[tuple[str, str, Record, float, dict[str, Any], str]] = []
        for score, row, session, st, value, shown, part, coverage in found[:k]:
            ref = (row.ns, row.key)
            age_days = max(0.0, now - st.updated_us / 1e6) / 86400
            why = {
                "id": None if session else row.id,
                "relevance": min(1.0, max(0.0, -row.score) / top_lex) if row.score else 0.0,
                "coverage": coverage,
                "passage": part,
                "recency": 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS),
                "quality": 0.5 * {"hot": 0.9, "warm": 1.0, "cold": 0.7}.get(st.tier, 0.8) + 0.5 * row.importance,
                "routed": row.kind is not None and row.kind in routes,
                "lexical_rank": _rank(lexical, ref),
                "dense_rank": _rank(dense_refs, ref),
                "hits": row.hits,
            }
            record = Record.from_stored(row.ns, st, value, st.tier != "hot")
            shown_hits.append((row.ns, row.key, record, round(score / top if top > 0 else 0.0, 6), why,
                         rt.snippet(shown, terms)))
        # Consistency: how many of the other hits from the same namespace also
        # match some of the query's words.
        agreeing: dict[str, int] = {}
        for ns, _, _, _, why, _ in shown_hits:
            if why["coverage"] > 0:
                agreeing[ns] = agreeing.get(ns, 0) + 1
        others = len(shown_hits) - 1
        return [Hit(ns, key, record, score, _confidence(why, others, agreeing.get(ns, 0)), why, shown)
                for ns, key, record, score, why, shown in shown_hits]

    def _weights(self, terms: list[str]) -> dict[str, float]:
        """Each query word's specificity (idf), from the persisted index (the
        larger one) when there is one."""
        index = self.index.disk if self.index.disk is not None else self.index.mem
        return {t: 1.0 for t in terms} if index is None else index.weights(terms)

    def _dense(self, query: str, names: list[str], cold: bool, want: int,
               candidates: dict[tuple[str, str], tuple[Any, bool]]) -> list[tuple[tuple[str, str], float]]:
        assert self.index.embedder is not None
        q = self.index.embedder.query(query)
        scored: list[tuple[float, int, str, str, bool]] = []
        wanted = set(names)
        for index, session in self.index.indexes():
            vecs = self.index.vectors(index, cold)
            np = _numpy()
            if np is not None:  # one matrix product over the vectors, kept with the rows it was made from
                cache = self.index.matrices
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
        for index, session in self.index.indexes():
            rows = index.rows([rid for _, rid, _, _, s in top if s is session])
            for cos, rid, ns, key, s in top:
                if s is session and rid in rows and (ns, key) not in candidates:
                    candidates[(ns, key)] = (rows[rid], session)
        for cos, rid, ns, key, s in top:
            out.append(((ns, key), cos))
        return out


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


def _confidence(why: dict[str, Any], others: int, agreeing: int) -> float:
    """Relevance, source quality, recency, consistency (the share of the
    ``others`` hits, ``agreeing`` of them from this hit's namespace, that
    corroborate the query words) and completeness (the share of the query's
    words its passage holds, each weighed by how specific it is: its idf),
    weighted by :data:`WEIGHTS`, then scaled by the square root of that
    completeness: a hit whose passage shares no specific word with the
    question is not a confident one, however it ranked."""
    consistency = 1.0
    if others:
        agree = agreeing - (1 if why.get("coverage", 0) > 0 else 0)  # the others only
        consistency = 0.5 + 0.5 * agree / others
    parts = (why.get("relevance", 0.0), why.get("quality", 0.5), why.get("recency", 0.5), consistency,
             why.get("coverage", 0.0))
    total = sum(w * p for w, p in zip(WEIGHTS, parts, strict=True))
    return round(float(total * math.sqrt(why.get("coverage", 0.0))), 4)


def _with(hit: Hit, why: dict[str, Any] | None, *, confidence: float | None = None, explain: bool = True) -> Hit:
    return Hit(hit.namespace, hit.key, hit.record, round(hit.score, 6),
               hit.confidence if confidence is None else confidence, why if explain else None, hit.snippet)


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


__all__ = ["CASCADE_BELOW", "ENTITY_BOOST", "FUSIONS", "WEIGHTS", "Doc", "Hit", "Recall", "candidates_for"]
