"""Handlers of the operations that are not about one record: declarations,
consent, archiving, checks, compaction and statistics. A scoped handle may
run none of them but ``namespaces``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from hrm_memory.core.backend import ARCHIVE, Backend
from hrm_memory.core.errors import (
    InvalidArgument,
    InvalidSpec,
    NamespaceInUse,
    NotReplicated,
    UnknownConsentCategory,
    Unsupported,
)
from hrm_memory.core.ops import (
    ArchiveOp,
    CheckOp,
    CompactOp,
    ConsentOp,
    DeclareOp,
    NamespacesOp,
    StatsOp,
    UndeclareOp,
)
from hrm_memory.core.records import Finding, Stored
from hrm_memory.core.spec import (
    CONSENT_CATEGORIES,
    NamespaceSpec,
    conflict,
)
from hrm_memory.core.state import CONSENT_NAMESPACE, Attrs, Core, Handlers, now_us
from hrm_memory.tracing.spans import OpSpan, current_trace_id


class Admin:
    """The administrative handlers: declarations, consent, tiers, maintenance."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def handlers(self) -> Handlers:
        return {
            NamespacesOp: ("namespaces", self._namespaces, False),
            DeclareOp: ("declare", self._declare, False),
            UndeclareOp: ("undeclare", self._undeclare, False),
            ConsentOp: ("consent", self._consent, False),
            ArchiveOp: ("archive", self._archive, False),
            CheckOp: ("check", self._check, False),
            CompactOp: ("compact", self._compact, False),
            StatsOp: ("stats", self._stats, False),
        }

    def close(self) -> None:
        pass

    def _namespaces(self, op: NamespacesOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        self.core.load_declared()
        specs = list(self.core.registry)
        if scope is not None:
            specs = [s for s in specs if self.core.readable(scope, s.name)]
        return specs, None

    def _declare(self, op: DeclareOp, scope: str | None, span: OpSpan | None) -> tuple[NamespaceSpec, Attrs]:
        self.core.admin_only(scope, "declare namespaces")
        spec = op.spec
        if not isinstance(spec, NamespaceSpec):
            raise InvalidSpec(f"declare() takes a NamespaceSpec, not {type(spec).__name__}", namespace=None)
        # Every part resolves before anything is registered or stored.
        self.core.codecs.for_spec(spec.codec)
        if spec.schema is not None:
            self.core.schemas.model(spec)
        self.core.load_declared()
        self.core.registry.check(spec)
        stored = self.core.backend.declare(spec.name, spec.to_dict())
        if stored is not None and stored != spec.to_dict():
            # Declared differently by another process: never overwrite a
            # declaration (it may carry a consent gate) from here.
            raise conflict(spec, NamespaceSpec.from_dict(stored), where="in this store")
        self.core.declare(spec)
        return spec, None

    def _undeclare(self, op: UndeclareOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self.core.admin_only(scope, "undeclare namespaces")
        spec = self.core.spec(op.namespace)
        if spec.name in self.core.seeded:
            raise InvalidArgument(f"{spec.name!r} is a seed namespace; only run-time declarations can be undeclared")
        purged: dict[str, int] = {}
        with self.core.backend.lock(spec.name, cross_process=True):
            held = self.core.hot.count(spec.name) + (0 if spec.tier == "hot" else _holds(self.core.backend, spec.name))
            if held and not op.purge:
                raise NamespaceInUse(
                    f"namespace {spec.name!r} still holds {held} record(s); undeclare(..., purge=True) removes them",
                    namespace=spec.name,
                )
            for st in list(self.core.hot.scan(spec.name)):
                self.core.hot.delete(spec.name, st.key, now_us())
            if spec.tier != "hot":
                purged = self.core.backend.purge(spec.name)
            self.core.backend.undeclare(spec.name)
            self.core.forget_namespace(spec.name)
            self.core.purged(spec.name)
            self.core.refresh_followers()
        return purged, None

    def _consent(self, op: ConsentOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, Any], Attrs]:
        self.core.admin_only(scope, "change consent")
        category = op.category
        if not isinstance(category, str) or category not in CONSENT_CATEGORIES:
            raise UnknownConsentCategory(
                f"unknown consent category {category!r}; expected one of {CONSENT_CATEGORIES}", category=category
            )
        result = self.decide(category, op.grant, op.purge, current_trace_id(span))
        attrs = None if span is None else {"hrm.memory.consent": category, "hrm.memory.granted": op.grant}
        return result, attrs

    def decide(self, category: str, grant: bool, purge: bool, trace_id: str,
               record: Callable[[], Stored] | None = None) -> dict[str, Any]:
        """Record a consent decision (the one way consent records change):
        granting persists what this session holds for the category; revoking
        with ``purge`` removes its namespaces' data. ``category`` is checked
        by the caller. ``record`` commits the decision's record in a way of
        its own (an import keeps the file's version and times), with the
        consent namespace's lock held; by default, a new version now."""
        spec = self.core.spec(CONSENT_NAMESPACE)
        with self.core.backend.lock(spec.name):
            if record is None:
                data, _ = self.core.encode(spec, category, {"granted": grant})
                stored = self.core.commit(spec, category, data)
            else:
                stored = record()
            self.core.bus.record("write", spec.name, category, stored.version, trace_id, True)
        gated = [s for s in self.core.registry if s.consent == category and s.tier != "hot"]
        if grant:
            # A kept version no replica confirmed (as in Core.commit) is raised
            # once every namespace's copies are moved and the grant is told.
            unconfirmed: list[NotReplicated] = []
            persisted = {s.name: n for s in gated if (n := self._persist_session(s, trace_id, unconfirmed))}
            self.core.decided(category, True, False)
            if unconfirmed:
                raise unconfirmed[0]
            return {"category": category, "granted": True, "persisted": persisted}
        purged = {s.name: self.core.backend.purge(s.name) for s in gated} if purge else {}
        for name in purged:
            self.core.purged(name)
        self.core.decided(category, False, purge)
        return {"category": category, "granted": False, "purged": purged}

    def _persist_session(self, spec: NamespaceSpec, trace_id: str, unconfirmed: list[NotReplicated]) -> int:
        """Move this session's copies of a gated namespace to the backend (on
        grant); the ``NotReplicated`` of kept versions go to ``unconfirmed``."""
        n = 0
        with self.core.backend.lock(spec.name):
            for st in list(self.core.hot.scan(spec.name)):
                # The record keeps the creation time it had while it waited for
                # consent: the grant persists the record, it does not create it.
                least = st.version
                if spec.history is not None:
                    least = max(least, self.core.supersede(spec, st.key, st.updated_us, False, unconfirmed))
                stored = self.core.backend.put(
                    spec.name, st.key, st.value, st.updated_us, min_version=least, created_us=st.created_us
                )
                self.core.hot.delete(spec.name, st.key, now_us())
                self.core.bus.record("write", spec.name, st.key, stored.version, trace_id, True)
                n += 1
        return n

    def _archive(self, op: ArchiveOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self.core.admin_only(scope, "archive")
        now = op.now
        if now is not None and (type(now) not in (int, float) or not math.isfinite(now) or abs(now) > 1e11):
            raise InvalidArgument(f"now must be a finite number of epoch seconds, not {now!r}")
        if ARCHIVE not in self.core.backend.capabilities:
            raise Unsupported(f"the backend {self.core.backend.system} cannot archive")
        trace_id = current_trace_id(span)
        now_us = int((time.time() if now is None else now) * 1_000_000)
        moved: dict[str, int] = {}
        for spec in self.core.registry:
            if spec.tier == "hot" or spec.ttl is None:
                continue
            cutoff = now_us - int(spec.ttl * 1_000_000)
            with self.core.backend.lock(spec.name):
                old = [s for s in self.core.backend.scan(spec.name, strict=False) if s.updated_us < cutoff]
                n = self.core.move_to_cold(spec.name, old, trace_id)
                if n:
                    # The markers just appended supersede the moved lines:
                    # rewrite now rather than leave warm/ up to twice its size
                    # until a compact().
                    self.core.backend.compact(spec.name)
            if n:
                moved[spec.name] = n
        self.core.expire_kept(list(self.core.registry), now_us)
        attrs = None
        if span is not None:
            attrs = {"hrm.memory.archived": sum(moved.values()), "db.response.returned_rows": len(moved)}
        return moved, attrs

    def _check(self, op: CheckOp, scope: str | None, span: OpSpan | None) -> tuple[list[Finding], Attrs]:
        self.core.admin_only(scope, "check the store")
        findings = self.core.backend.check(bool(op.fix))
        findings += self.core.check_derived(bool(op.fix))  # what components hold beside the backend
        attrs = None if span is None else {"hrm.memory.findings": len(findings), "hrm.memory.fix": bool(op.fix)}
        return findings, attrs

    def _compact(self, op: CompactOp, scope: str | None, span: OpSpan | None) -> tuple[int, Attrs]:
        self.core.admin_only(scope, "compact the store")
        specs = list(self.core.registry) if op.namespace is None else [self.core.spec(op.namespace)]
        reclaimed = 0
        reclaimed += self.core.expire_kept(specs, now_us())  # kept history past its policy goes
        reclaimed += self.core.backend.compact(op.namespace)
        return reclaimed, (None if span is None else {"hrm.memory.bytes": reclaimed})

    def _stats(self, op: StatsOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, Any], Attrs]:
        self.core.admin_only(scope, "read store statistics")
        backend = self.core.backend.stats()
        per_ns = {}
        for spec in self.core.registry:
            b = backend.get(spec.name, {})
            per_ns[spec.name] = {
                "tier": spec.tier,
                "keys": self.core.hot.count(spec.name) if spec.tier == "hot" else b.get("keys", 0),
                "archived": b.get("archived", 0),
                "warm_bytes": b.get("bytes", 0),
                "cold_bytes": b.get("cold_bytes", 0),
            }
        return {**self.core.backend.info(), "backend": self.core.backend.system, "namespaces": per_ns}, None


def _holds(backend: Backend, namespace: str) -> int:
    """Live plus archived records of ``namespace`` in the backend."""
    stats = backend.stats().get(namespace, {})
    return int(stats.get("keys", 0)) + int(stats.get("archived", 0))


__all__ = ["Admin"]
