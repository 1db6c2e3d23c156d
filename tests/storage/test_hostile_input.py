"""Hostile input and the file system: nothing escapes the root, files are private.

DESIGN guarantee 5: whatever namespace or key a caller passes, the store never
creates, changes or follows a path outside its root, and every file it creates
is 0600 (directories 0700), whatever the process umask.
"""

from __future__ import annotations

import os
import stat
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory import (
    AccessDenied,
    InvalidArgument,
    InvalidKey,
    InvalidNamespace,
    MemoryManager,
    MemoryStoreError,
    NamespaceSpec,
    StorageError,
    UndeclaredNamespace,
)
from hrm_memory.core.spec import MAX_KEY_BYTES
from tests.helpers.damage import damage, find_line
from tests.helpers.errors import assert_pickles
from tests.helpers.layout import assert_layout, files_bytes

NS = "altitude.patterns"
NOTES = "t.notes"

# -- helpers -------------------------------------------------------------------


def tree(base: Path, *, exclude: Path | None = None) -> dict[str, tuple[Any, ...]]:
    """Every path under ``base`` (symlinks not followed) with its kind, and for
    files their size, mtime and mode; the subtree ``exclude`` is left out."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(dirpath)
        if exclude is not None and (here == exclude or exclude in here.parents):
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = here / name
            if exclude is not None and p == exclude:
                continue
            st_ = p.lstat()
            kind = stat.S_IFMT(st_.st_mode)
            if stat.S_ISDIR(st_.st_mode):
                out[str(p)] = (kind, stat.S_IMODE(st_.st_mode))
            else:
                out[str(p)] = (kind, st_.st_size, st_.st_mtime_ns, stat.S_IMODE(st_.st_mode))
    return out


class Outside:
    """Snapshot of everything around the store root that a store must not touch:
    the pytest base dir (every sibling of this test's tmp dir, and the
    current directory, see ``isolated_cwd``) and a few absolute paths a
    path-traversal bug would reach."""

    WATCHED = ["/etc/passwd", "/etc", "/tmp/x", "/x", "/nul.txt"]

    def __init__(self, tmp_path: Path, root: Path) -> None:
        self.base = tmp_path.parent
        self.root = root
        self.before = self._take()

    def _take(self) -> tuple[Any, ...]:
        absolute = {}
        for name in self.WATCHED:
            try:
                s = os.lstat(name)
                absolute[name] = (s.st_mtime_ns, s.st_size, s.st_mode)
            except FileNotFoundError:
                absolute[name] = None
        return (tree(self.base, exclude=self.root), absolute)

    def assert_untouched(self) -> None:
        after = self._take()
        before_tree, after_tree = self.before[0], after[0]
        created = sorted(set(after_tree) - set(before_tree))
        removed = sorted(set(before_tree) - set(after_tree))
        changed = sorted(
            p
            for p in set(before_tree) & set(after_tree)
            # a directory's own mtime changes when the root is created inside it
            if before_tree[p] != after_tree[p] and not stat.S_ISDIR(before_tree[p][0])
        )
        assert not created, f"created outside the root: {created}"
        assert not removed, f"removed outside the root: {removed}"
        assert not changed, f"changed outside the root: {changed}"
        assert after[1] == self.before[1], "an absolute path outside the root changed"


@pytest.fixture(autouse=True)
def isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty current directory inside tmp_path, so that a relative
    path ("../x") resolved against the cwd lands where Outside watches."""
    cwd = tmp_path / "cwd" / "deeper"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    return cwd


# -- hostile namespaces ------------------------------------------------------------

HOSTILE_NAMESPACES = [
    "../x",
    "/etc",
    "/etc/passwd",
    "altitude/../../x",
    "altitude/patterns",
    "altitude\\patterns",
    "altitude.",
    ".x",
    ".altitude.patterns",
    "altitude..patterns",
    "altitude",
    "ALTITUDE.patterns",
    "Altitude.Patterns",
    "altitude.patterns\x00",
    "altitude.pat\x00terns",
    "altitude." + "p" * 10_000,
    "a" * 10_240,
    "\u0430ltitude.patterns",  # Cyrillic а
    "altitude.p\u0430tterns",
    "\uff41\uff4c\uff54\uff49\uff54\uff55\uff44\uff45.patterns",  # fullwidth letters
    "altitude.pat\u200bterns",  # zero-width space
    "altitude.patterns ",
    " altitude.patterns",
    "altitude.patterns\n",
    "con.x",
    "altitude.nul",
    "altitude.com1",
    "altitude.lpt9",
    "prn.aux",
    "",
    ".",
    "..",
    "a.b.c.d.e",
    "1altitude.patterns",
    "altitude.patterns.\ud800",
]

NON_STR_NAMESPACES = [1, None, b"altitude.patterns", 1.5, ("altitude", "patterns")]


@pytest.fixture
def seeded(mm: MemoryManager) -> MemoryManager:
    mm.write(NS, "existing", {"v": 1})
    return mm


def _ops(mm: MemoryManager, ns: Any, called: list[Any]) -> dict[str, Any]:
    def fn(v: Any) -> Any:
        called.append(v)
        return 1

    return {
        "write": lambda: mm.write(ns, "k", 1),
        "read": lambda: mm.read(ns, "k"),
        "get_record": lambda: mm.get_record(ns, "k"),
        "update": lambda: mm.update(ns, "k", fn),
        "delete": lambda: mm.delete(ns, "k"),
        "declare-spec": lambda: mm.declare(NamespaceSpec(ns)),
        "declare-name": lambda: mm.declare(ns),
        "scope-write": lambda: mm.scope("altitude").write(ns, "k", 1),
    }


@pytest.mark.parametrize("ns", HOSTILE_NAMESPACES + NON_STR_NAMESPACES, ids=lambda v: repr(v)[:40])
def test_hostile_namespace_rejected_and_nothing_created(
    seeded: MemoryManager, root: Path, tmp_path: Path, ns: Any
) -> None:
    outside = Outside(tmp_path, root)
    before = files_bytes(root)
    called: list[Any] = []
    for op, call in _ops(seeded, ns, called).items():
        if op == "declare-name" and not isinstance(ns, str):
            continue  # see test_declare_rejects_what_is_not_a_spec_or_name
        with pytest.raises(InvalidNamespace) as info:
            call()
        err = info.value
        assert isinstance(err, ValueError) and isinstance(err, MemoryStoreError), op
        assert not isinstance(err, UndeclaredNamespace), f"{op}: a malformed name is not merely undeclared"
        if op != "scope-write":
            assert err.namespace == ns, op
        assert_pickles(err)
    assert called == [], "update called fn for an invalid namespace"
    # query takes a glob: a hostile one matches nothing (or is refused).
    try:
        found = seeded.query(ns)
    except (InvalidArgument, InvalidNamespace) as exc:
        assert isinstance(exc, ValueError)
    else:
        assert found == []
    try:
        found = seeded.query("*", ns)
    except (InvalidArgument, InvalidNamespace, InvalidKey) as exc:
        assert isinstance(exc, ValueError)
    else:
        assert found == []
    assert files_bytes(root) == before, "a rejected namespace changed the store"
    assert seeded.read(NS, "existing") == {"v": 1}
    assert_layout(root)
    outside.assert_untouched()


def test_unhashable_namespace_is_invalid_namespace(mm: MemoryManager) -> None:
    """A list/dict/set namespace must be an InvalidNamespace (a ValueError), not
    a raw TypeError from a dict lookup."""
    for ns in (["altitude", "patterns"], {"altitude": "patterns"}, {"a"}):
        for op, call in _ops(mm, ns, []).items():
            if op.startswith(("declare", "scope")):
                continue
            with pytest.raises(InvalidNamespace):
                call()


def test_declare_rejects_what_is_not_a_spec_or_name(mm: MemoryManager, root: Path) -> None:
    """declare() takes a NamespaceSpec or a name: anything else is a typed
    ValueError (InvalidNamespace or InvalidArgument), not an AttributeError."""
    before = files_bytes(root)
    for bad in (1, None, b"test.rt", ["test.rt"], {"name": "test.rt"}):
        with pytest.raises((InvalidNamespace, InvalidArgument)) as info:
            mm.declare(bad)
        assert isinstance(info.value, ValueError)
    assert files_bytes(root) == before


def test_undeclared_namespace_is_typed_and_creates_nothing(mm: MemoryManager, root: Path, tmp_path: Path) -> None:
    outside = Outside(tmp_path, root)
    before = files_bytes(root)
    with pytest.raises(UndeclaredNamespace) as info:
        mm.write("altitude.nothere", "k", 1)
    assert isinstance(info.value, InvalidNamespace) and isinstance(info.value, LookupError)
    assert info.value.namespace == "altitude.nothere"
    assert_pickles(info.value)
    with pytest.raises(UndeclaredNamespace):  # a typo in a query is an error, not an empty result
        mm.query("altitude.nothere")
    assert files_bytes(root) == before
    outside.assert_untouched()


@pytest.mark.parametrize("glob", ["../*", "/etc/*", "*/../*", "**/*", "[!a]*", "\x00", "*" * 5000, "warm/*"], ids=lambda v: repr(v)[:30])
def test_hostile_query_globs_create_nothing(seeded: MemoryManager, root: Path, tmp_path: Path, glob: str) -> None:
    outside = Outside(tmp_path, root)
    before = files_bytes(root)
    # Only the seeded key exists: a glob may match it, never anything else. A
    # namespace glob that matches no declared namespace is a typed error.
    for call in (lambda: seeded.query(glob), lambda: seeded.query(NS, glob), lambda: seeded.query("*", glob, include_cold=True)):
        try:
            found = call()
        except (InvalidNamespace, InvalidKey) as exc:
            assert isinstance(exc, ValueError) and isinstance(exc, MemoryStoreError)
            continue
        assert all((r.namespace, r.key, r.value) == (NS, "existing", {"v": 1}) for r in found)
    if "*" not in glob and "[" not in glob:
        with pytest.raises(InvalidNamespace):
            seeded.query(glob)
    assert files_bytes(root) == before
    outside.assert_untouched()


# -- hostile keys ---------------------------------------------------------------------

STORED_KEYS = [
    "../x",
    "../../../../../../etc/passwd",
    "/etc/passwd",
    "..",
    ".",
    "./.",
    "a/b/c",
    "a\\b",
    "~root",
    "$HOME",
    "CON",
    "con",
    "nul.txt",
    "COM1",
    "lpt1.log",
    "00.log",
    "000001.seg",
    "namespaces.json",
    "\u0430ltitude",  # Cyrillic а
    "\uff50\uff41\uff53\uff53\uff57\uff44",  # fullwidth "passwd"
    "pass\u200bwd",  # zero-width space
    "\u202eevil",  # right-to-left override
    "\ufeffbom",
    "e\u0301",  # decomposed é: must stay distinct from the composed one
    "\u00e9",
    "line\u2028sep",
    "\U0001f600",
    " ",
    "\"quoted\"",
    "tab-like \\t",
    "*?[]",
    "a" * MAX_KEY_BYTES,
    "\u00e9" * (MAX_KEY_BYTES // 2),  # exactly MAX_KEY_BYTES UTF-8 bytes
]

REJECTED_KEYS = [
    "",
    "\x00",
    "a\x00b",
    "../\x00",
    "\n",
    "a\nb",
    "a\tb",
    "\r",
    "\x1b[31m",
    "\x7f",
    "\x85",
    "\x9f",
    "\ud800",
    "a\udfffb",
    "a" * (MAX_KEY_BYTES + 1),
    "\u00e9" * (MAX_KEY_BYTES // 2 + 1),
    "x" * 10_240,
    1,
    0,
    None,
    b"x",
    1.5,
    ("a",),
    ["a"],
    True,
]


@pytest.mark.parametrize("key", STORED_KEYS, ids=lambda k: repr(k)[:40])
def test_hostile_key_is_stored_safely_and_reads_back(mm: MemoryManager, root: Path, tmp_path: Path, key: str) -> None:
    outside = Outside(tmp_path, root)
    value = {"key": key, "n": 1}
    mm.write(NS, key, value)
    assert mm.read(NS, key) == value
    rec = mm.get_record(NS, key)
    assert rec is not None and rec.key == key and rec.value == value
    assert [r.key for r in mm.query(NS)] == [key]
    assert mm.update(NS, key, lambda v: {**v, "n": v["n"] + 1}) == {"key": key, "n": 2}
    assert_layout(root, [key])
    mm.close()
    with MemoryManager(root, durability="flush") as again:
        assert again.read(NS, key) == {"key": key, "n": 2}
        assert again.get_record(NS, key).key == key
        assert again.check() == []
        assert again.delete(NS, key) is True
        assert again.read(NS, key, default="gone") == "gone"
    assert_layout(root, [key])
    outside.assert_untouched()


def test_lookalike_keys_stay_distinct(mm: MemoryManager) -> None:
    keys = ["e\u0301", "\u00e9", "CON", "con", "\u0430", "a", "\uff41", "pass\u200bwd", "passwd"]
    for i, key in enumerate(keys):
        mm.write(NS, key, i)
    for i, key in enumerate(keys):
        assert mm.read(NS, key) == i
    assert sorted(r.key for r in mm.query(NS)) == sorted(keys)


@pytest.mark.parametrize("key", REJECTED_KEYS, ids=lambda k: repr(k)[:40])
def test_hostile_key_rejected(seeded: MemoryManager, root: Path, tmp_path: Path, key: Any) -> None:
    outside = Outside(tmp_path, root)
    before = files_bytes(root)
    called: list[Any] = []
    calls = {
        "write": lambda: seeded.write(NS, key, 1),
        "read": lambda: seeded.read(NS, key),
        "get_record": lambda: seeded.get_record(NS, key),
        "update": lambda: seeded.update(NS, key, lambda v: called.append(v) or 1),
        "delete": lambda: seeded.delete(NS, key),
        "hot-write": lambda: seeded.write("altitude.session", key, 1),
        "scope-write": lambda: seeded.scope("altitude").write(NS, key, 1),
    }
    for op, call in calls.items():
        with pytest.raises(InvalidKey) as info:
            call()
        err = info.value
        assert isinstance(err, ValueError) and isinstance(err, MemoryStoreError), op
        assert err.namespace in (NS, "altitude.session"), op
        if not (isinstance(key, str) and len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES):
            assert err.key == key, op
        assert_pickles(err)
    assert called == []
    assert files_bytes(root) == before, "a rejected key changed the store"
    assert seeded.read(NS, "existing") == {"v": 1}
    outside.assert_untouched()


def _key_ok(key: str) -> bool:
    """The documented key contract, independently of the code: a non-empty
    str, at most MAX_KEY_BYTES UTF-8 bytes, no control character (Unicode
    category Cc) and no lone surrogate."""
    if not key:
        return False
    if any(unicodedata.category(ch) == "Cs" for ch in key):
        return False
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return False
    return not any(unicodedata.category(ch) == "Cc" for ch in key)


def test_arbitrary_text_keys_round_trip_or_are_rejected(mm: MemoryManager, root: Path, tmp_path: Path) -> None:
    outside = Outside(tmp_path, root)
    written: dict[str, int] = {}
    any_char = st.characters(codec=None, categories=None)
    keys = st.one_of(
        st.text(alphabet=any_char, max_size=40),
        st.text(alphabet=st.sampled_from("./\\\x00\n\t~:*?[]é\u0430\uff0e\ud800 "), max_size=12),
        st.text(alphabet=st.characters(codec="utf-8"), min_size=250, max_size=600),
    )

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(key=keys)
    def check(key: str) -> None:
        n = len(written)
        if _key_ok(key):
            mm.write(NS, key, n)
            written[key] = n
            assert mm.read(NS, key) == n
            assert mm.get_record(NS, key).key == key
        else:
            with pytest.raises(InvalidKey):
                mm.write(NS, key, n)
            with pytest.raises(InvalidKey):
                mm.read(NS, key)

    check()
    # Every accepted key reads back exactly, also from a fresh process view.
    with MemoryManager(root, durability="flush", cache_size=0) as reader:
        for key, n in written.items():
            assert reader.read(NS, key) == n
        assert {r.key: r.value for r in reader.query(NS)} == written
        assert reader.check() == []
    assert_layout(root)
    outside.assert_untouched()


# -- scopes ---------------------------------------------------------------------------


def test_scope_cannot_write_other_hrm(mm: MemoryManager, root: Path) -> None:
    focus = mm.scope("focus")
    before = files_bytes(root)
    for call in (
        lambda: focus.write(NS, "k", 1),
        lambda: focus.update(NS, "k", lambda v: 1),
        lambda: focus.delete(NS, "k"),
        lambda: focus.write("shared.people", "k", 1),
        lambda: focus.read(NS, "k"),
    ):
        with pytest.raises(AccessDenied) as info:
            call()
        assert isinstance(info.value, PermissionError) and isinstance(info.value, MemoryStoreError)
        assert info.value.hrm == "focus"
        assert_pickles(info.value)
    with pytest.raises(AccessDenied):
        focus.query("altitude.*")
    with pytest.raises(InvalidNamespace):  # validated before the scope is asked
        focus.read("../x", "k")
    assert files_bytes(root) == before
    for bad in ("../x", "Focus", "", "a.b", 1):
        with pytest.raises(InvalidArgument) as info:
            mm.scope(bad)
        assert isinstance(info.value, ValueError) and isinstance(info.value, MemoryStoreError)
        assert_pickles(info.value)


# -- permissions ----------------------------------------------------------------------


def _exercise_every_writer(mm: MemoryManager, root: Path) -> None:
    """Create every kind of file the store makes: warm logs, run notes, locks,
    meta, cold segments, quarantine (a torn tail fixed), compaction output."""
    mm.declare(NamespaceSpec("test.rt"))
    mm.declare(NamespaceSpec("test.aging", ttl=60.0))
    for i in range(30):
        mm.write(NS, f"k{i}", {"i": i})
        mm.write("test.rt", f"k{i}", i)
        mm.write("test.aging", f"k{i}", [i])
    mm.write("altitude.session", "hot", 1)
    assert mm.archive(now=time.time() + 10**6) == {"test.aging": 30}
    assert mm.read("test.aging", "k3") == [3]
    mm.compact(NS)
    # A torn tail repaired by check(fix=True) creates quarantine/.
    log = next((root / "warm" / "test.rt").glob("*.log"))
    with open(log, "ab") as f:
        f.write(b"\n0badc0de [\"p\",\"torn")
    findings = mm.check(fix=True)
    assert [f.kind for f in findings] == ["torn-tail"] and findings[0].fixed
    assert (root / "quarantine").is_dir()
    assert mm.check() == []


def _assert_private(root: Path) -> dict[str, int]:
    seen = {"dir": 0, "file": 0}
    for p in [root, *root.rglob("*")]:
        st_ = p.lstat()
        mode = stat.S_IMODE(st_.st_mode)
        rel = p.relative_to(root).as_posix() or "."
        assert not stat.S_ISLNK(st_.st_mode), rel
        if stat.S_ISDIR(st_.st_mode):
            assert mode == 0o700, f"directory {rel} has mode {mode:o}"
            seen["dir"] += 1
        else:
            assert stat.S_ISREG(st_.st_mode), rel
            assert mode == 0o600, f"file {rel} has mode {mode:o}"
            seen["file"] += 1
    return seen


@pytest.mark.parametrize("mask", [None, 0o000, 0o077, 0o002], ids=lambda m: "inherited" if m is None else f"umask-{m:03o}")
def test_files_0600_dirs_0700_whatever_the_umask(root: Path, mask: int | None) -> None:
    old = os.umask(mask) if mask is not None else None
    try:
        with MemoryManager(root, durability="flush") as mm:
            _exercise_every_writer(mm, root)
            seen = _assert_private(root)
    finally:
        if old is not None:
            os.umask(old)
    # Sanity: the walk really covered every part of the layout.
    for sub in ("warm", "cold", "locks", "meta", "run", "quarantine"):
        assert (root / sub).is_dir(), sub
    assert seen["file"] >= 30
    assert_layout(root)
    _assert_private(root)


# -- symlink attacks --------------------------------------------------------------------


def _bucket_file_of(key: str, scratch: Path) -> str:
    """The warm log file name a key lands in, found by writing it in a scratch store."""
    with MemoryManager(scratch, durability="flush") as mm:
        mm.write(NS, key, 1)
    (name,) = [n for n in os.listdir(scratch / "warm" / NS) if n.endswith(".log")]
    return name


def _plant(root: Path, outside: Path, where: str) -> tuple[str, str]:
    """Plant an attacker's symlink inside the root before the first write;
    return (namespace, key) of a write that would go through it."""
    if where == "warm-namespace-dir":
        (root / "warm").mkdir(parents=True, mode=0o700)
        os.symlink(outside, root / "warm" / NS)
        return NS, "k"
    if where == "warm-bucket-file":
        (root / "warm" / NS).mkdir(parents=True, mode=0o700)
        os.symlink(outside / "victim.txt", root / "warm" / NS / _bucket_file_of("k", root.parent / "scratch"))
        return NS, "k"
    if where == "warm-dir":
        root.mkdir(mode=0o700)
        os.symlink(outside, root / "warm")
        return NS, "k"
    if where == "cold-namespace-dir":
        (root / "cold").mkdir(parents=True, mode=0o700)
        os.symlink(outside, root / "cold" / "test.aging")
        return "test.aging", "k"
    raise AssertionError(where)


@pytest.mark.parametrize("where", ["warm-namespace-dir", "warm-bucket-file", "warm-dir", "cold-namespace-dir"])
def test_symlink_planted_in_root_is_not_followed(tmp_path: Path, root: Path, where: str) -> None:
    """An attacker who can create a symlink inside the root before the first
    write must not get the store to write (or chmod) outside the root: the
    write is refused with a MemoryStoreError, or lands inside the root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_bytes(b"precious\n")
    os.chmod(outside / "victim.txt", 0o644)
    ns, key = _plant(root, outside, where)
    before = tree(outside)
    victim = (outside / "victim.txt").read_bytes()
    spec = NamespaceSpec("test.aging", ttl=60.0)
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NS), spec]) as mm:
        try:
            mm.write(ns, key, {"secret": 1})
            if ns == "test.aging":
                mm.archive(now=time.time() + 10**6)
        except MemoryStoreError:
            pass
        try:
            mm.check(fix=True)
        except MemoryStoreError:
            pass
    assert (outside / "victim.txt").read_bytes() == victim, "the store wrote through a symlink"
    assert tree(outside) == before, f"the store created or changed files outside its root: {sorted(tree(outside))}"


@pytest.mark.parametrize("planted", ["quarantine", "meta", "run", "locks"])
def test_links_planted_as_store_folders_are_never_followed(root: Path, tmp_path: Path, planted: str) -> None:
    """A link planted as quarantine/, meta/, run/ or locks/ is never followed:
    the store writes nothing outside its root (a typed refusal at open is as
    good as one at use)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    with MemoryManager(root, durability="flush", namespaces=[NamespaceSpec(NOTES)]) as mm:
        mm.write(NOTES, "k", {"v": "CANARY-outside"})
    if (root / planted).exists():
        os.rename(root / planted, tmp_path / f"{planted}.moved")
    os.symlink(outside, root / planted)
    try:  # refusing at open (a typed error) is as good as refusing at use
        with MemoryManager(root, durability="flush", locking=True, namespaces=[NamespaceSpec(NOTES)]) as mm:
            attempts = {
                "quarantine": lambda: (_damage_one(root), mm.check(fix=True)),
                "meta": lambda: mm.declare(NamespaceSpec("t.extra")),
                "run": lambda: mm.write(NOTES, "k2", {"v": "CANARY-outside"}),
                "locks": lambda: mm.update(NOTES, "k", lambda v: {"v": "CANARY-outside", "n": 2}),
            }
            attempts[planted]()
    except StorageError as exc:
        assert "symbolic link" in str(exc)
    assert list(outside.iterdir()) == [], f"the store wrote into the linked {planted}/"


def _damage_one(root: Path) -> None:
    path, start, end = find_line(root, NOTES, "k")
    damage(path, {end - 2: path.read_bytes()[end - 2] ^ 0x01})


def test_hostile_keys_in_an_indexed_namespace_are_recalled_and_stay_out_of_file_names(
    mm: MemoryManager, root: Path, tmp_path: Path
) -> None:
    outside = Outside(tmp_path, root)
    for key in STORED_KEYS:
        mm.write("shared.people", key, {"name": "zqhostile person", "key": key})
    found = {h.key for h in mm.recall("zqhostile", namespaces="shared.people", k=1000)}
    assert found == set(STORED_KEYS)
    assert "zqhostile" in mm.context("altitude", budget=100_000).text
    assert_layout(root, list(STORED_KEYS))
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in (root / "index").iterdir())
    outside.assert_untouched()
