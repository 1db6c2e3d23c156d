"""A damaged checksum that ``int(..., 16)`` would still read as the same
number is caught: a tab before a leading ``0`` (``"\\t1ab2c3d"``), upper case
digits, a ``0x`` or ``+`` prefix. The checksum is compared as the exact digits
written, so whether damage is caught does not depend on the record's
checksum (its timestamps).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from hrm_memory import CorruptRecord, MemoryManager, NamespaceSpec
from hrm_memory.storage.fsutil import frame, unframe
from hrm_memory.storage.redis.scripts import decode
from hrm_memory.storage.file.warm.format import parse_line
from tests.helpers.damage import damage, find_line

NS = "t.notes"


def _variants(digits: bytes) -> list[bytes]:
    """Spellings of the same number that int(..., 16) accepts, each of the
    same length as the 8 digits (so a one-byte-or-so damage makes them)."""
    out = []
    if digits != digits.upper():
        out.append(digits.upper())
        i = next(i for i, c in enumerate(digits) if chr(c) in "abcdef")
        out.append(digits[:i] + digits[i : i + 1].upper() + digits[i + 1 :])
    if digits[:1] == b"0":
        out += [b"\t" + digits[1:], b" " + digits[1:], b"+" + digits[1:], b"\x0b" + digits[1:]]
    if digits[:2] == b"00":
        out.append(b"0x" + digits[2:])
    return [v for v in out if v != digits and int(v, 16) == int(digits, 16)]


def _body_whose_crc(pred: object) -> bytes:
    for i in range(100_000):
        body = b'["p","k",1,2,3]\t{"n":%d}' % i
        if pred(b"%08x" % zlib.crc32(body)):  # type: ignore[operator]
            return body
    raise AssertionError("no body found")


@pytest.mark.parametrize(
    "pred",
    [
        lambda d: d[:2] == b"00" and d != d.upper(),
        lambda d: d[:1] != b"0" and d != d.upper(),
    ],
)
def test_a_checksum_spelled_differently_fails(pred: object) -> None:
    """parse_line and unframe accept the digits as written and refuse every variant."""
    body = _body_whose_crc(pred)
    line = frame(body)[1:-1]
    assert parse_line(line) is not None and unframe(line) == body
    variants = _variants(line[:8])
    assert len(variants) >= 2
    for v in variants:
        bad = v + line[8:]
        assert parse_line(bad) is None, f"checksum {v!r} accepted for {line[:8]!r}"
        assert unframe(bad) is None, f"checksum {v!r} accepted for {line[:8]!r}"


def test_redis_record_blob_checksum_spelled_differently_fails() -> None:
    """The Redis record blob (``w<version>:<created>:<updated>:<crc><value>``)
    had the same int() parse."""
    value = _body_whose_crc(lambda d: d[:1] == b"0" and d != d.upper())
    digits = b"%08x" % zlib.crc32(value)
    good = b"w1:2:3:" + digits + value
    assert decode("k", good, "warm", NS) is not None
    for v in _variants(digits):
        with pytest.raises(CorruptRecord):
            decode("k", b"w1:2:3:" + v + value, "warm", NS)


def test_upper_cased_checksum_digit_in_a_store_is_caught(root: Path) -> None:
    """End to end, on a real store: every upper-cased hex letter of the
    newest line's checksum is found by check() and refused by read()."""
    specs = [NamespaceSpec(NS)]
    n = 0
    while True:  # a line whose checksum has a letter (98% of them do)
        n += 1
        with MemoryManager(root, durability="flush", namespaces=specs) as mm:
            mm.write(NS, "victim", {"n": n})
        path, start, _ = find_line(root, NS, "victim")
        digits = path.read_bytes()[start : start + 8]
        if digits != digits.upper():
            break
    original = path.read_bytes()
    for i, c in enumerate(digits):
        if chr(c) not in "abcdef":
            continue
        damage(path, {start + i: ord(chr(c).upper())})
        try:
            with MemoryManager(root, durability="flush", namespaces=specs) as mm:
                assert [f.kind for f in mm.check()] == ["corrupt-record"], f"digit {i} upper-cased went unnoticed"
                with pytest.raises(CorruptRecord):
                    mm.read(NS, "victim")
        finally:
            path.write_bytes(original)
