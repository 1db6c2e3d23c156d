"""The documented layout of a store root, and snapshots of what is under it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_NS_RE = r"[a-z][a-z0-9_]{0,31}(?:\.[a-z][a-z0-9_]{0,31}){1,3}"
_LAYOUT = re.compile(
    "|".join(
        [
            r"(warm|cold|locks|meta|run|quarantine|events|traces)",
            r"events/[0-9]{6}\.log",
            r"events/\.(?:lock|seg)",
            r"traces/spans\.jsonl",
            rf"warm/(?:_h\.)?{_NS_RE}",  # _h.<namespace>: its kept history (docs/history.md)
            rf"warm/(?:_h\.)?{_NS_RE}/[0-9a-f]{{2}}\.log",
            rf"warm/(?:_h\.)?{_NS_RE}/\.gen",
            rf"warm/(?:_h\.)?{_NS_RE}/[0-9a-f]{{2}}\.idx",  # persisted bucket index
            rf"cold/{_NS_RE}",
            rf"cold/{_NS_RE}/[0-9]{{6}}\.seg",
            rf"locks/(?:(?:_h\.)?{_NS_RE}|meta\.namespaces)\.lock",
            rf"locks/(?:_h\.)?{_NS_RE}\.writers",  # the writer gate: appends shared, rewrites exclusive
            r"meta/namespaces\.json",
            r"index",
            r"index/recall\.db(?:-wal|-shm|-journal)?",  # the recall index (docs/recall.md)
            r"meta/\.gen",  # run-time declarations' change counter
            r"run/[0-9]+-[0-9a-f]{8}\.touched",
            rf"quarantine/(?:warm__{_NS_RE}__[0-9a-f]{{2}}\.log|cold__{_NS_RE}__[0-9]{{6}}\.seg)"
            r"\.(?:corrupt|torn|misplaced|replayed)-[0-9]+\.bad",
        ]
    )
)


_LAYOUT_NAME = re.compile(r"[0-9a-f]*\.(?:log|seg)|namespaces\.json")


def assert_layout(root: Path, keys: list[str] = ()) -> None:
    """Every path under the root is one the documented layout allows, and no
    file name contains a (distinctive) key: keys never become file names."""
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        assert not p.is_symlink(), f"unexpected symlink {rel}"
        assert _LAYOUT.fullmatch(rel), f"path outside the documented layout: {rel!r}"
        for key in keys:
            # Keys shaped like the store's own file names are covered by the
            # layout match above; any other key must not appear in a name.
            if isinstance(key, str) and len(key) >= 3 and not _LAYOUT_NAME.fullmatch(key):
                assert key not in p.name, f"key {key!r} became part of file name {rel!r}"


def files_bytes(root: Path) -> dict[str, bytes]:
    """Relative POSIX path -> bytes, for every regular file under ``root`` (symlinks not followed)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def digests(root: Path) -> dict[str, str]:
    """Relative POSIX path -> sha256, for every file under ``root`` (hidden ones too)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
