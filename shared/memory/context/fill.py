"""Context, the fill: whole entries into sections within a token budget.

:func:`fill` takes the entries of a render (each a section and a text, in
rank order) and lays them out: each section up to its share of the budget,
whole entries only (one that does not fit is skipped, the next may fit),
near-duplicates shown once, a ``… N more not shown`` footer counted inside,
the legend of the codes that appear last. Its figures are exact o200k
counts: of each line with its newline, and of the whole text (see
:func:`_text_tokens`).

What a render repeats is kept between renders, so a render right after one
record changed costs what that record's lines cost, not what the whole
context does: each entry's line, cost and stemmed words (:func:`_prepared`),
the near-duplicate pairs among the entries seen lately (:class:`_Neighbours`),
and whole fills by everything they depend on.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from dataclasses import dataclass
from typing import Any

from hrm_memory.recall import text as rt
from hrm_memory.core import tokens
from hrm_memory.core.errors import CorruptRecord, Unsupported

MAX_ENTRY_TOKENS = 60
NEAR_DUPLICATE = 0.8
FOOTER_RESERVE = 12  # tokens kept free in a section for its "… N more not shown"
#: Fills kept between renders, by everything a fill depends on (budget, plan,
#: legend, each section's entries in order).
FILLS_KEPT = 32
#: Distinct stem sets whose near-duplicate pairs are kept (a render has a few
#: hundred); past this the pairs are found again from scratch.
NEAR_KEPT = 8192


@dataclass(frozen=True, slots=True)
class Section:
    """Figures of one rendered section."""

    name: str
    budget: int
    tokens: int
    shown: int
    omitted: int


@dataclass(frozen=True, slots=True)
class Entry:
    section: str
    text: str
    rank: tuple[Any, ...]
    #: The record the entry comes from (namespace, key, version), if any.
    ref: tuple[str, str, int] | None = None


#: A fill: text, tokens, section figures, entries omitted, legend, and where
#: the entries shown sit (section, position in its pool).
_Filled = tuple[str, int, list[Section], int, dict[str, str], tuple[tuple[str, int], ...]]


def _cap(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` tokens, at a word, with an ellipsis."""
    if tokens.count(text) <= limit:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tokens.count(" ".join(words[:mid]) + " …") <= limit:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " …" if lo else ""


def fill(plan: list[tuple[str, str, float]], entries: list[Entry], legend_map: dict[str, str],
         budget: int) -> tuple[str, int, list[Section], int, dict[str, str], list[Entry]]:
    """Fill the sections; when budget is left over while sections left
    entries out, fill once more with that remainder given to them, in
    proportion to what each left out. Returns the text, its tokens, the
    sections' figures, the number omitted, the legend and the entries shown."""
    by_section: dict[str, list[Entry]] = {}
    for e in sorted(entries, key=lambda e: e.rank):
        by_section.setdefault(e.section, []).append(e)
    # The fill depends on nothing else: a session's renders of an unchanged
    # store reuse it (copies out, so a caller's edits cannot reach the cache).
    key = (budget, tuple(plan), tuple(sorted(legend_map.items())),
           tuple((name, tuple(e.text for e in pool)) for name, pool in by_section.items()))
    hit = _FILLS.get(key)
    if hit is None:
        hit = _fill_uncached(plan, by_section, legend_map, budget)
        if len(_FILLS) >= FILLS_KEPT:
            evict(_FILLS)
        _FILLS[key] = hit
    text, used, figures, omitted, legend, at = hit
    return text, used, list(figures), omitted, dict(legend), [by_section[name][i] for name, i in at]


def _fill_uncached(plan: list[tuple[str, str, float]], by_section: dict[str, list[Entry]],
                   legend_map: dict[str, str], budget: int) -> _Filled:
    result = _fill_once(plan, by_section, legend_map, budget, {})
    _, used, figures, omitted, _, _ = result
    # Each section keeps what it used plus the slack the fill leaves (the
    # footer reserve), and the spare goes to those that left entries out.
    slack = FOOTER_RESERVE
    spare = budget - used - slack * len(figures)
    if spare > 16 and omitted:
        hidden = {f.name: f.omitted for f in figures if f.omitted and f.name != "legend"}
        total = sum(hidden.values())
        if total:
            fixed = {f.name: f.tokens + slack + spare * hidden.get(f.name, 0) // total for f in figures}
            second = _fill_once(plan, by_section, legend_map, budget, fixed)
            if second[1] <= budget and second[3] < omitted:
                return second
    return result


def _fill_once(plan: list[tuple[str, str, float]], by_section: dict[str, list[Entry]], legend_map: dict[str, str],
               budget: int, fixed: dict[str, int]) -> _Filled:
    graph = _neighbours()
    taken: set[frozenset[str]] = set()  # the stemmed words of the entries shown
    lines: list[str] = []
    costs: list[int] = []  # each line's tokens with its newline
    figures: list[Section] = []
    used = 0
    omitted_total = 0
    legend: dict[str, str] = {}
    at: list[tuple[str, int]] = []
    # Sections with nothing to show give up their share; each section gets
    # its share of what the sections before it left.
    plan = [p for p in plan if p[0] == "legend" or by_section.get(p[0])]
    shares_left = sum(share for _, _, share in plan)
    for name, title, share in plan:
        allowance = int((budget - used) * share / shares_left) if shares_left > 0 else 0
        shares_left -= share
        if name in fixed:
            allowance = min(fixed[name], budget - used)
        if name == "legend":
            above = "\n".join(lines)
            pool = [Entry("legend", f"{c}={legend_map[c]}", (c,)) for c in sorted(legend_map) if _appears(c, above)]
        else:
            pool = by_section.get(name, [])
        if not pool:
            continue
        header = f"## {title}"
        cost_header = _cost(header)
        sect_lines: list[str] = []
        sect_costs: list[int] = []
        sect_used = cost_header
        shown = omitted = 0
        room = min(allowance, budget - used)
        for i, e in enumerate(pool):
            if room - sect_used < 16:
                omitted += len(pool) - i  # no entry fits in what is left: counted, not tokenized
                break
            line, cost, sig = _prepared(e.text)
            # A near-duplicate (Jaccard >= NEAR_DUPLICATE) of an entry shown is not shown.
            if not line or sig in taken or not taken.isdisjoint(graph.of(sig)):
                continue
            # Room for a footer is kept while entries remain after this one.
            if sect_used + cost + FOOTER_RESERVE <= room:
                sect_lines.append(line)
                sect_costs.append(cost)
                sect_used += cost
                taken.add(sig)
                shown += 1
                if name == "legend":
                    code = e.text.split("=", 1)[0]
                    legend[code] = legend_map[code]
                else:
                    at.append((name, i))
            else:
                omitted += 1
        if not shown:
            omitted_total += omitted
            figures.append(Section(name, allowance, 0, 0, omitted))
            continue
        if omitted:
            footer = f"… {omitted} more not shown"
            sect_lines.append(footer)
            sect_costs.append(_cost(footer))
            sect_used += sect_costs[-1]
        lines.append(header)
        lines.extend(sect_lines)
        costs.append(cost_header)
        costs.extend(sect_costs)
        used += sect_used
        omitted_total += omitted
        figures.append(Section(name, allowance, sect_used, shown, omitted))
    total = _text_tokens(lines, costs)
    while lines and total > budget:  # never over budget, whatever BPE does across lines
        lines.pop()
        costs.pop()
        omitted_total += 1
        total = _text_tokens(lines, costs)
    return "\n".join(lines), total, figures, omitted_total, legend, tuple(at)


_FILLS: dict[tuple[Any, ...], _Filled] = {}


def evict(kept: dict[Any, Any]) -> None:
    """Drop the oldest of ``kept`` (another thread's render may be at it too)."""
    try:
        kept.pop(next(iter(kept)), None)
    except (StopIteration, RuntimeError):
        pass


_WORD = re.compile(r"\w")


def _appears(code: str, text: str) -> bool:
    r"""``code`` occurs in ``text`` as a word of its own: what
    ``(?<!\w)code(?!\w)`` finds, but searched for by its letters first (a
    pattern that starts with a look-behind is tried at every position:
    0.14 ms for one code over a 2,000-token text)."""
    pattern = re.compile(re.escape(code) + r"(?!\w)")
    m = pattern.search(text)
    while m is not None:
        at = m.start()
        if at == 0 or not _WORD.match(text, at - 1):
            return True
        m = pattern.search(text, at + 1)
    return False


@functools.lru_cache(maxsize=1024)
def _cost(line: str) -> int:
    return tokens.count(line + "\n")


#: o200k_base's split pattern, as tiktoken pins it. BPE merges only inside
#: the pieces this pattern cuts, so a text's count is the sum of its pieces'.
#: A piece that holds a line's closing "\n" comes from ``[^\s\p{L}\p{N}]+[\r\n/]*``,
#: ``\s*[\r\n]+`` or ``\s+``: it can go on past that "\n" only into "\r", "\n",
#: "/" or whitespace, and the two letter patterns never take a "\n". So when
#: every line after the first starts with "#", "-" or "…" (a header, an entry,
#: a footer), each "\n" ends a piece, every line is cut as it is on its own
#: with its "\n", and the text counts exactly the sum of ``count(line + "\n")``
#: over its lines but the last, plus ``count(last)``.
_O200K_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LINE_STARTS = frozenset("#-…")


@functools.cache
def _splits_at_lines() -> bool:
    """True if the exact counter's split pattern is :data:`_O200K_SPLIT`."""
    try:
        return tokens.pinned_encoding().pat_str == _O200K_SPLIT
    except (Unsupported, CorruptRecord, OSError):
        return False


@functools.lru_cache(maxsize=1024)
def _bare(line: str) -> int:
    return tokens.count(line)


def _text_tokens(lines: list[str], costs: list[int]) -> int:
    """Exact tokens of ``"\\n".join(lines)``, ``costs`` being each line's with
    its newline: summed where that is provably the count (see
    :data:`_O200K_SPLIT`), else the joined text counted."""
    if not lines:
        return 0
    if (tokens.get_counter().exact and _splits_at_lines()
            and all(line[:1] in _LINE_STARTS and line[:1] for line in lines)):
        return sum(costs) - costs[-1] + _bare(lines[-1])
    return tokens.count("\n".join(lines))


@functools.lru_cache(maxsize=65536)
def _prepared(text: str) -> tuple[str, int, frozenset[str]]:
    """An entry's line (capped), its token cost with the newline, its stemmed words."""
    capped = _cap(text[: MAX_ENTRY_TOKENS * 12], MAX_ENTRY_TOKENS)
    if not capped:
        return "", 0, frozenset()
    line = f"- {capped}"
    return line, tokens.count(line + "\n"), _signature(capped)


def _signature(text: str) -> frozenset[str]:
    return frozenset(rt.stem(w) for w in rt.words(text) if w not in rt.STOPWORDS)


class _Neighbours:
    """The near-duplicate pairs (Jaccard >= NEAR_DUPLICATE) among the stem
    sets added so far, each set's pairs found once, when it is added: a fill
    then asks whether one of an entry's neighbours was shown (a set lookup
    per neighbour, and most entries have none) instead of comparing it with
    every entry shown. Thread-safe: a set is added under the lock, with its
    pairs on both sides, so whichever of two near sets comes second finds the
    first."""

    def __init__(self) -> None:
        self.near: dict[frozenset[str], tuple[frozenset[str], ...]] = {}
        self.postings: dict[str, list[frozenset[str]]] = {}
        self.lock = threading.Lock()

    def of(self, sig: frozenset[str]) -> tuple[frozenset[str], ...]:
        """The sets added that are near ``sig`` (``sig`` itself left out)."""
        found = self.near.get(sig)
        if found is None:
            with self.lock:
                found = self.near.get(sig)
                if found is None:
                    found = self.near[sig] = self._pairs(sig)
        return found

    def _pairs(self, sig: frozenset[str]) -> tuple[frozenset[str], ...]:
        """Add ``sig``. A set near it holds at least ceil(0.8 n) of its n
        stems, so it holds one of any n - that + 1 of them: only sets in the
        postings of its rarest n - that + 1 stems are compared."""
        n = len(sig)
        if not n:
            return ()  # only an empty set is near an empty one: ``sig in taken``
        postings = self.postings
        empty: list[frozenset[str]] = []
        lists = sorted((postings.get(stem, empty) for stem in sig), key=len)[: n - math.ceil(NEAR_DUPLICATE * n) + 1]
        found: list[frozenset[str]] = []
        seen: set[frozenset[str]] = set()
        for others in lists:
            for other in others:
                if other not in seen:
                    seen.add(other)
                    inter = len(sig & other)
                    if inter >= NEAR_DUPLICATE * (n + len(other) - inter):
                        found.append(other)
        near = self.near
        for other in found:
            near[other] += (sig,)
        for stem in sig:
            postings.setdefault(stem, []).append(sig)
        return tuple(found)


_graph = _Neighbours()
_graph_lock = threading.Lock()


def _neighbours() -> _Neighbours:
    """The pairs kept, started afresh once they hold :data:`NEAR_KEPT` sets
    (a fill keeps using the one it started with)."""
    global _graph
    with _graph_lock:
        if len(_graph.near) >= NEAR_KEPT:
            _graph = _Neighbours()
        return _graph
