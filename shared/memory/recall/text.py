"""Text for recall: what of a value is indexed, how a query becomes terms,
and what kind of question a query is.

Pure functions, no state: the index engine (:mod:`hrm_memory.recall.search`) and
``remember()`` (:mod:`hrm_memory.recall.memories`) share them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)  # as the index splits them: "due_date" is two words
_SEP = re.compile(r"[_\-.:/#@]+")
_STEP = re.compile(r"([^.\[\]]+)((?:\[(?:\*|[0-9]+)\])*)")
_SUBSCRIPTS = re.compile(r"\[[^\]]*\]")

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


def tokens(text: str) -> list[str]:
    """The lower-case words of ``text`` as the index splits them (``due_date``
    is ``due`` and ``date``)."""
    return _TOKEN.findall(text.lower())


def query_terms(query: str) -> list[str]:
    """The distinct words of ``query`` worth searching for, in order, split
    as the index splits them: the stopwords are dropped unless nothing else
    is left."""
    seen: dict[str, None] = {}
    for w in tokens(query):
        seen.setdefault(w, None)
    terms = [w for w in seen if w not in STOPWORDS]
    return (terms or list(seen))[:32]


def fts_query(terms: list[str]) -> str:
    """An FTS5 expression matching any of ``terms`` (each quoted, so no word
    is read as an operator)."""
    return " OR ".join(f'"{t}"' for t in terms)


_SUFFIXES = ("ingly", "edly", "ings", "ing", "ies", "ied", "ed", "es", "ly", "s")


def stem(word: str) -> str:
    """A crude prefix stem, for telling near-duplicate texts apart (remember,
    context); recall tells which query words a text holds with :func:`light_stem`."""
    return word if len(word) <= 4 else word[: max(4, len(word) - 3)]


@functools.lru_cache(maxsize=1 << 16)  # a text's words repeat: a dict look-up, not a stemming, each
def light_stem(word: str) -> str:
    """A light suffix stem, for telling which query words a text holds
    ("walking", "walked" and "walks" are "walk"; "zq1" and "zq2" differ);
    the index itself stems with Porter's algorithm. It always starts with
    the word's first three letters (a suffix goes only when three remain),
    which callers use to skip stemming words that cannot match."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def coverer(terms: list[str], weights: dict[str, float] | None = None) -> Callable[[str], float]:
    """A function giving the share of ``terms`` a text contains (by stem),
    each term counted at its weight (1 without ``weights``), the stems made
    once for all the texts it is given."""
    if not terms:
        return lambda text: 0.0
    stems = [(light_stem(t), 1.0 if weights is None else weights.get(t, 1.0)) for t in terms]
    total = sum(w for _, w in stems) or 1.0
    heads = {s[:3] for s, _ in stems}  # a stem keeps its word's first three letters: the others are not stemmed

    def cover(text: str) -> float:
        have = {light_stem(w) for w in set(tokens(text)) if w[:3] in heads}
        return sum(w for s, w in stems if s in have) / total

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


@functools.lru_cache(maxsize=1024)
def _steps(path: str) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """``path`` parsed once: each step's name and its subscripts (None: not a path)."""
    out = []
    for part in path.split("."):
        m = _STEP.fullmatch(part)
        if m is None:
            return None
        out.append((m.group(1), tuple(re.findall(r"\[(\*|[0-9]+)\]", m.group(2)))))
    return tuple(out)


def _select(value: Any, path: str) -> Iterator[Any]:
    steps = _steps(path)
    if steps is None:
        return
    nodes = [value]
    for name, subs in steps:
        nodes = [n[name] for n in nodes if isinstance(n, dict) and name in n]
        for sub in subs:
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


# -- passages: the unit recall ranks and shows ----------------------------------

#: A part of a value whose text is at most this long is one passage; a longer
#: one is split: a list into its items, a map into its entries (its short
#: scalar fields kept together), a string into paragraphs, then sentences.
PASSAGE_CHARS = 480
#: A record is indexed as at most this many passages (the rest is kept in the last).
MAX_PASSAGES = 1024
#: A snippet (:func:`snippet`) is at most this long.
SNIPPET_CHARS = 360
_PARAGRAPH = re.compile(r"\n\s*\n|\n(?=#{1,6} )")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")


class Passage(NamedTuple):
    """One passage of a value: ``text`` is what is indexed (its words: the
    string leaves and numbers, and the key of the map entry it is), ``shown``
    what a hit shows (the same part of the value, as written, with its keys)."""

    text: str
    shown: str


def passages(value: Any, paths: tuple[str, ...]) -> list[Passage]:
    """The passages of the parts of ``value`` under ``paths`` (``"$"``: all of
    it), in document order: a message of a conversation, an entry of a list
    or a map, a paragraph of a note. Never empty (one empty passage for a
    value with no text), at most :data:`MAX_PASSAGES`."""
    out: list[Passage] = []
    if paths == ("$",):
        _split(value, "", out)
    else:
        nodes = [(path, node, _text(node)) for path in paths for node in _select(value, path)]
        text = "\n".join(t for _, _, t in nodes if t)
        if len(text) <= PASSAGE_CHARS and not any(_collection(n) for _, n, _ in nodes):  # they fit in one passage
            if text:
                out.append(Passage(text, _shown_paths(nodes)))
        else:
            for _, node, _ in nodes:
                _split(node, "", out)
    if not out:
        return [Passage("", "")]
    if len(out) > MAX_PASSAGES:
        rest = out[MAX_PASSAGES - 1:]
        out[MAX_PASSAGES - 1:] = [Passage("\n".join(p.text for p in rest), "\n".join(p.shown for p in rest))]
    return out


def _shown_paths(nodes: list[tuple[str, Any, str]]) -> str:
    """The indexed parts of a value as a hit shows them: the first path's
    text as written (a memory's sentence, nothing before it), each other
    path's values after its field's name (``tags: tea, mornings``)."""
    shown: dict[str, list[str]] = {}
    for path, node, text in nodes:
        if text:
            shown.setdefault(path, []).append(_shown(node))
    parts = []
    for i, (path, values) in enumerate(shown.items()):
        joined = ", ".join(values)
        parts.append(joined if i == 0 else f"{_field(path)}: {joined}")
    return "; ".join(parts)


@functools.lru_cache(maxsize=1024)
def _field(path: str) -> str:
    """An indexed path as a hit names its values (``tags[*]`` is ``tags``)."""
    return _SUBSCRIPTS.sub("", path)


def _split(node: Any, label: str, out: list[Passage]) -> None:
    text = _text(node)
    if not text and not label:
        return
    if not isinstance(node, (str, dict, list)) or (len(text) <= PASSAGE_CHARS and not _collection(node)):
        out.append(_passage(node, label, text))
    elif isinstance(node, str):
        for piece in _pieces(node):
            out.append(Passage(f"{label}\n{piece}" if label else piece, f"{label}: {piece}" if label else piece))
    elif isinstance(node, list):
        for item in node:
            _split(item, label, out)
    else:
        small = {k: v for k, v in node.items() if not isinstance(v, (dict, list))
                 and not (isinstance(v, str) and len(v) > PASSAGE_CHARS // 4)}
        head = " ".join(_text(v) for v in small.values()).strip()
        if small and len(head) <= 80 and len(node) - len(small) == 1:
            # a few short fields beside one long one (a message's role and its
            # content, a timestamp and the messages): they name it
            label, shown_head = head, True
        elif small:
            out.append(_passage(small, label, _text(small)))
            shown_head = False
        else:
            shown_head = False
        for k, v in node.items():
            if str(k) in small:
                continue
            if isinstance(v, str):  # named by the short fields beside it, else by its key
                child = label if shown_head else (_label(str(k)) or label)
            elif isinstance(v, list) and any(isinstance(x, dict) for x in v):
                child = "" if shown_head else label  # records of their own (messages): each names itself
            else:
                child = _label(str(k)) or label
            _split(v, child, out)


def _collection(node: Any) -> bool:
    """A map or list of three or more entries that are maps or lists (people,
    messages), or a part holding one: split into its entries however short,
    each its own passage."""
    if isinstance(node, dict):
        entries: Any = node.values()
    elif isinstance(node, list):
        entries = node
    else:  # a string or a number (most indexed paths' leaves)
        return False
    inner = [e for e in entries if isinstance(e, (dict, list))]
    return len(inner) >= 3 or any(_collection(e) for e in inner)


def _label(key: str) -> str:
    """A map key as words (``"gaurav"``, ``"due date"``), none for a number."""
    words_ = _SEP.sub(" ", key).strip()
    return "" if words_.isdigit() else words_


def _text(node: Any) -> str:
    if isinstance(node, str):  # a leaf: itself
        return node
    out: list[str] = []
    _leaves(node, out)
    return "\n".join(out)


def _passage(node: Any, label: str, text: str) -> Passage:
    shown = _shown(node)
    return Passage(f"{label}\n{text}" if label else text, f"{label}: {shown}" if label else shown)


def _shown(node: Any) -> str:
    """A part of a value as a model reads it: strings as written, a map as
    ``key: value; ...`` (a chat message as ``role: content``), a list's items
    one per line."""
    if isinstance(node, str):
        return node
    if isinstance(node, dict):
        if isinstance(node.get("role"), str) and isinstance(node.get("content"), str):
            return f"{node['role']}: {node['content']}"
        return "; ".join(f"{k}: {_shown(v)}" for k, v in node.items() if v not in (None, "", [], {}))
    if isinstance(node, list):
        return "\n".join(_shown(v) for v in node)
    return "" if node is None else str(node)


def _pieces(text: str) -> list[str]:
    """A long string as paragraphs, each at most :data:`PASSAGE_CHARS` (a
    longer paragraph split between sentences), short neighbours merged."""
    out: list[str] = []
    for para in _PARAGRAPH.split(text):
        para = para.strip()
        if not para:
            continue
        parts = [para] if len(para) <= PASSAGE_CHARS else [s for s in _SENTENCE.split(para) if s.strip()]
        for part in parts:
            while len(part) > PASSAGE_CHARS:  # one sentence longer than a passage: cut between words
                cut = part.rfind(" ", 0, PASSAGE_CHARS)
                cut = cut if cut > 0 else PASSAGE_CHARS
                out.append(part[:cut])
                part = part[cut:].strip()
            if out and len(out[-1]) + len(part) + 1 <= PASSAGE_CHARS // 2:
                out[-1] = f"{out[-1]}\n{part}"
            elif part:
                out.append(part)
    return out


def snippet(shown: str, terms: list[str], limit: int = SNIPPET_CHARS) -> str:
    """At most ``limit`` characters of ``shown``: all of it when it fits,
    else the window holding the most of ``terms`` (by stem), cut between
    words and marked with an ellipsis where text was left out."""
    if len(shown) <= limit:
        return shown
    stems = {light_stem(t) for t in terms}
    hits = [m.start() for m in _TOKEN.finditer(shown.lower()) if light_stem(m.group()) in stems]
    start = 0
    if hits:
        best = max(range(len(hits)), key=lambda i: (sum(1 for h in hits[i:] if h < hits[i] + limit - 40), -i))
        start = max(0, hits[best] - 40)
        space = shown.rfind(" ", 0, start + 1)
        start = space + 1 if space > 0 and start - space < 30 else start
    end = min(len(shown), start + limit - 2)
    if end < len(shown):
        space = shown.rfind(" ", start, end)
        end = space if space > start + limit // 2 else end
    return ("…" if start else "") + shown[start:end].strip() + ("…" if end < len(shown) else "")


def named_by(text: str, terms: list[str]) -> bool:
    """Whether a passage's ``text`` is the entry of something the query
    names: its first line (a map entry's key, a record's name) is a few words,
    every one of them a query word (by stem), as "bella" for "who is Bella?"."""
    head = tokens(text.split("\n", 1)[0])
    if not head or len(head) > 3:
        return False
    wanted = {light_stem(t) for t in terms}
    return all(light_stem(w) in wanted for w in head)


@functools.lru_cache(maxsize=1 << 14)
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


#: Query types asking when: their hits are lifted when the passage says when.
TIMELY = frozenset({"temporal", "prospective"})
_WHEN = re.compile(
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun"
    r"|january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|today|tonight|tomorrow|yesterday|weekend|weekends"
    r"|morning|afternoon|evening|noon|midnight|week|month|year|ago|days|weeks|months|years"
    r"|\d{1,2}(?::\d{2})?\s?(?:am|pm)|\d{4}-\d{2}-\d{2}|(?:19|20)\d{2})\b")


def says_when(text: str) -> bool:
    """Whether ``text`` names a time: a weekday, a month, a date, an hour, a
    relative day ("tomorrow", "3 weeks ago")."""
    return _WHEN.search(text.lower()) is not None


def classify(query: str) -> str:
    """The query's type: the first of ``QUERY_TYPES`` with a phrase in it, else ``"factual"``."""
    text = " ".join(words(query))
    for name, pattern in _TYPE_RES.items():
        if pattern.search(text):
            return name
    return "factual"


__all__ = ["MAX_PASSAGES", "PASSAGE_CHARS", "QUERY_TYPES", "ROUTES", "SNIPPET_CHARS", "STOPWORDS", "TIMELY", "Passage", "classify",
           "context", "coverer", "extract", "fts_query", "passages", "light_stem", "named_by", "query_terms", "says_when", "snippet", "stem", "tokens", "words"]
