"""The recall index file's health: damage found, set aside and rebuilt; SQLite errors typed.

``recall.db`` is derived data (``hrm_memory.recall.textindex``), so a damaged one is never
a reason to fail for good. Damage is looked for three ways:

- on open, cheaply: the 100-byte SQLite header must carry its magic string
  and, where it records the database size, the file must hold that many
  pages (a truncated file does not);
- on use: SQLite saying the file is not a database or is malformed;
- by ``check()``: ``PRAGMA quick_check`` over the whole file.

Damage found is reported (a ``corrupt-index`` finding), the file (with its
``-wal`` and ``-shm``) is moved to ``<root>/quarantine/`` (kept, never
silently overwritten) and an empty index takes its place; having no cursor,
it is rebuilt in full from the store by the next recall. An operation that
met the damage raises :class:`IndexRebuilt`, which the pipeline answers by
running that operation again (it had changed nothing yet).

SQLite's operational errors become typed ones: a busy index (another
connection holding its write lock past :data:`BUSY_TIMEOUT`) is
:class:`IndexBusy` (a ``LockTimeout``, so a ``TimeoutError``); a full disk or
an I/O error is ``StorageError`` (an ``OSError``, with its ``errno``).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import struct
import time
from pathlib import Path

from hrm_memory.core.errors import IndexBusy, IndexRebuilt, StorageError

from hrm_memory.storage.fsutil import NOFOLLOW, ensure_real_dirs, make_dirs

#: seconds a statement waits for another connection's write lock
BUSY_TIMEOUT = 5.0
_MAGIC = b"SQLite format 3\x00"


def header_problem(path: Path) -> str | None:
    """Why the file at ``path`` cannot be a whole SQLite database, from its
    header and size alone; None if it may be (or is empty: a fresh one)."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None  # missing (a fresh index) or a link: the opening refuses the latter
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, 100, 0)
    finally:
        os.close(fd)
    if size == 0:
        return None
    if len(head) < 100 or not head.startswith(_MAGIC):
        return "its header is not SQLite's (overwritten?)"
    page = struct.unpack_from(">H", head, 16)[0]
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return f"its header names an impossible page size ({page})"
    change, pages, valid_for = (struct.unpack_from(">I", head, o)[0] for o in (24, 28, 92))
    if pages and change == valid_for and size < pages * page:
        return f"it is {size} bytes, shorter than the {pages} pages of {page} bytes its header records (truncated?)"
    return None


def set_aside(path: Path, ino: int | None) -> Path | None:
    """Move the damaged index at ``path`` (and its -wal, -shm) under
    ``<root>/quarantine/``; None if ``path`` is no longer the file of inode
    ``ino`` (another process set it aside and made a new one already)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if ino is not None and st.st_ino != ino:
        return None
    root = path.parent.parent
    qdir = root / "quarantine"
    try:
        ensure_real_dirs(root, "quarantine")
        make_dirs(qdir, durable=True)
        tag = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.{os.getpid()}.{st.st_ino}"
        target = qdir / f"index__{path.name}.{tag}.bad"
        os.replace(path, target)
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if os.path.lexists(side):
                os.replace(side, qdir / f"index__{path.name}{suffix}.{tag}.bad")
    except OSError as exc:
        raise StorageError(f"could not set the damaged recall index {path} aside: {exc}", path=str(path)) from None
    return target


def quick_check(path: Path) -> str | None:
    """``PRAGMA quick_check`` of the file (read-only); None if it passes."""
    if not path.exists():
        return None
    problem = header_problem(path)
    if problem is not None:
        return problem
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT)
    except sqlite3.Error as exc:
        return f"it cannot be opened ({exc})"
    try:
        rows = [str(r[0]) for r in db.execute("PRAGMA quick_check")]
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return None  # busy, not damaged: the next check looks again
        return f"quick_check failed ({exc})"
    except sqlite3.DatabaseError as exc:
        return f"quick_check failed ({exc})"
    finally:
        db.close()
    return None if rows == ["ok"] else "quick_check: " + "; ".join(rows[:3])


def operational(exc: sqlite3.OperationalError, path: Path | None, what: str) -> Exception:
    """The typed error for SQLite's operational ``exc``."""
    text = str(exc)
    where = "the recall index" if path is None else f"the recall index {path}"
    code = getattr(exc, "sqlite_errorcode", None)
    if "locked" in text or "busy" in text or code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return IndexBusy(
            f"{where} stayed busy (written by another connection) for over {BUSY_TIMEOUT:g} s during {what}; "
            "try again"
        )
    if "full" in text or code == sqlite3.SQLITE_FULL:
        return StorageError(f"{where}: the disk is full during {what} ({text})", path=str(path), errno=errno.ENOSPC)
    return StorageError(f"{where}: {text} during {what}", path=str(path))


__all__ = ["BUSY_TIMEOUT", "IndexBusy", "IndexRebuilt", "header_problem", "operational", "quick_check", "set_aside"]
