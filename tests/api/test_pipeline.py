"""The pipeline's promises: reads return what was written, mistakes raise
typed errors, every door (sync, async, scope, batch) runs the same ops."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from hrm_memory import (
    AsyncMemoryManager,
    Event,
    InvalidArgument,
    InvalidSpec,
    MemoryManager,
    NamespaceSpec,
    SchemaViolation,
    UndeclaredNamespace,
    UnknownSchema,
)
from hrm_memory.namespaces import seed
from hrm_memory.core.state import DECLARATIONS_RECHECK

REPO = Path(__file__).resolve().parents[2]
CODED = sorted(s.name for s in seed() if s.codec is not None and s.tier == "warm" and s.consent is None)
#: Hot namespaces with a codec: kept as written, coded when asked for.
HOT_CODED = sorted(s.name for s in seed() if s.codec is not None and s.tier == "hot")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    # strings the codecs know: field names, value codes, escapes
    | st.sampled_from(["relationship", "family", "work_colleague", "fam", "wk", "r", "~", "~r", "~~x", "timeboxing"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.text(max_size=8) | st.sampled_from(["relationship", "r", "~r", "tags", "t", "first_mentioned"]),
        children,
        max_size=4,
    ),
    max_leaves=12,
)


def same(a: Any, b: Any) -> bool:
    """Equal with the same types at every depth (and the same key order)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def test_there_are_coded_namespaces() -> None:
    assert len(CODED) >= 10


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(namespace=st.sampled_from(CODED), value=json_values)
def test_read_returns_what_was_written(mm: MemoryManager, namespace: str, value: Any) -> None:
    coded_store = mm  # one store for every example: each writes over the last
    coded_store.write(namespace, "k", value)
    assert same(coded_store.read(namespace, "k"), value)
    assert same(coded_store.get_record(namespace, "k").value, value)
    (rec,) = coded_store.query(namespace, "k")
    assert same(rec.value, value)
    compact = coded_store.read(namespace, "k", compact=True)
    assert same(coded_store.expand(namespace, compact), value)
    # the stored form is exactly the codec's compact form (coded on the JSON or by the walk)
    from hrm_memory.namespaces.codecs import CODECS

    assert same(compact, CODECS[next(s.codec for s in seed() if s.name == namespace)].compact(value))


def test_there_are_hot_coded_namespaces() -> None:
    assert {"focus.fast", "altitude.session"} <= set(HOT_CODED)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(namespace=st.sampled_from(HOT_CODED), value=json_values)
def test_a_hot_record_is_coded_when_asked_for_exactly_as_a_warm_one_is_stored(
    mm: MemoryManager, namespace: str, value: Any
) -> None:
    """A hot record is kept as written (docs/tracing.md, "Where the codes
    live"); a compact read, a compact query and the tokens report's view code
    it then, to exactly the codec's compact form: what a warm namespace with
    the same codec stores."""
    from hrm_memory.namespaces.codecs import CODECS

    codec = CODECS[next(s.codec for s in seed() if s.name == namespace)]
    mm.write(namespace, "k", value)
    assert same(mm.read(namespace, "k"), value) and same(mm.get_record(namespace, "k").value, value)
    compact = mm.read(namespace, "k", compact=True)
    assert same(compact, codec.compact(value))
    assert same(mm.get_record(namespace, "k", compact=True).value, compact)
    (rec,) = mm.query(namespace, "k", compact=True)
    assert same(rec.value, compact)
    (rec,) = mm.query(namespace, "*", compact=True)
    assert same(rec.value, compact)
    assert same(mm.expand(namespace, compact), value)
    mm.update(namespace, "k", lambda v: v)  # an update keeps it as written too
    assert same(mm.read(namespace, "k"), value) and same(mm.read(namespace, "k", compact=True), compact)
    mm.delete(namespace, "k")


def test_compact_form_differs_where_the_codec_applies(mm: MemoryManager) -> None:
    person = {"relationship": "work_colleague", "tags": ["q1_planning"]}
    mm.write("shared.people", "gaurav", person)
    assert mm.read("shared.people", "gaurav") == person
    assert mm.read("shared.people", "gaurav", compact=True) == {"r": "wk", "t": ["q1_planning"]}
    mm.write("shared.people", "odd", "~x")
    assert mm.read("shared.people", "odd") == "~x" and mm.read("shared.people", "odd", compact=True) == "~~x"
    # the coded form is what is on disk
    assert b'"r":"wk"' in b"".join(p.read_bytes() for p in (mm.root / "warm" / "shared.people").glob("*.log"))


# -- mistakes raise ------------------------------------------------------------------------------


class Goal(BaseModel):
    title: str
    prio: int


def test_declare_accepts_a_pydantic_class(mm: MemoryManager) -> None:
    spec = mm.declare(NamespaceSpec("planner.goals", schema=Goal))
    assert spec.schema == f"{__name__}:Goal"
    mm.write("planner.goals", "g", {"title": "ship", "prio": 1})
    with pytest.raises(SchemaViolation) as info:
        mm.write("planner.goals", "g", {"title": "ship", "prio": "high"})
    assert info.value.field == "prio"
    assert mm.read("planner.goals", "g") == {"title": "ship", "prio": 1}


def meta(root: Path) -> bytes | None:
    path = root / "meta" / "namespaces.json"
    return path.read_bytes() if path.exists() else None


@pytest.mark.parametrize(
    "fields",
    [{"ttl": "5"}, {"schema": 5}, {"codec": ["l"]}, {"max_keys": True}, {"consent": "everything"}, {"owner": "Bad"}],
    ids=repr,
)
def test_bad_spec_raises_before_anything_is_registered(mm: MemoryManager, root: Path, fields: dict[str, Any]) -> None:
    before = meta(root)
    with pytest.raises(InvalidSpec) as info:
        mm.declare("planner.bad", **fields)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert info.value.field == next(iter(fields))
    assert meta(root) == before
    with pytest.raises(UndeclaredNamespace):
        mm.write("planner.bad", "k", 1)


def test_unknown_codec_or_schema_is_refused_at_declare(mm: MemoryManager, root: Path) -> None:
    for fields, error in (({"codec": "nope"}, InvalidSpec.__mro__[1]), ({"schema": "no.such:Model"}, UnknownSchema)):
        with pytest.raises(error):
            mm.declare("planner.bad", **fields)
        assert meta(root) is None
    with pytest.raises(UndeclaredNamespace):
        mm.read("planner.bad", "k")


def test_declaration_is_shared_and_undeclare_reaches_other_managers(root: Path) -> None:
    with MemoryManager(root) as a, MemoryManager(root) as b:
        a.declare(NamespaceSpec("planner.drafts"))
        b.write("planner.drafts", "d", 1)  # b learns of it from the store
        b.delete("planner.drafts", "d")
        a.undeclare("planner.drafts")
        with pytest.raises(UndeclaredNamespace):
            a.write("planner.drafts", "d", 2)  # at once where it was undeclared
        time.sleep(DECLARATIONS_RECHECK * 1.5)  # elsewhere within the recheck interval
        with pytest.raises(UndeclaredNamespace):
            b.write("planner.drafts", "d", 2)


def test_seed_namespace_cannot_be_undeclared(mm: MemoryManager) -> None:
    with pytest.raises(InvalidArgument):
        mm.undeclare("altitude.patterns")


def test_not_an_op_is_refused(mm: MemoryManager) -> None:
    with pytest.raises(InvalidArgument):
        mm.batch([("get", "altitude.patterns", "k")])  # type: ignore[list-item]


# -- the async twin ---------------------------------------------------------------------------------


def test_async_gather_gives_the_sync_results(tmp_path: Path) -> None:
    keys = [f"k{i}" for i in range(50)]

    def sync_run(root: Path) -> tuple[list[Any], Any, list[Any]]:
        with MemoryManager(root, durability="flush") as mm:
            for k in keys:
                mm.write("altitude.patterns", k, {"k": k})
            for _ in keys:
                mm.update("focus.slow", "n", lambda v: (v or 0) + 1)
            reads = [mm.read("altitude.patterns", k) for k in keys]
            return reads, mm.read("focus.slow", "n"), [(r.key, r.value, r.version) for r in mm.query("altitude.*")]

    async def async_run(root: Path) -> tuple[list[Any], Any, list[Any]]:
        async with AsyncMemoryManager(root, durability="flush") as amm:
            # 100 operations at once: 50 writes to distinct keys, 50 increments of one key
            await asyncio.gather(
                *(amm.write("altitude.patterns", k, {"k": k}) for k in keys),
                *(amm.update("focus.slow", "n", lambda v: (v or 0) + 1) for _ in keys),
            )
            reads = await asyncio.gather(*(amm.read("altitude.patterns", k) for k in keys))
            rows = await amm.query("altitude.*")
            return list(reads), await amm.read("focus.slow", "n"), [(r.key, r.value, r.version) for r in rows]

    expected = sync_run(tmp_path / "sync")
    assert expected[1] == 50
    assert asyncio.run(async_run(tmp_path / "async")) == expected


def test_async_subscriber_receives_another_process_writes(root: Path) -> None:
    async def main() -> list[Event]:
        async with AsyncMemoryManager(root, namespaces=[NamespaceSpec("ev.data")]) as amm:
            sub = await amm.subscribe("ev.*", key="w-*")
            writer = await asyncio.create_subprocess_exec(
                sys.executable, str(REPO / "tests" / "helpers" / "event_writer.py"), str(root), "w", "20",
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=subprocess.DEVNULL,
            )
            got: list[Event] = []
            async with sub:
                async for event in sub:
                    got.append(event)
                    if len(got) == 20:
                        break
            assert await writer.wait() == 0
            return got

    got = asyncio.run(asyncio.wait_for(main(), 60))
    assert all(e.origin.startswith("pid:") and e.origin != f"pid:{os.getpid()}" for e in got)
    assert [orjson.loads(orjson.dumps(e.version)) for e in got if e.key == "w-0"] == [1]
    assert sorted({e.key for e in got}) == sorted({f"w-{i}" for i in range(20)})


def test_async_update_refuses_a_coroutine(root: Path) -> None:
    async def main() -> None:
        async with AsyncMemoryManager(root) as amm:
            async def fn(v: Any) -> Any:
                return 1

            with pytest.raises(InvalidArgument):
                await amm.update("focus.slow", "n", fn)

    asyncio.run(main())


def test_readme_namespace_table_is_the_seed() -> None:
    from hrm_memory.namespaces import table

    assert table() in (REPO / "README.md").read_text(), "README's namespace table: paste hrm_memory.namespaces.table()"
