"""Warm tier, writer notes: which bucket files each writing process appends to.

Every writing process notes in ``run/`` which buckets it appends to (one
file per process, ``<pid>-<random>.touched``, one ``<namespace>/<bb>.log``
a line), before its first append to each; a later process that finds the
note of a dead one repairs what it may have left half-done (see
``upkeep.Upkeep.recover_dead_writers``). A clean close removes the note.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from ...fsutil import FILE_MODE, NOFOLLOW, ensure_real_dirs, make_dirs, storage_error


class WriterNotes:
    """This process's note in ``run/``, and the reading of other processes' notes."""

    def __init__(self, store_root: Path, *, fsync: bool) -> None:
        self.store_root = store_root
        self.fsync = fsync
        self._run_file: Path | None = None
        self._touched: set[str] = set()

    def touch(self, rel: str, *more: str) -> None:
        """Note (once per process) which buckets this process writes, so that a
        later process can repair a torn tail if this one dies mid-write (and
        remove the temp file of a compaction or index write it cut short)."""
        if not more and rel in self._touched:
            return  # every append asks: the common case, first
        rels = sorted({rel, *more} - self._touched)
        if not rels:
            return
        run = self.store_root / "run"
        path = self._run_file or run / f"{os.getpid()}-{secrets.token_hex(4)}.touched"
        ensure_real_dirs(self.store_root, "run")  # a planted link is never followed
        try:
            make_dirs(run, durable=self.fsync)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, FILE_MODE)
            try:
                os.write(fd, "".join(rel + "\n" for rel in rels).encode())
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise storage_error(exc, "write", path) from None
        self._run_file = path
        self._touched.update(rels)

    def notes(self, *, alive: bool) -> Iterator[tuple[str, Path, list[str] | None]]:
        """``(pid, path, buckets)`` of each ``run/`` note whose process is (not)
        alive; ``buckets`` is None when the note cannot be read."""
        run = self.store_root / "run"
        try:
            ensure_real_dirs(self.store_root, "run")  # a planted link is never followed
            names = os.listdir(run)
        except OSError:  # StorageError (a planted link) included: no notes to read
            return
        for name in names:
            pid = name.split("-", 1)[0]
            if not pid.isdigit() or alive_pid(int(pid)) != alive:
                continue
            path = run / name
            try:
                rels: list[str] | None = path.read_text().split()
            except OSError:
                rels = None
            yield pid, path, rels

    def close(self) -> None:
        """Remove this process's note: everything it wrote is complete."""
        if self._run_file is not None:
            try:
                self._run_file.unlink()
            except OSError:
                pass  # gone already, or a read-only root: recovery copes either way
            self._run_file = None
            self._touched.clear()


def alive_pid(pid: int) -> bool:
    """Whether process ``pid`` exists (this one always does)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
