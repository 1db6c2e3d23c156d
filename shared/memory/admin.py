"""Handlers of the operations that are not about one record: declarations,
consent, archiving, checks, compaction and statistics. A scoped handle may
run none of them but ``namespaces``."""

from __future__ import annotations

import math
import time
from typing import Any

from .backend import ARCHIVE, Backend
from .errors import (
    InvalidArgument,
    InvalidSpec,
    NamespaceInUse,
    UnknownConsentCategory,
    Unsupported,
)
from .ops import (
    ArchiveOp,
    CheckOp,
    CompactOp,
    ConsentOp,
    DeclareOp,
    NamespacesOp,
    StatsOp,
    UndeclareOp,
)
from .records import Finding, Stored
from .spec import (
    CONSENT_CATEGORIES,
    NamespaceSpec,
    conflict,
)
from .context import Contexting
from .steps import CONSENT_NAMESPACE, Attrs, now_us
from .tracing import OpSpan, current_trace_id


class Admin(Contexting):
    """The administrative handlers; :class:`hrm_memory.pipeline.Pipeline` adds the record ones."""

    def _namespaces(self, op: NamespacesOp, scope: str | None, span: OpSpan | None) -> tuple[Any, Attrs]:
        self._load_declared()
        specs = list(self.registry)
        if scope is not None:
            specs = [s for s in specs if self.readable(scope, s.name)]
        return specs, None

    def _declare(self, op: DeclareOp, scope: str | None, span: OpSpan | None) -> tuple[NamespaceSpec, Attrs]:
        self._admin(scope, "declare namespaces")
        spec = op.spec
        if not isinstance(spec, NamespaceSpec):
            raise InvalidSpec(f"declare() takes a NamespaceSpec, not {type(spec).__name__}", namespace=None)
        # Every part resolves before anything is registered or stored.
        self.codecs.for_spec(spec.codec)
        if spec.schema is not None:
            self.schemas.model(spec)
        self._load_declared()
        self.registry.check(spec)
        stored = self.backend.declare(spec.name, spec.to_dict())
        if stored is not None and stored != spec.to_dict():
            # Declared differently by another process: never overwrite a
            # declaration (it may carry a consent gate) from here.
            raise conflict(spec, NamespaceSpec.from_dict(stored), where="in this store")
        if spec.name not in self._seeded:
            self._runtime.add(spec.name)
        self.registry.declare(spec)
        self.refresh_indexed()
        return spec, None

    def _undeclare(self, op: UndeclareOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self._admin(scope, "undeclare namespaces")
        spec = self.spec(op.namespace)
        if spec.name in self._seeded:
            raise InvalidArgument(f"{spec.name!r} is a seed namespace; only run-time declarations can be undeclared")
        purged: dict[str, int] = {}
        with self.backend.lock(spec.name, cross_process=True):
            held = self.hot.count(spec.name) + (0 if spec.tier == "hot" else _holds(self.backend, spec.name))
            if held and not op.purge:
                raise NamespaceInUse(
                    f"namespace {spec.name!r} still holds {held} record(s); undeclare(..., purge=True) removes them",
                    namespace=spec.name,
                )
            for st in list(self.hot.scan(spec.name)):
                self.hot.delete(spec.name, st.key, now_us())
            if spec.tier != "hot":
                purged = self.backend.purge(spec.name)
            self.backend.undeclare(spec.name)
            self.registry.remove(spec.name)
            self._runtime.discard(spec.name)
            self._codec_of.pop(spec.name, None)
            self.purge_index(spec.name)
            self.refresh_indexed()
        return purged, None

    def _consent(self, op: ConsentOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, Any], Attrs]:
        self._admin(scope, "change consent")
        category = op.category
        if not isinstance(category, str) or category not in CONSENT_CATEGORIES:
            raise UnknownConsentCategory(
                f"unknown consent category {category!r}; expected one of {CONSENT_CATEGORIES}", category=category
            )
        trace_id = current_trace_id(span)
        spec = self.spec(CONSENT_NAMESPACE)
        data, _ = self._encode(spec, category, {"granted": op.grant})
        with self.backend.lock(spec.name):
            stored = self._commit(spec, category, data)
            self.bus.record("write", spec.name, category, stored.version, trace_id, True)
        gated = [s for s in self.registry if s.consent == category and s.tier != "hot"]
        if op.grant:
            persisted = {s.name: n for s in gated if (n := self._persist_session(s, trace_id))}
            result: dict[str, Any] = {"category": category, "granted": True, "persisted": persisted}
        else:
            purged = {s.name: self.backend.purge(s.name) for s in gated} if op.purge else {}
            for name in purged:
                self.purge_index(name)
            result = {"category": category, "granted": False, "purged": purged}
        attrs = None if span is None else {"hrm.memory.consent": category, "hrm.memory.granted": op.grant}
        return result, attrs

    def _persist_session(self, spec: NamespaceSpec, trace_id: str) -> int:
        """Move this session's copies of a gated namespace to the backend (on grant)."""
        n = 0
        with self.backend.lock(spec.name):
            for st in list(self.hot.scan(spec.name)):
                # The record keeps the creation time it had while it waited for
                # consent (issue 14, item 22: a grant used to reset it).
                stored = self.backend.put(
                    spec.name, st.key, st.value, st.updated_us, min_version=st.version, created_us=st.created_us
                )
                self.hot.delete(spec.name, st.key, now_us())
                self.bus.record("write", spec.name, st.key, stored.version, trace_id, True)
                n += 1
        return n

    def _archive(self, op: ArchiveOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        self._admin(scope, "archive")
        now = op.now
        if now is not None and (type(now) not in (int, float) or not math.isfinite(now) or abs(now) > 1e11):
            raise InvalidArgument(f"now must be a finite number of epoch seconds, not {now!r}")
        if ARCHIVE not in self.backend.capabilities:
            raise Unsupported(f"the backend {self.backend.system} cannot archive")
        trace_id = current_trace_id(span)
        now_us = int((time.time() if now is None else now) * 1_000_000)
        moved: dict[str, int] = {}
        for spec in self.registry:
            if spec.tier == "hot" or spec.ttl is None:
                continue
            cutoff = now_us - int(spec.ttl * 1_000_000)
            with self.backend.lock(spec.name):
                old = [s for s in self.backend.scan(spec.name, strict=False) if s.updated_us < cutoff]
                n = self._move_to_cold(spec.name, old, trace_id)
                if n:
                    # The markers just appended supersede the moved lines:
                    # rewrite now rather than leave warm/ up to twice its size
                    # until a compact() (issue 14, item 22).
                    self.backend.compact(spec.name)
            if n:
                moved[spec.name] = n
        attrs = None
        if span is not None:
            attrs = {"hrm.memory.archived": sum(moved.values()), "db.response.returned_rows": len(moved)}
        return moved, attrs

    def _move_to_cold(self, namespace: str, records: list[Stored], trace_id: str) -> int:
        """Archive ``records``; the caller holds the namespace lock."""
        if not records:
            return 0
        versions = {st.key: st.version for st in records}
        marked = self.backend.archive(namespace, records)
        for key in marked:
            self.bus.record("archive", namespace, key, versions[key], trace_id, True)
        return len(marked)

    def _enforce_cap(self, spec: NamespaceSpec, trace_id: str) -> None:
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
            self._move_to_cold(spec.name, old, trace_id)

    def _check(self, op: CheckOp, scope: str | None, span: OpSpan | None) -> tuple[list[Finding], Attrs]:
        self._admin(scope, "check the store")
        findings = self.backend.check(bool(op.fix))
        if self.disk_index is not None:  # the recall index file: damaged ones found, set aside (index_health.py)
            findings += self.disk_index.check(bool(op.fix))
        attrs = None if span is None else {"hrm.memory.findings": len(findings), "hrm.memory.fix": bool(op.fix)}
        return findings, attrs

    def _compact(self, op: CompactOp, scope: str | None, span: OpSpan | None) -> tuple[int, Attrs]:
        self._admin(scope, "compact the store")
        if op.namespace is not None:
            self.spec(op.namespace)
        reclaimed = self.backend.compact(op.namespace)
        return reclaimed, (None if span is None else {"hrm.memory.bytes": reclaimed})

    def _stats(self, op: StatsOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, Any], Attrs]:
        self._admin(scope, "read store statistics")
        backend = self.backend.stats()
        per_ns = {}
        for spec in self.registry:
            b = backend.get(spec.name, {})
            per_ns[spec.name] = {
                "tier": spec.tier,
                "keys": self.hot.count(spec.name) if spec.tier == "hot" else b.get("keys", 0),
                "archived": b.get("archived", 0),
                "warm_bytes": b.get("bytes", 0),
                "cold_bytes": b.get("cold_bytes", 0),
            }
        return {**self.backend.info(), "backend": self.backend.system, "namespaces": per_ns}, None


def _holds(backend: Backend, namespace: str) -> int:
    """Live plus archived records of ``namespace`` in the backend."""
    stats = backend.stats().get(namespace, {})
    return int(stats.get("keys", 0)) + int(stats.get("archived", 0))


__all__ = ["Admin"]
