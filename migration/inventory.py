"""The legacy tree, read-only and one file at a time.

:func:`scan` reads every file once: its sha256, place in the store
(migration/layout.py), format facts, value digest and anomalies. It keeps
those facts, not the bytes or the decoded value, so memory does not grow
with the size of the tree; :meth:`LegacyFile.load` reads a file again when
a command needs its bytes or value (and checks it still hashes the same).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hrm_memory.core.errors import LegacyChanged, NoLegacyFiles

from .anomalies import (
    Anomaly,
    Facts,
    Flags,
    TreeItem,
    scan_bytes,
    scan_tree,
    scan_value,
    tree_value,
)
from .formats import Decoded, decode, decode_value
from .layout import Place, place_of

#: ``progress(phase, done, total)``: called with done=0 before the first
#: file, then after each file (the caller decides how often to print).
Progress = Callable[[str, int, int], None]

#: Where a legacy tree is recognised: the folders under the legacy root.
LEGACY_FOLDERS = ("the_assist", "locked_system")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def value_digest(value: Any) -> str:
    """sha256 of a value's stored encoding (compact JSON, key order kept):
    equal digests mean type-exact equal values."""
    return sha256(orjson.dumps(value))


@dataclass
class LegacyFile:
    """One legacy file as scanned: facts only (see :meth:`load` for the bytes)."""

    rel: str  # POSIX path relative to the legacy root
    size: int
    sha256: str
    place: Place | None
    fmt: dict[str, Any]
    exact: bool  # rendering the value with ``fmt`` gives the bytes back
    value_sha256: str | None  # digest of the record value; None: no record
    anomalies: list[Anomaly] = field(default_factory=list)
    tokens_before: int | None = None  # the file's text, when tokens are counted
    extra: dict[str, Any] = field(default_factory=dict)  # what a command noted while the bytes were at hand

    @property
    def kind(self) -> str:
        return self.place.kind if self.place else "unmapped"

    @property
    def raw_needed(self) -> bool:
        """The value alone does not give the bytes back: keep them too."""
        return self.place is None or not self.exact

    def load(self, root: Path, *, value: bool = True) -> tuple[bytes, Any]:
        """The file's bytes and (``value``) its record value, read again;
        raise :class:`LegacyChanged` if the bytes are not the scanned ones."""
        try:
            data = read_file(root, self.rel)
        except OSError as exc:
            raise LegacyChanged(f"cannot be read again ({exc})") from None
        if len(data) != self.size or sha256(data) != self.sha256:
            raise LegacyChanged("the legacy file changed while the command ran")
        return data, (decode_value(self.place.kind if self.place else None, data) if value else None)


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


def hash_tree(root: Path, rels: list[str], progress: Progress | None = None) -> dict[str, str | None]:
    """sha256 of each file now (None if it is gone), one file at a time."""
    out: dict[str, str | None] = {}
    if progress:
        progress("rehash", 0, len(rels))
    for i, rel in enumerate(rels, 1):
        try:
            out[rel] = sha256(read_file(root, rel))
        except OSError:
            out[rel] = None
        if progress:
            progress("rehash", i, len(rels))
    return out


def _parsed_part(decoded: Decoded) -> Any:
    """What the value checks look at: for text files (and unparsable JSON)
    the parsed parts, not the raw copy, so nothing is counted twice."""
    value = decoded.value
    if isinstance(value, dict) and (decoded.fmt["type"] == "text" or "error" in value):
        return {k: v for k, v in value.items() if k not in ("raw", "raw_base64", "error")}
    return value


# -- the wrong folder ----------------------------------------------------------------------

_SEARCH_DEPTH = 3
_SEARCH_DIRS = 2_000


def legacy_roots_below(base: Path) -> list[Path]:
    """Folders under ``base`` (at most three levels down, nearest first) that
    hold ``the_assist/`` or ``locked_system/``: the legacy root the user meant."""
    found: list[Path] = []
    level = [base]
    seen = 0
    for _ in range(_SEARCH_DEPTH):
        nxt: list[Path] = []
        for folder in level:
            for child in _subfolders(folder):
                seen += 1
                if child.name in LEGACY_FOLDERS:
                    if folder != base and folder not in found:
                        found.append(folder)
                elif not child.name.startswith("."):
                    nxt.append(child)
            if seen > _SEARCH_DIRS:
                return found
        if found:
            return found
        level = nxt
    return found


def _subfolders(folder: Path) -> Iterator[Path]:
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False):
                yield Path(e.path)
        except OSError:
            continue


def no_legacy_message(base: Path) -> str:
    """Why ``base`` is not a legacy root, and which folder to pass instead."""
    msg = (f"no legacy file recognised in {base}: LEGACY_DIR is the folder that holds "
           f"{'/ and '.join(LEGACY_FOLDERS)}/ (for the shipped copy: shared/legacy/data)")
    above = next((p for p in [base, *base.resolve().parents] if p.name in LEGACY_FOLDERS), None)
    if above is not None:
        return f"{msg}; {base} is inside a legacy tree: pass {above.parent} instead"
    # Only a folder that would be accepted is suggested (a folder named like
    # the legacy trees may hold something else: the adapters' code, say).
    below = [p for p in legacy_roots_below(base) if _holds_legacy_files(p)]
    if len(below) == 1:
        return f"{msg}; {below[0]} holds the legacy layout: pass {below[0]} instead"
    if below:
        shown = "".join(f"\n  {p}" for p in below[:SUGGESTED])
        more = f"\n  ... and {len(below) - SUGGESTED} more" if len(below) > SUGGESTED else ""
        return f"{msg}; {len(below)} folders under it hold a legacy layout, pass one of them:{shown}{more}"
    return msg


#: At most this many folders are suggested by name.
SUGGESTED = 5


def _holds_legacy_files(folder: Path) -> bool:
    """``folder`` holds at least one file the legacy layout knows (what check_root asks)."""
    try:
        rels, _ = list_files(folder)
    except OSError:
        return False
    return any(place_of(rel) for rel in rels)


def check_root(root: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """:func:`list_files` of the legacy tree at ``root``; raise
    FileNotFoundError / NotADirectoryError if it is not a folder and
    :class:`NoLegacyFiles` if no file in it is one the layout knows."""
    base = Path(root)
    if not base.exists():
        raise FileNotFoundError(f"legacy folder {base} does not exist")
    if not base.is_dir():
        raise NotADirectoryError(f"{base} is not a folder")
    rels, skipped = list_files(base)
    if not any(place_of(rel) for rel in rels):
        raise NoLegacyFiles(no_legacy_message(base))
    return rels, skipped


# -- the scan -------------------------------------------------------------------------------


OnFile = Callable[[LegacyFile, bytes, Decoded], None]


def scan(
    root: str | os.PathLike[str],
    *,
    counter: Any = None,
    on_file: OnFile | None = None,
    progress: Progress | None = None,
) -> Inventory:
    """Read and decode the legacy tree at ``root``, one file at a time.

    ``counter`` (an ``hrm_memory.core.tokens`` counter) fills ``tokens_before``;
    ``on_file(file, bytes, decoded)`` runs while a file's bytes are in
    memory (before the cross-file anomalies are known). Raises
    FileNotFoundError / NotADirectoryError if ``root`` is not a folder and
    :class:`NoLegacyFiles` if no file in it is a legacy file."""
    base = Path(root)
    rels, problems = check_root(base)
    files: list[LegacyFile] = []
    items: list[TreeItem] = []
    if progress:
        progress("scan", 0, len(rels))
    for i, rel in enumerate(rels, 1):
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
        f = LegacyFile(
            rel, len(data), sha256(data), place, decoded.fmt, decoded.exact,
            value_digest(decoded.value) if place else None,
        )
        if counter is not None:
            f.tokens_before = counter.count(data.decode("utf-8", "replace"))
        if on_file is not None:
            on_file(f, data, decoded)
        files.append(f)
        items.append(TreeItem(rel, place.kind if place else None, tree_value(place.kind if place else None, decoded.value), facts, flags))
        del data, decoded  # one file at a time
        if progress:
            progress("scan", i, len(rels))
    scan_tree(items)
    for f, it in zip(files, items):
        f.anomalies = it.flags.items
    return Inventory(base, files, problems)


__all__ = [
    "Inventory",
    "LegacyChanged",
    "LegacyFile",
    "NoLegacyFiles",
    "Progress",
    "check_root",
    "hash_tree",
    "legacy_roots_below",
    "list_files",
    "no_legacy_message",
    "read_file",
    "scan",
    "sha256",
    "value_digest",
]
