"""Kept history and as-of reads: ``history()``, ``read/get_record/query(as_of=...)``.

The stateful test drives a real store (files, fsync off) through writes,
updates, deletes, archiving, compaction and reopening, and checks every
answer against a model of what was current when: within the declared
retention the answers agree, outside it the store says so
(:class:`HistoryNotKept`), and it never answers with a version the model says
was not current at that time.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hrm_memory import HistoryNotKept, InvalidArgument, InvalidSpec, Keep, MemoryManager, NamespaceSpec
from hrm_memory.history.keeper import trim

NS = "hist.notes"
KEEP = 3
DELETED = object()


def _tick() -> float:
    """A probe time strictly between the operation before and the one after."""
    time.sleep(0.002)
    t = time.time()
    time.sleep(0.002)
    return t


class HistoryModel(RuleBasedStateMachine):
    """The model: per key, the list of its versions ``(version, at_us, value
    or DELETED)`` in order; probe times between operations."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="hrm-hist-"))
        self.mm = self._open()
        self.mm.declare(NamespaceSpec(NS, ttl=1.0, history=Keep(versions=KEEP)))
        self.events: dict[str, list[tuple[int, int, Any]]] = {}
        self.since_us: int | None = None
        self.probes: list[float] = [time.time() - 100]

    def _open(self) -> MemoryManager:
        return MemoryManager(self.dir / "root", durability="flush", signal_log=False)

    def teardown(self) -> None:
        self.mm.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _record(self, key: str) -> None:
        rec = self.mm.get_record(NS, key)
        assert rec is not None
        at = int(rec.updated_at.timestamp() * 1_000_000)
        if self.since_us is None:
            self.since_us = at
        self.events.setdefault(key, []).append((rec.version, at, rec.value))
        self.probes.append(_tick())

    @rule(key=st.sampled_from(["a", "b", "c"]), value=st.integers(0, 1000))
    def write(self, key: str, value: int) -> None:
        self.mm.write(NS, key, {"v": value})
        self._record(key)

    @rule(key=st.sampled_from(["a", "b", "c"]))
    def update(self, key: str) -> None:
        self.mm.update(NS, key, lambda cur: {"v": (cur or {"v": 0})["v"] + 1})
        self._record(key)

    @rule(key=st.sampled_from(["a", "b", "c"]))
    def delete(self, key: str) -> None:
        existed = self.mm.delete(NS, key)
        line = self.events.get(key)
        live = bool(line) and line[-1][2] is not DELETED
        assert existed == live
        if existed:
            assert line is not None
            versions = self.mm.history(NS, key)
            assert versions[0].deleted and versions[0].version == line[-1][0] + 1
            line.append((versions[0].version, int(versions[0].updated_at.timestamp() * 1_000_000), DELETED))
            self.probes.append(_tick())

    @rule()
    def archive(self) -> None:
        self.mm.archive(now=time.time() + 3600)  # every live record is past its 1 s TTL

    @rule()
    def compact(self) -> None:
        self.mm.compact()

    @rule()
    def reopen(self) -> None:
        self.mm.close()
        self.mm = self._open()

    # -- what the model says -------------------------------------------------------

    def kept(self, key: str) -> tuple[list[tuple[int, int, Any]], int]:
        """The versions the policy keeps (oldest first, the current one last)
        and the time before which the key's history is incomplete."""
        line = self.events.get(key, [])
        if len(line) - 1 <= KEEP:
            return line, 0
        drop = len(line) - 1 - KEEP
        return line[drop:], line[drop][1]  # the first kept version began when the last dropped one ended

    @invariant()
    def history_agrees(self) -> None:
        for key in ("a", "b", "c"):
            kept, _ = self.kept(key)
            got = self.mm.history(NS, key)
            want = [(v, None if val is DELETED else val, val is DELETED) for v, _, val in reversed(kept)]
            assert [(x.version, x.value, x.deleted) for x in got] == want
            assert [x.current for x in got] == [i == 0 for i in range(len(got))]

    @precondition(lambda self: len(self.probes) > 1)
    @invariant()
    def as_of_agrees(self) -> None:
        for key in ("a", "b", "c"):
            line = self.events.get(key, [])
            kept, cut = self.kept(key)
            for t in self.probes[-6:] + self.probes[:1]:
                t_us = int(t * 1_000_000)
                current = [e for e in line if e[1] <= t_us]
                truth = None if not current or current[-1][2] is DELETED else current[-1][2]
                answerable = self.since_us is not None and t_us >= self.since_us and t_us >= cut
                if current and current[-1] in kept:
                    answerable = True  # the version current then is kept (or is the live one)
                try:
                    got = self.mm.read(NS, key, as_of=t)
                except HistoryNotKept:
                    assert not answerable, f"{key} at {t}: history said not kept, the model keeps it"
                    continue
                assert got == truth, f"{key} at {t}: got {got}, the model says {truth}"
                rec = self.mm.get_record(NS, key, as_of=datetime.fromtimestamp(t, tz=timezone.utc))
                assert (rec.value if rec is not None else None) == truth
                if rec is not None:
                    assert rec.version == current[-1][0]


HistoryModel.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_history_and_as_of_agree_with_the_model = HistoryModel.TestCase


# -- the parts, one at a time ------------------------------------------------------------


@pytest.fixture
def mm(tmp_path: Path) -> Any:
    with MemoryManager(tmp_path / "root", durability="flush") as manager:
        yield manager


def test_seed_namespaces_keep_history_where_facts_change() -> None:
    from hrm_memory.namespaces import seed

    keeps = {s.name for s in seed() if s.history is not None}
    assert keeps == {
        "altitude.patterns", "learning.patterns", "shared.people", "shared.north_stars", "shared.priorities",
        "reasoning.strategies", "focus.notes",
    }
    assert all(s.tier != "hot" for s in seed() if s.history is not None)


def test_keep_is_validated_and_survives_a_runtime_declaration(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec):
        Keep()
    with pytest.raises(InvalidSpec):
        Keep(versions=0)
    with pytest.raises(InvalidSpec):
        NamespaceSpec("x.hot", tier="hot", history=Keep(versions=2))
    with MemoryManager(tmp_path / "r") as mm:
        mm.declare("x.kept", history=Keep(versions=2, days=7))
    with MemoryManager(tmp_path / "r") as mm:
        assert next(s for s in mm.namespaces() if s.name == "x.kept").history == Keep(versions=2, days=7)


def test_history_is_newest_first_with_deletions_and_the_coded_form_expanded(mm: MemoryManager) -> None:
    mm.write("shared.people", "ann", {"r": "friend", "n": "first"})
    mm.write("shared.people", "ann", {"r": "friend", "n": "second"})
    mm.delete("shared.people", "ann")
    mm.write("shared.people", "ann", {"r": "friend", "n": "third"})
    got = mm.history("shared.people", "ann")
    assert [(v.version, v.deleted, v.current) for v in got] == [(4, False, True), (3, True, False),
                                                                 (2, False, False), (1, False, False)]
    assert [v.value for v in got] == [{"r": "friend", "n": "third"}, None, {"r": "friend", "n": "second"},
                                      {"r": "friend", "n": "first"}]
    assert got[1].updated_at > got[2].updated_at


def test_as_of_outside_kept_history_is_refused_never_guessed(mm: MemoryManager) -> None:
    before = time.time() - 10
    mm.write("focus.slow", "k", 1)  # keeps no history
    t1 = _tick()
    mm.write("focus.slow", "k", 2)
    assert mm.read("focus.slow", "k", as_of=time.time()) == 2
    with pytest.raises(HistoryNotKept) as err:
        mm.read("focus.slow", "k", as_of=t1)
    assert isinstance(err.value, LookupError) and err.value.namespace == "focus.slow"
    with pytest.raises(HistoryNotKept):
        mm.query("focus.slow", as_of=time.time())  # a deleted key could be missing: no partial answers
    mm.write("shared.people", "p", 1)
    with pytest.raises(HistoryNotKept):
        mm.read("shared.people", "p", as_of=before)  # older than the namespace's kept history
    with pytest.raises(InvalidArgument):
        mm.read("shared.people", "p", as_of=datetime(2020, 1, 1))  # naive datetime


def test_query_as_of_sees_deleted_and_archived_keys(mm: MemoryManager) -> None:
    mm.declare(NamespaceSpec("hist.q", ttl=1.0, history=Keep(versions=5)))
    mm.write("hist.q", "a", 1)
    mm.write("hist.q", "b", 1)
    t = _tick()
    mm.delete("hist.q", "a")
    mm.write("hist.q", "b", 2)
    mm.archive(now=time.time() + 60)
    assert [(r.key, r.value) for r in mm.query("hist.q", as_of=t)] == [("a", 1), ("b", 1)]
    assert [(r.key, r.value, r.tier) for r in mm.query("hist.q", as_of=time.time())] == [("b", 2, "cold")]
    assert [r.key for r in mm.query("hist.q", as_of=t, limit=1)] == ["a"]


def test_age_retention_is_applied_by_archive_and_compaction(mm: MemoryManager) -> None:
    mm.declare(NamespaceSpec("hist.age", history=Keep(days=1)))
    mm.write("hist.age", "k", "v1")
    t1 = _tick()
    mm.write("hist.age", "k", "v2")
    assert mm.read("hist.age", "k", as_of=t1) == "v1"
    mm.archive(now=time.time() + 2 * 86400)  # two days on: v1 was superseded more than a day before
    assert [v.value for v in mm.history("hist.age", "k")] == ["v2"]
    with pytest.raises(HistoryNotKept):
        mm.read("hist.age", "k", as_of=t1)


def test_trim_drops_from_the_oldest_end_only() -> None:
    entries = [[1, 0, 10, 0, "a"], [2, 0, 20, 0, "b"], [3, 0, 30, 0, "c"]]
    assert trim(Keep(versions=2), 0, entries, 40, 50) == (20, entries[1:])
    assert trim(Keep(days=1), 0, entries, 40, 50) == (0, entries)
    tomb = [[1, 0, 10, 0, "a"], [2, 0, 20, 1, None]]
    assert trim(Keep(versions=1), 0, tomb, None, 50) == (0, tomb)  # the deletion is current: one superseded


def test_gated_namespace_keeps_no_history_before_consent(mm: MemoryManager) -> None:
    mm.write("learning.patterns", "p", 1)
    mm.write("learning.patterns", "p", 2)
    assert [v.value for v in mm.history("learning.patterns", "p")] == [2]  # session-only copies
    mm.consent.grant("preferences")
    mm.write("learning.patterns", "p", 3)
    assert [v.value for v in mm.history("learning.patterns", "p")] == [3, 2]


def test_history_events_reach_no_subscriber(mm: MemoryManager) -> None:
    cursor = mm.cursor()
    mm.write("shared.people", "x", 1)
    mm.write("shared.people", "x", 2)
    events, _ = mm.events_since(cursor)
    assert {e.namespace for e in events} == {"shared.people"}


def test_purge_removes_kept_history(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "r") as mm:
        mm.declare("hist.tmp", history=Keep(versions=3))
        mm.write("hist.tmp", "k", "secret-one")
        mm.write("hist.tmp", "k", "secret-two")
        mm.undeclare("hist.tmp", purge=True)
    assert not any(b"secret-one" in p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file())


def test_one_span_per_operation_and_no_value_in_any(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    canary = "CANARY-hist-5e1d-do-not-trace"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryManager(tmp_path / "r", tracer_provider=provider, deferred_spans=False) as mm:
        mm.write("shared.people", "ann", {"n": canary})
        t = time.time()
        mm.write("shared.people", "ann", {"n": canary + "2"})
        provider.force_flush()
        exporter.clear()
        calls = [
            ("memory.history", lambda: mm.history("shared.people", "ann")),
            ("memory.read_as_of", lambda: mm.read("shared.people", "ann", as_of=t)),
            ("memory.read_as_of", lambda: mm.get_record("shared.people", "ann", as_of=t)),
            ("memory.query_as_of", lambda: mm.query("shared.people", as_of=t)),
            ("memory.export", lambda: mm.export(tmp_path / "x.jsonl")),
            ("memory.import", lambda: mm.import_(tmp_path / "x.jsonl")),
            ("memory.forget", lambda: mm.forget("shared.people", "ann")),
        ]
        for name, call in calls:
            call()
            provider.force_flush()
            got = ["memory." + s.attributes["db.operation.name"] for s in exporter.get_finished_spans() if s.attributes]
            assert got == [name], (name, got)
            span = exporter.get_finished_spans()[0]
            assert canary not in repr(dict(span.attributes or {})) and not span.events
            exporter.clear()
    provider.shutdown()


def test_async_twins(tmp_path: Path) -> None:
    import asyncio

    from hrm_memory import AsyncMemoryManager

    async def main() -> None:
        async with AsyncMemoryManager(tmp_path / "r") as amm:
            await amm.write("shared.people", "ann", 1)
            t = _tick()
            await amm.write("shared.people", "ann", 2)
            assert [v.value for v in await amm.history("shared.people", "ann")] == [2, 1]
            assert await amm.read("shared.people", "ann", as_of=t) == 1
            assert (await amm.get_record("shared.people", "ann", as_of=t)).version == 1  # type: ignore[union-attr]
            assert [r.value for r in await amm.query("shared.people", as_of=t)] == [1]
            counts = await amm.export(tmp_path / "x.jsonl")
            assert counts["records"] == 1
            assert (await amm.import_(tmp_path / "x.jsonl"))["existing"] == 1
            await amm.forget("shared.people", "ann")
            assert await amm.history("shared.people", "ann") == []

    asyncio.run(main())


def test_compaction_keeps_what_the_policy_keeps_nothing_more(tmp_path: Path) -> None:
    root = tmp_path / "r"
    with MemoryManager(root, durability="flush") as mm:
        mm.declare(NamespaceSpec("hist.one", history=Keep(versions=1)))
        mm.write("hist.one", "k", "dropped-7c1e0a9b44")
        mm.write("hist.one", "k", "kept-51f0e2d8aa")
        mm.write("hist.one", "k", "current-0b9d3f6c12")
        held = lambda needle: [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]  # noqa: E731
        assert held(b"dropped-7c1e0a9b44")  # superseded lines, until compaction
        mm.compact("hist.one")
        assert held(b"dropped-7c1e0a9b44") == []
        assert held(b"kept-51f0e2d8aa")
        assert [v.value for v in mm.history("hist.one", "k")] == ["current-0b9d3f6c12", "kept-51f0e2d8aa"]
