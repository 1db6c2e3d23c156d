"""What looks odd in the legacy data: found, counted and flagged, never fixed.

Every check here only *reads* a parsed legacy value. What it finds becomes an
:class:`Anomaly` in the file's manifest entry and in the reports; the value
itself is imported exactly as it is. The codes follow section 3 of
``shared/legacy/DATA_NOTES.md`` (see docs/migration.md for the list).

Three levels:

- :func:`scan_bytes`: the raw JSON bytes (``\\u`` escapes, surrogate pairs).
- :func:`scan_value`: one parsed file (timestamps, types, nulls, caps, kind
  rules), which also collects the timestamps the tree level needs.
- :func:`scan_tree`: across files (duplicate session ids, wrong years, data
  older than consent, counters that disagree with the files, orphans).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

MAX_WHERE = 5


@dataclass
class Anomaly:
    """One kind of oddity in one file: how often, what, and where (the first
    few JSON paths or examples)."""

    code: str
    count: int
    detail: str
    where: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "count": self.count, "detail": self.detail, "where": list(self.where)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Anomaly:
        return cls(data["code"], data["count"], data["detail"], list(data.get("where", [])))


class Flags:
    """Collects anomalies of one file, one :class:`Anomaly` per code."""

    def __init__(self) -> None:
        self._by_code: dict[str, Anomaly] = {}

    def add(self, code: str, detail: str, where: str | None = None, count: int = 1) -> None:
        found = self._by_code.get(code)
        if found is None:
            found = self._by_code[code] = Anomaly(code, 0, detail)
        found.count += count
        if where is not None and where not in found.where and len(found.where) < MAX_WHERE:
            found.where.append(where)

    def extend(self, anomalies: Iterable[Anomaly]) -> None:
        for a in anomalies:
            self.add(a.code, a.detail, None, a.count)
            for w in a.where:
                self.add(a.code, a.detail, w, 0)

    @property
    def items(self) -> list[Anomaly]:
        return list(self._by_code.values())


@dataclass
class Facts:
    """What the tree-level checks need from one file."""

    times: list[tuple[str, datetime]] = field(default_factory=list)  # timestamp fields
    text_dates: list[tuple[str, date]] = field(default_factory=list)  # dates inside prose


# -- bytes ---------------------------------------------------------------------------

_U_ESCAPE = re.compile(rb"\\u[0-9a-fA-F]{4}")
_SURROGATE_PAIR = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def scan_bytes(data: bytes, flags: Flags) -> None:
    """Escapes a text-level reader would get wrong (the value is parsed by a real JSON parser)."""
    escapes = _U_ESCAPE.findall(data)
    if escapes:
        flags.add("unicode-escape", "\\uXXXX escapes (non-ASCII text written by ensure_ascii)", None, len(escapes))
        for e in dict.fromkeys(escapes):
            flags.add("unicode-escape", "", e.decode(), 0)
    pairs = _SURROGATE_PAIR.findall(data)
    if pairs:
        flags.add("surrogate-pair-escape", "emoji written as \\ud8xx\\udcxx surrogate pairs", None, len(pairs))
        for p in dict.fromkeys(pairs):
            flags.add("surrogate-pair-escape", "", p.decode(), 0)


# -- one value -------------------------------------------------------------------------

_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?")
_OTHER_TIME = (
    (re.compile(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}"), "%Y-%m-%d_%H-%M-%S", "YYYY-MM-DD_HH-MM-SS"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z"), "%Y-%m-%dT%H-%M-%SZ", "YYYY-MM-DDTHH-MM-SSZ"),
    (re.compile(r"\d{4}-\d{2}-\d{2}"), "%Y-%m-%d", "date only"),
    (re.compile(r"\d{2}:\d{2}"), None, "HH:MM only"),
)
_TEXT_DATE = re.compile(r"(?<![\d-])(\d{4})-(\d{2})-(\d{2})(?![\d])")
_FLOAT_IN_TEXT = re.compile(r"(?<![\d.])\d+\.\d{15,}(?!\d)")
_STRAY_QUOTE = re.compile(r'(?:^|[\s,(])"[^"\s,]+(?=,|$)')
_TEST_SUMMARY = re.compile(r"\s*test(ed|ing|s)?\b", re.I)
TEST_SESSION_IDS = frozenset({99, 999, 9999})
SESSION_FIELDS = ("session", "session_id")


def scan_value(kind: str | None, value: Any, flags: Flags, name: str = "") -> Facts:
    """Flag what is odd in one parsed file of ``kind``; return its timestamps."""
    facts = Facts()
    if isinstance(value, list):
        flags.add("top-level-array", "the file holds an array, not an object", f"$: {len(value)} items")
    for fmt_re, _, label in _OTHER_TIME[:2]:
        if name and fmt_re.search(name):
            flags.add("other-time-format", f"time in the file name ({label}, local or UTC per writer)", name)
    for path, node in _walk(value, "$"):
        _scan_node(path, node, flags, facts)
    for rule in KIND_RULES.get(kind or "", ()):
        rule(value, flags)
    return facts


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def _scan_node(path: str, node: Any, flags: Flags, facts: Facts) -> None:
    t = type(node)
    if t is str:
        _scan_string(path, node, flags, facts)
    elif t is float:
        if repr(round(node, 12)) != repr(node):
            flags.add("float-noise", "binary float noise (kept exactly, never rounded)", f"{path}={node!r}")
    elif node is None:
        flags.add("null-value", "null values", path)
    elif t is dict or t is list:
        if not node and path != "$":
            flags.add("empty-container", "empty lists/objects", path)
        _scan_collection(path, node, flags)


def _scan_string(path: str, s: str, flags: Flags, facts: Facts) -> None:
    m = _ISO.fullmatch(s)
    if m:
        tz = m.group(7)
        if tz is None:
            flags.add("naive-timestamp", "naive local ISO timestamps (no offset; kept as strings)", path)
        elif tz == "Z":
            flags.add("utc-timestamp", "UTC ISO timestamps with a literal Z (the integrity writer)", path)
        else:
            flags.add("offset-timestamp", "ISO timestamps with a numeric offset", path)
        when = _parse_iso(m)
        if when is not None:
            facts.times.append((path, when))
        return
    for fmt_re, strp, label in _OTHER_TIME:
        if fmt_re.fullmatch(s):
            flags.add("other-time-format", f"other time formats ({label})", path)
            if strp is not None:
                try:
                    facts.times.append((path, datetime.strptime(s, strp)))
                except ValueError:
                    pass
            return
    for dm in _TEXT_DATE.finditer(s):
        try:
            facts.text_dates.append((path, date(int(dm.group(1)), int(dm.group(2)), int(dm.group(3)))))
        except ValueError:
            pass
    for fm in _FLOAT_IN_TEXT.finditer(s):
        flags.add("float-noise", "binary float noise (kept exactly, never rounded)", f"{path} (text) {fm.group(0)}")
    if len(s) <= 200 and _STRAY_QUOTE.search(s):
        flags.add("unbalanced-quote", "a word opens a quote that never closes", path)


def _parse_iso(m: re.Match[str]) -> datetime | None:
    try:
        y, mo, d, h, mi = (int(m.group(i)) for i in range(1, 6))
        return datetime(y, mo, d, h, mi, int(m.group(6) or 0))
    except ValueError:
        return None


def _type_name(v: Any) -> str:
    return "number" if type(v) in (int, float) else type(v).__name__


def _scan_collection(path: str, node: dict[str, Any] | list[Any], flags: Flags) -> None:
    members = list(node.values()) if isinstance(node, dict) else node
    star = f"{path}.*" if isinstance(node, dict) else f"{path}[*]"
    if isinstance(node, dict):
        _check_session_and_test(path, node, flags)
        spaced = [k for k in node if " " in k]
        snake = [k for k in node if "_" in k and " " not in k]
        if spaced and snake:
            flags.add("mixed-key-style", f"keys mix snake_case ({len(snake)}) and spaced words ({len(spaced)})", path)
    if len(members) < 2:
        return
    if all(type(m) is dict for m in members):
        types: dict[str, Counter[str]] = {}
        for m in members:
            for k, v in m.items():
                if v is not None:
                    types.setdefault(k, Counter())[_type_name(v)] += 1
        for k, c in types.items():
            if len(c) > 1:
                mix = ", ".join(f"{t}x{n}" for t, n in c.most_common())
                flags.add("mixed-types", f"one field, several types ({mix})", f"{star}.{k}: {mix}")
        topics = [m["topic"] for m in members if isinstance(m.get("topic"), str)]
        if any(" " in t for t in topics) and any("_" in t for t in topics):
            flags.add("mixed-key-style", "topics mix snake_case and spaced words", f"{star}.topic")
    elif isinstance(node, list) and not any(type(m) in (dict, list) for m in members):
        c = Counter(_type_name(m) for m in members if m is not None)
        if len(c) > 1:
            flags.add("mixed-types", "one list, several types", f"{star}: " + ", ".join(f"{t}x{n}" for t, n in c.items()))


def _check_session_and_test(path: str, node: dict[str, Any], flags: Flags) -> None:
    for f in SESSION_FIELDS:
        if node.get(f) in TEST_SESSION_IDS and type(node.get(f)) is int:
            flags.add("test-data", "test data (kept, flagged): a test session id", f"{path}.{f}={node[f]}")
    summary = node.get("summary")
    if isinstance(summary, str) and _TEST_SUMMARY.match(summary):
        flags.add("test-data", "test data (kept, flagged): a test summary", f"{path}.summary")
    topics = node.get("topics")
    if isinstance(topics, list) and "test_topic" in topics:
        flags.add("test-data", "test data (kept, flagged): a test topic", f"{path}.topics")


# -- kind rules ----------------------------------------------------------------------


def _select(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """The nodes at a dotted ``path`` ("" is the root; ``*`` any member)."""
    nodes: list[tuple[str, Any]] = [("$", value)]
    for part in [p for p in path.split(".") if p]:
        nxt: list[tuple[str, Any]] = []
        for where, node in nodes:
            if part == "*" and isinstance(node, dict):
                nxt += [(f"{where}.{k}", v) for k, v in node.items()]
            elif part == "*" and isinstance(node, list):
                nxt += [(f"{where}[{i}]", v) for i, v in enumerate(node)]
            elif isinstance(node, dict) and part in node:
                nxt.append((f"{where}.{part}", node[part]))
        nodes = nxt
    return iter(nodes)


def _caps(*caps: tuple[str, int]) -> Callable[[Any, Flags], None]:
    def rule(value: Any, flags: Flags) -> None:
        for path, cap in caps:
            for where, node in _select(value, path):
                if isinstance(node, list) and len(node) >= cap:
                    flags.add("at-cap", "list at its legacy write cap: older items were dropped upstream", f"{where}: {len(node)}/{cap}")

    return rule


def _allowed(path: str, allowed: frozenset[str], code: str, what: str) -> Callable[[Any, Flags], None]:
    def rule(value: Any, flags: Flags) -> None:
        for where, node in _select(value, path):
            if isinstance(node, str) and node not in allowed:
                flags.add(code, what, f"{where}={node!r}")

    return rule


def _known_keys(*keys: str) -> Callable[[Any, Flags], None]:
    def rule(value: Any, flags: Flags) -> None:
        if isinstance(value, dict):
            for k in value:
                if k not in keys:
                    flags.add("unknown-key", "a key no legacy writer creates", f"$.{k}")

    return rule


def _state(test: Callable[[Any], bool], what: str) -> Callable[[Any, Flags], None]:
    def rule(value: Any, flags: Flags) -> None:
        try:
            hit = isinstance(value, dict) and test(value)
        except (AttributeError, TypeError, KeyError):
            hit = False
        if hit:
            flags.add("inconsistent-state", "state that looks wrong but is real (kept)", what)

    return rule


def _turns_vs_messages(value: Any, flags: Flags) -> None:
    if isinstance(value, dict) and isinstance(value.get("messages"), list) and isinstance(value.get("turn_count"), int):
        if value["turn_count"] != len(value["messages"]):
            flags.add("counter-mismatch", "a counter disagrees with the data (not repaired)",
                      f"$.turn_count={value['turn_count']} vs {len(value['messages'])} messages")


def _boots_without_shutdown(value: Any, flags: Flags) -> None:
    log = value.get("version_log") if isinstance(value, dict) else None
    if not isinstance(log, list):
        return
    open_: dict[Any, int] = {}
    for i, e in enumerate(log):
        if isinstance(e, dict) and e.get("status") == "boot":
            open_[e.get("session")] = i
        elif isinstance(e, dict) and e.get("status") == "shutdown":
            open_.pop(e.get("session"), None)
    for session, i in open_.items():
        flags.add("boot-without-shutdown", "a session booted and never shut down", f"$.version_log[{i}] session {session}")


_BIG5 = ("openness", "conscientiousness", "extraversion", "agreeableness", "neuroticism")
_LEVELS = frozenset({"high", "baseline", "low"})
RELATIONSHIP_CODES = frozenset({"wk", "fam", "fr", "svc"})

KIND_RULES: dict[str, tuple[Callable[[Any, Flags], None], ...]] = {
    "compressed": (
        _known_keys("north_stars", "priorities", "active", "commits", "people", "patterns", "coaching", "last_update", "session_count"),
        _allowed("people.*.r", RELATIONSHIP_CODES, "off-code-value", "relationship code outside RELATIONSHIP_CODES (3-letter truncation)"),
        _caps(("active", 15), ("commits", 10), ("north_stars", 5), ("priorities", 5)),
    ),
    "context": (_known_keys("active_threads", "pending_commits", "open_questions", "last_session"),),
    "retrospective": tuple(
        _allowed(f"big5_signals.{t}", _LEVELS, "enum-drift", "value outside the prompt's allowed set") for t in _BIG5
    ),
    "retro_trends": (_caps(("correction_rates", 50), ("learnings", 100), ("mbti_shifts", 20)),),
    "reflection_trends": (_caps(("improvement_areas", 30), ("failure_modes", 20), ("strengths", 20), ("outcomes", 100)),),
    "proactive": (
        _caps(("intuition_history", 50)),
        _state(lambda v: v["last_nudge"]["resolved"] is True and v["session_nudges"]
               and not any(n.get("resolved") for n in v["session_nudges"]),
               "$.session_nudges all resolved=false while $.last_nudge.resolved=true"),
    ),
    "curator": (_caps(("daily_summaries", 14)),),
    "entities": (_caps(("observed", 50)),),
    "blocked_topics": (_allowed("blocked.*.strength", frozenset({"demand", "request"}), "enum-drift", "value outside the writer's set"),),
    "integrity": (
        _boots_without_shutdown,
        _state(lambda v: v["clean_shutdown"] is False, "$.clean_shutdown=false (last session did not shut down)"),
    ),
    "session_history": (_caps(("sessions", 20)),),
    "hrm_store": (
        _caps(("revision_history", 10), ("recent", 20), ("patterns.repeated_issues", 10), ("patterns.successful_approaches", 10)),
        _allowed("recent.*.evaluation.severity", frozenset({"none", "minor", "major", "critical"}), "enum-drift", "value outside the writer's set"),
        _allowed("stance", frozenset({"partner", "support", "challenge"}), "enum-drift", "value outside the writer's set"),
    ),
    "locked_conversation": (_caps(("messages", 100)), _turns_vs_messages),
    "fast": (_caps(("", 100)),),
    "slow": (_state(lambda v: "frame" in v and v["turns_remaining"] <= 0, "$.turns_remaining<=0: the commitment lease has expired"),),
}


# -- across files -----------------------------------------------------------------------


@dataclass
class TreeItem:
    """One parsed file, as the cross-file checks see it."""

    rel: str
    kind: str | None
    value: Any
    facts: Facts
    flags: Flags


WRONG_YEAR_DAYS = 180
SESSION_KINDS = {"retrospective": "session_id", "reflection": "session_id", "checkpoint": "session"}


def tree_value(kind: str | None, value: Any) -> Any:
    """The part of a parsed file the cross-file checks read (a TreeItem's
    ``value``), so a scan need not keep every file's whole value."""
    if not isinstance(value, dict):
        return None
    if kind == "consent":
        return {"first_consent_at": value.get("first_consent_at")}
    if kind in SESSION_KINDS:
        return {SESSION_KINDS[kind]: value.get(SESSION_KINDS[kind])}
    for counter_kind, counter, _ in _COUNTERS:
        if kind == counter_kind:
            return {counter: value.get(counter)}
    if kind == "integrity" and isinstance(value.get("version_log"), list):
        return {"version_log": [{"checkpoint_file": e.get("checkpoint_file")} for e in value["version_log"] if isinstance(e, dict)]}
    return None


def scan_tree(items: list[TreeItem]) -> None:
    """Cross-file checks; each adds to the flags of the files concerned."""
    _wrong_years(items)
    _predates_consent(items)
    _duplicate_sessions(items)
    _counters(items)
    _orphan_checkpoints(items)


def _wrong_years(items: list[TreeItem]) -> None:
    times = sorted(t for it in items for _, t in it.facts.times)
    if not times:
        return
    median = times[len(times) // 2]
    limit = timedelta(days=WRONG_YEAR_DAYS)
    for it in items:
        for path, t in it.facts.times:
            if abs(t - median) > limit:
                it.flags.add("wrong-year", f"timestamp far from the rest of the data (median {median:%Y-%m-%d}); kept as written", f"{path}={t:%Y-%m-%d}")
        for path, d in it.facts.text_dates:
            if abs(datetime(d.year, d.month, d.day) - median) > limit:
                it.flags.add("off-year-date-in-text", f"a date in prose far from the data (median {median:%Y-%m-%d}); content, kept", f"{path}: {d}")


def _predates_consent(items: list[TreeItem]) -> None:
    consent = next((it for it in items if it.kind == "consent" and isinstance(it.value, dict)), None)
    first = consent.value.get("first_consent_at") if consent else None
    if not isinstance(first, str):
        return
    m = _ISO.fullmatch(first)
    granted = _parse_iso(m) if m else None
    if granted is None:
        return
    root = consent.rel.rsplit("/", 1)[0] + "/" if consent and "/" in consent.rel else ""
    for it in items:
        if it is consent or not it.rel.startswith(root):
            continue
        older = [p for p, t in it.facts.times if t < granted]
        if older:
            it.flags.add("predates-consent", f"{len(older)} of {len(it.facts.times)} timestamps are older than first_consent_at {first} (imported anyway)", None, len(older))
            for p in older[:MAX_WHERE]:
                it.flags.add("predates-consent", "", p, 0)


def _session_of(it: TreeItem) -> Any:
    field_name = SESSION_KINDS.get(it.kind or "")
    return it.value.get(field_name) if field_name and isinstance(it.value, dict) else None


def _duplicate_sessions(items: list[TreeItem]) -> None:
    groups: dict[tuple[str, Any], list[TreeItem]] = {}
    for it in items:
        sid = _session_of(it)
        if sid is not None:
            groups.setdefault((it.kind or "", sid), []).append(it)
    for (kind, sid), group in groups.items():
        if len(group) > 1:
            for it in group:
                others = [o.rel.rsplit("/", 1)[-1] for o in group if o is not it]
                it.flags.add("duplicate-session-id", f"{kind} session id {sid} is not unique (the key is the file name)", f"session {sid}, also in {', '.join(others)}")


_COUNTERS = (("retro_trends", "sessions_analyzed", "retrospective"), ("reflection_trends", "sessions_reflected", "reflection"))


def _counters(items: list[TreeItem]) -> None:
    for kind, counter, counted in _COUNTERS:
        n = sum(1 for it in items if it.kind == counted)
        for it in items:
            if it.kind == kind and isinstance(it.value, dict) and isinstance(it.value.get(counter), int) and it.value[counter] != n:
                it.flags.add("counter-mismatch", "a counter disagrees with the data (not repaired)", f"$.{counter}={it.value[counter]} vs {n} {counted} files")


def _orphan_checkpoints(items: list[TreeItem]) -> None:
    logs = [it.value["version_log"] for it in items if it.kind == "integrity" and isinstance(it.value, dict) and isinstance(it.value.get("version_log"), list)]
    if not logs:
        return
    named = {str(e.get("checkpoint_file", "")).rsplit("/", 1)[-1] for log in logs for e in log if isinstance(e, dict)}
    for it in items:
        if it.kind == "checkpoint" and it.rel.rsplit("/", 1)[-1] not in named:
            it.flags.add("orphan-checkpoint", "checkpoint no version_log entry names (session counter rolled back)", it.rel.rsplit("/", 1)[-1])


__all__ = ["Anomaly", "Facts", "Flags", "KIND_RULES", "TreeItem", "scan_bytes", "scan_tree", "scan_value", "tree_value"]
