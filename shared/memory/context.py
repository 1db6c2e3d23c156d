"""Context: an HRM's memory rendered into a prompt within a token budget.

``mm.context(hrm, budget=2000, query=None)`` returns a :class:`Context`:
Markdown ``text``, its ``tokens`` (o200k, everything counted: headers,
bullets, footers, legend), the figures of each section and what was left out.

How it is built (:meth:`Contexting._context`):

1. **Sources, bounded.** The indexed namespaces the HRM may read, grouped into
   sections (:data:`SECTIONS`) by the kind of memory they hold, or for legacy
   documents by the field an item sits in (``pending_commits`` is a
   commitment, ``people`` are people, ...). At most :data:`PER_NAMESPACE`
   newest records per namespace are read, through the recall index's
   (namespace, update time) order, so the cost is the same at 10k and at 1M
   records. With ``query``, a recalled section leads.
2. **Entries.** Each record becomes one entry per item (a list item, a person,
   a scored code at or above :data:`SHOW_SCORE`), flattened to one line;
   long entries are capped at :data:`MAX_ENTRY_TOKENS`; ISO timestamps are
   shortened (``today``, ``3d ago``, ``Jan 9``, ``Jan 9 2025``); strings the
   namespace's codec has a code for are written as the code.
3. **Dedup.** An entry whose stemmed words are a near-duplicate (Jaccard >=
   0.8) of one already taken is dropped, across sections.
4. **Fill.** Sections in order, each up to its share of the budget (unused
   share flows on), whole entries only: an entry that does not fit is
   skipped, the next may still fit; a section that leaves entries out ends
   with ``… N more not shown``, counted inside the budget. A legend of the
   codes that appear (and only those) comes last, if it fits.
5. **Exact.** The whole text is counted again; should BPE merges across lines
   make it larger than the sum of its lines, entries are dropped from the end
   until it fits. ``tokens <= budget`` always.

The same store, budget, query and ``now`` render byte-identical text, so a
provider's prompt cache hits.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from . import recall_text as rt
from . import tokens
from .errors import InvalidArgument
from .memories import Remembering
from .ops import ContextOp, RecallOp
from .records import Stored
from .spec import KINDS, NamespaceSpec
from .steps import Attrs
from .tracing import OpSpan

#: Sections in render order: name, title, share of the budget, the kinds that
#: land there. Shares follow OpenClaw's hot 1,600 / warm 400 / cold 200 split
#: of a 2,000-token file: what is live now (state, goals, people) gets about
#: 70%, patterns and history the rest.
SECTIONS: tuple[tuple[str, str, float, tuple[str, ...]], ...] = (
    ("now", "Now", 0.22, ("working",)),
    ("goals", "Goals and commitments", 0.22, ("prospective",)),
    ("people", "People", 0.16, ()),
    ("patterns", "Patterns and preferences", 0.16, ("semantic", "procedural")),
    ("history", "Recent history", 0.14, ("episodic",)),
    ("legend", "Codes", 0.10, ()),
)
#: With a query, the recalled section leads with this share (the others shrink).
RECALLED_SHARE = 0.3
#: Fields of legacy documents whose items belong to a section whatever the namespace's kind.
FIELD_SECTIONS: dict[str, str | None] = {
    "active_threads": "now", "active": "now", "open_questions": "now", "frame": "now",
    "north_stars": "goals", "current_priorities": "goals", "priorities": "goals", "anti_goals": "goals",
    "pending_commits": "goals", "commits": "goals", "commitments": "goals", "goals": "goals",
    "people": "people", "entities_people": "people",
    "patterns": "patterns", "observations": "patterns", "coaching": "patterns", "preferences": "patterns",
    "observed": "patterns",
    "sessions": "history", "summary": "history", "conversations": "history",
    # Transcripts are for recall (with a query), not for the standing context.
    "messages": None, "conversation": None, "history": None,
}
#: Words put before the items of a field, where the section alone would mislead.
FIELD_PREFIX = {"anti_goals": "avoid: ", "open_questions": "open question: "}
#: Namespaces whose records are people, whatever their kind.
PEOPLE_NAMESPACES = frozenset({"shared.people"})
PER_NAMESPACE = 20  # newest records read per namespace
CACHE_RECORDS = 4096  # records whose rendered lines are kept between renders
RENDERS_KEPT = 32  # whole renders kept while nothing the index sees changes
PER_FIELD = 40  # entries taken from one field of a record (or one record)
MAX_ENTRY_TOKENS = 60
SHOW_SCORE = 0.7  # scored codes shown at or above (the legacy SHOW_AT)
NEAR_DUPLICATE = 0.8
FOOTER_RESERVE = 12  # tokens kept free in a section for its "… N more not shown"
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")
_SKIP_FIELDS = frozenset({"timestamp", "first_mentioned", "last_updated", "last_session", "created", "updated",
                          "mentions", "index", "validated", "kind", "importance", "type", "category", "data",
                          "n", "duration_exchanges", "time"})
#: Fields that are the entry itself: written without their name.
_TEXT_FIELDS = frozenset({"text", "observation", "summary", "name", "content", "details", "note", "date"})
_MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


@dataclass(frozen=True, slots=True)
class Section:
    """Figures of one rendered section."""

    name: str
    budget: int
    tokens: int
    shown: int
    omitted: int


@dataclass(frozen=True, slots=True)
class Context:
    """A rendered context: ``text`` and its exact ``tokens`` (<= ``budget``)."""

    hrm: str
    text: str
    tokens: int
    budget: int
    sections: tuple[Section, ...]
    omitted: int
    legend: dict[str, str] = field(default_factory=dict)
    counter: str = "exact"


@dataclass
class _Entry:
    section: str
    text: str
    rank: tuple[Any, ...]


class Contexting(Remembering):
    """The ``context`` handler."""

    #: Rendered lines per (namespace, key, version, day), and whole renders
    #: per (hrm, budget, query, sections, day, index epoch).
    _ctx_lines: dict[tuple[str, str, int, int], tuple[list[tuple[str, str]], dict[str, str]]]
    _ctx_renders: dict[tuple[Any, ...], Context]

    def setup_recall(self, *args: Any, **kwargs: Any) -> None:
        super().setup_recall(*args, **kwargs)
        self._ctx_lines = {}
        self._ctx_renders = {}

    def _context(self, op: ContextOp, scope: str | None, span: OpSpan | None) -> tuple[Context, Attrs]:
        hrm, budget, query, sections, now = op
        if scope is not None and hrm != scope:
            raise InvalidArgument(f"a scope for {scope!r} renders its own context, not {hrm!r}")
        self.check_scope(hrm)
        if type(budget) is not int or not 0 <= budget <= 1_000_000:
            raise InvalidArgument(f"budget must be an int in 0..1000000 tokens, not {budget!r}")
        names = [s[0] for s in SECTIONS]
        if sections is not None:
            sections = [sections] if isinstance(sections, str) else list(sections)
            unknown = [s for s in sections if s not in names]
            if unknown:
                raise InvalidArgument(f"unknown section(s) {unknown}; expected some of {names}")
        wanted = names if sections is None else [n for n in names if n in sections or n == "legend"]
        now_s = time.time() if now is None else _epoch(now)
        specs = [s for s in self.registry if s.index and self.readable(hrm, s.name)]
        self.sync_index()
        # Nothing the index sees has changed since the same render: the same text.
        day = int(now_s // 86400)  # relative dates change once a day: so may the lines
        render_key = (hrm, budget, query, None if sections is None else tuple(sections), day, self.index_epoch)
        renders = self._ctx_renders
        done = renders.get(render_key)
        if done is not None:
            return replace(done, legend=dict(done.legend)), _context_attrs(span, done, budget, query)
        entries: list[_Entry] = []
        legend_map: dict[str, str] = {}
        if query:
            for i, hit in enumerate(self._recall_for(query, hrm, specs)):
                spec = self._specs[hit.namespace]
                for text in self._lines(spec, hit.record.value, None, now_s, legend_map):
                    entries.append(_Entry("recalled", text, (i,)))
        cache = self._ctx_lines
        for spec in specs:
            for key, version, st in self._newest(spec):
                ref = (spec.name, key, version, day)
                lines = cache.get(ref)
                if lines is None:
                    value = self.decode(spec, st, False)
                    found: dict[str, str] = {}
                    lines = (list(self._record_entries(spec, key, value, now_s, found)), found)
                    if len(cache) >= CACHE_RECORDS:
                        cache.pop(next(iter(cache)))
                    cache[ref] = lines
                legend_map.update(lines[1])
                for j, (section, text) in enumerate(lines[0]):
                    if section in wanted:
                        entries.append(_Entry(section, text, (-st.updated_us, spec.name, key, j)))
        plan = ([("recalled", "Recalled", RECALLED_SHARE)] if query else []) + [
            (name, title, share * (1 - RECALLED_SHARE if query else 1.0))
            for name, title, share, _ in SECTIONS if name in wanted
        ]
        text, used, figures, omitted, legend = _fill(plan, entries, legend_map, budget)
        result = Context(hrm, text, used, budget, tuple(figures), omitted, legend,
                         str(tokens.get_counter().info["counter"]))
        if len(renders) >= RENDERS_KEPT or any(k[5] != self.index_epoch for k in renders):
            renders.clear()
        renders[render_key] = result
        return replace(result, legend=dict(legend)), _context_attrs(span, result, budget, query)

    def _recall_for(self, query: str, hrm: str, specs: list[NamespaceSpec]) -> list[Any]:
        if not specs or not rt.query_terms(query):
            return []
        hits, _ = self._recall(RecallOp(query, [s.name for s in specs], k=10), hrm, None)
        return hits

    def _newest(self, spec: NamespaceSpec) -> Iterable[tuple[str, int, Stored]]:
        """The newest live records of ``spec`` (at most :data:`PER_NAMESPACE`),
        through the index's order; each checked against the store."""
        seen = set()
        for index in (self.mem_index, self.disk_index):
            if index is None:
                continue
            for key, version in index.newest(spec.name, PER_NAMESPACE):
                if key in seen:
                    continue
                st = self.lookup(spec, key)
                if st is None or st.version != version or st.tier == "cold":
                    continue
                seen.add(key)
                yield key, version, st

    def _record_entries(self, spec: NamespaceSpec, key: str, value: Any, now_s: float,
                        legend: dict[str, str]) -> Iterable[tuple[str, str]]:
        default = "people" if spec.name in PEOPLE_NAMESPACES else _section_of_kind(spec.kind)
        if isinstance(value, dict) and value.get("kind") in KINDS:
            default = _section_of_kind(value["kind"])
        if isinstance(value, dict) and not _is_leafy(value):
            for fname, item in value.items():
                section = FIELD_SECTIONS.get(fname, default)
                if section is None or fname in _SKIP_FIELDS:
                    continue
                prefix = FIELD_PREFIX.get(fname, "")
                for text in self._lines(spec, item, fname, now_s, legend)[:PER_FIELD]:
                    yield section, prefix + text
        elif default is not None:
            for text in self._lines(spec, value, None, now_s, legend, key=key)[:PER_FIELD]:
                yield default, text

    def _lines(self, spec: NamespaceSpec, value: Any, label: str | None, now_s: float,
               legend: dict[str, str], key: str | None = None) -> list[str]:
        """One line per item of ``value``: list items, people, scored codes."""
        codec = self.codec(spec)
        if codec is None and spec.hrm in self.codecs:
            codec = self.codecs.get(spec.hrm)  # a legacy document of the HRM speaks its codes
        codes = {} if codec is None else dict(codec.values)
        tables: dict[str, str] = {}
        if codec is not None:
            for table in codec.tables.values():
                tables.update(table)
        if isinstance(value, list):
            items = value[-PER_FIELD:][::-1] if label in ("observations", "observed", "sessions") else value
            return [_flat(v, now_s, codes, tables, legend) for v in items if v not in (None, "", [], {})]
        if isinstance(value, dict) and value and all(_score(v) is not None for v in value.values()):
            ranked = sorted(value.items(), key=lambda kv: (-float(kv[1]), kv[0]))
            shown = [k for k, v in ranked if float(v) >= SHOW_SCORE]
            return [_code(k, codes, tables, legend) for k in shown]
        if isinstance(value, dict) and label in ("people", "entities_people"):
            inner = value.get("people", value) if isinstance(value.get("people"), dict) else value
            out = []
            for name, v in inner.items():
                if isinstance(v, dict) and str(v.get("name", "")).lower() == str(name).lower():
                    v = {k: x for k, x in v.items() if k != "name"}
                    name = inner[name].get("name", name)
                out.append(f"{name}: {_flat(v, now_s, codes, tables, legend)}")
            return out
        line = _flat(value, now_s, codes, tables, legend)
        if not line:
            return []
        named = isinstance(value, dict) and str(value.get("name", "")).lower() == (key or "").lower()
        labelled = key and not named and isinstance(value, (dict, list)) and len(key) <= 24
        return [f"{key}: {line}" if labelled else line]


def _context_attrs(span: OpSpan | None, ctx: Context, budget: int, query: str | None) -> Attrs:
    if span is None:
        return None
    return {"hrm.memory.tokens": ctx.tokens, "hrm.memory.budget": budget, "hrm.memory.omitted": ctx.omitted,
            "hrm.memory.sections": len(ctx.sections), "hrm.memory.query": bool(query)}


def _section_of_kind(kind: str | None) -> str | None:
    for name, _, _, kinds in SECTIONS:
        if kind in kinds:
            return name
    return "patterns" if kind is None else None


def _is_leafy(value: dict[str, Any]) -> bool:
    """A record that reads as one entry (a memory, a person), not a document of sections."""
    return not any(f in FIELD_SECTIONS for f in value)


def _score(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 else None


def _code(text: str, codes: dict[str, str], tables: dict[str, str], legend: dict[str, str]) -> str:
    if text in codes:
        legend[codes[text]] = text
        return codes[text]
    if text in tables:
        legend[text] = tables[text]
    return text


def _flat(value: Any, now_s: float, codes: dict[str, str], tables: dict[str, str], legend: dict[str, str]) -> str:
    """One line for a JSON value: strings as they are (codes and short dates
    where they pay), lists joined by ", ", objects as ``k: v; k: v``."""
    if isinstance(value, str):
        return _dates(_code(" ".join(value.split()), codes, tables, legend), now_s)
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, list):
        return ", ".join(p for p in (_flat(v, now_s, codes, tables, legend) for v in value) if p)
    if isinstance(value, dict):
        if isinstance(value.get("role"), str) and isinstance(value.get("content"), str):
            return f"{value['role']}: {_flat(value['content'], now_s, codes, tables, legend)}"
        parts = []
        for k, v in value.items():
            if k in _SKIP_FIELDS:
                continue
            inner = _flat(v, now_s, codes, tables, legend)
            if inner:
                bare = k in _TEXT_FIELDS or isinstance(v, dict)
                parts.append(inner if bare else f"{k}: {inner}")
        return "; ".join(parts)
    return ""


def _dates(text: str, now_s: float) -> str:
    """ISO timestamps made short: relative within two weeks, else the day."""
    if "-" not in text:
        return text
    today = datetime.fromtimestamp(now_s, tz=timezone.utc).date()

    def short(m: re.Match[str]) -> str:
        try:
            day = datetime(int(m.group(1)), int(m.group(2)), int(m.group(3))).date()
        except ValueError:
            return m.group(0)
        delta = (today - day).days
        if delta == 0:
            return "today"
        if 0 < delta < 14:
            return f"{delta}d ago"
        label = f"{_MONTHS[day.month - 1]} {day.day}"
        return label if day.year == today.year else f"{label} {day.year}"

    return _ISO.sub(short, text)


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


def _fill(plan: list[tuple[str, str, float]], entries: list[_Entry], legend_map: dict[str, str],
          budget: int) -> tuple[str, int, list[Section], int, dict[str, str]]:
    """Fill the sections; when budget is left over while sections left
    entries out, fill once more with that remainder given to them, in
    proportion to what each left out."""
    by_section: dict[str, list[_Entry]] = {}
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
            try:
                _FILLS.pop(next(iter(_FILLS)), None)
            except (StopIteration, RuntimeError):  # another thread's render changed it meanwhile
                pass
        _FILLS[key] = hit
    text, used, figures, omitted, legend = hit
    return text, used, list(figures), omitted, dict(legend)


def _fill_uncached(plan: list[tuple[str, str, float]], by_section: dict[str, list[_Entry]],
                   legend_map: dict[str, str], budget: int) -> tuple[str, int, list[Section], int, dict[str, str]]:
    result = _fill_once(plan, by_section, legend_map, budget, {})
    text, used, figures, omitted, _ = result
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


def _fill_once(plan: list[tuple[str, str, float]], by_section: dict[str, list[_Entry]], legend_map: dict[str, str],
               budget: int, fixed: dict[str, int]) -> tuple[str, int, list[Section], int, dict[str, str]]:
    count = tokens.count
    taken = _Taken()
    lines: list[str] = []
    figures: list[Section] = []
    used = 0
    omitted_total = 0
    legend: dict[str, str] = {}
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
            pool = [_Entry("legend", f"{c}={legend_map[c]}", (c,)) for c in sorted(legend_map)
                    if re.search(rf"(?<![\w]){re.escape(c)}(?![\w])", "\n".join(lines))]
        else:
            pool = by_section.get(name, [])
        if not pool:
            continue
        header = f"## {title}"
        cost_header = _cost(header)
        sect_lines: list[str] = []
        sect_used = cost_header
        shown = omitted = 0
        for e in pool:
            if min(allowance, budget - used) - sect_used < 16:
                omitted += 1  # no entry fits in what is left: counted, not tokenized
                continue
            line, cost, sig = _prepared(e.text)
            if not line or taken.near(sig):
                continue
            # Room for a footer is kept while entries remain after this one.
            if sect_used + cost + FOOTER_RESERVE <= allowance and used + sect_used + cost + FOOTER_RESERVE <= budget:
                sect_lines.append(line)
                sect_used += cost
                taken.add(sig)
                shown += 1
                if name == "legend":
                    code = e.text.split("=", 1)[0]
                    legend[code] = legend_map[code]
            else:
                omitted += 1
        if not shown:
            omitted_total += omitted
            figures.append(Section(name, allowance, 0, 0, omitted))
            continue
        if omitted:
            footer = f"… {omitted} more not shown"
            sect_lines.append(footer)
            sect_used += _cost(footer)
        lines.append(header)
        lines.extend(sect_lines)
        used += sect_used
        omitted_total += omitted
        figures.append(Section(name, allowance, sect_used, shown, omitted))
    text = "\n".join(lines)
    total = count(text)
    while lines and total > budget:  # never over budget, whatever BPE does across lines
        lines.pop()
        omitted_total += 1
        text = "\n".join(lines)
        total = count(text)
    return text, total, figures, omitted_total, legend


#: Fills kept between renders, by everything a fill depends on (budget, plan,
#: legend, each section's entries in order).
FILLS_KEPT = 32
_FILLS: dict[tuple[Any, ...], tuple[str, int, list[Section], int, dict[str, str]]] = {}


@functools.lru_cache(maxsize=1024)
def _cost(line: str) -> int:
    return tokens.count(line + "\n")


@functools.lru_cache(maxsize=65536)
def _prepared(text: str) -> tuple[str, int, frozenset[str]]:
    """An entry's line (capped), its token cost with the newline, its stemmed words."""
    capped = _cap(text[: MAX_ENTRY_TOKENS * 12], MAX_ENTRY_TOKENS)
    if not capped:
        return "", 0, frozenset()
    line = f"- {capped}"
    return line, tokens.count(line + "\n"), _signature(capped)


class _Taken:
    """The stemmed words of the entries taken so far, with postings, for
    near-duplicate checks that compare only with entries that could be one."""

    def __init__(self) -> None:
        self.sigs: list[frozenset[str]] = []
        self.postings: dict[str, list[int]] = {}

    def add(self, sig: frozenset[str]) -> None:
        i = len(self.sigs)
        self.sigs.append(sig)
        for stem in sig:
            self.postings.setdefault(stem, []).append(i)

    def near(self, sig: frozenset[str]) -> bool:
        """Jaccard >= NEAR_DUPLICATE with a taken entry. Such an entry holds at
        least ceil(0.8 n) of the n stems, so it holds one of any n - that + 1
        of them: only entries in the postings of the rarest n - that + 1 are
        compared, and only those whose size allows a Jaccard that high."""
        n = len(sig)
        if not n:
            return bool(self.postings.get("")) or frozenset() in self.sigs
        postings = self.postings
        empty: list[int] = []
        lists = sorted((postings.get(stem, empty) for stem in sig), key=len)[: n - math.ceil(NEAR_DUPLICATE * n) + 1]
        if not lists[-1]:
            return False
        lo, hi = NEAR_DUPLICATE * n, n / NEAR_DUPLICATE  # |a|/|b| and |b|/|a| both >= NEAR_DUPLICATE
        sigs = self.sigs
        seen: set[int] = set()
        for ids in lists:
            for i in ids:
                if i not in seen:
                    seen.add(i)
                    other = sigs[i]
                    m = len(other)
                    if lo <= m <= hi:
                        inter = len(sig & other)
                        if inter >= NEAR_DUPLICATE * (n + m - inter):
                            return True
        return False


def _signature(text: str) -> frozenset[str]:
    return frozenset(rt.stem(w) for w in rt.words(text) if w not in rt.STOPWORDS)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 1.0 if a == b else 0.0
    return len(a & b) / len(a | b)


def _epoch(now: Any) -> float:
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise InvalidArgument("now must be timezone-aware (or epoch seconds)")
        return now.timestamp()
    if type(now) in (int, float) and math.isfinite(now):
        return float(now)
    raise InvalidArgument(f"now must be a datetime or epoch seconds, not {now!r}")


__all__ = ["FIELD_SECTIONS", "SECTIONS", "Context", "Contexting", "Section"]
