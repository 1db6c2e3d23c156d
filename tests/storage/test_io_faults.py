"""Fault injection with real files: disk full, read-only root, permission
denied, a bucket file or lock file removed underneath, stale and held locks.

Every failure must surface as a typed error (DESIGN: every error derives from
``MemoryStoreError``; disk refusals are ``StorageError``, an ``OSError`` with
the errno; lock waits end in ``LockTimeout``, a ``TimeoutError``), must leave
every acknowledged record readable and ``check()`` clean.

How the faults are made (the sandbox runs tests as root, and root ignores
file modes):

- disk full: a 512 KiB tmpfs of its own (``mount -t tmpfs -o size=512k``);
- read-only root: that tmpfs remounted read-only (``mount -o remount,ro``);
- permission denied: the store is handed to ``nobody`` (uid 65534) and used by
  a worker started through ``setpriv`` as that user, with one bucket file
  0400 and one 0000.

Each test is skipped, with the reason, where the sandbox does not allow it.
"""

from __future__ import annotations

import base64
import errno
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hrm_memory.storage.file.warm import tier as warm_tier

from hrm_memory import LockTimeout, MemoryManager, MemoryStoreError, StorageError
from hrm_memory.storage.file.warm.tier import bucket_of
from tests.helpers.mp_workers import REPO, SPECS, Peer

NS = "t.fault"


# -- helpers -------------------------------------------------------------------------------


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount small tmpfs file systems of their own; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        mnt = tmp_path / f"mnt{len(mounted)}"
        mnt.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        r = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mnt))
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in reversed(mounted):
        if _run("umount", str(mnt)).returncode != 0:
            _run("umount", "-l", str(mnt))


def remount(mnt: Path, mode: str) -> None:
    r = _run("mount", "-o", f"remount,{mode}", str(mnt))
    if r.returncode != 0:
        pytest.skip(f"cannot remount {mode}: {r.stderr.strip()}")


def summary(problems: list[str]) -> str:
    """The problems, similar ones (differing only in key names or paths) counted once."""
    groups: dict[str, list[str]] = {}
    for p in problems:
        shape = re.sub(r"'[^']*'|\bk\d+\b|\d{3,}", "#", p)
        groups.setdefault(shape, []).append(p)
    return "\n".join(f"{g[0]}" + (f"  [and {len(g) - 1} more like it]" if len(g) > 1 else "") for g in groups.values())


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}(errno={getattr(exc, 'errno', None)}): {exc}"


def expect_storage_error(problems: list[str], label: str, fn: Callable[[], Any], *errnos: int) -> None:
    """``fn`` must raise StorageError with one of ``errnos``; note any other outcome."""
    try:
        fn()
    except StorageError as exc:
        if exc.errno not in errnos:
            problems.append(f"{label}: StorageError with errno {exc.errno}, expected {errnos}: {exc}")
    except Exception as exc:  # noqa: BLE001 - the point is to report what escaped
        problems.append(f"{label}: untyped {describe(exc)}")
    else:
        problems.append(f"{label}: no error")


# -- disk full -----------------------------------------------------------------------------------


def test_disk_full_raises_enospc_and_keeps_every_acknowledged_record(tmpfs: Callable[[str], Path]) -> None:
    mnt = tmpfs("512k")
    ballast = mnt / "ballast"
    ballast.write_bytes(b"b" * 160 * 1024)  # freed at the end to make room again
    root = mnt / "store"
    acked: dict[str, Any] = {}
    problems: list[str] = []
    failures = 0
    with MemoryManager(root, durability="fsync", namespaces=SPECS) as mm:
        for i in range(4000):
            key = f"k{i % 500}"  # new keys (new buckets) and overwrites
            value = {"i": i, "pad": "p" * 700}
            try:
                mm.write(NS, key, value)
            except StorageError as exc:
                failures += 1
                if exc.errno != errno.ENOSPC:
                    problems.append(f"write {key}: errno {exc.errno}, expected ENOSPC")
                # "The store is unchanged": the failed write left the old record.
                if mm.read(NS, key) != acked.get(key):
                    problems.append(f"write {key} raised, yet the store changed")
                if failures >= 40:
                    break
            except Exception as exc:  # noqa: BLE001
                failures += 1
                problems.append(f"write {key}: untyped {describe(exc)}")
                if mm.read(NS, key) != acked.get(key):
                    problems.append(f"write {key} raised, yet the store changed")
                    acked[key] = mm.read(NS, key)  # keep later checks about other keys meaningful
                if failures >= 40:
                    break
            else:
                acked[key] = value
        assert failures, "the file system never filled up"
        assert len(acked) > 50, "almost nothing fitted; the test proves little"
        # update and compaction on a full disk fail typed, and change nothing.
        some = next(iter(acked))
        expect_storage_error(
            problems, "update", lambda: mm.update(NS, some, lambda v: {**v, "pad": "q" * 5000}), errno.ENOSPC
        )
        if mm.read(NS, some) != acked[some]:
            problems.append("a failed update changed the record")
        try:
            mm.compact()
        except StorageError as exc:
            if exc.errno != errno.ENOSPC:
                problems.append(f"compact: errno {exc.errno}")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"compact: untyped {describe(exc)}")
        leftovers = [p.name for p in (root / "warm" / NS).iterdir() if p.name.startswith(".") and p.name != ".gen"]
        if leftovers:
            problems.append(f"temporary files left in the namespace after a failed compaction: {leftovers}")
        wrong = [k for k, v in acked.items() if mm.read(NS, k) != v]
        if wrong:
            problems.append(f"acknowledged records lost or changed: {wrong[:5]}")
        findings = [str(f) for f in mm.check()]
        if findings:
            problems.append(f"check() after disk full: {findings}")
    # A fresh process view of the same bytes.
    with MemoryManager(root, durability="fsync", namespaces=SPECS) as mm:
        wrong = [k for k, v in acked.items() if mm.read(NS, k) != v]
        if wrong:
            problems.append(f"reopened: acknowledged records lost or changed: {wrong[:5]}")
        if len(mm.query(NS)) != len(acked):
            problems.append("reopened: query count differs from the acknowledged keys")
        # Free space: writes work again.
        ballast.unlink()
        try:
            mm.write(NS, "after", {"ok": True})
            mm.write(NS, some, {"ok": "again"})
            mm.update(NS, "after", lambda v: {**v, "n": 1})
        except Exception as exc:  # noqa: BLE001
            problems.append(f"after freeing space, writes still fail: {describe(exc)}")
        else:
            assert mm.read(NS, "after") == {"ok": True, "n": 1}
            assert mm.read(NS, some) == {"ok": "again"}
        findings = [str(f) for f in mm.check()]
        if findings:
            problems.append(f"check() after freeing space: {findings}")
    print(f"\n[disk full] {len(acked)} records fitted; {failures} writes refused")
    assert not problems, summary(problems)


# -- a write the file system refuses, across a process boundary -----------------------------


_REFUSED_WRITER = """
import base64, os, pickle, resource, signal, sys
from hrm_memory import MemoryManager
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
with MemoryManager(sys.argv[1], durability="flush") as mm:
    mm.write("altitude.patterns", "small", 1)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
    try:
        mm.write("altitude.patterns", "big", "x" * 200_000)
    except Exception as exc:
        print(type(exc).__name__, exc.errno, file=sys.stderr)
        sys.stdout.write(base64.b64encode(pickle.dumps(exc)).decode())
"""


def test_storage_error_crosses_a_process_boundary_with_errno(root: Path) -> None:
    """A write the file system refuses (a worker process hits its file-size
    limit: a short write, as on a full disk) raises StorageError with errno;
    sent to the parent as a pickle it keeps type, message, path and errno."""
    proc = subprocess.run(
        [sys.executable, "-c", _REFUSED_WRITER, str(root)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    name, errno_text = proc.stderr.split()
    assert name == "StorageError" and errno_text.isdigit(), proc.stderr
    err = pickle.loads(base64.b64decode(proc.stdout))
    assert type(err) is StorageError and isinstance(err, OSError) and isinstance(err, MemoryStoreError)
    assert err.path.startswith(str(root / "warm" / "altitude.patterns"))
    assert err.errno == int(errno_text), f"errno lost in the pickle round trip: {err.errno!r} != {errno_text}"
    # The refused write left nothing behind: the store is sound and complete.
    with MemoryManager(root, durability="flush") as mm:
        assert mm.check() == []
        assert mm.read("altitude.patterns", "small") == 1
        assert mm.read("altitude.patterns", "big") is None


# -- read-only root --------------------------------------------------------------------------------


def test_read_only_root_reads_work_writes_raise_typed(tmpfs: Callable[[str], Path]) -> None:
    mnt = tmpfs("4m")
    root = mnt / "store"
    data = {f"k{i}": {"i": i} for i in range(60)}
    with MemoryManager(root, locking=True, namespaces=SPECS) as mm:
        for k, v in data.items():
            mm.write(NS, k, v)
    remount(mnt, "ro")
    problems: list[str] = []
    try:
        for locking in (False, True):
            tag = f"locking={locking}"
            try:
                mm = MemoryManager(root, locking=locking, lock_timeout=1.0, namespaces=SPECS)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{tag}: opening a read-only store failed: {describe(exc)}")
                continue
            try:
                for label, fn in [
                    ("read", lambda: [mm.read(NS, k) for k in data] == list(data.values())),
                    ("query", lambda: len(mm.query(NS)) == len(data)),
                ]:
                    try:
                        if not fn():
                            problems.append(f"{tag}: {label} returned wrong data")
                    except Exception as exc:  # noqa: BLE001
                        problems.append(f"{tag}: {label} failed: {describe(exc)}")
                for label, fn in [
                    ("write", lambda: mm.write(NS, "k1", "new")),
                    ("write new key", lambda: mm.write(NS, "fresh", "new")),
                    ("update", lambda: mm.update(NS, "k2", lambda v: v)),
                    ("delete", lambda: mm.delete(NS, "k3")),
                    ("declare", lambda: mm.declare("t.other")),
                    ("compact", lambda: mm.compact()),
                ]:
                    expect_storage_error(problems, f"{tag}: {label}", fn, errno.EROFS)
                try:
                    if [mm.read(NS, k) for k in data] != list(data.values()):
                        problems.append(f"{tag}: reads after the failed writes returned wrong data")
                    findings = [str(f) for f in mm.check()]
                    if findings:
                        problems.append(f"{tag}: check() on a read-only store: {findings}")
                except Exception as exc:  # noqa: BLE001
                    problems.append(f"{tag}: reads/check after the failed writes: {describe(exc)}")
            finally:
                try:
                    mm.close()
                except Exception as exc:  # noqa: BLE001
                    problems.append(f"{tag}: close() raised {describe(exc)}")
    finally:
        remount(mnt, "rw")
    with MemoryManager(root, namespaces=SPECS) as mm:
        assert [mm.read(NS, k) for k in data] == list(data.values())
        assert mm.check() == []
    assert not problems, summary(problems)


# -- permission denied ----------------------------------------------------------------------------------


NOBODY = 65534


@pytest.fixture
def nobody_root() -> Iterator[Path]:
    """A store directory outside pytest's private (0700) temp dir, so that an
    unprivileged worker can reach it; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to hand a store to another user")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed: cannot start a worker as another user")
    # The worker runs this checkout's code as nobody: when the checkout sits in
    # a directory nobody cannot traverse (a 0700 home, any mktemp -d), it
    # cannot even import it. Probe exactly that.
    probe = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         sys.executable, "-c", "import hrm_memory, tests.helpers.mp_workers"],
        capture_output=True, text=True, cwd=REPO,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"uid {NOBODY} cannot run this checkout's code (a parent directory it cannot traverse?): {last}")
    base = Path(tempfile.mkdtemp(prefix="hrm-perm-"))
    try:
        yield base / "store"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_permission_denied_on_data_files_is_typed(nobody_root: Path) -> None:
    root = nobody_root
    ro_key, locked_key = "k1", "k2"
    assert bucket_of(ro_key) != bucket_of(locked_key)
    free_key = next(k for k in (f"f{i}" for i in range(1000)) if bucket_of(k) not in (bucket_of(ro_key), bucket_of(locked_key)))
    with MemoryManager(root, locking=True, namespaces=SPECS) as mm:
        for k in (ro_key, locked_key, free_key):
            mm.write(NS, k, {"k": k})
    _run("chown", "-R", f"{NOBODY}:{NOBODY}", str(root.parent))
    (root / "warm" / NS / f"{bucket_of(ro_key):02x}.log").chmod(0o400)
    (root / "warm" / NS / f"{bucket_of(locked_key):02x}.log").chmod(0o000)
    peer = Peer(root, "--locking", prefix=["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"])
    problems: list[str] = []
    try:
        assert peer.call("uid") == NOBODY
        # A read-only (0400) bucket: reads work, a write is refused with EACCES.
        got = peer.ask("read", NS, ro_key)
        if got != {"ok": {"k": ro_key}}:
            problems.append(f"read of a 0400 bucket: {got}")
        got = peer.ask("write", NS, ro_key, "new")
        if not (got.get("err") == "StorageError" and got.get("errno") in (errno.EACCES, errno.EPERM)):
            problems.append(f"write to a 0400 bucket: expected StorageError EACCES, got {got}")
        # An unreadable (0000) bucket: typed errors, not a raw PermissionError.
        for cmd in (["read", NS, locked_key], ["write", NS, locked_key, "new"]):
            got = peer.ask(*cmd)
            if not (got.get("err") == "StorageError" and got.get("errno") in (errno.EACCES, errno.EPERM)):
                problems.append(f"{cmd[0]} of a 0000 bucket: expected StorageError EACCES, got {got}")
        # Other buckets are unaffected.
        if peer.ask("write", NS, free_key, "newer") != {"ok": None} or peer.ask("read", NS, free_key) != {"ok": "newer"}:
            problems.append("a bucket with normal permissions stopped working")
        # check() reports the unreadable file (a finding), or fails typed; it must not crash untyped.
        got = peer.ask("check")
        if "err" in got:
            if not got.get("typed"):
                problems.append(f"check() with an unreadable bucket: untyped {got}")
        elif not any(f"{bucket_of(locked_key):02x}.log" in f for f in got["ok"]):
            problems.append(f"check() does not report the unreadable bucket: {got['ok']}")
    finally:
        peer.close()
    # Nothing was lost for the owner (root).
    (root / "warm" / NS / f"{bucket_of(locked_key):02x}.log").chmod(0o600)
    (root / "warm" / NS / f"{bucket_of(ro_key):02x}.log").chmod(0o600)
    with MemoryManager(root, namespaces=SPECS) as mm:
        assert mm.read(NS, ro_key) == {"k": ro_key}
        assert mm.read(NS, locked_key) == {"k": locked_key}
        assert mm.check() == []
    assert not problems, summary(problems)


# -- files removed underneath --------------------------------------------------------------------------


def test_bucket_file_removed_underneath_open_managers(root: Path) -> None:
    keys = [f"k{i}" for i in range(200)]
    victim_bucket = bucket_of("k1")
    lost = {k for k in keys if bucket_of(k) == victim_bucket}
    with MemoryManager(root, locking=True, durability="flush", namespaces=SPECS) as mm:
        for k in keys:
            mm.write(NS, k, {"k": k})
        assert all(mm.read(NS, k) == {"k": k} for k in keys)  # all cached, descriptors open
        peer = Peer(root, "--locking")
        try:
            assert peer.call("read", NS, "k1") == {"k": "k1"}  # cached in the other process too
            (root / "warm" / NS / f"{victim_bucket:02x}.log").unlink()
            # A removal by hand moves no change counter (storage/file/warm/tier.py,
            # generations): readers notice it at their next full check.
            time.sleep(warm_tier.FULL_CHECK_SECONDS + 0.1)
            for k in keys:
                assert mm.read(NS, k) == (None if k in lost else {"k": k}), k
            assert {r.key for r in mm.query(NS)} == set(keys) - lost
            assert peer.call("read", NS, "k1") is None
            # Writing re-creates the bucket; the history went with the file.
            mm.write(NS, "k1", "again")
            assert peer.call("read", NS, "k1") == "again"
            rec = mm.get_record(NS, "k1")
            assert rec is not None and rec.version == 1
            peer.call("write", NS, "k1", "from peer")
            assert mm.read(NS, "k1") == "from peer"
            assert peer.call("check") == []
        finally:
            peer.close()
        assert mm.check() == []


def test_lock_file_deleted_while_held(root: Path) -> None:
    """flock locks an inode, not a name. Deleting the lock file while a process
    holds it lets the next locker create a new file and lock that: both hold
    "the" lock at once, so updates can be lost for as long as the old holder
    keeps it. Records stay whole (each is one append) and check() stays clean;
    once the old holder lets go, everyone uses the new file and exclusion is back."""
    with MemoryManager(root, locking=True, durability="flush", namespaces=SPECS) as mm:
        mm.write(NS, "n", 0)
        peer = Peer(root, "--locking", "--lock-timeout", "5")
        try:
            peer.call("hold", NS)
            lock_file = root / "locks" / f"{NS}.lock"
            assert lock_file.exists()
            lock_file.unlink()
            t0 = time.monotonic()
            mm.write(NS, "x", "while the other process holds the old lock")
            waited = time.monotonic() - t0
            # Documented behaviour (docs/guarantees.md): no exclusion against the old holder.
            # Waiting for the old holder would take the whole 10 s lock timeout;
            # 3 s leaves room for a loaded machine without blurring the two.
            assert waited < 3.0, f"the second locker waited {waited:.2f} s: behaviour changed, update the docs"
            # Both now run updates at the same time, each "holding the lock".
            peer.send("bump", NS, "n", 300)
            for _ in range(300):
                mm.update(NS, "n", lambda v: v + 1)
            bumped = peer.receive()
            assert "ok" in bumped, bumped
            final = mm.read(NS, "n")
            assert 300 <= final <= 600
            assert all(isinstance(r.value, (int, str)) for r in mm.query(NS))
            # No record is damaged. The one finding lost exclusion can leave:
            # both writers appending the same line (same version, value and
            # microsecond stamp), which check() cannot tell from an old line
            # appended again (seen once in ~10 runs on a loaded machine).
            # check(fix=True) drops the repeat and keeps the newest version.
            findings = mm.check()
            assert {f.kind for f in findings} <= {"replayed-record"}, findings
            assert all(f.extra["key"] == "n" for f in findings), findings
            if findings:
                mm.check(fix=True)
                assert 300 <= mm.read(NS, "n") <= 600
            assert mm.check() == []
            assert peer.call("check") == []
            peer.call("release")
            # The old inode is gone from every path: the next holder locks the new file.
            peer.call("hold", NS)
            with MemoryManager(root, locking=True, lock_timeout=0.2, namespaces=SPECS) as other:
                with pytest.raises(LockTimeout):
                    other.write(NS, "y", 1)
            peer.call("release")
        finally:
            peer.close()
        print(f"\n[lock file deleted] 2 x 300 updates while both held a lock: final {final} (600 if none lost)")


def test_stale_lock_of_a_killed_process_is_released(root: Path) -> None:
    with MemoryManager(root, locking=True, durability="flush", namespaces=SPECS) as mm:
        mm.write(NS, "k", 1)
    peer = Peer(root, "--locking")
    peer.call("hold", NS)
    peer.kill()  # SIGKILL while holding the lock
    with MemoryManager(root, locking=True, lock_timeout=5.0, namespaces=SPECS) as mm:
        t0 = time.monotonic()
        mm.write(NS, "k", 2)
        waited = time.monotonic() - t0
        assert waited < 1.0, f"took {waited:.2f} s to take a dead process's lock"
        assert mm.read(NS, "k") == 2
        assert mm.check() == []
    print(f"\n[stale lock] acquired {waited * 1000:.1f} ms after the holder was killed")


def test_live_lock_holder_gives_lock_timeout(root: Path) -> None:
    with MemoryManager(root, locking=True, durability="flush", namespaces=SPECS) as mm:
        mm.write(NS, "k", 1)
    peer = Peer(root, "--locking")
    try:
        peer.call("hold", NS)
        with MemoryManager(root, locking=True, lock_timeout=0.2, namespaces=SPECS) as mm:
            for label, fn in [
                ("write", lambda: mm.write(NS, "k", 2)),
                ("update", lambda: mm.update(NS, "k", lambda v: v + 1)),
                ("delete", lambda: mm.delete(NS, "k")),
            ]:
                t0 = time.monotonic()
                with pytest.raises(LockTimeout) as info:
                    fn()
                waited = time.monotonic() - t0
                assert 0.2 <= waited < 1.5, f"{label}: LockTimeout after {waited:.2f} s"
                assert isinstance(info.value, TimeoutError) and isinstance(info.value, MemoryStoreError)
                assert info.value.namespace == NS
            assert mm.read(NS, "k") == 1  # reads take no lock
        peer.call("release")
        with MemoryManager(root, locking=True, lock_timeout=0.2, namespaces=SPECS) as mm:
            mm.write(NS, "k", 3)
            assert peer.call("read", NS, "k") == 3
            assert mm.check() == []
    finally:
        peer.close()
