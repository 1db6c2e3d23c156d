"""Cold tier: an append-only archive of zlib-compressed msgpack frames.

Layout: ``cold/<namespace>/<nnnnnn>.seg``; a segment rolls over at 64 MiB.
A frame is::

    b"HRMc" | payload length (u32 BE) | crc32 of payload (u32 BE) | payload

and the payload is ``zlib(msgpack([[key, version, created_us, updated_us,
value_json_bytes], ...]))``. Values stay as their JSON bytes, so a record
comes back exactly as it was written, floats included.

The archive is never bulk-loaded: a lookup reads the one frame the warm
tier's marker points at (``"<segment>:<offset>"``), checks its crc32, and
decodes it only as far as the key it wants (``_Frame``: the rest is
inflated and unpacked by later lookups in that frame, if any); a query
streams one frame at a time. Nothing is ever deleted here by archiving; superseded copies
simply stop being current (the warm marker decides which copy is).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
from hrm_memory.core.backend import ARCHIVE, PERSISTENT
from hrm_memory.core.errors import CorruptRecord
from hrm_memory.core.records import Finding, Stored

from ..fsutil import (
    FILE_MODE,
    NOFOLLOW,
    atomic_write,
    ensure_real_dirs,
    fsync_dir,
    make_dirs,
    quarantine,
    storage_error,
)

MAGIC = b"HRMc"
SKIP = b"HRMz"  # a blanked damaged span (after check(fix=True)); scans as empty
_HEAD = struct.Struct(">4sII")
SEGMENT_BYTES = 64 * 1024 * 1024
FRAME_RECORDS = 256  # small enough that a lookup decodes little, large enough to compress well
FRAME_CACHE = 32  # frames kept per process, decoded as far as lookups went (a cold read of a recent frame skips zlib)
_INFLATE = 8 * 1024  # bytes a lazy decode inflates at a time
_new = tuple.__new__  # a Stored without the Python-level __new__ of a NamedTuple


def _encode_frame(records: list[Stored]) -> bytes:
    payload = zlib.compress(
        msgpack.packb([[r.key, r.version, r.created_us, r.updated_us, r.value] for r in records]), 6
    )
    return _HEAD.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def _is_record(row: Any) -> bool:
    """True if a decoded row is ``[key, version, created_us, updated_us, value_json]``."""
    return (
        type(row) is list and len(row) == 5 and type(row[0]) is str and type(row[1]) is int
        and type(row[2]) is int and type(row[3]) is int and type(row[4]) is bytes
    )  # fmt: skip


def _decode_payload(payload: bytes) -> list[Stored]:
    """The records of a frame; :class:`CorruptRecord` for a payload that passes
    its crc32 but is not zlib, not msgpack, or not records, so that read()
    and check() say what is wrong in the store's own error."""
    try:
        rows = msgpack.unpackb(zlib.decompress(payload), raw=False)
    except Exception as exc:  # noqa: BLE001 - zlib and msgpack errors are all damage
        raise CorruptRecord(f"archive frame cannot be decoded ({type(exc).__name__}: {exc})") from None
    if type(rows) is not list or not all(map(_is_record, rows)):
        raise CorruptRecord("archive frame does not hold records")
    return [_new(Stored, (r[0], r[1], r[2], r[3], r[4], "cold")) for r in rows]


class _Frame:
    """A frame's records, inflated and unpacked only as far as lookups
    needed: a cold read decodes half a frame on average, and builds one
    ``Stored``. Its payload passed its crc32 already; what fails to decode
    is damage (``CorruptRecord``), as in ``_decode_payload``. A frame holds
    each key once (``archive`` is given a namespace's current records), so
    the first row of a key is its row."""

    __slots__ = ("rows", "_z", "_src", "_unpacker", "_left", "_lock")

    def __init__(self, payload: bytes) -> None:
        self.rows: dict[str, list[Any]] = {}
        self._z = zlib.decompressobj()
        self._src = payload  # compressed bytes not yet inflated
        self._unpacker = msgpack.Unpacker(raw=False)
        self._left = -1  # rows not yet unpacked (-1: the array header not read yet)
        self._lock = threading.Lock()

    def get(self, key: str) -> list[Any] | None:
        row = self.rows.get(key)
        if row is None and self._left:
            with self._lock:  # one decode at a time; it resumes where the last stopped
                while (row := self.rows.get(key)) is None and self._left:
                    self._next_row()
        return row

    def _next_row(self) -> None:
        unpacker = self._unpacker
        while True:
            try:
                if self._left < 0:
                    self._left = unpacker.read_array_header()
                    if not self._left:
                        return
                row = unpacker.unpack()
                break
            except msgpack.OutOfData:
                self._inflate()
            except Exception as exc:  # noqa: BLE001 - msgpack's errors are all damage
                raise CorruptRecord(f"archive frame cannot be decoded ({type(exc).__name__}: {exc})") from None
        if type(row) is not list or len(row) != 5 or type(row[0]) is not str:
            raise CorruptRecord("archive frame does not hold records")
        self._left -= 1
        self.rows.setdefault(row[0], row)

    def _inflate(self) -> None:
        z = self._z
        if z.eof or not (self._src or z.unconsumed_tail):
            raise CorruptRecord("archive frame cannot be decoded (truncated)")
        try:
            out = z.decompress(self._src, _INFLATE)
        except zlib.error as exc:
            raise CorruptRecord(f"archive frame cannot be decoded (error: {exc})") from None
        self._src = z.unconsumed_tail
        self._unpacker.feed(out)


def _damaged(namespace: str, key: str, path: Path, why: str) -> CorruptRecord:
    return CorruptRecord(f"archived record {namespace}/{key!r} {why}", namespace=namespace, key=key, path=str(path))


class ColdTier:
    """The cold archive. Query only: no ``put`` of single records, no delete
    except :meth:`purge` (an explicit rewrite, for consent revocation)."""

    name = "cold"
    capabilities = frozenset({PERSISTENT, ARCHIVE})

    def __init__(self, root: Path, *, durability: str = "fsync") -> None:
        self.store_root = root
        self.root = root / "cold"
        self.fsync = durability == "fsync"
        self._lock = threading.Lock()
        # Decoded frames, by (namespace, location), with the identity of what
        # was read: the segment file (dev, inode) and the frame's length and
        # crc32. A location ("<segment>:<offset>") is reused once a purge in
        # any process removed the segment and a new archive wrote another
        # frame there, so a cached frame is served only after its segment's
        # header at that offset is read again and still says the same
        # (a cache keyed by the location alone would serve a purged frame,
        # and a sound record written there since would read as CorruptRecord).
        self._frame_cache: OrderedDict[tuple[str, bytes], tuple[tuple[int, int, int, int], _Frame]] = OrderedDict()

    def _segments(self, namespace: str) -> list[Path]:
        ensure_real_dirs(self.store_root, "cold", namespace)
        d = self.root / namespace
        try:
            return sorted(d / n for n in os.listdir(d) if n.endswith(".seg") and n[:-4].isdigit())
        except FileNotFoundError:
            return []

    def archive(self, namespace: str, records: list[Stored]) -> list[bytes]:
        """Append ``records`` durably; return each one's location (in order)."""
        if not records:
            return []
        with self._lock:
            d = self.root / namespace
            try:
                make_dirs(d, durable=True)
            except OSError as exc:
                raise storage_error(exc, "create directory", d) from None
            segs = self._segments(namespace)
            seg = segs[-1] if segs else d / "000001.seg"
            if seg.exists() and seg.stat().st_size >= SEGMENT_BYTES:
                seg = d / f"{int(seg.stem) + 1:06d}.seg"
            new = not seg.exists()
            locations: list[bytes] = []
            try:
                fd = os.open(seg, os.O_RDWR | os.O_APPEND | os.O_CREAT | NOFOLLOW, FILE_MODE)
            except OSError as exc:
                raise storage_error(exc, "open", seg) from None
            try:
                for i in range(0, len(records), FRAME_RECORDS):
                    batch = records[i : i + FRAME_RECORDS]
                    frame = _encode_frame(batch)
                    try:
                        n = os.write(fd, frame)
                    except OSError as exc:
                        raise storage_error(exc, "write", seg) from None
                    end = os.lseek(fd, 0, os.SEEK_CUR)
                    if n != len(frame):
                        try:
                            os.ftruncate(fd, end - n)
                        finally:
                            raise storage_error(OSError(28, "short write"), "write", seg)
                    loc = f"{seg.stem}:{end - len(frame)}".encode()
                    locations.extend([loc] * len(batch))
                # The warm markers are written only after this fsync: a record
                # is always in at least one tier, never in neither.
                try:
                    os.fsync(fd)
                except OSError as exc:
                    raise storage_error(exc, "fsync", seg) from None
            finally:
                os.close(fd)
            if new:
                try:
                    fsync_dir(d)
                except OSError as exc:
                    raise storage_error(exc, "fsync", d) from None
            return locations

    def fetch(self, namespace: str, key: str, location: bytes) -> Stored:
        """The archived record of ``key`` at ``location``; raises CorruptRecord."""
        cached = self._frame_cache.get((namespace, location))
        identity, frame = self._read_frame(namespace, key, location, cached)
        if cached is None or cached[1] is not frame:
            with self._lock:
                self._frame_cache[(namespace, location)] = (identity, frame)
                while len(self._frame_cache) > FRAME_CACHE:
                    self._frame_cache.popitem(last=False)
        try:
            row = frame.get(key)
        except CorruptRecord as exc:
            self.forget(namespace, location)
            path = self._seg_path(namespace, location)
            raise _damaged(namespace, key, path, f"frame at {location.decode()}: {exc}") from None
        if row is None:
            raise CorruptRecord(
                f"archived record {namespace}/{key!r} is missing from its frame",
                namespace=namespace,
                key=key,
                path=str(self.root / namespace),
            )
        if not _is_record(row):
            path = self._seg_path(namespace, location)
            raise _damaged(namespace, key, path, f"frame at {location.decode()} does not hold records")
        return _new(Stored, (key, row[1], row[2], row[3], row[4], "cold"))

    def forget(self, namespace: str, location: bytes) -> None:
        """Drop a cached frame (it no longer matches what the warm tier says)."""
        with self._lock:
            self._frame_cache.pop((namespace, location), None)

    def _seg_path(self, namespace: str, location: bytes) -> Path:
        return self.root / namespace / f"{location.decode().partition(':')[0]}.seg"

    def _read_frame(
        self, namespace: str, key: str, location: bytes, cached: tuple[tuple[int, int, int, int], _Frame] | None
    ) -> tuple[tuple[int, int, int, int], _Frame]:
        """The frame at ``location`` and its identity (segment dev and inode,
        frame length and crc32): ``cached`` if the file still holds that
        frame there (one header read), else read and checked afresh."""
        seg_name, _, off_text = location.decode().partition(":")
        path = self.root / namespace / f"{seg_name}.seg"
        try:
            ensure_real_dirs(self.store_root, "cold", namespace)
            fd = os.open(path, os.O_RDONLY | NOFOLLOW)
            try:
                off = int(off_text)
                st = os.fstat(fd)
                head = os.pread(fd, _HEAD.size, off)
                magic, length, crc = _HEAD.unpack(head)
                identity = (st.st_dev, st.st_ino, length, crc)
                if cached is not None and cached[0] == identity and magic == MAGIC:
                    return cached
                payload = os.pread(fd, length, off + _HEAD.size)
            finally:
                os.close(fd)
        except (OSError, ValueError, struct.error) as exc:
            raise _damaged(namespace, key, path, f"is unreadable at {location.decode()}: {exc}") from None
        if magic != MAGIC or zlib.crc32(payload) != crc or len(payload) != length:
            raise _damaged(namespace, key, path, f"frame at {location.decode()} fails its checksum")
        return identity, _Frame(payload)

    def scan(self, namespace: str) -> Iterator[Stored]:
        """Every archived copy in ``namespace``, oldest first, one frame in
        memory at a time. Damaged frames are skipped here (check reports them)."""
        for seg in self._segments(namespace):
            for _off, payload in self._frames(seg):
                if payload is not None:
                    yield from _decode_payload(payload)

    def _frames(self, seg: Path) -> Iterator[tuple[int, bytes | None]]:
        """``(offset, payload)`` per frame; ``payload`` None for a damaged span,
        after which the scan resynchronises on the next magic."""
        with os.fdopen(os.open(seg, os.O_RDONLY | NOFOLLOW), "rb") as f:
            data_len = os.fstat(f.fileno()).st_size
            off = 0
            while off < data_len:
                f.seek(off)
                head = f.read(_HEAD.size)
                ok = len(head) == _HEAD.size
                if ok:
                    magic, length, crc = _HEAD.unpack(head)
                    if magic == SKIP and off + _HEAD.size + length <= data_len:
                        off += _HEAD.size + length
                        continue
                    ok = magic == MAGIC and off + _HEAD.size + length <= data_len
                if ok:
                    payload = f.read(length)
                    if zlib.crc32(payload) == crc:
                        try:
                            _decode_payload(payload)
                        except CorruptRecord:
                            ok = False
                        else:
                            yield off, payload
                            off += _HEAD.size + length
                            continue
                # Damaged: find the next frame start and report the gap.
                f.seek(off + 1)
                rest = f.read()
                nxt = rest.find(MAGIC)
                end = data_len if nxt < 0 else off + 1 + nxt
                yield off, None
                off = end

    def namespaces(self) -> list[str]:
        if self.root.is_symlink():
            return []
        try:
            return sorted(n for n in os.listdir(self.root) if not (self.root / n).is_symlink())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def check(self, fix: bool = False) -> list[Finding]:
        findings = []
        for namespace in self.namespaces():
            for seg in self._segments(namespace):
                if seg.is_symlink():
                    continue
                mode = seg.stat().st_mode & 0o777
                if mode & 0o077:
                    findings.append(
                        Finding("bad-permissions", str(seg), f"mode {mode:o}, expected 600", namespace, fixed=fix)
                    )
                    if fix:
                        os.chmod(seg, FILE_MODE)
                frames = list(self._frames(seg))
                bad = [off for off, payload in frames if payload is None]
                for off in bad:
                    findings.append(
                        Finding(
                            "corrupt-frame",
                            str(seg),
                            f"archive frame at offset {off} fails its checksum or is truncated",
                            namespace,
                            fixed=fix,
                            extra={"offset": off},
                        )
                    )
                if fix and bad:
                    self._rewrite_without_damage(namespace, seg, frames)
        return findings

    def _rewrite_without_damage(self, namespace: str, seg: Path, frames: list[tuple[int, bytes | None]]) -> None:
        """Copy damaged spans to quarantine, then blank them in place.

        Good frames keep their offsets, so the warm tier's markers stay
        valid; a damaged span becomes a skip frame (or is cut off when it is
        the tail of the segment)."""
        raw = seg.read_bytes()
        bounds = [off for off, _ in frames] + [len(raw)]
        out = bytearray(raw)
        cut = len(raw)
        for i, (off, payload) in enumerate(frames):
            if payload is not None:
                continue
            span = bytes(raw[off : bounds[i + 1]])
            quarantine(self.store_root, f"cold/{namespace}/{seg.name}", span, f"corrupt-{off}")
            if bounds[i + 1] == len(raw):
                cut = off
            elif len(span) >= _HEAD.size:
                out[off : off + len(span)] = _HEAD.pack(SKIP, len(span) - _HEAD.size, 0) + bytes(len(span) - _HEAD.size)
        atomic_write(seg, bytes(out[:cut]))
        self._frame_cache.clear()

    def purge(self, namespace: str) -> int:
        """Remove the whole archive of ``namespace`` (consent revoked with
        purge); return the number of archived copies removed. Whole-namespace
        only on purpose: rewriting part of a segment would move the frames
        that warm markers point at."""
        removed = 0
        with self._lock:
            for seg in self._segments(namespace):
                for _off, payload in self._frames(seg):
                    if payload is not None:
                        removed += len(_decode_payload(payload))
                try:
                    seg.unlink()
                except OSError as exc:
                    raise storage_error(exc, "remove", seg) from None
            self._frame_cache.clear()
            try:
                fsync_dir(self.root / namespace)
            except OSError:
                pass  # nothing left to make durable, or the directory went with it
        return removed

    def erase(self, namespace: str, key: str) -> int:
        """Remove every archived copy of ``key`` (``MemoryManager.forget``);
        return how many. Each frame holding one is rewritten in place, at the
        same offset and length: the other rows recompressed, the rest of the
        span zero bytes after the zlib stream (which decoding ignores), so
        the warm markers of the other keys stay valid and not a byte of the
        key's rows is left in the segment. A frame whose recompressed rows
        would not fit (never seen: fewer rows compress smaller) raises
        :class:`CorruptRecord` and changes nothing."""
        removed = 0
        with self._lock:
            for seg in self._segments(namespace):
                patches: list[tuple[int, bytes]] = []
                for off, payload in self._frames(seg):
                    if payload is None:
                        continue
                    rows = _decode_payload(payload)
                    keep = [r for r in rows if r.key != key]
                    if len(keep) == len(rows):
                        continue
                    removed += len(rows) - len(keep)
                    if keep:
                        body = zlib.compress(
                            msgpack.packb([[r.key, r.version, r.created_us, r.updated_us, r.value] for r in keep]), 9
                        )
                        if len(body) > len(payload):
                            raise CorruptRecord(
                                f"archive frame at {seg}:{off} cannot be rewritten in place without {key!r}",
                                namespace=namespace, key=key, path=str(seg),
                            )
                        body += bytes(len(payload) - len(body))
                        patches.append((off, _HEAD.pack(MAGIC, len(body), zlib.crc32(body)) + body))
                    else:
                        patches.append((off, _HEAD.pack(SKIP, len(payload), 0) + bytes(len(payload))))
                if not patches:
                    continue
                try:
                    fd = os.open(seg, os.O_WRONLY | NOFOLLOW)
                    try:
                        for off, data in patches:
                            os.pwrite(fd, data, off)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                except OSError as exc:
                    raise storage_error(exc, "rewrite", seg) from None
            self._frame_cache.clear()
        return removed

    def stats(self) -> dict[str, dict[str, int]]:
        out = {}
        for ns in self.namespaces():
            segs = self._segments(ns)
            out[ns] = {"segments": len(segs), "bytes": sum(s.stat().st_size for s in segs)}
        return out

    def close(self) -> None:
        return None
