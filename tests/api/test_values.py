"""Values: strict JSON in, the exact same JSON out, typed errors, nothing half-written.

NaN/inf, non-str dict keys, ints beyond 64 bits, circular
and too-deep structures, arbitrary objects and oversize values are refused
with InvalidValue (ValueTooLarge for size) naming where the problem is, and
the store is byte-for-byte unchanged afterwards; every plain JSON value
round-trips exactly.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import math
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory import InvalidValue, MemoryManager, MemoryStoreError, NamespaceSpec, ValueTooLarge
from tests.helpers.errors import assert_pickles

WARM = "altitude.patterns"
HOT = "altitude.session"
NAMESPACES = [WARM, HOT]

# -- helpers ---------------------------------------------------------------------


def snapshot(mm: MemoryManager, root: Path) -> tuple[Any, ...]:
    """Everything observable about the store: the bytes of every file under
    the root, and every record (warm, hot and archived) with its metadata."""
    files = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            files[p.relative_to(root).as_posix()] = p.read_bytes()
    records = [
        (r.namespace, r.key, orjson.dumps(r.value), r.version, r.created_at, r.updated_at, r.tier)
        for r in mm.query("*", include_cold=True)
    ]
    return files, records


def assert_identical(a: Any, b: Any, path: str = "$") -> None:
    """``a`` and ``b`` are equal *and* of the same types all the way down
    (so 1 vs 1.0 vs True, and 0.0 vs -0.0, are told apart; dict order too)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if type(a) is float:
        assert a == b and math.copysign(1.0, a) == math.copysign(1.0, b), f"{path}: {a!r} != {b!r}"
    elif type(a) is list:
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{path}[{i}]")
    elif type(a) is dict:
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_identical(a[k], b[k], f"{path}.{k}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def nested(depth: int) -> list[Any]:
    """``depth`` lists, one inside the other, around a 1."""
    v: Any = 1
    for _ in range(depth):
        v = [v]
    return v


# -- the bad values -----------------------------------------------------------------


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


class Mode(str, enum.Enum):
    FAST = "fast"


class Tone(enum.StrEnum):
    CALM = "calm"


class Perm(enum.IntFlag):
    READ = 1
    WRITE = 2


class Weight(float, enum.Enum):
    HALF = 0.5


ENUM_MEMBERS = [Color.RED, Level.LOW, Mode.FAST, Tone.CALM, Perm.READ, Perm.READ | Perm.WRITE, Weight.HALF]


class Name(str):
    pass


class Count(int):
    pass


class Ratio(float):
    pass


class Attrs(dict):  # type: ignore[type-arg]
    pass


class Items(list):  # type: ignore[type-arg]
    pass


@dataclasses.dataclass
class Point:
    x: int = 1
    y: int = 2


def _circular_list() -> Any:
    a: list[Any] = [1]
    a.append(a)
    return a


def _circular_dict() -> Any:
    d: dict[str, Any] = {"a": 1}
    d["self"] = d
    return d


def _circular_indirect() -> Any:
    a: list[Any] = [0, {"x": None}]
    a[1]["x"] = [a]
    return a


DEEP = "$" + "[0]" * 254

# (id, factory, expected .path)
BAD_VALUES: list[tuple[str, Any, str]] = [
    ("nan", lambda: float("nan"), "$"),
    ("inf", lambda: float("inf"), "$"),
    ("-inf", lambda: float("-inf"), "$"),
    ("nan-in-list", lambda: [1, 2, float("nan")], "$[2]"),
    ("inf-in-dict", lambda: {"a": {"b": float("inf")}}, "$.a.b"),
    ("-inf-deep", lambda: {"a": [{"b": [0.5, float("-inf")]}]}, "$.a[0].b[1]"),
    ("int-key", lambda: {1: "x"}, "$[1]"),
    ("int-key-among-str", lambda: {"a": 1, 2: 3}, "$[2]"),
    ("tuple-key", lambda: {"ok": {(1, 2): 3}}, "$.ok[(1, 2)]"),
    ("none-key", lambda: {None: 1}, "$[None]"),
    ("float-key", lambda: {1.5: 1}, "$[1.5]"),
    ("bool-key", lambda: {True: 1}, "$[True]"),
    ("str-subclass-key", lambda: {Name("k"): 1}, "$['k']"),
    ("int-2**64", lambda: 2**64, "$"),
    ("int-below-min", lambda: -(2**63) - 1, "$"),
    ("int-huge-nested", lambda: {"big": [2**100]}, "$.big[0]"),
    ("circular-list", _circular_list, "$[1]"),
    ("circular-dict", _circular_dict, "$.self"),
    ("circular-indirect", _circular_indirect, "$[1].x[0]"),
    ("deep-255", lambda: nested(255), DEEP),
    ("deep-300", lambda: nested(300), DEEP),
    ("deep-5000", lambda: nested(5000), DEEP),
    ("deep-dict-300", lambda: _deep_dict(300), "$" + ".a" * 254),
    ("object", object, "$"),
    ("datetime", lambda: datetime.datetime(2024, 1, 2, 3, 4, 5), "$"),
    ("date-nested", lambda: {"when": datetime.date(2024, 1, 2)}, "$.when"),
    ("set", lambda: {1, 2}, "$"),
    ("frozenset", lambda: frozenset({1}), "$"),
    ("bytes", lambda: b"x", "$"),
    ("bytearray-nested", lambda: [bytearray(b"x")], "$[0]"),
    ("dataclass", Point, "$"),
    ("uuid", lambda: uuid.UUID(int=5), "$"),
    ("uuid-nested", lambda: {"id": uuid.UUID(int=5)}, "$.id"),
    ("enum", lambda: Color.RED, "$"),
    ("int-enum", lambda: Level.LOW, "$"),
    ("str-mixin-enum", lambda: Mode.FAST, "$"),
    ("str-enum", lambda: Tone.CALM, "$"),
    ("int-flag", lambda: Perm.READ | Perm.WRITE, "$"),
    ("float-enum", lambda: Weight.HALF, "$"),
    ("int-enum-nested", lambda: {"level": Level.LOW}, "$.level"),
    ("str-enum-in-list", lambda: ["ok", [1, Tone.CALM]], "$[1][1]"),
    ("int-flag-deep", lambda: {"a": [{"b": [0.5, Perm.WRITE]}]}, "$.a[0].b[1]"),
    ("str-subclass", lambda: Name("x"), "$"),
    ("int-subclass", lambda: Count(3), "$"),
    ("float-subclass", lambda: Ratio(0.5), "$"),
    ("dict-subclass", lambda: Attrs(a=1), "$"),
    ("ordered-dict", lambda: collections.OrderedDict(a=1), "$"),
    ("list-subclass", lambda: Items([1]), "$"),
    ("tuple", lambda: (1, 2), "$"),
    ("tuple-nested", lambda: [1, (2, 3)], "$[1]"),
    ("decimal", lambda: decimal.Decimal("1.5"), "$"),
    ("complex", lambda: 1j, "$"),
    ("function", lambda: len, "$"),
    ("type", lambda: int, "$"),
]


def _deep_dict(depth: int) -> Any:
    v: Any = 1
    for _ in range(depth):
        v = {"a": v}
    return v


@pytest.fixture
def populated(mm: MemoryManager) -> MemoryManager:
    """A store with data in every tier, so that 'unchanged' means something."""
    mm.declare(NamespaceSpec("test.aging", ttl=60.0))
    for ns in NAMESPACES + ["test.aging"]:
        mm.write(ns, "k", {"old": 1})
        mm.write(ns, "other", [1, 2.5, "three"])
    mm.archive(now=time.time() + 10**6)
    mm.write("test.aging", "fresh", True)
    return mm


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize(("factory", "where"), [(f, w) for _, f, w in BAD_VALUES], ids=[i for i, _, _ in BAD_VALUES])
def test_bad_value_is_refused_and_store_unchanged(
    populated: MemoryManager, root: Path, ns: str, factory: Any, where: str
) -> None:
    mm = populated
    before = snapshot(mm, root)
    for key in ("k", "new"):
        with pytest.raises(InvalidValue) as info:
            mm.write(ns, key, factory())
        err = info.value
        assert isinstance(err, ValueError) and isinstance(err, TypeError) and isinstance(err, MemoryStoreError)
        assert not isinstance(err, ValueTooLarge)
        assert (err.namespace, err.key) == (ns, key)
        assert err.path == where, f"path {err.path!r} does not locate the bad part ({where!r})"
        assert where in str(err)
        assert_pickles(err)
    # update(): fn's bad result is refused, the old value stays.
    with pytest.raises(InvalidValue) as info:
        mm.update(ns, "k", lambda old: factory())
    assert info.value.path == where
    with pytest.raises(InvalidValue):
        mm.update(ns, "new", lambda old: factory())
    assert snapshot(mm, root) == before
    rec = mm.get_record(ns, "k")
    assert rec.value == {"old": 1} and rec.version == 1
    assert mm.read(ns, "new", default="absent") == "absent"
    # The store keeps working after the refusal.
    mm.write(ns, "k", {"new": 2})
    assert mm.read(ns, "k") == {"new": 2}


@pytest.mark.parametrize("ns", NAMESPACES)
def test_extreme_but_valid_values_accepted(mm: MemoryManager, ns: str) -> None:
    values = {
        "u64-max": 2**64 - 1,
        "i64-min": -(2**63),
        "i64-max": 2**63 - 1,
        "neg-zero": -0.0,
        "tiny": 5e-324,
        "huge": 1.7976931348623157e308,
        "third": 1 / 3,
        "deep-250": nested(250),
        "deep-dict-250": _deep_dict(250),
        "unicode": "\u0000 nul, \ud7ff, \U0010ffff, \u2028, \"quotes\", \\",
        "mixed": [True, 1, 1.0, None, "", [], {}],
        "empty-key": {"": 0, " ": 1},
    }
    for key, value in values.items():
        mm.write(ns, key, value)
    for key, value in values.items():
        assert_identical(mm.read(ns, key), value)


def test_nesting_limit_is_consistent(mm: MemoryManager) -> None:
    """The documented limit is orjson's, checked in C on every write: 254
    levels are accepted, 255 and more refused, with the path of the cut."""
    mm.write(WARM, "ok", nested(254))
    assert mm.read(WARM, "ok") == nested(254)
    for depth in (255, 256, 300):
        with pytest.raises(InvalidValue) as info:
            mm.write(WARM, f"d{depth}", nested(depth))
        assert info.value.path == DEEP


def test_enum_members_are_refused(mm: MemoryManager) -> None:
    """An Enum member of any kind (IntEnum, IntFlag,
    StrEnum, str or float mixins) would read back as a plain int, str or
    float, not "exactly as written": it is refused with InvalidValue naming
    where it is, in both tiers, on write and on update."""
    for ns in NAMESPACES:
        for member in ENUM_MEMBERS:
            for value, where in [(member, "$"), ({"x": [member]}, "$.x[0]")]:
                with pytest.raises(InvalidValue) as info:
                    mm.write(ns, "k", value)
                assert info.value.path == where
                assert type(member).__name__ in str(info.value)
                with pytest.raises(InvalidValue):
                    mm.update(ns, "k", lambda old, v=value: v)
        assert mm.read(ns, "k", default="absent") == "absent"


# -- size ----------------------------------------------------------------------------


@pytest.mark.parametrize("tier", ["warm", "hot"])
def test_value_too_large(mm: MemoryManager, root: Path, tier: str) -> None:
    ns = "test.small" if tier == "warm" else "test.hsmall"
    mm.declare(NamespaceSpec(ns, tier=tier, max_value_bytes=100))
    mm.write(ns, "k", "x" * 98)  # exactly 100 bytes encoded
    mm.write(ns, "u", "\u00e9" * 49)  # 98 bytes of UTF-8 plus the quotes: bytes, not characters, count
    before = snapshot(mm, root)
    for key, value, size in [("k", "x" * 99, 101), ("new", "\u00e9" * 50, 102), ("k", ["y" * 300], 304)]:
        with pytest.raises(ValueTooLarge) as info:
            mm.write(ns, key, value)
        err = info.value
        assert isinstance(err, InvalidValue) and isinstance(err, ValueError) and isinstance(err, TypeError)
        assert (err.namespace, err.key, err.path, err.size) == (ns, key, "$", size)
        assert_pickles(err)
        with pytest.raises(ValueTooLarge):
            mm.update(ns, key, lambda old, v=value: v)
    assert snapshot(mm, root) == before
    assert mm.read(ns, "k") == "x" * 98
    assert mm.read(ns, "new") is None


def test_default_size_limit(mm: MemoryManager, root: Path) -> None:
    limit = next(s for s in mm.namespaces() if s.name == WARM).max_value_bytes
    before = snapshot(mm, root)
    with pytest.raises(ValueTooLarge) as info:
        mm.write(WARM, "big", "x" * limit)
    assert info.value.size == limit + 2
    assert snapshot(mm, root) == before


def test_update_fn_error_stores_nothing(populated: MemoryManager, root: Path) -> None:
    before = snapshot(populated, root)

    def boom(old: Any) -> Any:
        raise KeyError("boom")

    for ns in NAMESPACES:
        with pytest.raises(KeyError):
            populated.update(ns, "k", boom)
    assert snapshot(populated, root) == before


# -- round trip ------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=40,
)


def test_json_values_round_trip_exactly(mm: MemoryManager, root: Path) -> None:
    """Any plain JSON value reads back identical (types, -0.0, big ints,
    dict order) from the warm tier (cached, uncached and after reopening),
    the hot tier, and the cold archive."""
    mm.declare(NamespaceSpec("test.aging", ttl=60.0))
    written: dict[str, Any] = {}
    reader = MemoryManager(root, durability="flush", cache_size=0)
    try:

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(value=json_values)
        def check(value: Any) -> None:
            key = f"v{len(written)}"
            written[key] = value
            for ns in (WARM, HOT, "test.aging"):
                mm.write(ns, key, value)
                assert_identical(mm.read(ns, key), value)
                assert orjson.dumps(mm.read(ns, key)) == orjson.dumps(value)
            assert_identical(mm.get_record(HOT, key).value, value)
            assert_identical(reader.read(WARM, key), value)
            assert mm.archive(now=time.time() + 10**6) == {"test.aging": 1}
            rec = mm.get_record("test.aging", key)
            assert rec.tier == "cold"
            assert_identical(rec.value, value)

        check()
    finally:
        reader.close()
    by_key = {r.key: r.value for r in mm.query(WARM)}
    cold = {r.key: r.value for r in mm.query("test.aging", include_cold=True)}
    mm.close()
    with MemoryManager(root, durability="flush") as again:
        for key, value in written.items():
            assert_identical(by_key[key], value)
            assert_identical(cold[key], value)
            assert_identical(again.read(WARM, key), value)
            assert_identical(again.read("test.aging", key), value)
        assert again.check() == []


def _plant(value: Any, member: Any, choice: int) -> tuple[Any, str]:
    """``value`` with one leaf (or, when it has none, the whole of it)
    replaced by ``member``, at a depth picked by ``choice``; and the path of
    the member, spelt as InvalidValue spells it."""
    spots: list[tuple[list[Any], str]] = []  # (route of keys/indexes, path)

    def walk(v: Any, route: list[Any], path: str) -> None:
        if type(v) is dict:
            for k, x in v.items():
                walk(x, route + [k], f"{path}.{k}")
        elif type(v) is list:
            for i, x in enumerate(v):
                walk(x, route + [i], f"{path}[{i}]")
        spots.append((route, path))

    walk(value, [], "$")
    route, path = spots[choice % len(spots)]
    if not route:
        return member, "$"
    copy = orjson.loads(orjson.dumps(value))
    parent = copy
    for step in route[:-1]:
        parent = parent[step]
    parent[route[-1]] = member
    return copy, path


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=json_values, member=st.sampled_from(ENUM_MEMBERS), choice=st.integers(min_value=0, max_value=10**6))
def test_enum_members_at_any_depth_are_refused(mm: MemoryManager, value: Any, member: Any, choice: int) -> None:
    """An Enum member anywhere in an otherwise plain value (any depth, dict
    value or list item) is refused with its path; the plain value itself
    round-trips exactly (hot and warm)."""
    planted, where = _plant(value, member, choice)
    for ns in NAMESPACES:
        with pytest.raises(InvalidValue) as info:
            mm.write(ns, "enum", planted)
        assert info.value.path == where
        mm.write(ns, "plain", value)
        assert_identical(mm.read(ns, "plain"), value)


def test_returned_values_are_copies(mm: MemoryManager) -> None:
    for ns in NAMESPACES:
        mm.write(ns, "k", {"list": [1, 2]})
        got = mm.read(ns, "k")
        got["list"].append(3)
        got["extra"] = True
        assert mm.read(ns, "k") == {"list": [1, 2]}


def _containers(v: Any) -> list[Any]:
    """Every dict and list in ``v`` (``v`` included)."""
    found: list[Any] = []
    if type(v) is dict:
        found.append(v)
        for x in v.values():
            found += _containers(x)
    elif type(v) is list:
        found.append(v)
        for x in v:
            found += _containers(x)
    return found


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_snapshot_and_clone(value: Any) -> None:
    """The hot tier's private copy: ``snapshot`` accepts what
    ``_exact`` accepts, its clone is identical to the value and shares no
    container with the value, the snapshot or another clone."""
    from hrm_memory.core import values

    snap = values.snapshot(value)
    assert snap is not None
    obj, plan = snap
    one, two = values.clone(obj, plan), values.clone(obj, plan)
    assert_identical(one, value)
    assert_identical(two, value)
    seen = [id(c) for v in (value, one, two) for c in _containers(v)]
    assert len(seen) == len(set(seen))
    # An exact copy of a refused value is refused too, at any depth.
    for bad in (float("nan"), float("inf"), (1,), Color.RED, uuid.UUID(int=1)):
        planted, _ = _plant(value, bad, len(seen))
        assert values.snapshot(planted) is None
        assert not values._exact(planted)


def test_hot_reads_share_nothing_with_the_store(mm: MemoryManager) -> None:
    """A hot value changed by its writer after the write, or by a reader in
    any nested container, leaves what the store holds unchanged."""
    value: Any = {"a": [1, {"b": [2.5, "x"], "c": {}}], "d": [[]], "e": "s"}
    mm.write(HOT, "k", value)
    value["a"][1]["b"].append(3)
    value["d"][0].append(1)
    expected = {"a": [1, {"b": [2.5, "x"], "c": {}}], "d": [[]], "e": "s"}
    for _ in range(2):
        got = mm.read(HOT, "k")
        assert_identical(got, expected)
        for c in _containers(got):
            if type(c) is dict:
                c["new"] = 1
            else:
                c.append(0)
    assert_identical(mm.read(HOT, "k"), expected)
    for top in ([[1], 2], [], 5, "s", None):
        mm.write(HOT, "t", top)
        got = mm.read(HOT, "t")
        assert_identical(got, top)
        if type(got) is list:
            got.append(9)
            if got and type(got[0]) is list:
                got[0].append(9)
        assert_identical(mm.read(HOT, "t"), top)


def test_kept_values_hold_only_their_bytes(mm: MemoryManager) -> None:
    """orjson (3.12 and later) returns bytes whose allocation is rounded up,
    4 KiB at least. The hot tier and the warm read cache keep every value they
    store, so what they keep must be an exact-size copy: 500 writes of a
    ~170-byte value grow the traced memory by well under 4 KiB a record
    (a hot write that kept the caller's object would touch a fresh page).
    Two batches are measured and the smaller growth counts: what each record
    keeps comes back in both, while a process-wide table that happens to be
    reallocated in one of them (the interned-string dict) does not."""
    import gc
    import tracemalloc

    value = {"text": "x" * 150, "tags": ["a", "b"], "n": 1}
    for ns in NAMESPACES:
        mm.write(ns, "first", value)  # the namespace's structures exist before measuring
        grown = []
        for batch in range(2):
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for i in range(500):
                    mm.write(ns, f"k{batch}-{i}", value)
                gc.collect()
                grown.append((tracemalloc.get_traced_memory()[0] - before) / 500)
            finally:
                tracemalloc.stop()
        per_record = min(grown)
        assert per_record < 2048, (ns, grown)
        assert mm.read(ns, "k1-499") == value


def test_the_warm_read_cache_keeps_no_record_the_garbage_collector_walks(tmp_path: Path) -> None:
    """The read cache in front of the warm tier keeps up to 100,000 records.
    Kept as NamedTuples (``Stored``), each stayed tracked by the garbage
    collector for good, and every collection that reached them walked them
    all: ~1.6 us of a ~13 us first read of a warm record after a reopen of
    20,000. Kept as plain tuples of strings, ints and bytes, they are untracked
    at their first collection; a hit is a ``Stored`` again."""
    import gc

    from hrm_memory.core.records import Stored

    def tracked_records() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is Stored)

    before = tracked_records()
    with MemoryManager(tmp_path, durability="flush") as mm:
        for i in range(500):
            mm.write(WARM, f"k{i}", {"n": i})  # the write path fills the cache
        assert tracked_records() - before < 50
    with MemoryManager(tmp_path, durability="flush") as mm:  # reopened: the reads below go to the disk
        for i in range(500):
            assert mm.read(WARM, f"k{i}") == {"n": i}
        for i in range(500):
            found = mm.get_record(WARM, f"k{i}")  # from the cache
            assert found is not None and (found.value, found.version, found.tier) == ({"n": i}, 1, "warm")
        assert tracked_records() - before < 50
