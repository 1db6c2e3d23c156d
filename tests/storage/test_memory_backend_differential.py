"""The reference backend and the file backend, driven by the same random
sequences of operations (writes, deletes, archiving, forget, purge, consent),
answer the same: values, versions, tiers, kept history and change-log events
(in commit order per key), after every step."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from hrm_memory import Keep, MemoryManager, NamespaceSpec

SPECS = [
    NamespaceSpec("t.plain"),
    NamespaceSpec("t.kept", history=Keep(versions=3)),
    NamespaceSpec("t.aged", ttl=60.0),
    NamespaceSpec("t.gated", consent="preferences", history=Keep(versions=2)),
]
NAMES = [s.name for s in SPECS]
keys = st.sampled_from(["a", "b/1"])  # few keys: operations meet on them
values = st.one_of(st.integers(-5, 5), st.text(max_size=6), st.lists(st.integers(0, 3), max_size=3))


def _view(mm: MemoryManager) -> Any:
    """Everything a caller can see of the store, in one comparable value."""
    out = {}
    for ns in NAMES:
        for r in mm.query(ns, include_cold=True):
            out[(ns, r.key)] = (r.value, r.version, r.tier, r.persisted,
                                [(v.version, v.value, v.deleted) for v in mm.history(ns, r.key)])
    return out


class SameAnswers(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="hrm-diff-"))
        self.file = MemoryManager(self.dir, durability="flush", namespaces=SPECS)
        self.mem = MemoryManager(backend="memory://", namespaces=SPECS)
        self.cursors = (self.file.cursor(), self.mem.cursor())

    def teardown(self) -> None:
        self.file.close()
        self.mem.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def both(self, call: Any) -> None:
        got = []
        for mm in (self.file, self.mem):
            try:
                got.append(("ok", call(mm)))
            except Exception as exc:  # noqa: BLE001 - the same error type is part of the answer
                got.append(("error", type(exc).__name__))
        assert got[0] == got[1], got

    @rule(ns=st.sampled_from(NAMES), key=keys, value=values)
    def write(self, ns: str, key: str, value: Any) -> None:
        self.both(lambda mm: (mm.write(ns, key, value), None)[1])

    @rule(ns=st.sampled_from(NAMES), key=keys)
    def delete(self, ns: str, key: str) -> None:
        self.both(lambda mm: mm.delete(ns, key))

    @rule(ns=st.sampled_from(NAMES), key=keys)
    def forget(self, ns: str, key: str) -> None:
        # counts per place differ by design (a file backend has more places); what is left must not
        self.both(lambda mm: (mm.forget(ns, key), None)[1])

    @rule()
    def archive(self) -> None:
        self.both(lambda mm: mm.archive(now=time.time() + 3600))

    @rule(grant=st.booleans(), purge=st.booleans())
    def consent(self, grant: bool, purge: bool) -> None:
        if grant:
            self.both(lambda mm: sorted(mm.consent.grant("preferences")["persisted"].items()))
        else:
            self.both(lambda mm: sorted(mm.consent.revoke("preferences", purge=purge)["purged"]))

    @invariant()
    def same_view(self) -> None:
        assert _view(self.file) == _view(self.mem)

    @invariant()
    def same_events(self) -> None:
        seen = []
        for mm, c in zip((self.file, self.mem), self.cursors):
            per_key: dict[tuple[str, str], list[tuple[str, int]]] = {}
            for e in mm.events_since(c)[0]:  # commit order per key is the contract
                per_key.setdefault((e.namespace, e.key), []).append((e.op, e.version))
            seen.append(per_key)
        assert seen[0] == seen[1]


SameAnswers.TestCase.settings = settings(
    max_examples=25, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
)
test_memory_and_file_backends_answer_the_same = SameAnswers.TestCase
