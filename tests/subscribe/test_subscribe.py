"""Subscriptions within a process and across processes."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory import Event, MemoryManager, NamespaceSpec
from hrm_memory import CursorExpired, InvalidCursor

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["notified", "polling"])
def wake(request: pytest.FixtureRequest) -> str:
    """How a cross-process subscriber hears of changes: file-system
    notifications (the default) or the polling fallback."""
    return str(request.param)


def assert_watching(mm: MemoryManager, wake: str) -> None:
    assert mm._pipeline.bus.watching == wake, "the mode under test is not the one running"


def test_callback_runs_after_commit_and_sees_the_value(mm: MemoryManager) -> None:
    seen: list[tuple[Event, Any]] = []
    with mm.subscribe("altitude.*", lambda e: seen.append((e, mm.read(e.namespace, e.key))), remote=False):
        trace_id = mm.write("altitude.patterns", "k", {"v": 1})
        mm.update("altitude.patterns", "k", lambda v: {"v": v["v"] + 1})
        mm.delete("altitude.patterns", "k")
        mm.write("focus.lanes", "other", 1)  # not matched
    mm.write("altitude.patterns", "after-cancel", 1)
    assert [(e.op, e.key, e.version, v) for e, v in seen] == [
        ("write", "k", 1, {"v": 1}),
        ("write", "k", 2, {"v": 2}),
        ("delete", "k", 3, None),
    ]
    assert seen[0][0].trace_id == trace_id and seen[0][0].origin == "local"


def test_key_glob_and_archive_events(mm: MemoryManager) -> None:
    got: list[Event] = []
    sub = mm.subscribe("focus.gates", got.append, key="g*", remote=False)
    mm.write("focus.gates", "g1", 1)
    mm.write("focus.gates", "x1", 1)
    mm.archive(now=time.time() + 40 * 86400)
    sub.cancel()
    assert [(e.op, e.key) for e in got] == [("write", "g1"), ("archive", "g1")]


def test_callbacks_run_outside_locks(root: Path) -> None:
    # With file locks on, a callback that writes the same namespace would
    # deadlock if it ran under the namespace lock.
    with MemoryManager(root, locking=True, lock_timeout=2) as mm:
        def echo(e: Event) -> None:
            if e.key == "ping":
                mm.write("focus.lanes", "pong", e.version)

        with mm.subscribe("focus.lanes", echo, remote=False):
            mm.write("focus.lanes", "ping", 1)
        assert mm.read("focus.lanes", "pong") == 1


def test_failing_callback_breaks_nothing(mm: MemoryManager, caplog: pytest.LogCaptureFixture) -> None:
    good: list[str] = []

    def bad(e: Event) -> None:
        raise RuntimeError("subscriber bug")

    with mm.subscribe("focus.*", bad, remote=False), mm.subscribe("focus.*", lambda e: good.append(e.key), remote=False):
        mm.write("focus.lanes", "a", 1)
        mm.write("focus.lanes", "b", 2)
    assert good == ["a", "b"]
    assert mm.read("focus.lanes", "b") == 2
    assert "subscriber bug" in caplog.text


def test_commit_order_per_key_across_threads(mm: MemoryManager) -> None:
    got: list[Event] = []
    lock = threading.Lock()

    def collect(e: Event) -> None:
        with lock:
            got.append(e)

    def work() -> None:
        for _ in range(200):
            mm.update("focus.slow", "n", lambda v: (v or 0) + 1)

    with mm.subscribe("focus.slow", collect, remote=False):
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [e.version for e in got] == list(range(1, 801))


def test_cursor_replays_what_was_missed(root: Path, wake: str) -> None:
    with MemoryManager(root) as mm:
        cursor = mm.cursor()
        mm.write("altitude.patterns", "a", 1)
        mm.write("focus.lanes", "b", 1)
        mm.delete("altitude.patterns", "a")
        events, nxt = mm.events_since(cursor, "altitude.*")
        assert [(e.op, e.key, e.version) for e in events] == [("write", "a", 1), ("delete", "a", 2)]
        assert mm.events_since(nxt) == ([], nxt)
        with pytest.raises(InvalidCursor):
            mm.events_since("yesterday")
    # a late subscriber in another manager asks for what it missed
    with MemoryManager(root, notifications=wake == "notified") as late:
        got: list[Event] = []
        with late.subscribe("altitude.*", got.append, since=cursor):
            assert_watching(late, wake)
        assert [(e.op, e.key) for e in got] == [("write", "a"), ("delete", "a")]
        assert all(e.origin.startswith("pid:") for e in got)


def test_expired_cursor(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hrm_memory.storage.file import changes as signal_log

    monkeypatch.setattr(signal_log, "SEGMENT_BYTES", 200)
    monkeypatch.setattr(signal_log, "KEEP_SEGMENTS", 2)
    with MemoryManager(root) as mm:
        cursor = mm.cursor()
        for i in range(30):
            mm.write("altitude.patterns", f"k{i}", i)
        with pytest.raises(CursorExpired) as info:
            mm.events_since(cursor)
        assert isinstance(info.value, LookupError)
        fresh = mm.cursor()
        mm.write("altitude.patterns", "last", 1)
        assert [e.key for e in mm.events_since(fresh)[0]] == ["last"]


@pytest.mark.slow
def test_two_writer_processes_one_subscriber(root: Path, tmp_path: Path, wake: str) -> None:
    """2 writers x 500 rounds (each an update of a shared key and a write),
    1 subscriber: every event received once, in order per key."""
    n = 500
    got: list[Event] = []
    lock = threading.Lock()

    def collect(e: Event) -> None:
        with lock:
            got.append(e)

    go = tmp_path / "go"
    with MemoryManager(
        root, namespaces=[NamespaceSpec("ev.data")], notifications=wake == "notified"
    ) as mm, mm.subscribe("ev.*", collect):
        assert_watching(mm, wake)
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.event_writer", str(root), name, str(n), "--go", str(go)],
                cwd=REPO,
                stdout=subprocess.PIPE,
            )
            for name in ("A", "B")
        ]
        time.sleep(0.5)
        go.touch()
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0 and out.strip() == str(n).encode()
        deadline = time.time() + 10
        while len(got) < 4 * n and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # anything extra would arrive now
        final = {r.key: r.version for r in mm.query("ev.data")}
    assert len(got) == 4 * n, f"received {len(got)} of {4 * n}"
    by_key: dict[str, list[int]] = {}
    for e in got:
        assert e.op == "write" and e.origin.startswith("pid:")
        by_key.setdefault(e.key, []).append(e.version)
    for key, versions in by_key.items():
        # once each, in commit order: exactly 1..final version, ascending
        assert versions == list(range(1, final[key] + 1)), key


op_lists = st.lists(st.tuples(st.sampled_from(["write", "update", "delete"]), st.integers(0, 4)), min_size=1, max_size=30)


@pytest.mark.parametrize("mode", ["notified", "polling"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=op_lists, split=st.integers(0, 30))
def test_remote_events_are_the_commits_in_order_property(mode: str, ops: list[tuple[str, int]], split: int) -> None:
    """Another manager on the root (its own writer name, so it reads A's
    changes from the log as another process would) subscribes part-way with
    a cursor from the start: replay plus live events are exactly A's
    commits, once each, in commit order, in either wake-up mode."""
    with tempfile.TemporaryDirectory() as root:
        with MemoryManager(root, durability="flush") as a, MemoryManager(root, notifications=mode == "notified") as b:
            local: list[Event] = []
            remote: list[Event] = []
            lock = threading.Lock()

            def collect(e: Event) -> None:
                with lock:
                    remote.append(e)

            def apply(op: str, k: int) -> None:
                if op == "write":
                    a.write("focus.slow", f"k{k}", k)
                elif op == "update":
                    a.update("focus.slow", f"k{k}", lambda v: (v or 0) + 1)
                else:
                    a.delete("focus.slow", f"k{k}")

            start = a.cursor()
            with a.subscribe("focus.*", local.append, remote=False):
                for op, k in ops[:split]:
                    apply(op, k)
                with b.subscribe("focus.*", collect, since=start):
                    assert_watching(b, mode)
                    for op, k in ops[split:]:
                        apply(op, k)
                    deadline = time.monotonic() + 10
                    while len(remote) < len(local) and time.monotonic() < deadline:
                        time.sleep(0.002)
                    time.sleep(0.01)  # anything extra would arrive now
            assert [(e.op, e.key, e.version) for e in remote] == [(e.op, e.key, e.version) for e in local]
