"""Text for recall: what of a value is indexed, how a query becomes terms,
and what kind of question a query is.

Pure functions, no state: the index engine (:mod:`hrm_memory.recall.search`) and
``remember()`` (:mod:`hrm_memory.recall.memories`) share them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

_WORD = re.compile(r"\w+", re.UNICODE)
_SEP = re.compile(r"[_\-.:/#@]+")
_STEP = re.compile(r"([^.\[\]]+)((?:\[(?:\*|[0-9]+)\])*)")

#: Words that carry no meaning for retrieval (an English list, the usual
#: function words plus the question words a query starts with). They are
#: left out of queries, never out of the index, so a phrase still matches.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your yours
    yourself yourselves s t don ll m re ve d y isn aren wasn weren hasn haven hadn doesn didn won wouldn
    shan shouldn can't cannot also get got gets like ever much many one may might must shall us let lets
    tell told say said know think""".split()
)


def words(text: str) -> list[str]:
    """The lower-case words of ``text``."""
    return _WORD.findall(text.lower())


def query_terms(query: str) -> list[str]:
    """The distinct words of ``query`` worth searching for, in order: the
    stopwords are dropped unless nothing else is left."""
    seen: dict[str, None] = {}
    for w in words(query):
        seen.setdefault(w, None)
    terms = [w for w in seen if w not in STOPWORDS]
    return (terms or list(seen))[:32]


def fts_query(terms: list[str]) -> str:
    """An FTS5 expression matching any of ``terms`` (each quoted, so no word
    is read as an operator)."""
    return " OR ".join(f'"{t}"' for t in terms)


def stem(word: str) -> str:
    """A crude prefix stem, for telling which query words a text covers
    (the index itself stems with Porter's algorithm)."""
    return word if len(word) <= 4 else word[: max(4, len(word) - 3)]


def coverer(terms: list[str]) -> Callable[[str], float]:
    """A function giving the share of ``terms`` a text contains (by stem),
    the stems made once for all the texts it is given."""
    if not terms:
        return lambda text: 0.0
    stems = [stem(t) for t in terms]
    lengths = sorted({len(s) for s in stems})

    def cover(text: str) -> float:
        have = {w[:n] for w in set(words(text)) for n in lengths}
        return sum(1 for s in stems if s in have) / len(stems)

    return cover


# -- what of a value is indexed -------------------------------------------------


def extract(value: Any, paths: tuple[str, ...]) -> str:
    """The text under ``paths`` of ``value`` (``"$"`` for all of it): string
    leaves and numbers, in document order, one per line."""
    out: list[str] = []
    for path in paths:
        if path == "$":
            _leaves(value, out)
        else:
            for found in _select(value, path):
                _leaves(found, out)
    return "\n".join(out)


def _leaves(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        if value:
            out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append(str(value))


def _select(value: Any, path: str) -> Iterator[Any]:
    nodes = [value]
    for part in path.split("."):
        m = _STEP.fullmatch(part)
        if m is None:
            return
        name, subs = m.group(1), m.group(2)
        nodes = [n[name] for n in nodes if isinstance(n, dict) and name in n]
        for sub in re.findall(r"\[(\*|[0-9]+)\]", subs):
            nxt: list[Any] = []
            for n in nodes:
                if not isinstance(n, list):
                    continue
                if sub == "*":
                    nxt.extend(n)
                elif int(sub) < len(n):
                    nxt.append(n[int(sub)])
            nodes = nxt
    yield from nodes


def context(namespace: str, key: str, kind: str | None) -> str:
    """What surrounds a record: the words of its key, its namespace's name and its kind."""
    parts = [_SEP.sub(" ", key), namespace.split(".", 1)[-1].replace("_", " ")]
    if kind:
        parts.append(kind)
    return " ".join(parts)


# -- what kind of question ------------------------------------------------------

#: Query types, each with the phrases that mark it (matched on word
#: boundaries, so "time" never matches "timeout"), in priority order.
QUERY_TYPES: dict[str, tuple[str, ...]] = {
    "prospective": ("remind", "reminder", "will i", "going to", "plan to", "todo", "to do", "due", "deadline",
                    "upcoming", "next week", "tomorrow", "promise", "promised", "commitment", "commitments"),
    "planning": ("plan", "plans", "planning", "goal", "goals", "priority", "priorities", "strategy", "roadmap",
                 "north star", "north stars", "objective", "objectives", "should i", "next step", "next steps"),
    "procedural": ("how to", "how do", "how can", "how should", "steps", "procedure", "process", "recipe",
                   "instructions", "method", "way to", "workflow"),
    "temporal": ("when", "what time", "date", "dates", "yesterday", "today", "ago", "last week", "last month",
                 "last year", "before", "after", "since", "recently", "first time", "how long", "year", "month"),
    "relational": ("who", "whom", "whose", "friend", "friends", "family", "sister", "brother", "mother", "father",
                   "mom", "dad", "partner", "wife", "husband", "colleague", "boss", "relationship", "people",
                   "person", "kids", "children"),
    "meta": ("what do you know", "what do you remember", "do you remember", "memory", "memories", "forget",
             "about me"),
}
_TYPE_RES = {t: re.compile(r"\b(?:" + "|".join(re.escape(p) for p in ps) + r")\b") for t, ps in QUERY_TYPES.items()}

#: The kinds of memory that answer each query type.
ROUTES: dict[str, tuple[str, ...]] = {
    "temporal": ("episodic",),
    "factual": ("semantic",),
    "relational": ("semantic", "episodic"),
    "procedural": ("procedural",),
    "prospective": ("prospective", "working"),
    "planning": ("prospective", "procedural"),
    "meta": (),
}


def classify(query: str) -> str:
    """The query's type: the first of ``QUERY_TYPES`` with a phrase in it, else ``"factual"``."""
    text = " ".join(words(query))
    for name, pattern in _TYPE_RES.items():
        if pattern.search(text):
            return name
    return "factual"


__all__ = ["QUERY_TYPES", "ROUTES", "STOPWORDS", "classify", "context", "coverer", "extract", "fts_query",
           "query_terms", "stem", "words"]
