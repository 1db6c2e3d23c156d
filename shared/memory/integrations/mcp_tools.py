"""The MCP server's tools and resources, as plain functions of a store handle.

This module does not import the MCP SDK: each tool is a method of
:class:`MemoryTools` that takes JSON arguments (annotated with the JSON schema
and the description a model reads), runs one public operation of a
:class:`~hrm_memory.MemoryManager` (or of its :class:`~hrm_memory.Scope` when
the server serves one HRM) and returns JSON data. Errors are the store's typed
errors, raised unchanged; :mod:`hrm_memory.integrations.mcp_server` turns them
into MCP tool errors, adds one span per call and registers the methods with
the SDK (their signatures are the tools' input schemas, their docstrings the
descriptions).

Names follow what the memory servers agents already use agree on: cognee's
``remember`` / ``recall`` / ``forget`` for memories, basic-memory's
verb-object ``write_note`` / ``read_note`` style for records
(``write_record``, ``read_record``, ``query_records``, ``delete_record``) and
``build_context`` for ``context``; mem0's ``list_memories`` is
``query_records`` on a ``*.memories`` namespace.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import Field

from hrm_memory.manager import MemoryManager, Operations
from hrm_memory.core.records import Record
from hrm_memory.core.spec import NamespaceSpec

#: Characters of a recalled value shown in a hit's ``snippet``.
SNIPPET_CHARS = 280
#: What a hit or the namespace list says of a value that stays in the server process.
NOT_PERSISTED = (
    "kept in the MCP server's memory only: the namespace's consent category is not granted (consent is "
    "given by the user with `hrm-memory consent grant CATEGORY`, never through MCP), or the namespace is "
    "hot; the value ends when the server stops"
)

Kind = Literal["episodic", "semantic", "procedural", "prospective", "working"]


def snippet(value: Any, limit: int = SNIPPET_CHARS) -> str:
    """A short readable preview of ``value``: a memory's ``text``, a string
    itself, else its compact JSON; cut at ``limit`` characters with an ellipsis."""
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        text: str = value["text"]
    elif isinstance(value, str):
        text = value
    else:
        text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def record_json(rec: Record, *, value: bool = True) -> dict[str, Any]:
    """A record as the tools return it."""
    out: dict[str, Any] = {
        "namespace": rec.namespace,
        "key": rec.key,
        "version": rec.version,
        "tier": rec.tier,
        "persisted": rec.persisted,
        "created": rec.created_at.isoformat(),
        "updated": rec.updated_at.isoformat(),
    }
    if value:
        out["value"] = rec.value
    return out


class MemoryTools:
    """The tools over one store handle: the manager, or ``manager.scope(hrm)``
    when ``scope`` is given (then every call runs as that HRM, with its rules)."""

    def __init__(self, manager: MemoryManager, scope: str | None = None) -> None:
        self.manager = manager
        self.scope = scope
        self.handle: Operations = manager if scope is None else manager.scope(scope)

    # -- memories ------------------------------------------------------------------

    def remember(
        self,
        content: Annotated[str, Field(description="The memory, as one self-contained sentence or short paragraph "
                                                  "(who/what/when), e.g. 'Dana prefers morning meetings'.")],
        kind: Annotated[Kind, Field(description="episodic: something that happened; semantic: a fact or "
                                                "preference; procedural: how to do something or how to behave; "
                                                "prospective: an intention or commitment for later; working: "
                                                "what is going on right now.")],
        namespace: Annotated[str | None, Field(description="Where to store it, a '*.memories' namespace; omit for "
                                                           "the default (the served HRM's, else shared.memories).")] = None,
        importance: Annotated[float, Field(ge=0.0, le=1.0, description="0 (trivia) to 1 (critical); default 0.5.")] = 0.5,
        tags: Annotated[list[str] | None, Field(description="Short topic labels, searchable by recall.")] = None,
    ) -> dict[str, Any]:
        """Store a memory for later recall. Trivial content (pleasantries, fewer than three words) is refused
        with the reason; a restatement of an existing memory is merged into it (action 'merged', same key)
        rather than duplicated, and an intention already recorded is refused (DuplicateMemory). Returns the
        namespace and key (use them with forget), the action, and 'persisted': false when the memory is
        kept in this server's process only (a consent-gated namespace whose consent the user has not
        granted: it is not written to disk and ends with the server)."""
        done = self.handle.remember(content, kind=kind, namespace=namespace, importance=importance, tags=tags or ())
        rec = self.handle.get_record(done.namespace, done.key)
        out: dict[str, Any] = {"namespace": done.namespace, "key": done.key, "action": done.action}
        if done.action == "merged":
            out["similarity"] = round(done.similarity, 3)
        return self._persistence(out, rec)

    def recall(
        self,
        query: Annotated[str, Field(description="What to remember, in plain words, e.g. 'when does Dana like to "
                                                "meet?'.")],
        kinds: Annotated[list[Kind] | None, Field(description="Keep memories of these kinds only; omit to let the "
                                                              "query's type choose (widening when unsure).")] = None,
        namespaces: Annotated[list[str] | None, Field(description="Namespace globs to search, e.g. "
                                                                  "['altitude.*', 'shared.*']; omit for all.")] = None,
        k: Annotated[int, Field(ge=1, le=100, description="How many hits at most (default 10).")] = 10,
    ) -> dict[str, Any]:
        """Search memories and records by meaning, best first. Each hit has the namespace and key (pass them
        to read_record for the whole value, or to forget), a snippet of the value, and a confidence in
        [0, 1]: below about 0.3 the hit is a weak match. No hit means nothing relevant is stored."""
        hits = self.handle.recall(query, namespaces=namespaces or "*", kinds=kinds, k=k)
        return {
            "hits": [
                {
                    "namespace": h.namespace,
                    "key": h.key,
                    "snippet": snippet(h.record.value),
                    "confidence": round(h.confidence, 3),
                    "kind": h.record.value.get("kind") if isinstance(h.record.value, dict) else None,
                    "updated": h.record.updated_at.isoformat(),
                    "persisted": h.record.persisted,
                }
                for h in hits
            ],
        }

    def forget(
        self,
        namespace: Annotated[str, Field(description="The memory's namespace, as remember or recall returned it.")],
        key: Annotated[str, Field(description="The memory's key, as remember or recall returned it.")],
    ) -> dict[str, Any]:
        """Forget one memory everywhere it lives: every version of it, its archived copy, its kept history, the
        recall index and the change log, so that nothing returns it again and nothing of it can be recovered.
        Returns forgotten: false when there was no such memory."""
        erased = self.handle.forget(namespace, key)
        return {"namespace": namespace, "key": key, "forgotten": any(n > 0 for n in erased.values())}

    def context(
        self,
        hrm: Annotated[str | None, Field(description="The HRM whose memory to render (e.g. 'altitude'); omit on a "
                                                     "server that serves one HRM.")] = None,
        budget: Annotated[int, Field(ge=0, le=1_000_000, description="Tokens at most (o200k); default 2000.")] = 2000,
        query: Annotated[str | None, Field(description="Lead with the memories recalled for this query.")] = None,
        sections: Annotated[list[Literal["now", "goals", "people", "patterns", "history", "legend"]] | None,
                            Field(description="Keep only these sections; omit for all.")] = None,
    ) -> dict[str, Any]:
        """An HRM's memory as Markdown for a prompt: what is going on now, goals and commitments, people,
        patterns and preferences, recent history; never over the token budget (whole entries only, the rest
        counted as 'N more not shown'). Returns the text and its exact token count."""
        ctx = self.handle.context(self._hrm(hrm), budget=budget, query=query, sections=sections)
        return {"hrm": ctx.hrm, "text": ctx.text, "tokens": ctx.tokens, "budget": ctx.budget, "omitted": ctx.omitted}

    # -- records -------------------------------------------------------------------

    def read_record(
        self,
        namespace: Annotated[str, Field(description="The namespace, e.g. 'altitude.memories'.")],
        key: Annotated[str, Field(description="The record's key.")],
    ) -> dict[str, Any]:
        """Read one record: its whole value (JSON), version, tier and times. found: false when there is none."""
        rec = self.handle.get_record(namespace, key)
        if rec is None:
            return {"namespace": namespace, "key": key, "found": False}
        return {"found": True, **record_json(rec)}

    def write_record(
        self,
        namespace: Annotated[str, Field(description="A declared namespace this server may write (see "
                                                    "list_namespaces).")],
        key: Annotated[str, Field(description="The record's key: printable, at most 256 characters.")],
        value: Annotated[Any, Field(description="Any JSON value (object, array, string, number, boolean, null); "
                                                "it replaces the record's value.")],
    ) -> dict[str, Any]:
        """Create or replace one record. Returns its new version and 'persisted': false when the value is kept
        in this server's process only (a consent-gated namespace whose consent is not granted, or a hot
        namespace): it is not written to disk and ends with the server. Prefer remember for memories (it
        dedupes and indexes them for recall)."""
        self.handle.write(namespace, key, value)
        rec = self.handle.get_record(namespace, key)
        return self._persistence({"namespace": namespace, "key": key}, rec)

    def query_records(
        self,
        namespace: Annotated[str, Field(description="A namespace or a glob, e.g. 'shared.*'.")],
        key: Annotated[str, Field(description="A key glob (default '*': every key).")] = "*",
        where: Annotated[dict[str, Any] | None, Field(description="Keep records whose value matches every "
                         "condition: {'field': value} or {'field': {'$gt': 3}} (operators $eq $ne $gt $gte $lt "
                         "$lte $in; dots reach into nested objects).")] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="How many records at most (default 20).")] = 20,
        values: Annotated[bool, Field(description="Include each record's value (default true); false lists "
                                                  "keys only.")] = True,
    ) -> dict[str, Any]:
        """List records by namespace and key globs, ordered by namespace then key, optionally filtered on
        their values. Archived records are not included."""
        recs = self.handle.query(namespace, key, where=where, limit=limit)
        return {"records": [record_json(r, value=values) for r in recs], "count": len(recs)}

    def delete_record(
        self,
        namespace: Annotated[str, Field(description="The namespace.")],
        key: Annotated[str, Field(description="The record's key.")],
    ) -> dict[str, Any]:
        """Delete one record. Returns deleted: false when there was no such record."""
        return {"namespace": namespace, "key": key, "deleted": self.handle.delete(namespace, key)}

    def list_namespaces(self) -> dict[str, Any]:
        """The namespaces this server may read: name, tier, description, the kind of memory they hold,
        whether recall searches them, whether this server may write them, and the consent category that
        gates persisting them (with whether it is granted)."""
        return {"namespaces": [self._spec_json(s) for s in self.handle.namespaces()]}

    # -- resources -----------------------------------------------------------------

    def context_markdown(self, hrm: str) -> str:
        """The resource ``hrm-memory://context/{hrm}``: the HRM's context at the default budget."""
        return self.handle.context(self._hrm(hrm)).text

    def namespaces_json(self) -> str:
        """The resource ``hrm-memory://namespaces``."""
        return orjson.dumps(self.list_namespaces(), option=orjson.OPT_INDENT_2).decode()

    # -- helpers -------------------------------------------------------------------

    def _hrm(self, hrm: str | None) -> str | None:
        return self.scope if hrm is None else hrm

    def _spec_json(self, spec: NamespaceSpec) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": spec.name,
            "tier": spec.tier,
            "description": spec.description,
            "kind": spec.kind,
            "recall": spec.index is not None and spec.tier != "hot",
            "writable": self.scope is None or spec.owner == self.scope,
        }
        if spec.consent is not None:
            out["consent"] = spec.consent
            out["consent_granted"] = self.manager.consent.granted(spec.consent)
        return out

    @staticmethod
    def _persistence(out: dict[str, Any], rec: Record | None) -> dict[str, Any]:
        if rec is not None:
            out["version"] = rec.version
        persisted = bool(rec is not None and rec.persisted)
        out["persisted"] = persisted
        if not persisted:
            out["note"] = NOT_PERSISTED
        return out


#: The tools in the order they are listed, with their MCP annotations
#: (read-only, destructive, idempotent).
TOOLS: tuple[tuple[str, bool, bool, bool], ...] = (
    ("remember", False, False, False),
    ("recall", True, False, True),
    ("context", True, False, True),
    ("forget", False, True, True),
    ("read_record", True, False, True),
    ("write_record", False, True, True),
    ("query_records", True, False, True),
    ("delete_record", False, True, True),
    ("list_namespaces", True, False, True),
)
