"""Encoding of values: strict JSON, exact round trip, typed errors.

A value is accepted only if it reads back *equal and of the same types*:
dict (str keys), list, str, int (signed or unsigned 64-bit), float (finite),
bool, None. orjson does most of the work in C (it refuses subclasses of the
JSON types, non-str keys, ints beyond 64 bits, cycles and nesting deeper than
254 levels). What it would quietly convert is caught by one walk of the value
with exact type checks (``type(x) is int``): NaN and infinities (written as
null), tuples (written as lists), UUIDs, and Enum members, ``IntEnum``,
``IntFlag`` and ``StrEnum`` included (written as their value, which would
read back as a plain int or str). That walk costs less than decoding the
JSON again and comparing (see ``_exact``); only a refused value is walked a second time, by ``problem``,
to name the offending part.
"""

from __future__ import annotations

import math
from typing import Any, Union

import orjson

from hrm_memory.core.errors import InvalidValue, ValueTooLarge

_DUMP_OPTS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
_MAX_DEPTH = 254  # orjson refuses deeper nesting (at 255 levels)

loads = orjson.loads

#: ``_join((data, b""))`` is an exact-size copy of ``data``. orjson (3.12 and
#: later) returns bytes whose allocation is rounded up, 4 KiB at least: a
#: 200-byte record kept as it comes out of ``dumps`` holds 4 KiB, and the hot
#: tier and the read cache keep every value they store. The copy costs
#: less than a fresh page per hot write would.
_join = b"".join


def kept(data: bytes) -> bytes:
    """An exact-size copy of ``data``, for bytes that will be kept (see
    ``_join``; the hot write spells it out)."""
    return _join((data, b""))


def encode(value: Any, *, limit: int, namespace: str | None = None, key: str | None = None) -> bytes:
    """Encode ``value`` as compact JSON bytes, or raise :class:`InvalidValue`
    (naming the path of the offending part) or :class:`ValueTooLarge`."""
    try:
        data = orjson.dumps(value, option=_DUMP_OPTS)
    except orjson.JSONEncodeError:
        data = None
    if data is None or not _exact(value):
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
    return kept(data)


#: How to copy a private snapshot (see :func:`snapshot`) into a value that
#: shares nothing mutable with it: None for a scalar (immutable: hand it out
#: as is); else the container is copied (a snapshot keeps a list as a tuple:
#: ``list(t)``; a dict: ``d.copy()``) and then each ``(key or index,
#: sub-plan)`` entry, the nested containers only (``()``: a container of
#: scalars, one C-level copy).
Plan = Union[tuple[tuple[Any, "Plan"], ...], None]

_PLANS: dict[Any, Any] = {}  # one of each plan made (see snapshot)
_PLANS_MAX = 4096


def encode_snapshot(
    value: Any, limit: int, namespace: str | None = None, key: str | None = None
) -> tuple[bytes, Any, Plan]:
    """Like :func:`encode`, and also a private copy of ``value`` (sharing no
    container with it) and its copy plan, from the one walk that checks the
    types: what the hot tier keeps so that a read is :func:`clone` (shallow
    C-level copies of the containers only) instead of a JSON decode."""
    try:
        data = orjson.dumps(value, option=_DUMP_OPTS)
    except orjson.JSONEncodeError:
        data = None
    snap = None if data is None else snapshot(value)
    if snap is None:
        encode(value, limit=limit, namespace=namespace, key=key)  # raises, naming the offending part
        raise AssertionError("unreachable: encode accepted a value snapshot refused")  # pragma: no cover
    if len(data) > limit:  # type: ignore[arg-type]
        encode(value, limit=limit, namespace=namespace, key=key)  # raises ValueTooLarge
    return _join((data, b"")), snap[0], snap[1]  # type: ignore[arg-type]  # exact size (see _join)


def snapshot(value: Any) -> tuple[Any, Plan] | None:
    """``(copy, plan)`` if every part of ``value`` is exactly a JSON type
    (the test of :func:`_exact`, to be run after ``orjson.dumps`` accepted
    the value), else None. The copy shares no container with ``value``
    (scalars are immutable, so they are shared); its lists are tuples (JSON
    has none, so a tuple can only be a list), so that once the garbage
    collector has seen a snapshot of plain data it stops tracking it, and
    nothing can change it in place; ``plan`` says where its nested
    containers are, for :func:`clone`."""
    kind = type(value)
    if kind is dict:
        copy: Any = value.copy()
        items: Any = copy.items()
    elif kind is list:
        copy = tuple(value)
        items = enumerate(copy)
    elif kind is str or kind is int or value is None or kind is bool or (kind is float and value - value == 0.0):
        return value, None
    else:
        return None
    plan: tuple[tuple[Any, Plan], ...] = ()
    for k, x in items:
        t = type(x)
        if t is str or t is int:
            continue
        if t is float:
            if x - x == 0.0:
                continue
            return None
        if x is None or t is bool:
            continue
        if t is list:
            # A list of scalars (the usual nested container), checked here
            # instead of by a call of snapshot, whose call overhead is a large
            # share of the walk: BENCHMARKS.md, "Figures the code's comments rely on".
            for y in x:
                u = type(y)
                if u is str or u is int or (u is float and y - y == 0.0) or y is None or u is bool:
                    continue
                break
            else:
                if type(copy) is tuple:
                    copy = list(copy)  # enumerate goes on over the tuple
                copy[k] = tuple(x)
                plan += ((k, ()),)
                continue
        if t is dict or t is list:
            sub = snapshot(x)
            if sub is None:
                return None
            if type(copy) is tuple:
                copy = list(copy)  # enumerate goes on over the tuple
            copy[k] = sub[0]  # an existing key's value: no resize, so the iteration is safe
            plan += ((k, sub[1]),)
            continue
        return None
    if type(copy) is list:
        copy = tuple(copy)
    if plan:
        # Values of one shape have equal plans: keep one of each (bounded),
        # so that a stored record holds no plan of its own (two tuples fewer
        # for the garbage collector to walk per hot write).
        plan = _PLANS.get(plan) or (_PLANS.setdefault(plan, plan) if len(_PLANS) < _PLANS_MAX else plan)
    return copy, plan


def clone(obj: Any, plan: Plan) -> Any:
    """A value equal to the snapshot ``obj`` that shares no container with
    it (see :data:`Plan`)."""
    if plan is None:
        return obj
    copy = list(obj) if type(obj) is tuple else obj.copy()
    for k, sub in plan:
        x = copy[k]
        copy[k] = clone(x, sub) if sub else list(x) if type(x) is tuple else x.copy()
    return copy


def _exact(value: Any) -> bool:
    """True if every part of ``value`` is exactly a JSON type (no subclass,
    Enum members included) and every float is finite.

    Runs only after ``orjson.dumps`` accepted the value, so it needs no
    cycle or depth guard and no check of dict keys or int ranges (orjson
    refused those already). Types are compared by identity, the cheapest
    test CPython has; ``x - x != 0.0`` is true exactly for NaN and the
    infinities."""
    t = type(value)
    if t is dict:
        items: Any = value.values()
    elif t is list:
        items = value
    else:
        return t is str or t is int or value is None or t is bool or (t is float and value - value == 0.0)
    for x in items:
        t = type(x)
        if t is str or t is int or x is None or t is bool:
            continue
        if t is float:
            if x - x != 0.0:
                return False
            continue
        if (t is dict or t is list) and _exact(x):
            continue
        return False
    return True


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
