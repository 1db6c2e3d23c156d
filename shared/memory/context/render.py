"""Context: an HRM's memory rendered into a prompt within a token budget.

``mm.context(hrm, budget=2000, query=None)`` returns a :class:`Context`:
Markdown ``text``, its ``tokens`` (o200k, everything counted: headers,
footers, legend), the figures of each section and what was left out.

How it is built (:meth:`ContextRenderer.context`):

1. **Sources, bounded.** The indexed namespaces the HRM may read, grouped into
   sections (:data:`SECTIONS`) by the kind of memory they hold, or for legacy
   documents by the field an item sits in (``pending_commits`` is a
   commitment, ``people`` are people, ...). At most :data:`PER_NAMESPACE`
   newest records per namespace are read, through the recall index's
   (namespace, update time) order, so the cost is the same at 10k and at 1M
   records. Each is checked against the store (present, this version, not
   archived) when a render first meets it at that version, and again by
   every render that shows its lines; in between, the synced index's word
   that the version is current stands for records only counted in a footer.
   With ``query``, a recalled section leads: recall's best hits, in
   recall's order (a prefix of its ranking, filled before the others).
2. **Entries, by the kind of value** (:class:`_Format`), for density: no
   bullets, no field names (a number keeps its name, ``n=3``); a list gives
   an entry per item; a scored map the codes at or above :data:`SHOW_SCORE`,
   strongest first; a map of records ``name(role):rest`` per key (a
   person: ``gaurav(wk):q1_planning``, ``Bella(daughter): cheer
   competitions``); an entity record under its key the same; long entries
   are capped at :data:`~.context_fill.MAX_ENTRY_TOKENS`; ISO dates and
   timestamps shortened (``today``, ``yesterday``, ``3d ago``, ``Jan 9``,
   ``Jan 9 2025``); strings the namespace's codec has a code for are
   written as the code (lossless: ``mm.expand`` gives the readable form).
3. **Dedup.** An entry whose stemmed words are a near-duplicate (Jaccard >=
   0.8) of one already taken is dropped, across sections.
4. **Fill** (:func:`~hrm_memory.context.fill.fill`). Each section
   (:data:`SECTIONS`, in priority order: now, goals and commitments,
   people, patterns, history) may spend its share of the budget: all it
   needs if that is less than its weight's part, else its weight's part of
   what the others leave. Each takes its entries smallest size class first
   (what an entry adds to the text: a code joining a run its ``" " +
   text``); an entry past the share waits, and a last pass takes, in
   priority order, any entry left out that still fits, so no left-out entry
   would fit in what remains. Word-like entries of one field share a line;
   a section that leaves entries out ends with ``+N more``, counted inside
   the budget. A legend of the codes that appear comes last, in what is
   left.
5. **Exact.** ``tokens`` is the o200k count of the whole text (every line
   closed by a newline): the sum of its lines' counts where o200k's split
   pattern provably cuts at every line break, else the text counted again;
   should that be over the budget, lines are dropped from the end until it
   fits. ``tokens <= budget`` always.

Steps 3-5 are :mod:`hrm_memory.context.fill`. What a render repeats is kept
between renders: whole renders while nothing the index sees changes, each
record's lines by (namespace, key, version, day), each entry's cost and
stemmed words, the near-duplicate pairs; so a render after a write redoes
the fill but reads, counts and compares only what changed, and checks
against the store only the records it shows.

The same store, budget, query and ``now`` render byte-identical text, so a
provider's prompt cache hits.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from hrm_memory.recall import text as rt
from hrm_memory.core import tokens
from hrm_memory.context.fill import Entry, Section, evict, fill
from hrm_memory.core.errors import InvalidArgument
from hrm_memory.recall.search import Recall
from hrm_memory.core.ops import ContextOp, RecallOp
from hrm_memory.core.records import Stored
from hrm_memory.core.spec import KINDS, NamespaceSpec
from hrm_memory.core.state import Attrs, Core, Handlers
from hrm_memory.tracing.spans import OpSpan

#: Sections in priority order: name, title, weight, the kinds that land
#: there. Each section's share of the budget is in proportion to its weight
#: (all it needs, if less; what one section does not need goes to the
#: others by weight, and what is left at the end in priority order). What is
#: live now and what was promised weigh most, then people, then patterns,
#: then history; the legend of codes gets what is left.
SECTIONS: tuple[tuple[str, str, float, tuple[str, ...]], ...] = (
    ("now", "Now", 8.0, ("working",)),
    ("goals", "Goals and commitments", 8.0, ("prospective",)),
    ("people", "People", 4.0, ()),
    ("patterns", "Patterns and preferences", 2.0, ("semantic", "procedural")),
    ("history", "Recent history", 1.0, ("episodic",)),
    ("legend", "Codes", 0.0, ()),
)
#: With a query, the recalled section leads, weighing as much as "now".
RECALLED_WEIGHT = 8.0
#: Sections that show their entries in rank order, a prefix of it: the
#: recalled hits, in recall's order (:func:`~hrm_memory.context.fill.fill`).
RANKED = frozenset({"recalled"})
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
NAMESPACES_KEPT = 256  # namespaces' entries kept, by what the index lists for them
PER_FIELD = 40  # entries taken from one field of a record (or one record)
SHOW_SCORE = 0.7  # scored codes shown at or above (the legacy SHOW_AT)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![\d:])")
_SKIP_FIELDS = frozenset({"timestamp", "first_mentioned", "last_updated", "last_session", "created", "updated",
                          "mentions", "index", "validated", "kind", "importance", "type", "category", "data",
                          "n", "duration_exchanges", "time", "last_update", "session_count"})
#: Fields that are the entry itself: written without their name.
_TEXT_FIELDS = frozenset({"text", "observation", "summary", "name", "content", "details", "note", "date"})
_MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
_BARE = re.compile(r"[\w$.+/-]{1,40}")  # a code: one word, no spaces, no ':'


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


class ContextRenderer:
    """The ``context`` handler: given the core and the recall component (for
    ``query=``, and its index: what each namespace holds, newest first)."""

    def __init__(self, core: Core, recall: Recall) -> None:
        self.core = core
        self.recall = recall
        self.index = recall.index
        #: Rendered lines per (namespace, key, version, update time, day); whole
        #: renders per (hrm, budget, query, sections, day, index epoch); the
        #: update time of each (namespace, key, version) the store last confirmed;
        #: a namespace's entries, codes and records per (namespace, what the
        #: index lists for it, day).
        self._ctx_lines: dict[tuple[str, str, int, int, int], tuple[list[Entry], dict[str, str]]] = {}
        self._ctx_renders: dict[tuple[Any, ...], Context] = {}
        self._ctx_checked: dict[tuple[str, str, int], int] = {}
        self._ctx_namespaces: dict[tuple[Any, ...], tuple[list[Entry], dict[str, str], list[tuple[str, str, int]]]] = {}

    def handlers(self) -> Handlers:
        return {ContextOp: ("context", self.context, False)}

    def close(self) -> None:
        pass

    def context(self, op: ContextOp, scope: str | None, span: OpSpan | None) -> tuple[Context, Attrs]:
        hrm, budget, query, sections, now = op
        if scope is not None and hrm != scope:
            raise InvalidArgument(f"a scope for {scope!r} renders its own context, not {hrm!r}")
        self.core.check_scope(hrm)
        if type(budget) is not int or not 0 <= budget <= 1_000_000:
            raise InvalidArgument(f"budget must be an int in 0..1000000 tokens, not {budget!r}")
        names = [s[0] for s in SECTIONS]
        if sections is not None:
            if isinstance(sections, str):
                sections = [sections]
            elif isinstance(sections, (list, tuple, set, frozenset)) and all(type(s) is str for s in sections):
                sections = list(sections)
            else:
                raise InvalidArgument(f"sections must be a section name or a list of them, not {sections!r}")
            unknown = [s for s in sections if s not in names]
            if unknown:
                raise InvalidArgument(f"unknown section(s) {unknown}; expected some of {names}")
        wanted = set(names) if sections is None else {n for n in names if n in sections or n == "legend"}
        now_s = time.time() if now is None else _epoch(now)
        specs = [s for s in self.core.registry if s.index and self.core.readable(hrm, s.name)]
        self.index.sync()
        # Nothing the index sees has changed since the same render: the same text.
        day = int(now_s // 86400)  # relative dates change once a day: so may the lines
        render_key = (hrm, budget, query, None if sections is None else tuple(sections), day, self.index.epoch)
        renders = self._ctx_renders
        done = renders.get(render_key)
        if done is not None:
            return replace(done, legend=dict(done.legend)), _context_attrs(span, done, budget, query)
        recalled: list[Entry] = []
        recalled_legend: dict[str, str] = {}
        if query:
            for i, hit in enumerate(self._recall_for(query, hrm, specs)):
                spec = self.core.specs[hit.namespace]
                # a record of several passages (a conversation, a map of people)
                # is recalled as the passage that answers, not whole
                one = len(rt.passages(hit.record.value, spec.index or ("$",))) == 1
                lines = self._lines(spec, hit.record.value if one else hit.snippet, None, now_s, recalled_legend)
                for j, text in enumerate(lines):
                    recalled.append(Entry("recalled", text, (i, j), None, ("recalled", i)))
        plan = ([("recalled", "Recalled", RECALLED_WEIGHT)] if query else []) + [
            (name, title, weight) for name, title, weight, _ in SECTIONS if name in wanted
        ]
        every = len(wanted) == len(SECTIONS)
        while True:
            # Records the store confirmed at this version in an earlier render
            # are taken on the synced index's word; those whose lines are
            # shown are checked again below, before the text is returned.
            entries = list(recalled)
            legend_map = dict(recalled_legend)
            unchecked: dict[tuple[str, str, int], NamespaceSpec] = {}
            for spec in specs:
                ents, codes, refs = self._namespace(spec, day, now_s)
                unchecked.update(dict.fromkeys(refs, spec))
                legend_map.update(codes)
                entries.extend(ents if every else [e for e in ents if e.section in wanted])
            text, used, figures, omitted, legend, shown = fill(plan, entries, legend_map, budget, RANKED)
            stale = [ref for ref in {e.ref for e in shown if e.ref in unchecked}
                     if ref is not None and not self._still(unchecked[ref], ref)]
            if not stale:
                break
            for ref in stale:  # the index missed a change: read the store again, without these
                self._ctx_checked.pop(ref, None)
            gone = {ref[0] for ref in stale}
            for k in [k for k in list(self._ctx_namespaces) if k[0] in gone]:
                self._ctx_namespaces.pop(k, None)
        result = Context(hrm, text, used, budget, tuple(figures), omitted, legend,
                         str(tokens.get_counter().info["counter"]))
        if len(renders) >= RENDERS_KEPT or any(k[5] != self.index.epoch for k in renders):
            renders.clear()
        renders[render_key] = result
        return replace(result, legend=dict(legend)), _context_attrs(span, result, budget, query)

    def _recall_for(self, query: str, hrm: str, specs: list[NamespaceSpec]) -> list[Any]:
        if not specs or not rt.query_terms(query):
            return []
        hits, _ = self.recall.recall(RecallOp(query, [s.name for s in specs], k=10), hrm, None)
        return hits

    def _namespace(self, spec: NamespaceSpec, day: int,
                   now_s: float) -> tuple[list[Entry], dict[str, str], list[tuple[str, str, int]]]:
        """The entries of ``spec``'s newest records, the codes they use, and
        the records not read from the store this time. What the index lists
        is asked every time; the rest is kept while that list is the same."""
        listed = tuple(() if index is None else tuple(index.newest(spec.name, PER_NAMESPACE))
                       for index in (self.index.mem, self.index.disk))
        key = (spec.name, listed, day)
        memo = self._ctx_namespaces
        kept = memo.get(key)
        if kept is not None:
            return kept  # every record of it was read before: none is read now
        entries: list[Entry] = []
        codes: dict[str, str] = {}
        refs: list[tuple[str, str, int]] = []
        unchecked: list[tuple[str, str, int]] = []
        for ref, (ents, found), checked in self._records(spec, listed, day, now_s):
            refs.append(ref)
            if not checked:
                unchecked.append(ref)
            codes.update(found)
            entries.extend(ents)
        if len(memo) >= NAMESPACES_KEPT:
            evict(memo)
        memo[key] = (entries, codes, refs)
        return entries, codes, unchecked

    def _records(self, spec: NamespaceSpec, listed: tuple[tuple[tuple[str, int], ...], ...], day: int,
                 now_s: float) -> Iterable[tuple[tuple[str, str, int], tuple[list[Entry], dict[str, str]], bool]]:
        """The live records among ``listed`` (what each index lists for
        ``spec``, newest first): ``((namespace, key, version), (entries,
        codes), checked)``. A record is read from the store (``checked``)
        unless the store confirmed this version in an earlier render and its
        entries are kept; then the caller checks it if its lines are shown."""
        keys = set()
        confirmed = self._ctx_checked
        cache = self._ctx_lines
        for rows in listed:
            for key, version in rows:
                if key in keys:
                    continue
                ref = (spec.name, key, version)
                updated = confirmed.get(ref)
                lines = None if updated is None else cache.get((*ref, updated, day))
                checked = lines is None
                if lines is None:
                    st = self.core.lookup(spec, key)
                    if st is None or st.version != version or st.tier == "cold":
                        confirmed.pop(ref, None)
                        continue
                    updated = st.updated_us
                    lines = self._lines_of(spec, st, day, now_s)
                    if len(confirmed) >= CACHE_RECORDS:
                        evict(confirmed)
                    confirmed[ref] = updated
                keys.add(key)
                yield ref, lines, checked

    def _lines_of(self, spec: NamespaceSpec, st: Stored, day: int, now_s: float) -> tuple[list[Entry], dict[str, str]]:
        """The record's entries (every section's) and the codes they use, kept."""
        cache = self._ctx_lines
        ref = (spec.name, st.key, st.version, st.updated_us, day)
        lines = cache.get(ref)
        if lines is None:
            found: dict[str, str] = {}
            rank, record = (-st.updated_us, spec.name, st.key), (spec.name, st.key, st.version)
            value = self.core.decode(spec, st, False)
            lines = ([Entry(section, text, (*rank, j), record, (spec.name, join))
                      for j, (section, text, join) in enumerate(
                          self._record_entries(spec, st.key, value, now_s, found))],
                     found)
            if len(cache) >= CACHE_RECORDS:
                evict(cache)
            cache[ref] = lines
        return lines

    def _still(self, spec: NamespaceSpec, ref: tuple[str, str, int]) -> bool:
        """The store still holds this version of the record, as confirmed before."""
        st = self.core.lookup(spec, ref[1])
        return (st is not None and st.version == ref[2] and st.tier != "cold"
                and st.updated_us == self._ctx_checked.get(ref))

    def _record_entries(self, spec: NamespaceSpec, key: str, value: Any, now_s: float,
                        legend: dict[str, str]) -> Iterable[tuple[str, str, Any]]:
        """(section, text, join) of each entry of a record: a document's
        fields each in their section, items of one field sharing a join key;
        a record that reads as one entry joins its namespace's others."""
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
                    yield section, prefix + text, (key, fname)
        elif default is not None:
            for text in self._lines(spec, value, None, now_s, legend, key=key)[:PER_FIELD]:
                yield default, text, ""

    def _lines(self, spec: NamespaceSpec, value: Any, label: str | None, now_s: float,
               legend: dict[str, str], key: str | None = None) -> list[str]:
        """The entries of ``value``, by the kind of value (see :func:`_entries`)."""
        codec = self.core.codec(spec)
        if codec is None and spec.hrm in self.core.codecs:
            codec = self.core.codecs.get(spec.hrm)  # a legacy document of the HRM speaks its codes
        codes = {} if codec is None else dict(codec.values)
        tables: dict[str, str] = {}
        if codec is not None:
            for table in codec.tables.values():
                tables.update(table)
        fmt = _Format(now_s, codes, tables, legend)
        if isinstance(value, list) and label in ("observations", "observed", "sessions"):
            value = value[-PER_FIELD:][::-1]  # logs append: the newest first
        return fmt.entries(value, label, key)


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


class _Format:
    """Entries of a value, by the kind of value, written for density: no
    field names (values say what they are; a number keeps its name as
    ``name=n``), no bullets, strings the namespace's codec has a code for as
    the code, ISO dates short (:func:`_dates`).

    - a list: one entry per item (short word-like items then share a line);
    - a scored map (every value a number in 0..1): the keys scoring at least
      :data:`SHOW_SCORE`, strongest first, one entry each; a record that is
      one (``timeboxing: {"s": 0.8}``) is one entry, its key with those
      scores (``timeboxing:s=0.8``);
    - a map of records (every value an object): one entry per key,
      ``name(first):rest`` where ``first`` is the record's first short string
      (a role, a status) and ``rest`` its other values;
    - a map of strings, inside a document: one ``key: value`` entry per key;
    - a map holding one collection: that collection;
    - anything else: one entry, its values joined.
    """

    def __init__(self, now_s: float, codes: dict[str, str], tables: dict[str, str], legend: dict[str, str]) -> None:
        self.now_s = now_s
        self.codes = codes
        self.tables = tables
        self.legend = legend

    def entries(self, value: Any, label: str | None, key: str | None) -> list[str]:
        if isinstance(value, list):
            return [t for t in (self.flat(v) for v in value if v not in (None, "", [], {})) if t]
        if not isinstance(value, dict) or not value:
            line = self.flat(value)
            return [line] if line else []
        if all(_score(v) is not None for v in value.values()):
            ranked = sorted(value.items(), key=lambda kv: (-float(kv[1]), kv[0]))
            if key is not None:  # a record's own scores ({"s": 0.8} under "timeboxing"): its key names them
                strong = {k: v for k, v in ranked if float(v) >= SHOW_SCORE}
                return [self.named(key, strong)] if strong else []
            return [self.code(k) for k, v in ranked if float(v) >= SHOW_SCORE]
        inner = [v for k, v in value.items() if k not in _SKIP_FIELDS]
        if len(inner) == 1 and isinstance(inner[0], (dict, list)) and inner[0] and key is None:
            return self.entries(inner[0], label, None)
        if all(isinstance(v, dict) for v in value.values()):
            return [t for t in (self.named(str(k), v) for k, v in value.items()) if t]
        if label is not None and len(value) > 1 and all(isinstance(v, str) for v in value.values()):
            return [f"{k}: {t}" for k, t in ((k, self.flat(v)) for k, v in value.items() if k not in _SKIP_FIELDS) if t]
        if key is not None and isinstance(value.get("name"), str) and value["name"].strip():
            line = self.named(" ".join(value["name"].split()), value)  # an entity: a person, a project
        elif key is not None and not any(f in value for f in _TEXT_FIELDS) and len(key) <= 24:
            line = self.named(key, value)  # an entity under its key
        else:
            line = self.flat(value)
        return [line] if line else []

    def named(self, name: str, value: Any) -> str:
        """``name(first):rest``, or ``name: rest`` when no value is short."""
        if not isinstance(value, dict):
            text = self.flat(value)
            return f"{name}: {text}" if text else name
        own = value.get("name")
        if isinstance(own, str) and " ".join(own.split()).lower() == name.lower():
            name = " ".join(own.split())
            value = {k: v for k, v in value.items() if k != "name"}
        parts = self.parts(value)
        first = next((i for i, (numeric, t) in enumerate(parts) if not numeric and len(t) <= 24), None)
        head = name if first is None else f"{name}({parts[first][1]})"
        rest = [t for i, (_, t) in enumerate(parts) if i != first]
        if not rest:
            return head
        tight = not any(c.isspace() for t in rest for c in t) and not any(c.isspace() for c in head)
        return head + (":" + ";".join(rest) if tight else ": " + "; ".join(rest))

    def parts(self, value: dict[str, Any]) -> list[tuple[bool, str]]:
        """(numeric, text) of each field worth showing, nested objects flattened in."""
        out: list[tuple[bool, str]] = []
        for k, v in value.items():
            if k in _SKIP_FIELDS:
                continue
            if isinstance(v, dict) and not (isinstance(v.get("role"), str) and isinstance(v.get("content"), str)):
                out.extend(self.parts(v))
                continue
            text = self.flat(v)
            if not text:
                continue
            numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
            out.append((numeric, f"{k}={text}" if numeric else text))
        return out

    def flat(self, value: Any) -> str:
        """One line for a JSON value: strings as they are (codes and short
        dates where they pay), lists joined (by "," when no item has a space),
        objects' values joined by "; "."""
        if isinstance(value, str):
            return _dates(self.code(" ".join(value.split())), self.now_s)
        if isinstance(value, bool) or value is None:
            return ""
        if isinstance(value, (int, float)):
            return f"{value:g}" if isinstance(value, float) else str(value)
        if isinstance(value, list):
            items = [p for p in (self.flat(v) for v in value) if p]
            return ("," if not any(c.isspace() for t in items for c in t) else ", ").join(items)
        if isinstance(value, dict):
            if isinstance(value.get("role"), str) and isinstance(value.get("content"), str):
                return f"{value['role']}: {self.flat(value['content'])}"
            return "; ".join(t for _, t in self.parts(value))
        return ""

    def code(self, text: str) -> str:
        if text in self.codes:
            self.legend[self.codes[text]] = text
            return self.codes[text]
        if text in self.tables:
            self.legend[text] = self.tables[text]
        return text


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
        if delta == 1:
            return "yesterday"
        if 0 < delta < 14:
            return f"{delta}d ago"
        label = f"{_MONTHS[day.month - 1]} {day.day}"
        return label if day.year == today.year else f"{label} {day.year}"

    return _ISO.sub(short, text)


def _epoch(now: Any) -> float:
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise InvalidArgument("now must be timezone-aware (or epoch seconds)")
        return now.timestamp()
    if type(now) in (int, float) and math.isfinite(now):
        return float(now)
    raise InvalidArgument(f"now must be a datetime or epoch seconds, not {now!r}")


__all__ = ["FIELD_SECTIONS", "SECTIONS", "Context", "ContextRenderer", "Section"]
