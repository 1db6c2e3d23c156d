"""``where`` filters for queries, in LangGraph's operator vocabulary.

``where`` maps a field to a condition. A field is a key of the (readable)
value; dots reach into nested objects (``"meta.prio"``). A condition is
either a plain JSON value (equality) or an object of operators:

``$eq $ne $gt $gte $lt $lte`` and ``$in`` (a list of allowed values).

Equality is JSON equality with numbers compared as numbers (``3 == 3.0``) but
never equal to booleans (``True`` is not ``1``). Ordering operators compare
numbers with numbers and strings with strings; a value of another type simply
does not match. A filter that cannot mean anything (an unknown operator, an
ordering operand that is not a number or a string, ``$in`` without a list)
raises :class:`InvalidFilter` before any record is read, so a typo is never a
silent empty result.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from hrm_memory.core.errors import InvalidArgument, InvalidFilter

_MISSING = object()
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}
OPERATORS = ("$eq", "$ne", *_ORDER, "$in")

Test = Callable[[Any], bool]


def _kind(value: Any) -> str:
    """The comparison class of a JSON value: numbers (not bools) are one class."""
    t = type(value)
    if t is int or t is float:
        return "number"
    return t.__name__


def json_equal(a: Any, b: Any) -> bool:
    """Deep JSON equality where ``3 == 3.0`` and ``1 != True``."""
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        return False
    if ka == "dict":
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if ka == "list":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _ordered(op: str, operand: Any, field: str) -> Test:
    kind = _kind(operand)
    if kind not in ("number", "str"):
        raise InvalidFilter(
            f"where[{field!r}]: {op} needs a number or a string, not {type(operand).__name__}", field=field
        )
    compare = _ORDER[op]
    return lambda v: v is not _MISSING and _kind(v) == kind and compare(v, operand)


def _condition(op: str, operand: Any, field: str) -> Test:
    if op == "$eq":
        return lambda v: v is not _MISSING and json_equal(v, operand)
    if op == "$ne":
        return lambda v: v is _MISSING or not json_equal(v, operand)
    if op in _ORDER:
        return _ordered(op, operand, field)
    if op == "$in":
        if type(operand) is not list:
            raise InvalidFilter(f"where[{field!r}]: $in needs a list, not {type(operand).__name__}", field=field)
        options = list(operand)
        return lambda v: v is not _MISSING and any(json_equal(v, o) for o in options)
    raise InvalidFilter(
        f"where[{field!r}]: unknown operator {op!r}; supported: {', '.join(OPERATORS)}", field=field
    )


def _compile_field(field: str, condition: Any) -> Test:
    if type(condition) is dict and condition and any(type(k) is str and k.startswith("$") for k in condition):
        if not all(type(k) is str and k.startswith("$") for k in condition):
            raise InvalidFilter(
                f"where[{field!r}]: mixes operators and plain fields; write {{'$eq': {{...}}}} to match an object",
                field=field,
            )
        tests = [_condition(op, operand, field) for op, operand in condition.items()]
        return lambda v: all(t(v) for t in tests)
    return _condition("$eq", condition, field)


def compile_where(where: Mapping[str, Any] | None) -> Callable[[Any], bool] | None:
    """A predicate over values for ``where``, or None for no filter. Raises
    :class:`InvalidFilter` for a filter that cannot mean anything."""
    if where is None:
        return None
    if not isinstance(where, Mapping):
        raise InvalidFilter(f"where must be a mapping of field -> condition, not {type(where).__name__}")
    if not where:
        return None
    compiled: list[tuple[list[str], Test]] = []
    for field, condition in where.items():
        if type(field) is not str or not field or "" in field.split("."):
            raise InvalidFilter(f"where: field names are non-empty dotted strings, not {field!r}", field=field)
        compiled.append((field.split("."), _compile_field(field, condition)))

    def matches(value: Any) -> bool:
        for path, test in compiled:
            node = value
            for part in path:
                if type(node) is not dict:
                    node = _MISSING
                    break
                node = node.get(part, _MISSING)
                if node is _MISSING:
                    break
            if not test(node):
                return False
        return True

    return matches


__all__ = ["OPERATORS", "compile_where", "json_equal", "query_filter"]


def query_filter(key_glob: Any, where: Mapping[str, Any] | None, limit: Any) -> Callable[[Any], bool] | None:
    """Check a query's key pattern and limit (:class:`InvalidArgument`) and
    compile its ``where`` (:func:`compile_where`): what query() and the
    query of a past moment take alike."""
    if limit is not None and (type(limit) is not int or limit < 0):
        raise InvalidArgument(f"limit must be a non-negative int, not {limit!r}")
    if not isinstance(key_glob, str):
        raise InvalidArgument("the key pattern must be a str glob")
    return compile_where(where)
