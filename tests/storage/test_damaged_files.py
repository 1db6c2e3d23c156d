"""Damage on disk: detected, isolated, typed, quarantined, never silently dropped.

Bytes are damaged in the real files the way a bad disk or a
crash would (flipped bytes, truncation), following the formats documented in
storage/file/warm/tier.py (``\\n<crc32 8 hex> <header JSON>\\t<value JSON>\\n`` lines in
``warm/<ns>/<bb>.log``) and storage/file/cold.py (``HRMc | len u32 BE | crc32 u32
BE | payload`` frames in ``cold/<ns>/<nnnnnn>.seg``).
"""

from __future__ import annotations

import shutil
import time
import zlib
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory import CorruptRecord, MemoryManager, MemoryStoreError, NamespaceSpec
from tests.helpers.damage import damage, find_line, frames, quarantined
from tests.helpers.errors import assert_pickles

WARM_NS = ["altitude.patterns", "focus.slow", "reasoning.strategies"]
VICTIM_NS = "focus.slow"
VICTIM = "victim-record"
AGING = "test.aging"
NOTES = "t.notes"

# -- helpers --------------------------------------------------------------------


def open_mm(root: Path) -> MemoryManager:
    return MemoryManager(root, durability="flush", namespaces=_specs())


def _specs() -> list[NamespaceSpec]:
    return [NamespaceSpec(ns) for ns in WARM_NS] + [NamespaceSpec(AGING, ttl=60.0)]


def populate(root: Path) -> dict[tuple[str, str], Any]:
    """~50 warm records over three namespaces (some overwritten, one deleted),
    the victim written once, last. Returns what each key must read."""
    expected: dict[tuple[str, str], Any] = {}
    with open_mm(root) as mm:
        for i in range(48):
            ns = WARM_NS[i % 3]
            key = f"key-{i:02d}"
            value = {"i": i, "f": i / 7, "s": "v" * (i % 5), "l": [i, None, True]}
            mm.write(ns, key, value)
            expected[(ns, key)] = value
        for i in range(0, 48, 5):  # overwrite a few: superseded lines stay in the logs
            ns = WARM_NS[i % 3]
            value = {"i": i, "second": True}
            mm.write(ns, f"key-{i:02d}", value)
            expected[(ns, f"key-{i:02d}")] = value
        mm.write(WARM_NS[1], "gone", 1)
        mm.delete(WARM_NS[1], "gone")
        expected[(WARM_NS[1], "gone")] = None
        value = {"secret": "ABCDEFGHIJKLMNOP", "n": 12345}
        mm.write(VICTIM_NS, VICTIM, value)
        expected[(VICTIM_NS, VICTIM)] = value
    return expected


def assert_reads(mm: MemoryManager, expected: dict[tuple[str, str], Any], skip: set[tuple[str, str]] = set()) -> None:
    for (ns, key), value in expected.items():
        if (ns, key) in skip:
            continue
        got = mm.read(ns, key, default=None)
        assert orjson.dumps(got) == orjson.dumps(value), f"{ns}/{key}: {got!r} != {value!r}"


# -- warm: flipped bytes ---------------------------------------------------------------------


def test_flipped_value_byte_is_reported_isolated_and_quarantined(root: Path) -> None:
    expected = populate(root)
    path, start, end = find_line(root, VICTIM_NS, VICTIM)
    pos = path.read_bytes().index(b"ABCDEFGH", start)  # inside the value JSON
    damaged = damage(path, {pos + 3: ord("x")})
    bad_line = damaged[start:end]

    with open_mm(root) as mm:
        findings = mm.check()
        assert [(f.kind, f.path, f.namespace, f.fixed) for f in findings] == [
            ("corrupt-record", str(path), VICTIM_NS, False)
        ]
        assert findings[0].extra["offset"] == start and findings[0].extra["length"] == end - start
        for call in (lambda: mm.read(VICTIM_NS, VICTIM), lambda: mm.get_record(VICTIM_NS, VICTIM)):
            with pytest.raises(CorruptRecord) as info:
                call()
            err = info.value
            assert isinstance(err, OSError) and isinstance(err, MemoryStoreError)
            assert (err.namespace, err.key, err.path) == (VICTIM_NS, VICTIM, str(path))
            assert_pickles(err)
        assert_reads(mm, expected, skip={(VICTIM_NS, VICTIM)})
        # A query over the damaged record says so, as read() does, rather than
        # return an incomplete (or superseded) result as if it were whole;
        # the other namespaces query as usual.
        with pytest.raises(CorruptRecord) as info:
            mm.query(VICTIM_NS)
        assert info.value.key == VICTIM
        assert {(r.namespace, r.key) for r in mm.query(WARM_NS[0])} <= set(expected)
        assert quarantined(root) == {}, "check() without fix must not move anything"
        assert path.read_bytes() == damaged, "check() without fix must not change the file"

        fixed = mm.check(fix=True)
        assert [(f.kind, f.path, f.fixed) for f in fixed] == [("corrupt-record", str(path), True)]
        q = quarantined(root)
        assert list(q.values()) == [bad_line], "the damaged bytes must be kept, exactly, under quarantine/"
        assert b"ABCxEFGH" in bad_line
        assert bad_line not in path.read_bytes()
        assert mm.check() == []
        assert_reads(mm, expected, skip={(VICTIM_NS, VICTIM)})
        assert mm.read(VICTIM_NS, VICTIM, default="moved-aside") == "moved-aside"
        mm.write(VICTIM_NS, VICTIM, "rewritten")
        assert mm.read(VICTIM_NS, VICTIM) == "rewritten"
    with open_mm(root) as mm:
        assert mm.check() == []
        assert_reads(mm, {**expected, (VICTIM_NS, VICTIM): "rewritten"})


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, str], Any]]:
    root = tmp_path_factory.mktemp("pristine") / "store"
    expected = populate(root)
    return root, expected


@pytest.fixture
def workcopy(pristine: tuple[Path, dict[tuple[str, str], Any]], tmp_path: Path) -> Path:
    work = tmp_path / "store"
    shutil.copytree(pristine[0], work)
    return work


def _damage_and_verify(
    work: Path, expected: dict[tuple[str, str], Any], changes_in_line: dict[int, int], *, fix: bool = True
) -> None:
    """Apply ``changes_in_line`` (offsets relative to the victim line) to a
    copy of the pristine store, check the invariants of detection and
    repair, then restore the copy."""
    path, start, end = find_line(work, VICTIM_NS, VICTIM)
    original = path.read_bytes()
    changes = {start + off: b for off, b in changes_in_line.items() if original[start + off] != b}
    if not changes:
        return
    damaged = damage(path, changes)
    try:
        with open_mm(work) as mm:
            findings = mm.check()
            assert findings, f"damage {changes_in_line} went unnoticed"
            assert {f.kind for f in findings} == {"corrupt-record"}
            assert {f.path for f in findings} == {str(path)}
            # The damaged key never reads as a value that was never written.
            try:
                got = mm.read(VICTIM_NS, VICTIM)
            except CorruptRecord:
                pass
            else:
                assert got is None, f"damaged record read back as {got!r}"
            assert_reads(mm, expected, skip={(VICTIM_NS, VICTIM)})
            if not fix:
                return
            fixed = mm.check(fix=True)
            assert all(f.fixed for f in fixed) and len(fixed) == len(findings)
            q = quarantined(work)
            for f in findings:
                off, length = f.extra["offset"], f.extra["length"]
                assert damaged[off : off + length] in q.values(), f"bytes at {off}+{length} not quarantined"
            assert mm.check() == []
            assert_reads(mm, expected, skip={(VICTIM_NS, VICTIM)})
    finally:
        path.write_bytes(original)
        shutil.rmtree(work / "quarantine", ignore_errors=True)


def test_every_single_byte_flip_in_a_record_is_caught(
    pristine: tuple[Path, dict[tuple[str, str], Any]], workcopy: Path
) -> None:
    path, start, end = find_line(workcopy, VICTIM_NS, VICTIM)
    line = path.read_bytes()[start:end]
    for i in range(len(line)):
        # Detection at every offset; the (slower) repair at every fifth.
        _damage_and_verify(workcopy, pristine[1], {i: line[i] ^ 0x01}, fix=i % 5 == 0)
        if i % 3 == 0:
            _damage_and_verify(workcopy, pristine[1], {i: line[i] ^ 0x80}, fix=False)


def test_arbitrary_damage_inside_a_record_is_caught(
    pristine: tuple[Path, dict[tuple[str, str], Any]], workcopy: Path
) -> None:
    path, start, end = find_line(workcopy, VICTIM_NS, VICTIM)
    n = end - start

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.dictionaries(
            st.integers(min_value=0, max_value=n - 1),
            st.sampled_from([0x0A, 0x09, 0x00, 0x22, 0x5B, 0x5D, 0x30, 0xFF]) | st.integers(0, 255),
            min_size=1,
            max_size=6,
        )
    )
    def check(changes: dict[int, int]) -> None:
        _damage_and_verify(workcopy, pristine[1], changes)

    check()


def test_damaged_newest_version_does_not_serve_the_superseded_one(root: Path) -> None:
    """When the newest record of a key is damaged so that its key cannot be
    trusted, a read must not quietly return the previous version as current."""
    with open_mm(root) as mm:
        mm.write(VICTIM_NS, VICTIM, {"v": 1})
        mm.write(VICTIM_NS, VICTIM, {"v": 2})
    path, start, end = find_line(root, VICTIM_NS, VICTIM)
    key_at = path.read_bytes().index(VICTIM.encode(), start)
    damage(path, {key_at + 2: path.read_bytes()[key_at + 2] ^ 0x01})  # "victim" -> "vibtim"
    with open_mm(root) as mm:
        assert [f.kind for f in mm.check()] == ["corrupt-record"]
        with pytest.raises(CorruptRecord):
            got = mm.read(VICTIM_NS, VICTIM)
            pytest.fail(f"read returned the superseded version {got!r} as current")


def test_query_over_a_damaged_key_does_not_serve_the_superseded_version(root: Path) -> None:
    """The newest line of a key damaged in its key: read() and query() both
    raise CorruptRecord (query() does not serve version 1 as current); after
    ``check(fix=True)`` they agree again."""
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NOTES)]) as mm:
        mm.write(NOTES, "victim", {"v": 1})
        mm.write(NOTES, "victim", {"v": 2})
    path, start, end = find_line(root, NOTES, "victim")
    key_at = path.read_bytes().index(b"victim", start)
    damage(path, {key_at + 2: path.read_bytes()[key_at + 2] ^ 0x01})
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NOTES)]) as mm:
        with pytest.raises(CorruptRecord):
            mm.read(NOTES, "victim")
        with pytest.raises(CorruptRecord):
            rows = mm.query(NOTES)
            pytest.fail(f"query served {[r.value for r in rows]}")
        mm.check(fix=True)  # the damage goes to quarantine; read and query agree again
        assert [(r.key, r.value) for r in mm.query(NOTES)] == [("victim", mm.read(NOTES, "victim"))]


# -- warm: torn tail ---------------------------------------------------------------------------


def _multi_record_file(root: Path) -> tuple[str, str]:
    """(namespace, key) of a key whose log file holds the most lines (at
    least two), so that truncating its newest line leaves other complete
    records in the same file."""
    best = None
    for ns in WARM_NS:
        for path in sorted((root / "warm" / ns).glob("*.log")):
            lines = [ln for ln in path.read_bytes().split(b"\n") if ln]
            if best is None or len(lines) > best[0]:
                header = orjson.loads(lines[0][9 : lines[0].index(b"\t")])
                best = (len(lines), ns, header[1])
    assert best is not None and best[0] >= 2
    return best[1], best[2]


@pytest.mark.parametrize("cut", ["one-byte", "in-crc", "middle", "before-closing-newline"])
def test_torn_tail_is_reported_and_repaired(root: Path, cut: str) -> None:
    expected = populate(root)
    ns, key = _multi_record_file(root)
    previous = expected[(ns, key)]
    with open_mm(root) as mm:
        mm.write(ns, key, {"torn": "t" * 100})
    path, start, end = find_line(root, ns, key)
    data = path.read_bytes()
    assert end == len(data) - 1, "the newest record is the last line"
    keep = {"one-byte": start + 1, "in-crc": start + 4, "middle": (start + end) // 2, "before-closing-newline": end}[cut]
    path.write_bytes(data[:keep])
    tail = data[start:keep]

    with open_mm(root) as mm:
        findings = mm.check()
        assert [(f.kind, f.path, f.namespace, f.fixed) for f in findings] == [("torn-tail", str(path), ns, False)]
        # An unfinished write never happened: the previous version reads.
        assert_reads(mm, expected)
        assert mm.read(ns, key) == previous
        fixed = mm.check(fix=True)
        assert all(f.fixed for f in fixed) and len(fixed) == len(findings)
        assert list(quarantined(root).values()) == [tail]
        assert mm.check() == []
        assert path.read_bytes().endswith(b"\n")
        assert_reads(mm, expected)
        mm.write(ns, key, "after")
    with open_mm(root) as mm:
        assert mm.check() == []
        assert_reads(mm, {**expected, (ns, key): "after"})


def test_write_after_torn_tail_is_not_glued_to_it(root: Path) -> None:
    """A crashed writer's fragment is moved aside by the next write to that
    file (here from a fresh manager), never joined to the new record."""
    expected = populate(root)
    ns, key = _multi_record_file(root)
    with open_mm(root) as mm:
        mm.write(ns, key, {"torn": "t" * 100})
    path, start, end = find_line(root, ns, key)
    data = path.read_bytes()
    path.write_bytes(data[: (start + end) // 2])
    with open_mm(root) as mm:
        mm.write(ns, key, {"next": 1})
        assert mm.read(ns, key) == {"next": 1}
        assert mm.check() == []
        assert list(quarantined(root).values()) == [data[start : (start + end) // 2]]
    with open_mm(root) as mm:
        assert_reads(mm, {**expected, (ns, key): {"next": 1}})


# -- cold ------------------------------------------------------------------------------------------


def populate_cold(root: Path) -> tuple[dict[tuple[str, str], Any], Path, list[tuple[int, int]]]:
    """Two archive batches (so two frames), plus warm data. Returns the expected
    values, the segment and its frames."""
    expected = populate(root)
    now = time.time()
    with open_mm(root) as mm:
        for batch in ("a", "b"):
            for i in range(10):
                value = {"batch": batch, "i": i, "pad": batch * 40}
                mm.write(AGING, f"{batch}{i}", value)
                expected[(AGING, f"{batch}{i}")] = value
            assert mm.archive(now=now + 10**6) == {AGING: 10}
        mm.write(AGING, "fresh", "warm")
        expected[(AGING, "fresh")] = "warm"
        assert mm.check() == []
    (seg,) = (root / "cold" / AGING).glob("*.seg")
    fr = frames(seg)
    assert len(fr) == 2
    return expected, seg, fr


def _damage_cold(seg: Path, fr: list[tuple[int, int]], how: str) -> tuple[int, bytes, set[str], set[str]]:
    """Damage the archive; return (damaged frame offset, the damaged bytes,
    keys that become unreadable, keys that must still read)."""
    a = {f"a{i}" for i in range(10)}
    b = {f"b{i}" for i in range(10)}
    data = seg.read_bytes()
    if how == "flip":
        off, length = fr[0]
        pos = off + 12 + (length - 12) // 2
        damaged = damage(seg, {pos: data[pos] ^ 0x55})
        return off, damaged[off : off + length], a, b
    if how == "truncate":
        off, length = fr[1]
        seg.write_bytes(data[: off + length // 2])
        return off, data[off : off + length // 2], b, a
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_damaged_archive_frame_is_reported_isolated_and_quarantined(root: Path, how: str) -> None:
    expected, seg, fr = populate_cold(root)
    off, bad, lost, kept = _damage_cold(seg, fr, how)
    with open_mm(root) as mm:
        findings = mm.check()
        frame_findings = [f for f in findings if f.kind == "corrupt-frame"]
        assert [(f.path, f.namespace, f.fixed, f.extra["offset"]) for f in frame_findings] == [
            (str(seg), AGING, False, off)
        ]
        assert {f.kind for f in findings} <= {"corrupt-frame", "dangling-archive-marker"}
        for key in sorted(lost):
            with pytest.raises(CorruptRecord) as info:
                mm.read(AGING, key)
            err = info.value
            assert isinstance(err, OSError) and isinstance(err, MemoryStoreError)
            assert (err.namespace, err.key, err.path) == (AGING, key, str(seg))
            assert_pickles(err)
        assert_reads(mm, expected, skip={(AGING, k) for k in lost})
        for key in kept:
            assert mm.get_record(AGING, key).tier == "cold"
        cold_rows = {r.key: r.value for r in mm.query(AGING, include_cold=True)}
        for key, value in cold_rows.items():
            assert value == expected[(AGING, key)]
        assert kept <= set(cold_rows)
        assert quarantined(root) == {}

        fixed = mm.check(fix=True)
        assert [(f.path, f.fixed) for f in fixed if f.kind == "corrupt-frame"] == [(str(seg), True)]
        q = quarantined(root)
        assert list(q.values()) == [bad], "the damaged frame bytes must be kept, exactly, under quarantine/"
        assert not [f for f in mm.check() if f.kind == "corrupt-frame"]
        assert_reads(mm, expected, skip={(AGING, k) for k in lost})
    with open_mm(root) as mm:
        assert not [f for f in mm.check() if f.kind == "corrupt-frame"]
        assert_reads(mm, expected, skip={(AGING, k) for k in lost})
        # Archiving keeps working after the repair.
        mm.write(AGING, "later", 1)
        mm.archive(now=time.time() + 10**6)
        assert mm.get_record(AGING, "later").tier == "cold"


@pytest.mark.parametrize(
    "payload",
    [b"not zlib at all", zlib.compress(b"\xc1 not msgpack"), zlib.compress(msgpack.packb([[1, 2], "x"]))],
    ids=["not-zlib", "not-msgpack", "not-records"],
)
def test_archive_frame_with_a_valid_crc_but_bad_payload_is_typed(root: Path, payload: bytes) -> None:
    """A cold frame whose payload passes its crc32 but is not zlib, not msgpack
    or not records: read() raises CorruptRecord, check() reports a
    ``corrupt-frame`` and ``check(fix=True)`` clears it."""
    from hrm_memory.storage.file import cold

    aging = "t.aging"
    specs = [NamespaceSpec(aging, ttl=60.0)]
    with MemoryManager(root, durability="flush", namespaces=specs) as mm:
        mm.write(aging, "k", {"v": 1})
        assert mm.archive(now=time.time() + 10**6) == {aging: 1}
    (seg,) = (root / "cold" / aging).glob("*.seg")
    seg.write_bytes(cold._HEAD.pack(cold.MAGIC, len(payload), zlib.crc32(payload)) + payload)
    with MemoryManager(root, durability="flush", namespaces=specs) as mm:
        with pytest.raises(CorruptRecord):
            mm.read(aging, "k")
        findings = mm.check()
        assert "corrupt-frame" in {f.kind for f in findings}
        mm.check(fix=True)
        assert mm.check() == []


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_check_is_clean_after_fixing_a_damaged_archive(root: Path, how: str) -> None:
    """check(fix=True) promises that every other record reads again and the
    findings say fixed: afterwards check() must report nothing. The warm
    markers of the records lost with the frame must not keep the store
    'damaged' for ever (the CLI would exit 4 after every check --fix)."""
    expected, seg, fr = populate_cold(root)
    _off, _bad, lost, _kept = _damage_cold(seg, fr, how)
    with open_mm(root) as mm:
        fixed = mm.check(fix=True)
        assert all(f.fixed for f in fixed), [str(f) for f in fixed if not f.fixed]
        assert mm.check() == []
        assert_reads(mm, expected, skip={(AGING, k) for k in lost})


# -- meta -----------------------------------------------------------------------------------------


def _declared_store(root: Path) -> bytes:
    with MemoryManager(root, durability="flush") as mm:
        mm.declare(NamespaceSpec("test.rt", ttl=3600.0, description="run time"))
        mm.write("test.rt", "k", 1)
    return (root / "meta" / "namespaces.json").read_bytes()


@pytest.mark.parametrize("content", ["truncated", "garbage", "binary", "empty"])
def test_unparsable_meta_namespaces_is_a_clear_error_on_open(root: Path, content: str) -> None:
    good = _declared_store(root)
    meta = root / "meta" / "namespaces.json"
    bad = {"truncated": good[: len(good) // 2], "garbage": b"{not json", "binary": b"\xff\xfe\x00\x01", "empty": b""}[
        content
    ]
    meta.write_bytes(bad)
    with pytest.raises(MemoryStoreError) as info:
        MemoryManager(root, durability="flush")
    assert "namespaces.json" in str(info.value)
    assert meta.read_bytes() == bad, "a damaged declaration file must not be reset or rewritten"
    meta.write_bytes(good)
    with MemoryManager(root, durability="flush") as mm:
        assert mm.read("test.rt", "k") == 1


def test_wrongly_shaped_meta_namespaces_is_not_silently_ignored(root: Path) -> None:
    """Valid JSON of the wrong shape is damage too: opening must raise a
    MemoryStoreError (not treat the declarations as empty, which would let
    the next declare() overwrite them, and not an AttributeError)."""
    _declared_store(root)
    meta = root / "meta" / "namespaces.json"
    problems = []
    for bad in (b"[]", b"null", b"42", b'"test.rt"', b'{"test.rt": 1}', b'{"test.rt": ["test.rt"]}'):
        meta.write_bytes(bad)
        try:
            with MemoryManager(root, durability="flush") as mm:
                mm.declare(NamespaceSpec("test.other"))
        except MemoryStoreError:
            pass
        except Exception as exc:  # noqa: BLE001 - the point is which type escapes
            problems.append(f"{bad!r}: untyped {type(exc).__name__}: {exc}")
        else:
            problems.append(f"{bad!r}: opened without error")
        if meta.read_bytes() != bad:
            problems.append(f"{bad!r}: file was rewritten to {meta.read_bytes()[:60]!r}")
    assert not problems, "\n".join(problems)


# -- layout damage ------------------------------------------------------------------------------------


def test_namespace_path_replaced_by_a_file(root: Path) -> None:
    """A stray file where a namespace directory belongs: operations raise a
    typed error (a MemoryStoreError that is an OSError) and check() reports
    the stray file instead of crashing."""
    expected = populate(root)
    ns_dir = root / "warm" / "altitude.patterns"
    shutil.rmtree(ns_dir)
    ns_dir.write_bytes(b"not a directory")
    with open_mm(root) as mm:
        for call in (
            lambda: mm.write("altitude.patterns", "k", 1),
            lambda: mm.read("altitude.patterns", "key-00"),
            lambda: mm.query("altitude.patterns"),
        ):
            with pytest.raises(MemoryStoreError) as info:
                call()
            assert isinstance(info.value, OSError)
        findings = mm.check()
        assert [(f.kind, f.path) for f in findings] == [("stray-file", str(ns_dir))]
        assert_reads(mm, {k: v for k, v in expected.items() if k[0] != "altitude.patterns"})
