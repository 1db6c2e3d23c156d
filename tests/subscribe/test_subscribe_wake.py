"""Cross-process subscribers on the file backend sleep until the file system
says the change log grew (one notification thread per process: watchdog's
inotify reader on Linux, its Observer elsewhere; both are run here), and fall back
to polling by themselves, saying so once, where notifications fail. Every
failure here is real: a killed observer thread, a process out of file
descriptors, a log directory replaced under the watch."""

from __future__ import annotations

import ctypes
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify_c import InotifyFD

from hrm_memory import Event, MemoryManager
from hrm_memory.core import events as events_module
from hrm_memory.storage.file import changes_watch

REPO = Path(__file__).resolve().parents[2]

# Writes N records to focus.slow, one every GAP ms, once the file GO exists.
PACED_WRITER = """
import os, sys, time
from hrm_memory import MemoryManager
root, n, gap, go = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) / 1000, sys.argv[4]
with MemoryManager(root, durability="flush") as mm:
    while not os.path.exists(go):
        time.sleep(0.001)
    for i in range(n):
        mm.write("focus.slow", f"k{i % 7}", i)
        time.sleep(gap)
print(n)
"""


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the process's first fallback warnings."""
    monkeypatch.setattr(events_module, "fallback_warnings", events_module.OncePerProcess())


@pytest.fixture(params=["direct", "observer"])
def notifier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type[threading.Thread]:
    """Each test runs with the inotify reader waking listeners itself and
    with watchdog's Observer between them; the class of the one thread
    that stands for "the observer" in each."""
    monkeypatch.setattr(changes_watch, "DIRECT", request.param == "direct")
    return InotifyFD if request.param == "direct" else BaseObserver


def observers(kind: type[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, kind) and t.is_alive()]


def watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if type(t).__module__.startswith("watchdog") and t.is_alive()]


class Collector:
    def __init__(self) -> None:
        self.got: list[Event] = []
        self.lock = threading.Lock()

    def __call__(self, e: Event) -> None:
        with self.lock:
            self.got.append(e)

    def wait_for(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # anything extra would arrive now


def assert_every_event_once_in_order(got: list[Event], n: int) -> None:
    assert len(got) == n, f"received {len(got)} of {n}"
    by_key: dict[str, list[int]] = {}
    for e in got:
        by_key.setdefault(e.key, []).append(e.version)
    for key, versions in by_key.items():
        assert versions == list(range(1, len(versions) + 1)), key


def run_writer(root: Path, n: int, gap_ms: float, go: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", PACED_WRITER, str(root), str(n), str(gap_ms), str(go)], cwd=REPO, stdout=subprocess.PIPE
    )


def test_one_observer_per_process_however_many_subscriptions(tmp_path: Path, notifier: type[threading.Thread]) -> None:
    """10 subscriptions in each of two managers on two roots: one observer
    thread in the process; none once they are cancelled."""
    with MemoryManager(tmp_path / "a") as a, MemoryManager(tmp_path / "b") as b:
        subs = [m.subscribe(g, lambda e: None) for m in (a, b) for g in ["focus.*", "altitude.*"] * 5]
        assert a._pipeline.bus.watching == b._pipeline.bus.watching == "notified"
        assert len(observers(notifier)) == 1
        for s in subs:
            s.cancel()
        assert observers(notifier) == [] and watchdog_threads() == []
        assert a._pipeline.bus.watching is None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the kill itself
def test_a_killed_observer_hands_over_to_polling_with_no_event_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh_warnings: None, notifier: type[threading.Thread]
) -> None:
    """The observer's thread dies (an exception raised in it, as a bug in it
    would) while another process writes: both subscribing managers notice
    within a health check, poll from then on, and get every event once, in
    commit order per key; the fallback is logged once for the process."""
    n = 400
    root, other = tmp_path / "store", tmp_path / "other"
    got, also = Collector(), Collector()
    go = tmp_path / "go"
    with MemoryManager(root) as mm, MemoryManager(other) as second, caplog.at_level(logging.WARNING):
        with mm.subscribe("focus.slow", got), second.subscribe("focus.*", also):
            assert mm._pipeline.bus.watching == "notified"
            writer = run_writer(root, n, 5, go)
            go.touch()
            deadline = time.monotonic() + 30
            while len(got.got) < 50 and time.monotonic() < deadline:
                time.sleep(0.005)
            [observer] = observers(notifier)
            assert observer.ident is not None
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(observer.ident), ctypes.py_object(SystemExit))
            out, _ = writer.communicate(timeout=60)
            assert writer.returncode == 0 and out.strip() == str(n).encode()
            got.wait_for(n, 20)
            assert not observer.is_alive(), "the observer was not killed: the test proves nothing"
            assert mm._pipeline.bus.watching == "polling"
            deadline = time.monotonic() + 5
            while second._pipeline.bus.watching != "polling" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert second._pipeline.bus.watching == "polling"
        assert_every_event_once_in_order(got.got, n)
        assert also.got == []  # another root's subscriber hears nothing of this one
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "change log: file-system notifications failed (the notification thread stopped); "
        "subscribers poll the log every 5 ms"
    ]
    assert watchdog_threads() == []


def test_a_replaced_log_directory_is_noticed_and_polled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh_warnings: None, notifier: type[threading.Thread]
) -> None:
    """The watch follows the directory it was put on; when ``events/`` is
    replaced by a new directory, writes land where no notification comes
    from. The subscriber sees the log grow twice without a wake-up, says
    so once and polls: every event arrives, once, in order."""
    n = 300
    root = tmp_path / "store"
    got = Collector()
    go = tmp_path / "go"
    with MemoryManager(root) as mm, caplog.at_level(logging.WARNING):
        with mm.subscribe("focus.slow", got):
            assert mm._pipeline.bus.watching == "notified"
            (root / "events").rename(root / "events.old")
            (root / "events").mkdir(mode=0o700)
            writer = run_writer(root, n, 10, go)
            go.touch()
            out, _ = writer.communicate(timeout=60)
            assert writer.returncode == 0
            got.wait_for(n, 20)
            assert mm._pipeline.bus.watching == "polling"
        assert_every_event_once_in_order(got.got, n)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "change log: file-system notifications failed (the log grew twice without a notification); "
        "subscribers poll the log every 5 ms"
    ]


# A subscriber that runs out of file descriptors just as its observer starts:
# two left, so the log's listing (one, given back) works, inotify takes one and
# its wake-up pipe finds none (EMFILE, what inotify_init gives at the per-user
# instance limit too). Prints the mode, then every event received.
STARVED_SUBSCRIBER = """
import json, logging, os, resource, sys, threading
from hrm_memory import MemoryManager
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
root, n = sys.argv[1], int(sys.argv[2])
got, done = [], threading.Event()
def on(e):
    got.append([e.key, e.version])
    if len(got) >= n:
        done.set()
with MemoryManager(root, durability="flush") as mm:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (top + 1, hard))
    filler = []
    try:
        while True:
            filler.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    for fd in filler[-2:]:
        os.close(fd)
    del filler[-2:]
    try:
        sub = mm.subscribe("focus.slow", on)
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    print(mm._pipeline.bus.watching, flush=True)
    done.wait(60)
    sub.cancel()
print(json.dumps(got), flush=True)
"""


def test_an_observer_that_cannot_start_leaves_polling(tmp_path: Path) -> None:
    """The observer fails to start (out of descriptors): the subscriber says
    so once and polls, and another process's 200 writes all arrive once, in
    order."""
    n = 200
    root = tmp_path / "store"
    MemoryManager(root).close()
    child = subprocess.Popen(
        [sys.executable, "-c", STARVED_SUBSCRIBER, str(root), str(n)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "polling"
        with MemoryManager(root, durability="flush") as mm:
            for i in range(n):
                mm.write("focus.slow", f"k{i % 7}", i)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    got = json.loads(out)
    versions: dict[str, list[int]] = {}
    for key, version in got:
        versions.setdefault(key, []).append(version)
    assert len(got) == n and all(v == list(range(1, len(v) + 1)) for v in versions.values())
    warnings = [line for line in err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, err
    assert "file-system notifications are unavailable ([Errno 24] Too many open files)" in warnings[0]
    assert "poll the log every 5 ms" in warnings[0]


def test_cancelling_one_roots_subscriptions_leaves_the_others_notified(
    tmp_path: Path, notifier: type[threading.Thread]
) -> None:
    """Two roots watched by the one thread: when the first root's last
    subscription ends, its watch goes and the second root's stays; a write
    from another process still wakes the second root's subscriber."""
    got = Collector()
    with MemoryManager(tmp_path / "a") as a, MemoryManager(tmp_path / "b") as b:
        first = a.subscribe("focus.*", lambda e: None)
        with b.subscribe("focus.*", got):
            first.cancel()
            assert len(observers(notifier)) == 1
            assert b._pipeline.bus.watching == "notified"
            go = tmp_path / "go"
            writer = run_writer(tmp_path / "b", 20, 1, go)
            go.touch()
            assert writer.wait(timeout=60) == 0
            got.wait_for(20, timeout=10)
        assert b._pipeline.bus.watching is None
    assert_every_event_once_in_order(got.got, 20)
    assert observers(notifier) == []
