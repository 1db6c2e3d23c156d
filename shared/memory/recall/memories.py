"""Typed memories: ``remember(content, kind=...)``.

A memory is a record ``{"text", "kind", "importance", "tags", "mentions"}``
in an indexed namespace (by default ``<hrm>.memories``, or
``shared.memories`` for the unscoped manager). Before it is stored:

- **trivial content is refused** with the reason (:class:`TrivialMemory`):
  empty, a pleasantry ("ok thanks"), or fewer than three words with no word
  of substance;
- **near-duplicates are found**, not only exact copies: the candidates the
  index returns for the content's own words, compared by the Jaccard
  similarity of their stemmed content words (:data:`NEAR_DUPLICATE` or
  more). What happens then depends on the kind (:data:`ON_DUPLICATE`):
  facts, procedures and working memory are merged into the existing record
  (the newer wording wins, importance is the larger, tags are joined,
  ``mentions`` counts restatements), an intention already recorded is
  refused (:class:`DuplicateMemory`), and an event is merged only when
  retold within a day (the same thing happening again is a new event).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from hrm_memory.recall import text as rt
from hrm_memory.core.errors import DuplicateMemory, InvalidArgument, InvalidValue, TrivialMemory
from hrm_memory.core.ops import RememberOp
from hrm_memory.recall.index import RecallIndex
from hrm_memory.core.spec import KINDS, check_key
from hrm_memory.core.records import Record
from hrm_memory.core.state import Attrs, Core, Handlers, now_us
from hrm_memory.tracing.spans import OpSpan, current_trace_id

#: Jaccard similarity of stemmed content words from which two memories are the same.
NEAR_DUPLICATE = 0.75
#: What a near-duplicate does, per kind: merge into the existing memory, or refuse.
ON_DUPLICATE = {
    "semantic": "merge",
    "procedural": "merge",
    "working": "merge",
    "prospective": "refuse",
    "episodic": "merge-within-a-day",
}
_PLEASANTRIES = frozenset(
    "ok okay k kk thanks thank thx ty you hi hello hey yo yes yeah yep no nope sure cool nice great lol haha "
    "bye goodbye cheers welcome np fine good morning evening night hmm um uh ah oh wow please".split()
)
DAY_US = 86_400 * 1_000_000


@dataclass(frozen=True, slots=True)
class Remembered:
    """What ``remember()`` did: ``action`` is ``"created"`` or ``"merged"``
    (into ``key``, the existing memory, with ``similarity`` to it)."""

    namespace: str
    key: str
    action: str
    similarity: float = 0.0


def trivial(content: str) -> str | None:
    """Why ``content`` is not worth remembering, or None."""
    ws = rt.words(content)
    if not ws:
        return "it holds no words"
    if all(w in _PLEASANTRIES for w in ws):
        return "it is only a pleasantry"
    substance = [w for w in ws if w not in rt.STOPWORDS and w not in _PLEASANTRIES and len(w) > 2]
    if not substance:
        return "it holds no word of substance"
    if len(ws) < 3 and len(substance) < 2:
        return "it is shorter than three words"
    return None


def _singular(word: str) -> str:
    """``word`` without a plural ``s`` (``rt.stem`` cuts a fixed number of
    letters, so "mornings" and "morning" would stem apart)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _signature(text: str) -> frozenset[str]:
    return frozenset(rt.stem(_singular(w)) for w in rt.words(text) if w not in rt.STOPWORDS)


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of the stemmed content words of two texts."""
    sa, sb = _signature(a), _signature(b)
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


class Remember:
    """The ``remember`` handler: given the core and the recall index (to find near duplicates)."""

    def __init__(self, core: Core, index: RecallIndex) -> None:
        self.core = core
        self.index = index

    def handlers(self) -> Handlers:
        return {RememberOp: ("remember", self.remember, False)}

    def close(self) -> None:
        pass

    def remember(self, op: RememberOp, scope: str | None, span: OpSpan | None) -> tuple[Remembered, Attrs]:
        content, kind, namespace, importance, tags, key = op
        if not isinstance(content, str):
            raise InvalidValue(f"a memory is a str, not {type(content).__name__}", path="$")
        if kind not in KINDS:
            raise InvalidArgument(f"kind must be one of {KINDS}, not {kind!r}")
        if type(importance) not in (int, float) or not (math.isfinite(importance) and 0 <= importance <= 1):
            raise InvalidArgument(f"importance must be a number in [0, 1], not {importance!r}")
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise InvalidArgument("tags must be a sequence of str")
        if namespace is None:
            namespace = f"{scope or 'shared'}.memories"
        spec = self.core.spec(namespace)
        if scope is not None:
            self.core.may_write(scope, spec)
        if not spec.index:
            raise InvalidArgument(f"namespace {namespace!r} is not indexed; declare it with index=('text',) to remember in it")
        reason = trivial(content)
        if reason is not None:
            raise TrivialMemory(f"not remembered: {reason}", reason=reason, path="$")
        text = " ".join(content.split())
        if key is None:
            key = f"{kind}-" + hashlib.blake2b(" ".join(sorted(_signature(text))).encode(), digest_size=8).hexdigest()
        check_key(key, namespace)
        trace_id = current_trace_id(span)
        with self.core.backend.lock(spec.name):
            existing, score = self._near_duplicate(spec.name, text, kind)
            policy = ON_DUPLICATE[kind]
            action, target = "created", key
            value: dict[str, Any] = {"text": text, "kind": kind, "importance": float(importance),
                                     "tags": sorted(set(tags)), "mentions": 1}
            if existing is not None:
                old = existing.value
                recent = existing.updated_at.timestamp() * 1e6 >= now_us() - DAY_US
                if policy == "refuse":
                    raise DuplicateMemory(
                        f"a {kind} memory like this exists already ({existing.key!r}, similarity {score:.2f})",
                        key=existing.key, namespace=spec.name,
                    )
                if policy == "merge" or recent:
                    action, target = "merged", existing.key
                    value = {**old, "text": text, "kind": kind,
                             "importance": max(float(importance), float(old.get("importance", 0.0))),
                             "tags": sorted(set(tags) | set(old.get("tags", []))),
                             "mentions": int(old.get("mentions", 1)) + 1}
            data, _ = self.core.encode(spec, target, value)
            stored = self.core.commit(spec, target, data)
            self.core.bus.record("write", spec.name, target, stored.version, trace_id, stored.tier != "hot")
        attrs = None
        if span is not None:
            span.retarget(spec.name, target)  # the namespace and key chosen here
            attrs = {"hrm.memory.kind": kind, "hrm.memory.action": action, "hrm.memory.version": stored.version,
                     "hrm.memory.persisted": stored.tier != "hot"}  # fmt: skip
        return Remembered(spec.name, target, action, round(score, 4)), attrs

    def _near_duplicate(self, namespace: str, text: str, kind: str) -> tuple[Any, float]:
        """The most similar existing memory of ``kind`` at or above
        :data:`NEAR_DUPLICATE`, with its similarity, or ``(None, best)``."""
        terms = rt.query_terms(text)
        if not terms:
            return None, 0.0
        self.index.sync()
        best, best_score = None, 0.0
        for index, _ in self.index.indexes():
            for row in index.search(rt.fts_query(terms), [namespace], cold=False, limit=20, kinds=[kind]):
                score = similarity(text, row.body)
                if score > best_score:
                    spec = self.core.specs[namespace]
                    st = self.core.lookup(spec, row.key)
                    if st is None or st.version != row.version:
                        continue
                    value = self.core.decode(spec, st, False)
                    if isinstance(value, dict) and value.get("kind") == kind:
                        best, best_score = Record.from_stored(namespace, st, value, st.tier != "hot"), score
        if best_score < NEAR_DUPLICATE:
            return None, best_score
        return best, best_score



__all__ = ["NEAR_DUPLICATE", "ON_DUPLICATE", "Remembered", "Remember", "similarity", "trivial"]
