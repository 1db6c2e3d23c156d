"""Context, the fill: whole entries into sections within a token budget.

:func:`fill` takes the entries of a render (each a section, a text, a rank
and a join key) and lays them out (:func:`_fill_uncached`):

- **Order.** Each section's entries by size class (a word, a phrase, a
  sentence, a paragraph: the power of two of the tokens each adds to the
  text, an entry joining a run its ``" " + text``), then rank.
- **Shares, no stranding.** Each section may spend its share of the budget:
  its whole pool if that is less than its weight's part, else its weight's
  part of what the others leave (:func:`_shares`); an entry that does not
  fit is left out, the next may fit.
- **Top-up.** The entries left out are tried again in priority order with
  the exact change each makes (its line or its share of a line, the header
  of an empty section, the footer's count): at the end no entry left out
  would fit in what remains.
- **Lines.** No bullets. Word-like entries of one join key (codes,
  ``name(role):topic``) share one line, in rank order, joined by a space;
  prose keeps a line. Each section that left entries out ends with ``+N
  more``, inside the budget. Near-duplicates (Jaccard >= 0.8 of stemmed
  words) are shown once.
- **Legend.** Meanings of the codes that appear, shortest first, in what the
  entries left; never at an entry's expense.

Its figures are exact o200k counts: the text is its lines each closed by a
newline, and its count the sum of its lines' (see :data:`_O200K_SPLIT`); an
entry sharing a line costs ``count(" " + text)`` (see :func:`_joinable`).

What a render repeats is kept between renders, so a render right after one
record changed costs what that record's lines cost, not what the whole
context does: each entry's line, cost and stemmed words (:func:`_prepared`),
the near-duplicate pairs among the entries seen lately (:class:`_Neighbours`),
and whole fills by everything they depend on.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, NamedTuple

from hrm_memory.recall import text as rt
from hrm_memory.core import tokens
from hrm_memory.core.errors import CorruptRecord, Unsupported

MAX_ENTRY_TOKENS = 60
NEAR_DUPLICATE = 0.8
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
    #: Shown entries with the same ``join`` (one field of one record), each
    #: one word-like run (:func:`_joinable`), share a line, in rank order,
    #: joined by a space.
    join: Any = None


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
         budget: int, ranked: frozenset[str] = frozenset()) -> tuple[str, int, list[Section], int, dict[str, str], list[Entry]]:
    """Lay the entries out within ``budget`` (see :func:`_fill_uncached`).
    ``plan`` is the sections in priority order, each (name, title, weight),
    the legend's among them; the sections named in ``ranked`` (a recall's
    hits) keep their entries' rank order and show a prefix of it. Returns
    the text, its tokens, the sections' figures, the number of entries left
    out, the legend shown and the entries shown."""
    by_section: dict[str, list[Entry]] = {}
    for e in sorted(entries, key=lambda e: (0, e.rank) if e.section in ranked else _order(e)):
        by_section.setdefault(e.section, []).append(e)
    # The fill depends on nothing else: a session's renders of an unchanged
    # store reuse it (copies out, so a caller's edits cannot reach the cache).
    key = (budget, tuple(plan), tuple(sorted(legend_map.items())), tuple(sorted(ranked)),
           tuple((name, tuple((e.text, e.join) for e in pool)) for name, pool in by_section.items()))
    hit = _FILLS.get(key)
    if hit is None:
        hit = _fill_uncached(plan, by_section, legend_map, budget, ranked)
        if len(_FILLS) >= FILLS_KEPT:
            evict(_FILLS)
        _FILLS[key] = hit
    text, used, figures, omitted, legend, at = hit
    return text, used, list(figures), omitted, dict(legend), [by_section[name][i] for name, i in at]


def _order(e: Entry) -> tuple[int, tuple[Any, ...]]:
    """A section's order: by size class (tokens' power of two: a word, a
    phrase, a sentence, a paragraph), then rank. At a tight budget the
    entries that say a whole fact in a few tokens come first; within a class
    the rank (newest, strongest) decides. The size is what the entry adds to
    the text: its line with its newline, or, for an entry that may join a
    run, ``count(" " + text)`` (a code of 3 tokens on a run line is a word,
    whatever its own line would cost)."""
    return _size_class(e.text, e.join is not None), e.rank


@functools.lru_cache(maxsize=65536)
def _size_class(text: str, joins: bool) -> int:
    line, cost, _ = _prepared(text)
    return (_cost_joined(line) if joins and _joinable(line) else cost).bit_length()


def _fill_uncached(plan: list[tuple[str, str, float]], by_section: dict[str, list[Entry]],
                   legend_map: dict[str, str], budget: int, ranked: frozenset[str] = frozenset()) -> _Filled:
    """The fill, in three passes over exact o200k costs.

    0. **Ranked sections first** (``ranked``: the Recalled section, a
       recall's hits in its order). Each takes its entries in rank order
       within its share, and the first that does not fit ends it: what it
       shows is the recall's best hits, in the recall's order, and the
       ``+N more`` footer counts the hits after them. Taken before the other
       sections, so a near-duplicate elsewhere (a recalled line that is also
       a "Now" line) is shown where the recall put it.
    1. **Shares.** Each section may spend its share (:func:`_shares`: its
       weight's part of the budget, or its whole pool where that is less,
       what it does not need split among the others). The sections take
       entries in turn, each in its own order, the next turn going to the
       section furthest below its weight (tokens used / weight; ties to the
       earlier, higher-priority section), so a near-duplicate goes to the
       section that reaches it first. An entry that would take its section
       past its share, or the text past the budget, is left out and the
       section goes on with its next. While a section has entries it has
       not shown, room for its ``+N more`` footer is kept, inside its share.
       A section of low weight whose entries are all larger than its share
       shows none of them here: a paragraph of history does not push out
       the last commitment.
    2. **Top-up.** With the footers now known, the entries left out are tried
       again in priority order (sections, then rank), each taken if the text
       with it, header, line and footer change counted, still fits: at the
       end no entry left out would fit in what remains.
    3. **Legend.** Meanings of the codes that appear in the text, shortest
       first, in what the entries left.
    """
    graph = _neighbours()
    taken: set[frozenset[str]] = set()
    secs = [_Sec(name, title, max(weight, 1e-9), prio, by_section.get(name, []))
            for prio, (name, title, weight) in enumerate(plan) if name != "legend" and by_section.get(name)]
    used = reserved = 0
    _shares(secs, budget)
    # 0. Ranked sections: a prefix of each, in rank order.
    for s in secs:
        if s.name not in ranked:
            continue
        while s.next < len(s.pool):
            i = s.next
            s.next += 1
            it = s.items[i]
            if not it.text or it.sig in taken or not taken.isdisjoint(graph.of(it.sig)):
                s.void.add(i)  # empty, or a near-duplicate of a better hit's line
                continue
            d = s.delta(i, footer=False)
            reserve = s.footer_bound() if s.next < len(s.pool) else 0
            if used + d + reserved + reserve <= budget and s.used + d + reserve <= s.share:
                s.take(i, d)
                used += d
                taken.add(it.sig)
            else:  # the rest waits: shown after this one or not at all
                s.skipped.extend(range(i, len(s.pool)))
                s.next = len(s.pool)
                reserve = s.footer_bound() if s.chosen else 0
                reserved += reserve
                s.reserve = reserve
    # 1. Shares.
    active = [s for s in secs if s.name not in ranked]
    while active:
        s = min(active, key=lambda s: (s.used / s.weight, s.prio))
        if s.next >= len(s.pool):
            active.remove(s)
            if not s.skipped:  # every entry shown: no footer
                reserved -= s.reserve
                s.reserve = 0
            continue
        i = s.next
        s.next += 1
        it = s.items[i]
        if not it.text:
            s.void.add(i)
            continue
        if it.sig in taken or not taken.isdisjoint(graph.of(it.sig)):
            s.void.add(i)  # a near-duplicate of an entry shown
            continue
        d = s.delta(i, footer=False)
        more = s.next < len(s.pool) or bool(s.skipped)
        # a section that fits whole within its share will need no footer
        reserve = s.footer_bound() if more and s.share < s.need else 0
        if used + d + reserved - s.reserve + reserve <= budget and s.used + d + reserve <= s.share:
            s.take(i, d)
            used += d
            reserved += reserve - s.reserve
            s.reserve = reserve
            taken.add(it.sig)
        else:
            s.skipped.append(i)
    # 2. Top-up, exact: header, lines and footer of every section.
    total = sum(s.cost() for s in secs)
    changed = True
    while changed and total < budget:
        changed = False
        for s in secs:
            for i in list(s.skipped):
                it = s.items[i]
                if it.sig in taken or not taken.isdisjoint(graph.of(it.sig)):
                    s.skipped.remove(i)  # a near-duplicate of one shown since: not left out
                    s.void.add(i)
                    total = sum(x.cost() for x in secs)  # its section's footer counts one fewer
                    continue
                d = s.delta(i, footer=True)
                if d <= budget - total:
                    s.skipped.remove(i)
                    s.take(i, s.delta(i, footer=False))
                    taken.add(it.sig)
                    total += d
                    changed = True
                elif s.name in ranked:
                    break  # a ranked section stays a prefix: no later hit before this one
    lines: list[str] = []
    figures: list[Section] = []
    at: list[tuple[str, int]] = []
    omitted_total = 0
    for s in secs:
        sect = s.lines()
        omitted = len(s.skipped)
        omitted_total += omitted
        lines.extend(sect)
        at.extend((s.name, i) for i in s.chosen)
        figures.append(Section(s.name, int(s.share), s.cost(), len(s.chosen), omitted))
    # 3. Legend: the codes that appear, in what is left.
    legend: dict[str, str] = {}
    title = next((t for n, t, _ in plan if n == "legend"), None)
    if title is not None and legend_map and lines:
        above = "\n".join(lines)
        codes = [c for c in legend_map if _appears(c, above)]
        pool = [Entry("legend", f"{c}={legend_map[c]}", (c,), None, "legend") for c in codes]
        pool.sort(key=lambda e: (_prepared(e.text)[1], e.text))
        leg = _Sec("legend", title, 1.0, len(plan), pool)
        for i in range(len(pool)):
            d = leg.delta(i, footer=False)
            if leg.items[i].text and d <= budget - total:
                total += d
                leg.take(i, d)
        if leg.chosen:
            for i in leg.chosen:
                code = pool[i].text.split("=", 1)[0]
                legend[code] = legend_map[code]
            lines.extend(leg.lines())
            figures.append(Section("legend", 0, leg.cost(), len(leg.chosen), 0))
    text = "".join(line + "\n" for line in lines)
    count = _text_tokens(lines)
    while lines and count > budget:  # never over budget, whatever BPE does across lines
        lines.pop()
        omitted_total += 1
        text = "".join(line + "\n" for line in lines)
        count = _text_tokens(lines)
    return text, count, figures, omitted_total, legend, tuple(at)


def _shares(secs: list[_Sec], budget: int) -> None:
    """Each section's share of ``budget`` (``_Sec.share``), by weight, water
    filled: a section that needs less than its weight's part of what is left
    (its whole pool, :meth:`_Sec.demand`) gets what it needs, and the rest is
    split again among the others, until every section left needs more."""
    for s in secs:
        s.need = s.demand()
    left = list(secs)
    free = float(budget)
    while left:
        weights = sum(s.weight for s in left)
        whole = [s for s in left if s.need <= free * s.weight / weights]
        if not whole:
            for s in left:
                s.share = free * s.weight / weights
            return
        for s in whole:
            s.share = float(s.need)
            free -= s.share
            left.remove(s)


class _Item(NamedTuple):
    """An entry as the fill lays it out: its line, what that line costs with
    its newline, what it costs joined to the line before (``" " + text``,
    for an entry that may share a line), and its stemmed words."""

    text: str
    cost: int
    joined: int
    join: Any
    sig: frozenset[str]


class _Sec:
    """One section during a fill: its pool (entries in rank order), which are
    shown (``chosen``, in pool order), left out (``skipped``) or not to be
    shown (``void``: empty or a near-duplicate), and what it costs."""

    def __init__(self, name: str, title: str, weight: float, prio: int, pool: list[Entry]) -> None:
        self.name = name
        self.title = title
        self.weight = weight
        self.prio = prio
        self.pool = pool
        self.items = [_item(e) for e in pool]
        self.header = f"## {title}"
        self.header_cost = _cost(self.header)
        self.chosen: list[int] = []
        self.groups: dict[Any, list[int]] = {}  # the chosen word-like entries by join key
        self.skipped: list[int] = []
        self.void: set[int] = set()
        self.next = 0
        self.used = 0  # header and lines, without the footer
        self.reserve = 0  # footer room kept during the first pass
        self.need = 0  # what the whole pool costs (:meth:`demand`)
        self.share = 0.0  # what the first pass may spend here (:func:`_shares`)

    def demand(self) -> int:
        """What the whole pool costs laid out: the header and every line (the
        entries of a run on one line), near-duplicates counted as if shown."""
        runs: dict[Any, list[int]] = {}
        total = self.header_cost
        for i, it in enumerate(self.items):
            if it.join is None:
                total += it.cost
            else:
                runs.setdefault(it.join, []).append(i)
        for members in runs.values():
            total += self._line_cost(members)
        return total

    def footer_bound(self) -> int:
        """At least what the footer will cost (it counts at most the pool)."""
        return _cost(f"+{len(self.pool)} more")

    def footer(self, omitted: int) -> int:
        return _cost(f"+{omitted} more") if omitted and self.chosen else 0

    def cost(self) -> int:
        return self.used + self.footer(len(self.skipped))

    def _line_cost(self, members: list[int]) -> int:
        """A line of entries of one join key, in rank order, joined by a space."""
        items = self.items
        run = sorted(members, key=lambda i: self.pool[i].rank)
        return items[run[0]].cost + sum(items[i].joined for i in run[1:])

    def delta(self, i: int, footer: bool) -> int:
        """What showing entry ``i`` adds: its own line, or what its join
        key's line grows by with it, the header if it is the first, and with
        ``footer`` the footer's change (``i`` being one of those left out)."""
        join = self.items[i].join
        if join is None:
            d = self.items[i].cost
        else:
            members = self.groups.get(join)
            d = self._line_cost([*members, i]) - self._line_cost(members) if members else self.items[i].cost
        if not self.chosen:
            d += self.header_cost
        if footer:
            n = len(self.skipped)
            d += (_cost(f"+{n - 1} more") if n > 1 else 0) - self.footer(n)
        return d

    def take(self, i: int, d: int) -> None:
        """Show entry ``i``, ``d`` being its :meth:`delta` without the footer's change."""
        self.used += d
        bisect.insort(self.chosen, i)
        join = self.items[i].join
        if join is not None:
            self.groups.setdefault(join, []).append(i)

    def lines(self) -> list[str]:
        """The header, the entries shown in pool order (those of one join key
        on one line, in rank order, where the first of them is), the footer."""
        if not self.chosen:
            return []
        out = [self.header]
        done = set()
        groups: dict[Any, list[int]] = {}
        for i in self.chosen:
            join = self.items[i].join
            if join is not None:
                groups.setdefault(join, []).append(i)
        for i in self.chosen:
            join = self.items[i].join
            if join is None:
                out.append(self.items[i].text)
            elif join not in done:
                done.add(join)
                out.append(" ".join(self.items[k].text for k in sorted(groups[join], key=lambda k: self.pool[k].rank)))
        if self.skipped:
            out.append(f"+{len(self.skipped)} more")
        return out


def _item(e: Entry) -> _Item:
    line, cost, sig = _prepared(e.text)
    if e.join is not None and _joinable(line):
        return _Item(line, cost, _cost_joined(line), e.join, sig)
    return _Item(line, cost, cost, None, sig)


def _joinable(text: str) -> bool:
    """An entry that may share a line, joined by a space: one word-like run
    with no white space, starting and ending with a letter or digit, so the
    split pattern cuts at the joining space and each entry's tokens are its
    own (``count(a + " " + b) == count(a) + count(" " + b)``)."""
    return bool(text) and text[0].isalnum() and text[-1].isalnum() and not any(c.isspace() for c in text)


@functools.lru_cache(maxsize=65536)
def _cost_joined(text: str) -> int:
    return tokens.count(" " + text)


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
    pattern that starts with a look-behind is tried at every position, which
    made it the slow part of a render: BENCHMARKS.md, "Figures the code's
    comments rely on")."""
    pattern = re.compile(re.escape(code) + r"(?!\w)")
    m = pattern.search(text)
    while m is not None:
        at = m.start()
        if at == 0 or not _WORD.match(text, at - 1):
            return True
        m = pattern.search(text, at + 1)
    return False


@functools.lru_cache(maxsize=16384)
def _cost(line: str) -> int:
    return tokens.count(line + "\n")


#: o200k_base's split pattern, as tiktoken pins it. BPE merges only inside
#: the pieces this pattern cuts, so a text's count is the sum of its pieces'.
#: A piece that holds a line's closing "\n" comes from ``[^\s\p{L}\p{N}]+[\r\n/]*``,
#: ``\s*[\r\n]+`` or ``\s+``: it can go on past that "\n" only into "\r", "\n",
#: "/" or white space, and the two letter patterns never take a "\n". So when
#: no line starts with white space or "/" (:func:`_starts_clean`), each "\n"
#: ends a piece, every line is cut as it is on its own with its "\n", and a
#: text of lines each closed by "\n" counts exactly the sum of
#: ``count(line + "\n")``.
_O200K_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _starts_clean(line: str) -> bool:
    r"""``line`` starts with what no piece of the line before can take: not
    white space (Python's ``isspace``, a superset of the pattern's ``\s``),
    not "/"."""
    return bool(line) and not line[0].isspace() and line[0] != "/"


@functools.cache
def _splits_at_lines() -> bool:
    """True if the exact counter's split pattern is :data:`_O200K_SPLIT`."""
    try:
        return tokens.pinned_encoding().pat_str == _O200K_SPLIT
    except (Unsupported, CorruptRecord, OSError):
        return False


def _text_tokens(lines: list[str]) -> int:
    """Exact tokens of ``"".join(line + "\n" for line in lines)``: the sum
    of each line's :func:`_cost` where that is provably the count (see
    :data:`_O200K_SPLIT`), else the text counted."""
    if not lines:
        return 0
    if tokens.get_counter().exact and _splits_at_lines() and all(_starts_clean(line) for line in lines[1:]):
        return sum(_cost(line) for line in lines)
    return tokens.count("".join(line + "\n" for line in lines))


@functools.lru_cache(maxsize=65536)
def _prepared(text: str) -> tuple[str, int, frozenset[str]]:
    """An entry's line (capped), its token cost with the newline, its stemmed words."""
    capped = _cap(text[: MAX_ENTRY_TOKENS * 12], MAX_ENTRY_TOKENS)
    if not capped:
        return "", 0, frozenset()
    line = capped if _starts_clean(capped) else f"- {capped}"
    return line, _cost(line), _signature(capped)


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
