"""The legacy tree, read once and read-only: every file with its bytes,
sha256, place in the store (migration/layout.py), decoded value and anomalies."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson

from .anomalies import Anomaly, Facts, Flags, TreeItem, scan_bytes, scan_tree, scan_value
from .formats import Decoded, decode
from .layout import Place, place_of


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def value_digest(value: Any) -> str:
    """sha256 of a value's stored encoding (compact JSON, key order kept):
    equal digests mean type-exact equal values."""
    return sha256(orjson.dumps(value))


@dataclass
class LegacyFile:
    rel: str  # POSIX path relative to the legacy root
    data: bytes
    place: Place | None
    decoded: Decoded
    anomalies: list[Anomaly] = field(default_factory=list)

    @cached_property
    def sha256(self) -> str:
        return sha256(self.data)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def kind(self) -> str:
        return self.place.kind if self.place else "unmapped"

    @property
    def value_sha256(self) -> str | None:
        """Digest of the record value (readable form); None: no record."""
        return value_digest(self.decoded.value) if self.place else None

    @property
    def raw_needed(self) -> bool:
        """The value alone does not give the bytes back: keep them too."""
        return self.place is None or not self.decoded.exact


@dataclass
class Inventory:
    root: Path
    files: list[LegacyFile]
    problems: list[str]  # what could not be read (symlinked folders, sockets, ...)

    @property
    def tree_sha256(self) -> str:
        """One hash over the ``sha256sum``-style listing of the tree."""
        return sha256("".join(f"{f.sha256}  {f.rel}\n" for f in self.files).encode("utf-8", "surrogateescape"))

    @property
    def by_rel(self) -> dict[str, LegacyFile]:
        return {f.rel: f for f in self.files}


def list_files(root: Path) -> tuple[list[str], list[str]]:
    """Every regular file under ``root`` (hidden ones too) as sorted POSIX
    relative paths, and what was skipped (with the reason)."""
    rels: list[str] = []
    skipped: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                skipped.append(f"{_rel(root, dirpath, d)}: a symlinked folder (not followed)")
                dirnames.remove(d)
        for name in filenames:
            mode = os.stat(os.path.join(dirpath, name)).st_mode
            if stat.S_ISREG(mode):
                rels.append(_rel(root, dirpath, name))
            else:
                skipped.append(f"{_rel(root, dirpath, name)}: not a regular file")
    return sorted(rels), skipped


def _rel(root: Path, dirpath: str, name: str) -> str:
    return Path(os.path.relpath(os.path.join(dirpath, name), root)).as_posix()


def read_file(root: Path, rel: str) -> bytes:
    with open(root / rel, "rb") as fh:  # read-only: the legacy tree is never written
        return fh.read()


def hash_tree(root: Path, rels: list[str]) -> dict[str, str | None]:
    """sha256 of each file now (None if it is gone)."""
    out: dict[str, str | None] = {}
    for rel in rels:
        try:
            out[rel] = sha256(read_file(root, rel))
        except OSError:
            out[rel] = None
    return out


def _parsed_part(decoded: Decoded) -> Any:
    """What the value checks look at: for text files (and unparsable JSON)
    the parsed parts, not the raw copy, so nothing is counted twice."""
    value = decoded.value
    if isinstance(value, dict) and (decoded.fmt["type"] == "text" or "error" in value):
        return {k: v for k, v in value.items() if k not in ("raw", "raw_base64", "error")}
    return value


def scan(root: str | os.PathLike[str]) -> Inventory:
    """Read and decode the whole legacy tree at ``root``; raise
    FileNotFoundError / NotADirectoryError if it is not a folder."""
    base = Path(root)
    if not base.exists():
        raise FileNotFoundError(f"legacy folder {base} does not exist")
    if not base.is_dir():
        raise NotADirectoryError(f"{base} is not a folder")
    rels, problems = list_files(base)
    files: list[LegacyFile] = []
    items: list[TreeItem] = []
    for rel in rels:
        data = read_file(base, rel)
        place = place_of(rel)
        decoded = decode(place.kind if place else None, data)
        flags = Flags()
        flags.extend(decoded.anomalies)
        if os.path.islink(base / rel):
            flags.add("symlink", "the file is a symlink; its target's bytes are imported", rel)
        if decoded.fmt["type"] == "json":
            scan_bytes(data, flags)
        facts = scan_value(place.kind, _parsed_part(decoded), flags, rel.rsplit("/", 1)[-1]) if place else Facts()
        files.append(LegacyFile(rel, data, place, decoded))
        items.append(TreeItem(rel, place.kind if place else None, decoded.value, facts, flags))
    scan_tree(items)
    for f, it in zip(files, items):
        f.anomalies = it.flags.items
    return Inventory(base, files, problems)


__all__ = ["Inventory", "LegacyFile", "hash_tree", "list_files", "read_file", "scan", "sha256", "value_digest"]
