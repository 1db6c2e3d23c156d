"""What a span may say of a record: the GenAI memory convention's names, and the keys it must not name.

Shared by both paths of :mod:`hrm_memory.tracing.spans` (a span through the
API, finished on the caller's thread; a deferred record, finished in a batch
by :mod:`hrm_memory.tracing.sdk`), so that both export the same attributes.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping
from typing import Any

#: ``gen_ai.operation.name`` (and the span's name) of each operation, per
#: OpenTelemetry's GenAI memory convention. An operation for which the
#: convention has no value carries hrm-memory's own, ``hrm_memory.<op>``.
GENAI_OPERATIONS: dict[str, str] = {
    "read": "search_memory",
    "get": "search_memory",
    "query": "search_memory",
    "recall": "search_memory",
    "context": "search_memory",
    "history": "search_memory",
    "read_as_of": "search_memory",
    "query_as_of": "search_memory",
    "events_since": "search_memory",
    "subscribe": "search_memory",
    "export": "search_memory",
    "write": "upsert_memory",
    "remember": "upsert_memory",
    "import": "upsert_memory",
    "update": "update_memory",
    "archive": "update_memory",
    "compact": "update_memory",
    "delete": "delete_memory",
    "forget": "delete_memory",
    "declare": "create_memory_store",
    "undeclare": "delete_memory_store",
}

#: How an operation's key becomes ``gen_ai.memory.record.id``: always (it
#: names one record), only when it is not a glob (a pattern of keys), never.
ID_ALWAYS, ID_UNLESS_GLOB, ID_NEVER, ID_DROP = 1, 2, 0, -1
RECORD_IDS = {
    "read": ID_ALWAYS, "get": ID_ALWAYS, "write": ID_ALWAYS, "update": ID_ALWAYS, "delete": ID_ALWAYS,
    "history": ID_ALWAYS, "read_as_of": ID_ALWAYS, "remember": ID_ALWAYS, "notify": ID_ALWAYS,
    "query": ID_UNLESS_GLOB, "query_as_of": ID_UNLESS_GLOB, "events_since": ID_UNLESS_GLOB,
}  # fmt: skip
#: Operations whose span never names a key: ``forget`` erases it;
#: ``subscribe``'s second field is its callback, not a key.
KEYLESS = frozenset({"forget", "subscribe"})
for _op in KEYLESS:
    RECORD_IDS[_op] = ID_DROP
GLOB = frozenset("*?[")
#: The store id of an operation on no one namespace (the whole store).
WHOLE_STORE = "*"

_capture = os.environ.get("HRM_MEMORY_TRACE_CONTENT", "").strip().lower() in ("1", "true", "yes", "on")


def capture_content(on: bool) -> None:
    """Record (or stop recording) the query text and the records found of
    searches (``gen_ai.memory.query.text``, ``gen_ai.memory.records``) in this
    process, for searches that reach no consent-gated namespace. Off unless
    ``HRM_MEMORY_TRACE_CONTENT=1`` is in the environment at import, or this is
    called (``setup_tracing(..., capture_content=True)`` calls it)."""
    global _capture
    _capture = bool(on)


def capturing_content() -> bool:
    """True if searches record their query text and what they found (see :func:`capture_content`)."""
    return _capture


#: The consent view a manager gives its Tracing: namespace (or pattern) ->
#: (the consent categories gating it, whether its records are persisted), or
#: None when no category gates it.
ConsentOf = Callable[[str], "tuple[tuple[str, ...], bool] | None"]


def consent_view(specs: Mapping[str, Any]) -> ConsentOf:
    """The :data:`ConsentOf` of a live ``{name: NamespaceSpec}`` mapping: a
    namespace's consent category; for a pattern, those of every gated
    namespace it matches (the records of any of them may be the ones named)."""

    def consent_of(namespace: str) -> tuple[tuple[str, ...], bool] | None:
        spec = specs.get(namespace)
        if spec is not None:
            return None if spec.consent is None else ((spec.consent,), spec.tier != "hot")
        if GLOB.isdisjoint(namespace):
            return None
        matched = [s for s in list(specs.values()) if s.consent is not None and fnmatch.fnmatchcase(s.name, namespace)]
        if not matched:
            return None
        return tuple(sorted({s.consent for s in matched})), all(s.tier != "hot" for s in matched)

    return consent_of


def record_id(mode: int, key: str) -> bool:
    """True if a key of an operation of this mode names one record."""
    return mode == ID_ALWAYS or (mode == ID_UNLESS_GLOB and GLOB.isdisjoint(key))


def cut(key: str) -> str:
    """A key as a span carries it: at most 256 characters and an ellipsis."""
    return key if len(key) <= 256 else key[:256] + "..."


#: What :func:`gate_of` returns when the consent view failed: hide the key.
VIEW_FAILED: tuple[tuple[str, ...], bool] = ((), True)


def gate_of(consent_of: ConsentOf, ns: str) -> tuple[tuple[str, ...], bool] | None:
    """``consent_of(ns)``: the categories gating ``ns`` and whether its
    records are persisted, or None when none gates it; :data:`VIEW_FAILED`
    when the view raised (the key is then hidden: the safe answer)."""
    try:
        return consent_of(ns)
    except Exception:  # noqa: BLE001 - see above
        return VIEW_FAILED


def hides_gated(
    info: tuple[Any, ...], gate: tuple[tuple[str, ...], bool], attrs: dict[str, Any] | None, granted: dict[str, bool]
) -> bool:
    """True if a span of a namespace under ``gate`` (not None) must not name
    its key: a category is not granted (``granted`` caches the answers of one
    batch), or the record stayed in memory (``hrm.memory.persisted`` false,
    or a session-only copy read from the hot tier, in a namespace whose
    records are persisted)."""
    if gate is VIEW_FAILED:
        return True
    categories, persists = gate
    if persists and attrs and (attrs.get("hrm.memory.persisted") is False or attrs.get("hrm.memory.tier") == "hot"):
        return True
    is_granted = info[4]
    for category in categories:
        ok = granted.get(category)
        if ok is None:
            try:
                ok = granted[category] = bool(is_granted(category))
            except Exception:  # noqa: BLE001 - a closed store, say: not known to be granted
                ok = granted[category] = False
        if not ok:
            return True
    return False


#: What :func:`key_rule` says of a namespace's spans: they name their key
#: (SHOW), never (HIDE), or only when the record was persisted (KEPT).
SHOW, HIDE, KEPT = 0, 1, 2


def key_rule(info: tuple[Any, ...], consent_of: ConsentOf, ns: str) -> int:
    """Whether the spans of ``info``'s operation on ``ns`` may name their
    key, as far as that does not depend on the span's attributes:
    :data:`HIDE` when the consent view failed or a category gating ``ns`` is
    not granted now; :data:`KEPT` when every category is granted and the
    namespace's records are persisted (a span then names its key only if
    its record was: ``hrm.memory.persisted`` not false, not read from the
    hot tier); :data:`SHOW` otherwise. The same
    answer as :func:`hides_gated`, split so that a batch asks it once a
    namespace and each span only looks at its own attributes."""
    gate = gate_of(consent_of, ns)
    if gate is None:
        return SHOW
    if gate is VIEW_FAILED:
        return HIDE
    categories, persists = gate
    is_granted = info[4]
    for category in categories:
        try:
            ok = bool(is_granted(category))
        except Exception:  # noqa: BLE001 - a closed store, say: not known to be granted
            ok = False
        if not ok:
            return HIDE
    return KEPT if persists else SHOW


def hides_key(info: tuple[Any, ...], ns: str | None, attrs: dict[str, Any] | None, granted: dict[str, bool]) -> bool:
    """True if a span of ``info``'s operation on ``ns`` must not name its key:
    the operation erases it (``forget``), or a consent category gates ``ns``
    and the key must stay out (:func:`hides_gated`)."""
    if info[2] == ID_DROP:
        return True
    consent_of = info[3]
    if consent_of is None or ns is None:
        return False
    gate = gate_of(consent_of, ns)
    return gate is not None and hides_gated(info, gate, attrs, granted)


def strip_content(info: tuple[Any, ...], ns: str | None, attrs: dict[str, Any]) -> None:
    """Drop opted-in content from a span of a consent-gated namespace (the
    handler never adds it there; this holds it whatever a handler does)."""
    if "gen_ai.memory.query.text" not in attrs and "gen_ai.memory.records" not in attrs:
        return
    consent_of = info[3]
    gated = True
    if consent_of is not None and ns is not None:
        try:
            gated = consent_of(ns) is not None
        except Exception:  # noqa: BLE001 - unknown: treat as gated
            gated = True
    elif ns is None:
        gated = False  # a search over several namespaces: its handler checked each
    if gated or not _capture:
        attrs.pop("gen_ai.memory.query.text", None)
        attrs.pop("gen_ai.memory.records", None)


def target_attrs(
    info: tuple[Any, ...], ns: str | None, key: str | None, attrs: dict[str, Any] | None, granted: dict[str, bool]
) -> dict[str, Any]:
    """The attributes that name a span's key (``hrm.memory.key``, and
    ``gen_ai.memory.record.id`` where the key names one record), or none
    when it must not name it (:func:`hides_key`)."""
    if key is None or hides_key(info, ns, attrs, granted):
        return {}
    short = cut(key)
    out = {"hrm.memory.key": short}
    if record_id(info[2], key):
        out["gen_ai.memory.record.id"] = short
    return out


__all__ = [
    "GENAI_OPERATIONS",
    "GLOB",
    "VIEW_FAILED",
    "HIDE",
    "KEPT",
    "SHOW",
    "WHOLE_STORE",
    "ConsentOf",
    "capture_content",
    "consent_view",
    "capturing_content",
    "cut",
    "gate_of",
    "hides_gated",
    "hides_key",
    "key_rule",
    "record_id",
    "strip_content",
    "target_attrs",
]
