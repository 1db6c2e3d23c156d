"""Warm tier, bulk reads: scans, key lists and stats.

Every method needs a bucket's whole index, so each first makes sure it has
one (``BucketFiles.full``): a bucket read through its persisted index
(``warm/buckets.py``) knows its keys only one at a time, and is scanned once
here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from hrm_memory.core.errors import CorruptRecord
from hrm_memory.core.records import Stored

from ...fsutil import storage_error
from .files import BucketFiles, by_offset
from .format import line_key, parse_line


class BulkReads:
    """The reads of one warm tier that walk whole namespaces; no state of its own."""

    def __init__(self, files: BucketFiles) -> None:
        self.files = files

    def scan(self, namespace: str, *, archived: bool = False, strict: bool = True) -> Iterator[Stored]:
        """Live records of ``namespace``; archived markers too when ``archived``.

        ``strict`` (what queries use) answers as :meth:`get` does: a key whose
        newest line is damaged, or any key of a bucket holding a damaged line
        whose key is unreadable, raises :class:`CorruptRecord` rather than
        serving an older version. Maintenance (archive,
        caps, purge, check) scans with ``strict=False`` and skips them."""
        for b in self.files.buckets_of(namespace):
            with b.lock:
                if not self.files.full(b):
                    continue
                wanted = ("p", "a") if archived else ("p",)
                if strict:
                    for k, e in b.index.items():
                        if e.op == "x" or (b.unknown_after >= 0 and e.offset < b.unknown_after and e.op in wanted):
                            raise CorruptRecord(
                                f"record {namespace}/{k!r} cannot be served: its newest line (or a line "
                                f"that may be it) in {b.path.name} is damaged; run check(fix=True)",
                                namespace=namespace,
                                key=k,
                                path=str(b.path),
                            )
                entries = sorted(
                    ((k, e) for k, e in b.index.items() if e.op in wanted), key=by_offset
                )
                if not entries:
                    continue
                _, first = entries[0]
                _, last = entries[-1]
                lo, hi = first.offset, last.offset + last.length
                fd = b.fd if b.fd is not None else self.files.open_existing(b)
                try:
                    data = os.pread(fd, hi - lo, lo)
                except OSError as exc:
                    raise storage_error(exc, "read", b.path) from None
                out = []
                for k, e in entries:
                    line = data[e.offset - lo : e.offset - lo + e.length]
                    parsed = parse_line(line)
                    if parsed is None or line_key(parsed) != k:
                        raise CorruptRecord(
                            f"record {namespace}/{k!r} failed its checksum on read",
                            namespace=namespace,
                            key=k,
                            path=str(b.path),
                        )
                    _, value = parsed
                    out.append(Stored(k, e.version, e.created_us, e.updated_us, value, "warm" if e.op == "p" else "cold"))
            yield from out

    def keys(self, namespace: str) -> list[tuple[str, int, int]]:
        """``(key, created_us, updated_us)`` of every live (not archived) key,
        as the backend protocol says (it returned the version second and the
        creation time third, which recall's reconcile read as the update time)."""
        out: list[tuple[str, int, int]] = []
        for b in self.files.buckets_of(namespace):
            with b.lock:
                self.files.full(b)
                out.extend((k, e.created_us, e.updated_us) for k, e in b.index.items() if e.op == "p")
        return out

    def stats(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for ns in self.files.namespaces():
            live = archived = deleted = size = 0
            for b in self.files.buckets_of(ns):
                with b.lock:
                    self.files.full(b)
                    size += b.size + b.tail
                    for e in b.index.values():
                        if e.op == "p":
                            live += 1
                        elif e.op == "a":
                            archived += 1
                        elif e.op == "d":
                            deleted += 1
            out[ns] = {"keys": live, "archived": archived, "deleted": deleted, "bytes": size}
        return out

