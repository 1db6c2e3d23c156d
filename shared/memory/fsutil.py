"""Small file-system helpers: private modes, fsync of directories, atomic replace."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .errors import StorageError

FILE_MODE = 0o600
DIR_MODE = 0o700


def storage_error(exc: OSError, action: str, path: str | os.PathLike[str]) -> StorageError:
    """Wrap an OSError from the disk in the package's typed error, keeping errno."""
    reason = {
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    err = StorageError(f"cannot {action} {os.fspath(path)}: {reason}", path=os.fspath(path), errno=exc.errno)
    err.errno = exc.errno
    return err


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


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
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
    make_dirs(qdir, durable=True)
    name = relpath.replace("/", "__") + f".{tag}.bad"
    target = qdir / name
    atomic_write(target, data)
    return target
