"""A process forked from one that has a store open is a writer of its own.

The warm tier's writer gate (``flock`` on a descriptor per namespace) and the
change log's writer name are per process. A forked child inherits the
parent's descriptors, which share the parent's lock, and the parent's name:
it must take new ones before its first append. The check runs on every
append and reads a process id kept by a fork hook (``fsutil.this_process``),
not ``os.getpid()``; these tests fork for real and fail if the child goes on
with what it inherited.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from hrm_memory import MemoryManager
from hrm_memory.core.errors import LockTimeout
from hrm_memory.storage.fsutil import this_process
from hrm_memory.storage.file.locks import NamespaceLocks

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _in_child(body: Callable[[], int]) -> tuple[int, int]:
    """Run ``body()`` (returning an exit code) in a forked child: its pid and exit code."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its exit code is the result
        code = 99
        try:
            code = body()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return pid, os.waitstatus_to_exitcode(status)


def test_the_kept_process_id_follows_a_fork() -> None:
    parent = os.getpid()
    assert this_process.pid == parent
    assert _in_child(lambda: 0 if this_process.pid == os.getpid() != parent else 1)[1] == 0
    assert this_process.pid == parent


def test_a_forked_child_takes_the_writer_gate_on_its_own_descriptor(tmp_path: Path) -> None:
    locks = NamespaceLocks(tmp_path / "locks", cross_process=True, timeout=1.0)
    gate = locks.writers

    def exclusive_while_the_parent_appends() -> int:
        try:
            with gate.exclusive("altitude.patterns", wait=False):
                return 2  # granted: the child used the parent's descriptor (and lock)
        except LockTimeout:
            return 0  # refused: an append of another process is under way, as it is

    with gate.shared("altitude.patterns"):  # the parent is part-way through an append
        assert _in_child(exclusive_while_the_parent_appends)[1] == 0
    locks.writers.close()


def test_a_forked_childs_changes_are_logged_under_its_own_name(tmp_path: Path) -> None:
    mm = MemoryManager(tmp_path)
    try:
        mm.write("altitude.patterns", "before", {"n": 0})  # the parent's log and gate are open
        cursor = mm.cursor()

        def write() -> int:  # with the manager it inherited, as a forked worker has it
            mm.write("altitude.patterns", "from-child", {"n": 1})
            return 0  # no close(): the store's files are the parent's to close

        child, code = _in_child(write)
        assert code == 0
        events, _ = mm.events_since(cursor, "altitude.patterns")
        assert [(e.key, e.origin) for e in events] == [("from-child", f"pid:{child}")]
        assert mm.read("altitude.patterns", "from-child") == {"n": 1}
    finally:
        mm.close()
