"""Encoding of values: strict JSON, exact round trip, typed errors.

A value is accepted only if it reads back *equal and of the same types*:
dict (str keys), list, str, int (signed or unsigned 64-bit), float (finite),
bool, None. orjson does the work in C; on the happy path the only extra cost
is one decode and one equality test, which also catches what orjson would
quietly convert (NaN to null, a tuple to a list, a UUID or an Enum to its
JSON form).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from .errors import InvalidValue, ValueTooLarge

_DUMP_OPTS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
_MAX_DEPTH = 254  # orjson refuses deeper nesting (at 255 levels)

loads = orjson.loads


def encode(value: Any, *, limit: int, namespace: str | None = None, key: str | None = None) -> bytes:
    """Encode ``value`` as compact JSON bytes, or raise :class:`InvalidValue`
    (naming the path of the offending part) or :class:`ValueTooLarge`."""
    try:
        data = orjson.dumps(value, option=_DUMP_OPTS)
    except orjson.JSONEncodeError:
        data = None
    if data is None or orjson.loads(data) != value:
        # orjson writes NaN as null and a tuple as a list; comparing the
        # decoded copy with the original catches every such conversion.
        found = problem(value) or ("$", "value does not round-trip as JSON")
        raise InvalidValue(
            f"value is not plain JSON data: {found[1]} at {found[0]}",
            namespace=namespace,
            key=key,
            path=found[0],
        )
    if len(data) > limit:
        raise ValueTooLarge(
            f"value is {len(data)} bytes encoded; the limit is {limit}",
            namespace=namespace,
            key=key,
            path="$",
            size=len(data),
        )
    return data


def problem(value: Any) -> tuple[str, str] | None:
    """``(path, reason)`` of the first part of ``value`` that is not plain JSON, or None."""
    return _walk(value, "$", 0, set())


def _walk(value: Any, path: str, depth: int, open_: set[int]) -> tuple[str, str] | None:
    t = type(value)
    if t is str or t is bool or value is None:
        return None
    if t is int:
        return None if -(2**63) <= value < 2**64 else (path, "integer does not fit in 64 bits")
    if t is float:
        return None if math.isfinite(value) else (path, f"{value!r} is not a JSON number")
    if t is not dict and t is not list:
        return (path, f"{t.__name__} is not a JSON type (use dict, list, str, int, float, bool, None)")
    if depth >= _MAX_DEPTH:
        return (path, f"nesting deeper than {_MAX_DEPTH} levels")
    if id(value) in open_:
        return (path, "circular reference")
    open_.add(id(value))
    if t is dict:
        for k, v in value.items():
            if type(k) is not str:
                return (f"{path}[{k!r}]", f"dict key {k!r} is a {type(k).__name__}, not a str")
            found = _walk(v, f"{path}.{k}", depth + 1, open_)
            if found:
                return found
    else:
        for i, v in enumerate(value):
            found = _walk(v, f"{path}[{i}]", depth + 1, open_)
            if found:
                return found
    open_.discard(id(value))
    return None
