"""The steps every operation shares, and the state they work on.

:class:`Steps` holds what the pipeline is made of (backend, hot tier,
registry, codecs, schemas, tracing, event bus) and the pieces each handler
composes: resolve and validate a namespace, check a scope's access, find a
record where it lives (hot tier, session-only copy, backend), commit it to
the right place given consent, and encode or decode a value with the
namespace's codec. The handlers are in :mod:`hrm_memory.pipeline` (records)
and :mod:`hrm_memory.admin` (declarations, consent, tiers, maintenance).
"""

from __future__ import annotations

import fnmatch
import time
from typing import Any

import orjson

from . import values
from .backend import Backend, HotStore
from .codes import Codec, CodecRegistry
from .errors import (
    AccessDenied,
    CorruptRecord,
    InvalidArgument,
    MemoryStoreError,
    UndeclaredNamespace,
)
from .events import EventBus, Subscription
from .records import Event, Stored
from .schemas import Schemas
from .spec import (
    NamespaceSpec,
    Registry,
    check_namespace,
)
from .tracing import TokensSaved, Tracing

#: The ``focus.consent`` namespace holds one record per consent category.
CONSENT_NAMESPACE = "focus.consent"
GLOB = frozenset("*?[")

#: Span attributes a handler returns (None when nothing is traced).
Attrs = dict[str, Any] | None


#: Seconds between two looks at the store's run-time declarations before an
#: operation on a run-time namespace (a look is a shared-counter read).
DECLARATIONS_RECHECK = 0.05
_monotonic = time.monotonic


def now_us() -> int:
    return time.time_ns() // 1000


class Steps:
    """State and shared steps of the pipeline. Thread-safe."""

    def __init__(
        self,
        backend: Backend,
        hot: HotStore,
        registry: Registry,
        codecs: CodecRegistry,
        tracing: Tracing,
        *,
        poll_interval: float = 0.005,
    ) -> None:
        self.backend = backend
        self.hot = hot
        self.registry = registry
        self.codecs = codecs
        self.tracing = tracing
        self.schemas = Schemas()
        self.closed = False
        self.bus = EventBus(backend.changes, report_error=self._callback_failed, poll_interval=poll_interval)
        self._specs = registry.specs  # read-only view for the hot path
        self._codec_of: dict[str, Codec | None] = {}
        self._seeded = frozenset(self._specs)
        self._runtime: set[str] = set()
        self._declared_at = 0.0
        #: Bumped whenever what the recall index sees may have changed.
        self.index_epoch = 0
        self._load_declared()
        self.refresh_indexed()

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
            spec = self._specs.get(namespace)
        except TypeError:  # unhashable: certainly not a namespace
            check_namespace(namespace)
            raise
        if spec is not None:
            if namespace not in self._runtime:
                return spec
            now = _monotonic()
            if now - self._declared_at < DECLARATIONS_RECHECK:
                return spec
            self._declared_at = now
            self._load_declared()  # one shared-counter read when nothing changed
            spec = self._specs.get(namespace)
            return spec if spec is not None else self.registry.get(namespace)
        check_namespace(namespace)
        self._load_declared()
        return self.registry.get(namespace)

    def match(self, pattern: str) -> list[NamespaceSpec]:
        """The declared namespaces matching a glob; an exact name that is not
        declared, or a glob that matches nothing, raises :class:`UndeclaredNamespace`."""
        if not isinstance(pattern, str):
            raise InvalidArgument(f"a namespace pattern is a str glob, not {type(pattern).__name__}")
        spec = self._specs.get(pattern)
        if spec is not None:
            return [spec]
        if not GLOB.intersection(pattern):
            return [self.spec(pattern)]
        self._load_declared()
        found = [s for s in self.registry if fnmatch.fnmatchcase(s.name, pattern)]
        if not found:
            raise UndeclaredNamespace(f"no declared namespace matches {pattern!r}", namespace=pattern)
        return found

    def _load_declared(self) -> None:
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
                self._runtime.add(spec.name)
        for name in self._runtime - set(declared):
            self.registry.remove(name)  # undeclared by another process
            self._runtime.discard(name)
        self.refresh_indexed()

    def refresh_indexed(self) -> None:
        """Tell the event bus which namespaces' changed keys recall must index."""
        self.bus.indexed = frozenset(s.name for s in self.registry if s.index)
        self.index_epoch += 1

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
        spec = self._specs.get(namespace)
        return spec is not None and spec.owner == scope

    def check_scope(self, scope: str) -> None:
        """A scope must own or share at least one declared namespace."""
        if not isinstance(scope, str) or not scope.isidentifier() or not scope.islower():
            raise InvalidArgument(f"invalid HRM name {scope!r}")
        self._load_declared()
        if not any(s.hrm == scope or s.owner == scope for s in self.registry):
            raise UndeclaredNamespace(
                f"no declared namespace belongs to HRM {scope!r}; declare one first", namespace=f"{scope}.*"
            )

    def _may_read(self, scope: str | None, namespace: str) -> None:
        if scope is not None and not self.readable(scope, namespace):
            raise AccessDenied(f"HRM {scope!r} may not read namespace {namespace!r}", namespace=namespace, hrm=scope)

    def _may_write(self, scope: str | None, spec: NamespaceSpec) -> None:
        if scope is not None and spec.owner != scope:
            raise AccessDenied(
                f"HRM {scope!r} may not write namespace {spec.name!r} (owner: {spec.owner})",
                namespace=spec.name,
                hrm=scope,
            )

    def _visible(self, scope: str | None, pattern: str, specs: list[NamespaceSpec]) -> list[NamespaceSpec]:
        if scope is None:
            return specs
        allowed = [s for s in specs if self.readable(scope, s.name)]
        if not allowed:
            raise AccessDenied(f"HRM {scope!r} may not read namespaces matching {pattern!r}", namespace=pattern, hrm=scope)
        return allowed

    @staticmethod
    def _admin(scope: str | None, what: str) -> None:
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

    def _commit(self, spec: NamespaceSpec, key: str, data: bytes, imported: bool = False) -> Stored:
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
        return self.backend.put(spec.name, key, data, now_us())

    def _encode(self, spec: NamespaceSpec, key: str, value: Any) -> tuple[bytes, Any]:
        """Validate ``value`` (JSON, schema) and return ``(stored bytes,
        tokens_saved attribute)``: the compact form when the namespace has a
        codec. Token counting is deferred to span finishing."""
        data = values.encode(value, limit=spec.max_value_bytes, namespace=spec.name, key=key)
        if spec.schema is not None:
            self.schemas.validate(spec, key, value)
        codec = self.codec(spec)
        if codec is None:
            return data, 0
        # The compact form of checked JSON is JSON (the codec only renames
        # keys and strings): a plain dump, without a second exactness check.
        compact = values.kept(orjson.dumps(codec.compact(value)))
        if len(compact) > spec.max_value_bytes:
            compact = values.encode(codec.compact(value), limit=spec.max_value_bytes, namespace=spec.name, key=key)
        return compact, TokensSaved(data, compact)

    def decode(self, spec: NamespaceSpec, stored: Stored, compact: bool) -> Any:
        """A stored value as the caller asked for it: as written (readable), or coded."""
        value = values.loads(stored.value)
        return value if compact else self.expanded(spec, value)

    def expanded(self, spec: NamespaceSpec, value: Any) -> Any:
        """``value`` (stored coded) in its readable form: as written."""
        codec = self.codec(spec)
        return value if codec is None else codec.expand(value)

    def _callback_failed(self, sub: Subscription, event: Event, exc: BaseException) -> None:
        span = self.tracing.start("notify", event.namespace, event.key)
        if span is not None:
            span.end({"hrm.memory.subscription": sub.namespace, "hrm.memory.event": event.op}, exc)


__all__ = ["CONSENT_NAMESPACE", "GLOB", "Attrs", "Steps", "now_us"]
