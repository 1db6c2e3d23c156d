"""The state every handler shares, and the steps they compose.

:class:`Core` is one object handed to each component of the pipeline (the
record handlers, the administrative ones, recall, remember, context): what
the store is made of (backend, hot tier, registry, codecs, schemas, tracing,
event bus) and the steps every handler composes: resolve and validate a
namespace, check a scope's access, find a record where it lives (hot tier,
session-only copy, backend), commit it to the right place given consent,
encode or decode a value with the namespace's codec, keep a namespace within
its key cap. A component holds the Core and its own collaborators, never
another component's state. What a component must learn of the others'
work reaches it through a listener the core offers: a key committed
(:meth:`Core.on_commit`), the declared namespaces changed
(:meth:`Core.on_declared`), a namespace purged (:meth:`Core.on_purge`), a
key erased (:meth:`Core.on_erase`), a consent decision
(:meth:`Core.on_consent`), a record about to be superseded
(:meth:`Core.keep_history`), the store checked (:meth:`Core.on_check`).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from hrm_memory.core import values
from hrm_memory.core.backend import Backend, HotStore
from hrm_memory.core.codes import Codec, CodecRegistry
from hrm_memory.core.errors import (
    AccessDenied,
    CorruptRecord,
    InvalidArgument,
    MemoryStoreError,
    NotReplicated,
    UndeclaredNamespace,
)
from hrm_memory.core.events import EventBus, Subscription
from hrm_memory.core.records import Event, Finding, Stored
from hrm_memory.core.schemas import Schemas
from hrm_memory.core.spec import (
    CONSENT_CATEGORIES,
    NamespaceSpec,
    Registry,
    check_namespace,
)
from hrm_memory.tracing.keys import consent_view
from hrm_memory.tracing.spans import OpSpan, TokensSaved, Tracing

#: The ``focus.consent`` namespace holds one record per consent category.
CONSENT_NAMESPACE = "focus.consent"
GLOB = frozenset("*?[")

#: Span attributes a handler returns (None when nothing is traced).
Attrs = dict[str, Any] | None
#: A handler: (op, scope, span) -> (result, span attributes). ``op`` is an op
#: value or the plain tuple of its fields; handlers read fields by position.
Handler = Callable[[Any, str | None, OpSpan | None], tuple[Any, Attrs]]
#: What a component contributes to the pipeline: op type -> (span name,
#: handler, keyed: the op's first two fields are its namespace and key).
Handlers = dict[type, tuple[str, Handler, bool]]


class Keeper(Protocol):
    """Keeps superseded versions (``NamespaceSpec.history``)."""

    def supersede(self, spec: NamespaceSpec, key: str, now_us: int, deleting: bool,
                  unconfirmed: list[NotReplicated] | None = None) -> int:  # fmt: skip
        """Told before a persisted record of a namespace that keeps history is
        replaced or deleted, with the namespace lock held. Returns the least
        version the next write of the key may take (versions never go back,
        deletions included). ``unconfirmed``, when given, collects the
        ``NotReplicated`` of the keeper's own writes instead of raising them
        (each is on the primary): the caller writes or deletes the record all
        the same, then raises the first."""
        ...

    def relink(self, spec: NamespaceSpec, key: str, version: int, now_us: int) -> None:
        """The persisted record of ``key`` at ``version`` is about to take the
        next version with the same value (a key rotation reseals it): its
        kept versions must stay reachable from the new one. Called with the
        namespace lock held, before the record is written."""
        ...

    def expire(self, specs: list[NamespaceSpec], now_us: int) -> int:
        """Drop kept versions the namespaces' policies no longer keep at
        ``now_us`` (compaction and archiving call it), and rewrite what held
        them; the bytes reclaimed."""
        ...


class Component(Protocol):
    """A part of the pipeline: the handlers of its ops, and what it holds to release."""

    def handlers(self) -> Handlers: ...

    def close(self) -> None: ...


#: Seconds between two looks at the store's run-time declarations before an
#: operation on a run-time namespace (a look is a shared-counter read).
DECLARATIONS_RECHECK = 0.05
_monotonic = time.monotonic


def now_us() -> int:
    return time.time_ns() // 1000


class Core:
    """The state the pipeline's components share, and their shared steps. Thread-safe."""

    def __init__(
        self,
        backend: Backend,
        hot: HotStore,
        registry: Registry,
        codecs: CodecRegistry,
        tracing: Tracing,
        *,
        poll_interval: float = 0.005,
        notifications: bool = True,
    ) -> None:
        self.backend = backend
        self.hot = hot
        self.registry = registry
        self.codecs = codecs
        self.tracing = tracing
        self.schemas = Schemas()
        self.closed = False
        self.bus = EventBus(
            backend.changes, report_error=self._callback_failed, poll_interval=poll_interval, notifications=notifications
        )
        self.specs = registry.specs  # read-only view for the hot path
        self._codec_of: dict[str, Codec | None] = {}
        self.seeded = frozenset(self.specs)
        self.runtime: set[str] = set()
        self.declared_at = 0.0
        self._commit_listeners: list[tuple[Callable[[str, str], None], Callable[[NamespaceSpec], bool]]] = []
        self._declared_listeners: list[Callable[[], None]] = []
        self._purge_listeners: list[Callable[[str], None]] = []
        self._erase_listeners: list[Callable[[str, str], dict[str, int]]] = []
        self._consent_listeners: list[Callable[[str, bool, bool], None]] = []
        self._checkers: list[Callable[[bool], list[Finding]]] = []
        self._keeper: Keeper | None = None
        # Spans name a gated namespace's keys only while its consent is granted.
        tracing.gate(consent_view(self.specs), self.granted)
        self.load_declared()
        self.refresh_followers()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.bus.close()
        self.tracing.flush()
        self.backend.close()
        self.hot.close()

    def spec(self, namespace: str) -> NamespaceSpec:
        """The declared spec; raises :class:`InvalidNamespace` or
        :class:`UndeclaredNamespace` (after looking for run-time declarations
        made by other processes since). A run-time namespace is looked up in
        the store again at most every ``DECLARATIONS_RECHECK`` seconds, so an
        undeclare in another process takes effect here within that time (at
        once in the process that made it); seed namespaces cost a dict lookup."""
        try:
            spec = self.specs.get(namespace)
        except TypeError:  # unhashable: certainly not a namespace
            check_namespace(namespace)
            raise
        if spec is not None:
            if namespace not in self.runtime:
                return spec
            now = _monotonic()
            if now - self.declared_at < DECLARATIONS_RECHECK:
                return spec
            self.declared_at = now
            self.load_declared()  # one shared-counter read when nothing changed
            spec = self.specs.get(namespace)
            return spec if spec is not None else self.registry.get(namespace)
        check_namespace(namespace)
        self.load_declared()
        return self.registry.get(namespace)

    def match(self, pattern: str) -> list[NamespaceSpec]:
        """The declared namespaces matching a glob; an exact name that is not
        declared, or a glob that matches nothing, raises :class:`UndeclaredNamespace`."""
        if not isinstance(pattern, str):
            raise InvalidArgument(f"a namespace pattern is a str glob, not {type(pattern).__name__}")
        spec = self.specs.get(pattern)
        if spec is not None:
            return [spec]
        if not GLOB.intersection(pattern):
            return [self.spec(pattern)]
        self.load_declared()
        found = [s for s in self.registry if fnmatch.fnmatchcase(s.name, pattern)]
        if not found:
            raise UndeclaredNamespace(f"no declared namespace matches {pattern!r}", namespace=pattern)
        return found

    def load_declared(self) -> None:
        """Bring run-time declarations (made by any process) into the registry."""
        declared = self.backend.declarations()
        if declared is None:
            return
        for name, data in declared.items():
            try:
                spec = NamespaceSpec.from_dict(data)
            except (MemoryStoreError, TypeError) as exc:
                raise CorruptRecord(
                    f"run-time declaration {name!r} is not a valid namespace spec ({exc})", namespace=name
                ) from None
            if spec.name not in self.registry:
                self.registry.declare(spec)
                self.runtime.add(spec.name)
        for name in self.runtime - set(declared):
            self.registry.remove(name)  # undeclared by another process
            self.runtime.discard(name)
        self.refresh_followers()

    def declare(self, spec: NamespaceSpec) -> None:
        """Register a namespace declared in this process (checked and stored
        by the caller): a run-time one unless it is a seed namespace."""
        if spec.name not in self.seeded:
            self.runtime.add(spec.name)
        self.registry.declare(spec)
        self.refresh_followers()

    def refresh_followers(self) -> None:
        """The declared namespaces changed: tell the event bus which
        namespaces' commits each commit listener follows, then tell the
        ``on_declared`` listeners."""
        specs = list(self.registry)
        self.bus.follow([(listener, frozenset(s.name for s in specs if follows(s)))
                         for listener, follows in self._commit_listeners])
        for told in self._declared_listeners:
            told()

    def codec(self, spec: NamespaceSpec) -> Codec | None:
        try:
            return self._codec_of[spec.name]
        except KeyError:
            codec = self._codec_of[spec.name] = self.codecs.for_spec(spec.codec)
            return codec

    def readable(self, scope: str, namespace: str) -> bool:
        head = namespace.split(".", 1)[0]
        if head == scope or head == "shared":
            return True
        spec = self.specs.get(namespace)
        return spec is not None and spec.owner == scope

    def check_scope(self, scope: str) -> None:
        """A scope must own or share at least one declared namespace."""
        if not isinstance(scope, str) or not scope.isidentifier() or not scope.islower():
            raise InvalidArgument(f"invalid HRM name {scope!r}")
        self.load_declared()
        if not any(s.hrm == scope or s.owner == scope for s in self.registry):
            raise UndeclaredNamespace(
                f"no declared namespace belongs to HRM {scope!r}; declare one first", namespace=f"{scope}.*"
            )

    def may_read(self, scope: str | None, namespace: str) -> None:
        if scope is not None and not self.readable(scope, namespace):
            raise AccessDenied(f"HRM {scope!r} may not read namespace {namespace!r}", namespace=namespace, hrm=scope)

    def may_write(self, scope: str | None, spec: NamespaceSpec) -> None:
        if scope is not None and spec.owner != scope:
            raise AccessDenied(
                f"HRM {scope!r} may not write namespace {spec.name!r} (owner: {spec.owner})",
                namespace=spec.name,
                hrm=scope,
            )

    def visible(self, scope: str | None, pattern: str, specs: list[NamespaceSpec]) -> list[NamespaceSpec]:
        if scope is None:
            return specs
        allowed = [s for s in specs if self.readable(scope, s.name)]
        if not allowed:
            raise AccessDenied(f"HRM {scope!r} may not read namespaces matching {pattern!r}", namespace=pattern, hrm=scope)
        return allowed

    @staticmethod
    def may_change(spec: NamespaceSpec, key: str) -> None:
        """Consent decisions are system state: the records of
        ``focus.consent`` named by a category change only through the consent
        op (``mm.consent.grant/revoke``), never by a write, update, delete,
        forget or import, whatever the entry point. (The namespace's other
        keys, such as the legacy adapter's documents, are ordinary records.)"""
        if spec.name == CONSENT_NAMESPACE and key in CONSENT_CATEGORIES:
            raise AccessDenied(
                f"{CONSENT_NAMESPACE}/{key} is a consent decision: only consent.grant/revoke "
                "(or the CLI's consent command) change it",
                namespace=spec.name,
            )

    @staticmethod
    def admin_only(scope: str | None, what: str) -> None:
        if scope is not None:
            raise AccessDenied(f"HRM {scope!r} may not {what}: that is the manager's, not a scope's", hrm=scope)

    def granted(self, category: str) -> bool:
        """True if consent ``category`` was granted and not revoked since."""
        stored = self.backend.get(CONSENT_NAMESPACE, category)
        if stored is None or stored.tier == "cold":
            return False
        value = orjson.loads(stored.value)
        return type(value) is dict and value.get("granted") is True

    def lookup(self, spec: NamespaceSpec, key: str) -> Stored | None:
        """The current record: hot tier, else (for a gated namespace) the
        session-only copy, else the backend (archived records included)."""
        if spec.tier == "hot":
            return self.hot.get(spec.name, key)
        if spec.consent is not None:
            shadow = self.hot.get(spec.name, key)
            if shadow is not None:
                return shadow
        return self.backend.get(spec.name, key)

    def commit(self, spec: NamespaceSpec, key: str, data: bytes, imported: bool = False) -> Stored:
        """Commit to the namespace's home; the caller holds the namespace lock.
        A consent-gated namespace whose category is not granted is committed
        to the hot tier instead (this process only): nothing reaches the backend."""
        if spec.tier == "hot":
            return self.hot.put(spec.name, key, data, now_us())
        if spec.consent is not None:
            if not imported and not self.granted(spec.consent):
                base = self.lookup(spec, key)
                return self.hot.put(spec.name, key, data, now_us(), base_version=base.version if base else 0)
            self.hot.delete(spec.name, key, now_us())  # a session-only copy is superseded
        if spec.history is not None and self._keeper is not None:
            now = now_us()
            # The kept version is written first, on a key of its own: when no
            # replica confirms it (NotReplicated: it is on the primary), the
            # record is written all the same, so that a read after the error
            # gives it, and the error is raised after.
            unconfirmed: list[NotReplicated] = []
            least = self._keeper.supersede(spec, key, now, False, unconfirmed)
            stored = self.backend.put(spec.name, key, data, now, min_version=least)
            if unconfirmed:
                raise unconfirmed[0]
            return stored
        return self.backend.put(spec.name, key, data, now_us())

    def supersede(self, spec: NamespaceSpec, key: str, now_us: int, deleting: bool,
                  unconfirmed: list[NotReplicated] | None = None) -> int:  # fmt: skip
        """Before a persisted record of a namespace that keeps history is
        replaced or deleted (the namespace lock held): the keeper keeps the
        current version. The least version the key's next write may take (0
        when no keeper is wired). ``unconfirmed``: see :meth:`Keeper.supersede`."""
        keeper = self._keeper
        if keeper is None or spec.history is None:
            return 0
        return keeper.supersede(spec, key, now_us, deleting, unconfirmed)

    def expire_kept(self, specs: list[NamespaceSpec], now_us: int) -> int:
        """Drop kept versions the namespaces' policies no longer keep at
        ``now_us``; the bytes reclaimed (0 when no keeper is wired)."""
        return 0 if self._keeper is None else self._keeper.expire(specs, now_us)

    def relink(self, spec: NamespaceSpec, key: str, version: int, now_us: int) -> None:
        """A rotation resealed ``key`` from ``version`` to the next: its kept
        history follows it (nothing to do when no keeper is wired)."""
        if spec.history is not None and self._keeper is not None:
            self._keeper.relink(spec, key, version, now_us)

    def encode(self, spec: NamespaceSpec, key: str, value: Any) -> tuple[bytes, Any]:
        """Validate ``value`` (JSON, schema) and return ``(stored bytes,
        tokens_saved attribute)``: in a namespace with a codec, the coded
        form (warm and cold), or the value as written (hot: see
        :meth:`decoded`). Token counting is deferred to span finishing."""
        data = values.encode(value, limit=spec.max_value_bytes, namespace=spec.name, key=key)
        if spec.schema is not None:
            self.schemas.validate(spec, key, value)
        codec = self.codec(spec)
        if codec is None:
            return data, 0
        if spec.tier == "hot":
            return data, TokensSaved(data, codec)
        return self.compacted(spec, key, value, data, codec)

    def compacted(self, spec: NamespaceSpec, key: str, value: Any, data: bytes, codec: Codec) -> tuple[bytes, Any]:
        """``(stored bytes, tokens_saved)`` of a checked ``value`` encoded as
        ``data`` in a namespace with ``codec``. A value with nothing to code
        (a dict record with no rename, :meth:`Codec.renames_of`, else
        :meth:`Codec.keeps`, decided on ``data``) is stored as ``data`` and
        saves 0 tokens, exactly, with no walk, no second encoding and no
        tokenizer; one whose renames are all keys is coded on ``data``
        (:meth:`Codec.compact_json`); else its compact form is made from the
        value. With it, a :class:`TokensSaved` counted when (and if) its
        span is finished."""
        pairs = codec.renames_of(value, data)
        if pairs == () or (pairs is None and codec.keeps(data)):
            return data, 0
        # A record whose only renames are keys is coded on its JSON; else
        # the compact form of checked JSON is JSON (the codec only renames
        # keys and strings): a plain dump, without a second exactness check.
        compact = None if pairs is None else codec.compact_json(data, pairs)
        if compact is None:
            coded = codec.compact_encoded(value, data)
            compact = values.kept(orjson.dumps(coded))
            if len(compact) > spec.max_value_bytes:
                compact = values.encode(coded, limit=spec.max_value_bytes, namespace=spec.name, key=key)
        return compact, TokensSaved(data, codec, stored=compact, pairs=pairs)

    def decode(self, spec: NamespaceSpec, stored: Stored, compact: bool) -> Any:
        """A stored value as the caller asked for it: as written (readable), or coded."""
        return self.decoded(spec, stored.value, compact)

    def decoded(self, spec: NamespaceSpec, data: bytes, compact: bool) -> Any:
        """Stored bytes as the caller asked for them: as written, or coded.
        A hot namespace keeps its values as written (process memory: codes
        pay at the prompt, so they are made when asked for); every other
        stores the coded form, expanded on its JSON (:meth:`Codec.expand_json`)
        or, where that declines, decoded and expanded unless it has nothing
        to expand (:meth:`Codec.expands_nothing`, decided on the bytes)."""
        codec = self.codec(spec)
        if codec is None:
            return values.loads(data)
        if spec.tier == "hot":  # as written
            value = values.loads(data)
            return codec.compact_encoded(value, data) if compact else value
        if compact:
            return values.loads(data)
        expanded = codec.expand_json(data)
        if expanded is not None:
            return values.loads(expanded)
        value = values.loads(data)
        return value if codec.expands_nothing(data) else codec.expand_encoded(value, data)

    def expanded(self, spec: NamespaceSpec, value: Any) -> Any:
        """``value`` (stored coded) in its readable form: as written."""
        codec = self.codec(spec)
        return value if codec is None else codec.expand(value)

    def on_commit(self, listener: Callable[[str, str], None], follows: Callable[[NamespaceSpec], bool]) -> None:
        """Call ``listener(namespace, key)`` after each change committed in
        this process to a namespace whose spec ``follows`` (with the
        namespace lock held: the listener only takes note), and for the keys
        an import wrote (:meth:`told_of`)."""
        self._commit_listeners.append((listener, follows))
        self.refresh_followers()

    def on_declared(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after the declared namespaces are (re)loaded."""
        self._declared_listeners.append(listener)

    def on_purge(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(namespace)`` after a namespace's data is purged."""
        self._purge_listeners.append(listener)

    def on_erase(self, listener: Callable[[str, str], dict[str, int]]) -> None:
        """Call ``listener(namespace, key)`` when a key is erased for good
        (``forget``); it returns what it removed, ``{place: count}``."""
        self._erase_listeners.append(listener)

    def on_consent(self, listener: Callable[[str, bool, bool], None]) -> None:
        """Call ``listener(category, granted, purged)`` after each consent decision."""
        self._consent_listeners.append(listener)

    def on_check(self, checker: Callable[[bool], list[Finding]]) -> None:
        """Run ``checker(fix) -> findings`` on what a component keeps beside
        the backend (the recall index's file) when the store is checked."""
        self._checkers.append(checker)

    def keep_history(self, keeper: Keeper) -> None:
        """The keeper of superseded versions (one per store)."""
        if self._keeper is not None and self._keeper is not keeper:
            raise InvalidArgument("a store has one keeper of history")
        self._keeper = keeper

    def told_of(self, namespace: str, keys: list[str]) -> None:
        """Keys of ``namespace`` were written outside a write op (an import
        into a store without a change log): tell the commit listeners."""
        self.bus.tell(namespace, keys)

    def decided(self, category: str, granted: bool, purged: bool) -> None:
        """A consent decision was carried out: tell the components that act on it."""
        for listener in self._consent_listeners:
            listener(category, granted, purged)

    def purged(self, namespace: str) -> None:
        """A namespace's data was purged: tell the components that derive data from it."""
        for listener in self._purge_listeners:
            listener(namespace)

    def erased(self, namespace: str, key: str) -> dict[str, int]:
        """A key was erased from the backend: the components erase what they
        derived from it; ``{place: records removed}``."""
        counts: dict[str, int] = {}
        for listener in self._erase_listeners:
            for place, n in listener(namespace, key).items():
                counts[place] = counts.get(place, 0) + n
        return counts

    def check_derived(self, fix: bool) -> list[Finding]:
        """The findings of what components keep beside the backend."""
        findings: list[Finding] = []
        for check in self._checkers:
            findings += check(fix)
        return findings

    def forget_namespace(self, namespace: str) -> None:
        """Drop an undeclared run-time namespace from the registry and caches."""
        self.registry.remove(namespace)
        self.runtime.discard(namespace)
        self._codec_of.pop(namespace, None)

    def move_to_cold(self, namespace: str, records: list[Stored], trace_id: str) -> int:
        """Archive ``records``; the caller holds the namespace lock."""
        if not records:
            return 0
        versions = {st.key: st.version for st in records}
        marked = self.backend.archive(namespace, records)
        for key in marked:
            self.bus.record("archive", namespace, key, versions[key], trace_id, True)
        return len(marked)

    def enforce_cap(self, spec: NamespaceSpec, trace_id: str) -> None:
        """Keep at most ``max_keys``: the oldest (by creation) move to cold
        (persisted namespaces) or are dropped (hot ones, which have no cold)."""
        assert spec.max_keys is not None
        with self.backend.lock(spec.name):
            if spec.tier == "hot":
                excess = self.hot.count(spec.name) - spec.max_keys
                if excess > 0:
                    for st in self.hot.oldest(spec.name, excess):
                        self.hot.delete(spec.name, st.key, now_us())
                        self.bus.record("delete", spec.name, st.key, st.version + 1, trace_id, False)
                return
            keys = self.backend.keys(spec.name)
            excess = len(keys) - spec.max_keys
            if excess <= 0:
                return
            keys.sort(key=lambda k: (k[1], k[0]))  # the oldest by creation (see NamespaceSpec.max_keys)
            victims = {k for k, _, _ in keys[:excess]}
            old = [s for s in self.backend.scan(spec.name, strict=False) if s.key in victims]
            self.move_to_cold(spec.name, old, trace_id)

    def _callback_failed(self, sub: Subscription, event: Event, exc: BaseException) -> None:
        span = self.tracing.start("notify", event.namespace, event.key)
        if span is not None:
            span.end({"hrm.memory.subscription": sub.namespace, "hrm.memory.event": event.op}, exc)


__all__ = ["CONSENT_NAMESPACE", "GLOB", "Attrs", "Component", "Core", "Handler", "Handlers", "Keeper", "now_us"]
