"""``forget``: erase every version of one record from every place it lives.

``delete`` is a versioned tombstone: what came before stays in the kept
history (and, until compaction, in the logs). ``forget`` is for data that
must go: the component holds the namespace lock (across processes) and
removes the key from this process's hot tier, from the backend (records,
archive, quarantine, change log: ``Backend.erase``, part of the backend
contract), from the kept history (every slot, the head and the base of the
key in ``_h.<namespace>``, each through ``Backend.erase``) and from what
components derived from it (``Core.on_erase``: the recall index, on disk,
WAL included, and in memory). No change-log entry is written for it (one would name the key);
subscribers in this process get no event either.
"""

from __future__ import annotations

from hrm_memory.core.ops import ForgetOp
from hrm_memory.core.spec import check_key
from hrm_memory.core.state import Attrs, Core, Handlers, now_us
from hrm_memory.history.keeper import History, history_namespace
from hrm_memory.tracing.spans import OpSpan


class Forget:
    """The ``forget`` handler, given the history it erases from; the backend
    erases through its own ``erase``, derived data through ``Core.erased``."""

    def __init__(self, core: Core, history: History) -> None:
        self.core = core
        self.history = history
        # Span files under the root lose the spans that name purged keys.
        core.on_purge(self._purged)

    def _purged(self, namespace: str) -> None:
        self.core.tracing.purged(namespace)

    def handlers(self) -> Handlers:
        return {ForgetOp: ("forget", self._forget, True)}

    def close(self) -> None:
        pass

    def _forget(self, op: ForgetOp, scope: str | None, span: OpSpan | None) -> tuple[dict[str, int], Attrs]:
        namespace, key = op
        spec = self.core.spec(namespace)
        check_key(key, namespace)
        self.core.may_write(scope, spec)
        self.core.may_change(spec, key)
        counts: dict[str, int] = {}

        def add(place: str, n: int) -> None:
            counts[place] = counts.get(place, 0) + int(n)

        backend = self.core.backend
        with backend.lock(spec.name, cross_process=True):
            if spec.tier == "hot" or spec.consent is not None:
                add("hot", self.core.hot.delete(spec.name, key, now_us()) is not None)
            if spec.tier != "hot":
                for place, n in backend.erase(spec.name, key).items():
                    add(place, n)
                hidden = history_namespace(spec.name)
                # Every slot and head of the key (named by a digest, not the
                # key), then its base: each erased as the record itself is,
                # since a backend rewrites only what holds the name it erases.
                for name in [*self.history.records(spec.name, key), key]:
                    for place, n in backend.erase(hidden, name).items():
                        add("history" if place == "warm" else place, n)
            for place, n in self.core.erased(spec.name, key).items():
                add(place, n)
        # Span files under the root: not one span names the key afterwards
        # (this process's pending spans are exported first; the forget span
        # itself never names it).
        spans = self.core.tracing.forgotten(spec.name, key)
        if spans:
            add("spans", spans)
        attrs = None if span is None else {"hrm.memory.erased": sum(counts.values())}
        return counts, attrs


__all__ = ["Forget"]
