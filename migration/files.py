"""Files of the legacy tree as the migration writes them back: safe relative
paths, atomic writes, and the format legacy writers used."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

from hrm_memory import BadInput

from .formats import TEXT_KINDS


def safe_rel(rel: str) -> PurePosixPath:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or any(part in ("", ".", "..") for part in p.parts):
        raise BadInput(f"unsafe legacy path in the manifest: {rel!r}")
    return p


def write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def inside(path: Path, folder: Path) -> bool:
    p, f = path.resolve(), folder.resolve()
    return p == f or f in p.parents


def default_format(kind: str) -> dict[str, Any]:
    """How the legacy writers wrote a file of ``kind`` (indent 2, ASCII, no newline)."""
    if kind in TEXT_KINDS:
        return {"type": "text", "syntax": TEXT_KINDS[kind]}
    return {"type": "json", "indent": 2, "ensure_ascii": True, "separators": None, "newline": False}


__all__ = ["default_format", "inside", "safe_rel", "write_file"]
