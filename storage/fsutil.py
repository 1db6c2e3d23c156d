"""Small file-system helpers: private modes, fsync of directories, atomic replace."""

from __future__ import annotations

import errno
import mmap
import os
import stat
import struct
import zlib
from pathlib import Path
from typing import Any

import orjson

from hrm_memory.core.errors import StorageError

FILE_MODE = 0o600
DIR_MODE = 0o700
#: Added to every open of a store file: a symbolic link planted inside the
#: root is never followed, so no path the store opens leads outside the root
#: (docs/storage.md, "Layout under the root").
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class _ThisProcess:
    """``this_process.pid`` is this process's id, set again in a forked
    child by a fork hook (``os.register_at_fork``: every ``os.fork()``, the
    ones ``multiprocessing`` makes included). A check made on every append
    ("is this a forked child, whose inherited descriptors and writer name
    are its parent's?") then reads an attribute instead of calling
    ``os.getpid()``, a system call, twice per warm write (BENCHMARKS.md,
    "Figures the code's comments rely on")."""

    __slots__ = ("pid",)

    def __init__(self) -> None:
        self.pid = os.getpid()

    def forked(self) -> None:
        self.pid = os.getpid()


this_process = _ThisProcess()
os.register_at_fork(after_in_child=this_process.forked)


def ensure_real_dirs(root: Path, *parts: str) -> bool:
    """Raise :class:`StorageError` if a directory on the way from ``root`` to
    ``root/parts...`` is a symbolic link or not a directory (missing is fine:
    it will be created as a real directory). True if all of them exist."""
    p = os.fspath(root)
    for part in parts:
        p = f"{p}/{part}"  # a string: a Path per step cost more than the lstat
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(st.st_mode):
            raise StorageError(
                f"{p} is a symbolic link; hrm-memory never follows links inside its root", path=str(p)
            )
        if not stat.S_ISDIR(st.st_mode):
            raise StorageError(f"{p} should be a directory but is not", path=str(p))
    return True


def symlinks_under(root: Path) -> list[Path]:
    """Every symbolic link below ``root`` (links are never followed)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                found.append(path)
    return found


def storage_error(exc: OSError, action: str, path: str | os.PathLike[str]) -> StorageError:
    """Wrap an OSError from the disk in the package's typed error, keeping errno."""
    reason = {
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return StorageError(f"cannot {action} {os.fspath(path)}: {reason}", path=os.fspath(path), errno=exc.errno)


def read_json(path: Path, missing: Any) -> Any:
    """The JSON document in the small file at ``path``: ``missing`` when there
    is no file, None when its bytes are not JSON (the caller decides what a
    damaged file means). Any other failure to read is a :class:`StorageError`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return missing
    except OSError as exc:
        raise storage_error(exc, "read", path) from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory entry change (create, rename) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path, *, durable: bool) -> None:
    """Create ``path`` and missing parents with mode 0700; fsync each new entry's parent."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue
        if durable:
            fsync_dir(d.parent)


def temp_path(path: Path, pid: int | str) -> Path:
    """The temp file ``atomic_write`` in process ``pid`` writes before it
    replaces ``path`` (what recovery removes for a process that died)."""
    return path.with_name(f".{path.name}.{pid}.tmp")


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file."""
    tmp = temp_path(path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def quarantine(root: Path, relpath: str, data: bytes, tag: str) -> Path:
    """Keep damaged bytes under ``root/quarantine`` instead of dropping them."""
    qdir = root / "quarantine"
    ensure_real_dirs(root, "quarantine")  # a planted link is never followed
    make_dirs(qdir, durable=True)
    name = relpath.replace("/", "__") + f".{tag}.bad"
    target = qdir / name
    atomic_write(target, data)
    return target


_U64 = struct.Struct("<Q")


class SharedCounters:
    """``n`` unsigned 64-bit counters in a small file, memory-mapped so that
    every process of the store reads and bumps them without a system call.

    The file is written out with real zeros when created (never a sparse
    ``ftruncate``): a store into a page of a sparse file needs a block, and
    on a full disk that store would kill the process with SIGBUS."""

    def __init__(self, path: str | Path, n: int) -> None:
        size = n * 8
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, FILE_MODE)
        try:
            have = os.fstat(fd).st_size
            if have < size:
                os.pwrite(fd, bytes(size - have), have)
                os.fsync(fd)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def get(self, i: int) -> int:
        return int(_U64.unpack_from(self._map, i * 8)[0])

    def set(self, i: int, value: int) -> None:
        _U64.pack_into(self._map, i * 8, value & 0xFFFFFFFFFFFFFFFF)

    def bump(self, i: int) -> int:
        """Add one; return the value before."""
        before = self.get(i)
        self.set(i, before + 1)
        return before

    def close(self) -> None:
        self._map.close()


def frame(body: bytes) -> bytes:
    """One checksummed line: ``\\n<crc32 as 8 hex> <body>\\n``. Used by the warm
    logs and the signal log: a torn or damaged line fails its checksum, and
    the newline on each side keeps a torn line from gluing onto the next."""
    return b"\n%08x " % zlib.crc32(body) + body + b"\n"


def unframe(line: bytes) -> bytes | None:
    """The body of a line (without its newlines) whose checksum holds, else None."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    # The exact 8 lowercase hex digits written: int(..., 16) would also take
    # whitespace, "0x", "_" and upper case, i.e. damaged checksums.
    if line[:8] != b"%08x" % zlib.crc32(memoryview(line)[9:]):
        return None
    return line[9:]
