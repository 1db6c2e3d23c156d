"""How LangGraph's store data sits in one hrm-memory namespace (see docs/langgraph.md).

A LangGraph item lives at ``(namespace: tuple[str, ...], key: str)``. The
adapter keeps every item of a store in one declared hrm-memory namespace
(``langgraph.store`` by default), under one hrm key built from the labels and
the item key:

    hrm_key = esc(label_1) "/" esc(label_2) ... "/" esc(label_n) "//" esc(key)

``esc`` percent-escapes ``%``, ``/``, the glob characters ``* ? [ ]`` and every
character that is not printable (``%XX``, ``%uXXXX``, ``%UXXXXXXXX``), so the
hrm key is printable (as hrm-memory requires), no two items share one, and
the items under a namespace prefix ``(a, b)`` are exactly the keys that start
with ``esc(a) "/" esc(b) "/"``. Labels are never empty (LangGraph refuses
empty labels), so ``//`` only ever separates the namespace from the key.
A key whose UTF-8 form would pass hrm-memory's 1024-byte limit keeps its first
bytes and ends with ``%#`` and the SHA-256 of the whole form (``%#`` never
occurs in an escaped key), so prefix listing still reaches it.

The stored value is an envelope that carries everything needed to rebuild the
item without parsing the key: ``n`` (labels) and ``k`` (key), escaped as in the
key (so that a label holding a lone surrogate is still JSON), ``v`` (the value,
exactly as put), and when set ``x`` (expiry, epoch seconds), ``t`` (TTL in
minutes, for refresh on read), ``u`` (the time of the last put, in
microseconds, kept once a TTL refresh rewrote the record) and ``e`` (embedding
vectors by field path, little-endian float64 in base64). The item's times are
the record's: ``created_at`` survives overwrites, ``updated_at`` is the last put.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from hrm_memory.core.errors import InvalidFilter
from hrm_memory.core.filters import OPERATORS
from hrm_memory.core.records import Record
from hrm_memory.core.spec import MAX_KEY_BYTES

#: Characters escaped besides the unprintable ones.
_SPECIAL = frozenset("%/*?[]")
#: Bytes kept of an over-long key before its hash.
_KEEP_BYTES = MAX_KEY_BYTES - 80
_HASHED = "%#"
SEP = "/"
KEY_SEP = "//"


def escape(text: str) -> str:
    """``text`` with ``% / * ? [ ]`` and unprintable characters percent-escaped."""
    if text.isprintable() and not _SPECIAL.intersection(text):
        return text
    out = []
    for ch in text:
        if ch in _SPECIAL or not ch.isprintable():
            code = ord(ch)
            if code < 0x100:
                out.append(f"%{code:02X}")
            elif code < 0x10000:
                out.append(f"%u{code:04X}")
            else:
                out.append(f"%U{code:08X}")
        else:
            out.append(ch)
    return "".join(out)


def unescape(text: str) -> str:
    """The inverse of :func:`escape`."""
    if "%" not in text:
        return text
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        kind = text[i + 1]
        width = 4 if kind == "u" else 8 if kind == "U" else 0
        if width:
            out.append(chr(int(text[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        else:
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
    return "".join(out)


def _bounded(text: str) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_KEY_BYTES:
        return text
    digest = hashlib.sha256(data).hexdigest()
    return data[:_KEEP_BYTES].decode("utf-8", "ignore") + _HASHED + digest


def prefix_of(labels: Sequence[str]) -> str:
    """The hrm key prefix shared by every item under the namespace prefix ``labels``."""
    if not labels:
        return ""
    text = SEP.join(escape(label) for label in labels) + SEP
    data = text.encode("utf-8")
    if len(data) > _KEEP_BYTES:  # an over-long key keeps only its first bytes
        text = data[:_KEEP_BYTES].decode("utf-8", "ignore")
    return text


def hrm_key(labels: Sequence[str], key: str) -> str:
    """The hrm-memory key of the item ``(labels, key)``."""
    return _bounded(SEP.join(escape(label) for label in labels) + KEY_SEP + escape(key))


@functools.lru_cache(maxsize=1 << 16)  # a search parses every key under its prefix
def parse_key(text: str) -> tuple[tuple[str, ...], str] | None:
    """``(labels, key)`` back from an hrm key, or None for a hashed (over-long) one."""
    head, _, tail = text.partition(KEY_SEP)
    if "%" not in text:  # the common case: nothing escaped
        return tuple(head.split(SEP)), tail
    if _HASHED in text:
        return None
    return tuple(unescape(label) for label in head.split(SEP)), unescape(tail)


class Row(NamedTuple):
    """A live item as read: the record, its envelope, and its LangGraph namespace and key."""

    record: Record
    env: dict[str, Any]
    namespace: tuple[str, ...]
    key: str


def order(row: Row) -> tuple[tuple[str, ...], str]:
    """The default order: namespace (label by label), then key."""
    return row.namespace, row.key


# -- the envelope --------------------------------------------------------------------


def envelope(
    labels: Sequence[str],
    key: str,
    value: Any,
    now: float,
    ttl_minutes: float | None,
    vectors: Mapping[str, Sequence[float]] | None,
) -> dict[str, Any]:
    """The stored form of one item (see the module docstring)."""
    env: dict[str, Any] = {"n": [escape(label) for label in labels], "k": escape(key), "v": value}
    if ttl_minutes is not None:
        env["t"] = ttl_minutes
        env["x"] = now + ttl_minutes * 60.0
    if vectors:
        env["e"] = {path: pack(vec) for path, vec in vectors.items()}
    return env


def expired(env: Mapping[str, Any], now: float) -> bool:
    """True once the item's expiry (``x``, epoch seconds) has passed."""
    x = env.get("x")
    return x is not None and x <= now


# -- vectors -------------------------------------------------------------------------

_SWAP = sys.byteorder != "little"


def pack(vector: Sequence[float]) -> str:
    """A vector as base64 of little-endian float64 (one JSON string: cheap to store and parse)."""
    arr = array("d", (float(x) for x in vector))
    if _SWAP:
        arr.byteswap()
    return base64.b64encode(arr.tobytes()).decode("ascii")


def unpack(text: str) -> array[float]:
    """The inverse of :func:`pack`."""
    arr = array("d")
    arr.frombytes(base64.b64decode(text))
    if _SWAP:
        arr.byteswap()
    return arr


def norm(vector: Sequence[float]) -> float:
    return math.sqrt(math.fsum(x * x for x in vector))


def cosine(query: Sequence[float], query_norm: float, vector: Sequence[float]) -> float:
    """Cosine similarity; 0.0 when either vector is zero (as LangGraph's stores do)."""
    n = norm(vector)
    if query_norm == 0.0 or n == 0.0:
        return 0.0
    return math.fsum(a * b for a, b in zip(query, vector)) / (query_norm * n)


# -- filters -------------------------------------------------------------------------


def translate_filter(filter: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """LangGraph's ``filter`` as an hrm-memory ``where`` over the envelope.

    - ``{"field": value}``: equality; numbers compare as numbers (``3 == 3.0``,
      never ``True``), strings as strings, lists and objects by JSON equality;
    - ``{"field": {"$gt": 3}}``: the operators ``$eq $ne $gt $gte $lt $lte``
      (and hrm-memory's ``$in``); an ordering operator compares numbers with
      numbers and strings with strings, and never matches across types;
    - ``{"field": {"sub": value}}`` (an object without operators) matches
      like LangGraph's in-memory store, field by field: it is read as
      ``{"field.sub": value}``;
    - a dotted field ``"a.b"`` is a path: the value's ``a``, then its ``b``
      (as in ``index`` fields and hrm-memory's ``where``); a top-level key
      that itself contains a dot cannot be filtered on.

    Raises :class:`InvalidFilter` for anything else (an unknown operator, a
    field reached twice, a non-string field)."""
    if filter is None:
        return None
    if not isinstance(filter, Mapping):
        raise InvalidFilter(f"filter must be a mapping of field -> condition, not {type(filter).__name__}")
    where: dict[str, Any] = {}
    for field, condition in filter.items():
        _translate(where, field, condition)
    return where or None


def _translate(where: dict[str, Any], field: Any, condition: Any) -> None:
    if type(field) is not str or not field or "" in field.split("."):
        raise InvalidFilter(
            f"Invalid filter key {field!r}: a field is a dotted path of non-empty names", field=field
        )
    if isinstance(condition, Mapping):
        keys = list(condition)
        if any(type(k) is str and k.startswith("$") for k in keys):
            for op in keys:
                if op not in OPERATORS:
                    raise InvalidFilter(
                        f"filter[{field!r}]: unknown operator {op!r}; supported: {', '.join(OPERATORS)}",
                        field=field,
                    )
            _set(where, "v." + field, {op: _plain(v) for op, v in condition.items()})
            return
        if keys:
            for sub, cond in condition.items():
                if type(sub) is not str:
                    raise InvalidFilter(f"filter[{field!r}]: field names are strings, not {sub!r}", field=field)
                _translate(where, f"{field}.{sub}", cond)
            return
    _set(where, "v." + field, {"$eq": _plain(condition)})


def _set(where: dict[str, Any], path: str, condition: dict[str, Any]) -> None:
    if path in where:
        raise InvalidFilter(f"filter reaches {path[2:]!r} twice; give it one condition", field=path[2:])
    where[path] = condition


def _plain(value: Any) -> Any:
    """Tuples (which LangGraph accepts where it means a JSON array) as lists."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# -- namespace listing ---------------------------------------------------------------


def matches(namespace: tuple[str, ...], kind: str, path: Sequence[str]) -> bool:
    """Whether ``namespace`` starts (``kind="prefix"``) or ends (``"suffix"``)
    with ``path``, where a ``"*"`` label matches any one label."""
    if len(namespace) < len(path):
        return False
    if kind == "prefix":
        pairs: Iterable[tuple[str, str]] = zip(namespace, path)
    elif kind == "suffix":
        pairs = zip(reversed(namespace), reversed(path))
    else:
        raise InvalidFilter(f"unknown match type {kind!r}; expected 'prefix' or 'suffix'")
    return all(p == "*" or p == label for label, p in pairs)


def literal_head(path: Sequence[str]) -> tuple[str, ...]:
    """The labels of a prefix condition before its first wildcard."""
    head = []
    for label in path:
        if label == "*":
            break
        head.append(label)
    return tuple(head)


__all__ = [
    "Row",
    "order",
    "cosine",
    "envelope",
    "escape",
    "expired",
    "hrm_key",
    "literal_head",
    "matches",
    "norm",
    "pack",
    "parse_key",
    "prefix_of",
    "translate_filter",
    "unescape",
    "unpack",
]
