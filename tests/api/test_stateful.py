"""Random sequences of write/update/delete/read/query/archive/compact/reopen
against a plain-dict model find no difference."""

from __future__ import annotations

import fnmatch
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hrm_memory import MemoryManager, NamespaceSpec

SPECS = [
    NamespaceSpec("t.warm"),
    NamespaceSpec("t.aged", ttl=60.0),
    NamespaceSpec("t.hot", tier="hot"),
]
NAMESPACES = [s.name for s in SPECS]
PERSISTED = {"t.warm", "t.aged"}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
keys = st.sampled_from(["a", "b", "c", "k/1", "ключ", "a*b", "z" * 40]) | st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=12
)
globs = st.sampled_from(["*", "a*", "?", "k/*", "*b*", "[ab]", "ключ", "z*"])


class Entry:
    __slots__ = ("value", "version", "archived")

    def __init__(self, value: Any, version: int, archived: bool = False) -> None:
        self.value, self.version, self.archived = value, version, archived


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="hrm-stateful-"))
        self.mm = MemoryManager(self.dir, durability="flush", namespaces=SPECS)
        self.model: dict[tuple[str, str], Entry] = {}
        self.versions: dict[tuple[str, str], int] = {}  # last version, deletes included

    def teardown(self) -> None:
        self.mm.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _bump(self, ns: str, key: str) -> int:
        v = self.versions.get((ns, key), 0) + 1
        self.versions[(ns, key)] = v
        return v

    @rule(ns=st.sampled_from(NAMESPACES), key=keys, value=json_values)
    def write(self, ns: str, key: str, value: Any) -> None:
        self.mm.write(ns, key, value)
        self.model[(ns, key)] = Entry(value, self._bump(ns, key))

    @rule(ns=st.sampled_from(NAMESPACES), key=keys, item=json_values)
    def update(self, ns: str, key: str, item: Any) -> None:
        new = self.mm.update(ns, key, lambda v: [v, item])
        old = self.model.get((ns, key))
        expected = [None if old is None else old.value, item]
        assert new == expected
        self.model[(ns, key)] = Entry(expected, self._bump(ns, key))

    @rule(ns=st.sampled_from(NAMESPACES), key=keys)
    def delete(self, ns: str, key: str) -> None:
        existed = self.mm.delete(ns, key)
        assert existed == ((ns, key) in self.model)
        if existed:
            del self.model[(ns, key)]
            self._bump(ns, key)

    @rule(ns=st.sampled_from(NAMESPACES), key=keys)
    def read(self, ns: str, key: str) -> None:
        entry = self.model.get((ns, key))
        rec = self.mm.get_record(ns, key)
        if entry is None:
            assert rec is None
            assert self.mm.read(ns, key, default="<absent>") == "<absent>"
        else:
            assert rec is not None
            assert (rec.value, rec.version) == (entry.value, entry.version)
            assert rec.tier == ("cold" if entry.archived else "hot" if ns == "t.hot" else "warm")

    @rule(nsglob=st.sampled_from(["t.*", "t.warm", "t.aged", "t.hot", "*"]), kglob=globs, cold=st.booleans())
    def query(self, nsglob: str, kglob: str, cold: bool) -> None:
        got = [(r.namespace, r.key, r.value, r.version) for r in self.mm.query(nsglob, kglob, include_cold=cold)]
        want = sorted(
            (ns, k, e.value, e.version)
            for (ns, k), e in self.model.items()
            if fnmatch.fnmatchcase(ns, nsglob)
            and fnmatch.fnmatchcase(k, kglob)
            and (cold or not e.archived)
        )
        assert sorted(got, key=lambda t: (t[0], t[1])) == want
        assert got == sorted(got, key=lambda t: (t[0], t[1]))  # ordered by namespace, key

    @rule()
    def archive(self) -> None:
        moved = self.mm.archive(now=time.time() + 3600)
        expected = [k for (ns, k), e in self.model.items() if ns == "t.aged" and not e.archived]
        assert moved.get("t.aged", 0) == len(expected)
        for (ns, _), e in self.model.items():
            if ns == "t.aged":
                e.archived = True

    @rule()
    def compact(self) -> None:
        self.mm.compact()

    @rule()
    def reopen(self) -> None:
        self.mm.close()
        self.mm = MemoryManager(self.dir, durability="flush", namespaces=SPECS)
        for k in [k for k in self.model if k[0] not in PERSISTED]:
            del self.model[k]
        for k in [k for k in self.versions if k[0] not in PERSISTED]:
            del self.versions[k]

    @precondition(lambda self: len(self.model) > 0)
    @invariant()
    def counts_agree(self) -> None:
        live = len(self.mm.query("t.*", include_cold=True))
        assert live == len(self.model)

    @rule()
    def check_is_clean(self) -> None:
        assert self.mm.check() == []


StoreMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStore = StoreMachine.TestCase
