"""Codecs: compact codes for stored values, lossless for every JSON value.

A :class:`Codec` is declared as data: field aliases for dict keys
(``relationship`` -> ``r``), value codes for whole strings (``work_colleague``
-> ``wk``) and code tables that describe codes (``timeboxing`` -> "Uses
timeboxing to prevent analysis paralysis"). :meth:`Codec.compact` applies the
aliases and codes at every depth; :meth:`Codec.expand` undoes them, so
``expand(compact(x)) == x`` with the same types and key order for every JSON
value x.

Escaping (one reserved character, ``ESCAPE = "~"``), applied to dict keys with
the aliases and to strings (list items and dict values) with the value codes:

- compact: a name with an alias or code becomes it; a string that *is* an alias
  or a code, or that starts with ``~``, gets a ``~`` prefix; anything else is
  kept as it is.
- expand: a leading ``~`` is removed (and nothing else done); an alias or a
  code becomes its name; anything else is kept.

So ordinary data needs no escapes; a dict holding both ``"r"`` and
``"relationship"`` compacts to ``{"~r": ..., "r": ...}``, the string ``"wk"``
to ``"~wk"`` and ``"~x"`` to ``"~~x"``. Numbers, booleans and null are never
touched. Values already in compact form (the legacy ``people`` entries
``{"r": "wk", "t": [...], "n": 2}``) satisfy ``compact(expand(v)) == v``
(:meth:`Codec.is_compact`), so they can be stored byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson

from hrm_memory.core.errors import InvalidNamespace
from hrm_memory.core.records import MISSING

#: The one reserved character: a key or string that starts with it was escaped.
ESCAPE = "~"

_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,31}", re.ASCII)
_EMPTY: Mapping[str, str] = MappingProxyType({})

#: What a compaction renamed: ``(name, code)`` pairs, one per place.
Renames = tuple[tuple[str, str], ...]
#: How a dict record of one key sequence is coded (Codec.compact_encoded):
#: its keys' codes, and where it held a container.
Plan = tuple[tuple[Any, ...], tuple[int, ...]]


@dataclass(frozen=True, eq=True)
class Codec:
    """Compact codes for one namespace (or a family of them), as data.

    - ``aliases``: field name -> alias, applied to dict keys at any depth.
    - ``values``: string value -> code, applied to strings (not keys) at any depth.
    - ``tables``: table name -> {code: description}, read by :meth:`describe`.

    Raises :class:`InvalidNamespace` (a ``ValueError``, attribute ``codec``) at
    construction if a mapping is not str -> str, a name or code is empty or
    starts with ``~``, an alias or code is not shorter than what it replaces,
    two names share an alias or code, or an alias or code is itself a name in
    the same mapping (no chains). The mappings are copied and read-only.
    Instances are immutable and safe to share between threads.
    """

    name: str
    aliases: Mapping[str, str] = field(default_factory=dict)
    values: Mapping[str, str] = field(default_factory=dict)
    tables: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    description: str = ""
    _key_out: dict[str, str] = field(init=False, repr=False, compare=False)
    _key_in: dict[str, str] = field(init=False, repr=False, compare=False)
    _str_out: dict[str, str] = field(init=False, repr=False, compare=False)
    _str_in: dict[str, str] = field(init=False, repr=False, compare=False)
    _out_names: frozenset[bytes] = field(init=False, repr=False, compare=False)
    _in_names: frozenset[bytes] = field(init=False, repr=False, compare=False)
    _split: bool = field(init=False, repr=False, compare=False)
    _shapes: dict[tuple[Any, ...], Plan] = field(init=False, repr=False, compare=False)
    _in_shapes: dict[tuple[Any, ...], Plan] = field(init=False, repr=False, compare=False)
    _in_edits: dict[bytes, tuple[tuple[bytes, bytes], ...]] = field(init=False, repr=False, compare=False)
    _key_renames: dict[tuple[Any, ...], Renames] = field(init=False, repr=False, compare=False)
    _key_names: frozenset[str] = field(init=False, repr=False, compare=False)
    _str_names: frozenset[str] = field(init=False, repr=False, compare=False)
    _key_edits: dict[Renames, tuple[tuple[bytes, bytes], ...] | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            raise InvalidNamespace(f"codec name {self.name!r} must be a lowercase identifier", codec=self.name)
        aliases = self._check_codes("aliases", self.aliases)
        values = self._check_codes("values", self.values)
        if not isinstance(self.tables, Mapping):
            raise InvalidNamespace(f"codec {self.name!r}: tables must be a mapping", codec=self.name)
        tables: dict[str, Mapping[str, str]] = {}
        for tname, table in self.tables.items():
            if not isinstance(tname, str) or not tname:
                raise InvalidNamespace(f"codec {self.name!r}: table name {tname!r} must be a non-empty str",
                                       codec=self.name)
            checked = self._check_map(f"tables[{tname!r}]", table)
            if "" in checked:
                raise InvalidNamespace(f"codec {self.name!r}: tables[{tname!r}] has an empty code", codec=self.name)
            tables[tname] = MappingProxyType(checked)
        set_ = object.__setattr__
        set_(self, "aliases", MappingProxyType(aliases))
        set_(self, "values", MappingProxyType(values))
        set_(self, "tables", MappingProxyType(tables))
        # (A JSON string that starts with "~" is looked for, everywhere below,
        # as b"~" in data and b'"~' in data: one memchr first, cheaper than
        # the two-byte search it spares on the usual value, which holds no
        # "~" at all: BENCHMARKS.md, "Figures the code's comments rely on".)
        # What compact/expand look up: a name becomes its code, a code gets
        # escaped; on the way back a code becomes its name.
        set_(self, "_key_out", {**{a: ESCAPE + a for a in aliases.values()}, **aliases})
        set_(self, "_key_in", {a: n for n, a in aliases.items()})
        set_(self, "_str_out", {**{c: ESCAPE + c for c in values.values()}, **values})
        set_(self, "_str_in", {c: v for v, c in values.items()})
        # What compact/expand would change, as the JSON strings (bytes between
        # the quotes, escaped as orjson escapes them) that spell it: see keeps().
        set_(self, "_out_names", frozenset(_json_inner(n) for n in (*self._key_out, *self._str_out)))
        set_(self, "_in_names", frozenset(_json_inner(n) for n in (*self._key_in, *self._str_in)))
        # keeps()/expands_nothing() split the bytes at quotes (C) instead of
        # matching every JSON string with a regex (sre pays per byte, the split
        # per quote: BENCHMARKS.md, "Figures the code's comments rely on"): exact when no name's JSON spelling holds a quote, so that a
        # string spelled as a name is a whole piece between two quotes.
        set_(self, "_split", not any(b'"' in n for n in (*self._out_names, *self._in_names)))
        set_(self, "_shapes", {})
        set_(self, "_in_shapes", {})
        set_(self, "_in_edits", _expand_edits(self._key_in, self._str_in))
        set_(self, "_key_renames", {})
        set_(self, "_key_edits", {})
        set_(self, "_key_names", frozenset(self._key_out))
        set_(self, "_str_names", frozenset(self._str_out))

    def __reduce__(self) -> tuple[Any, ...]:
        # Read-only mapping proxies do not pickle; rebuild from plain dicts
        # (validated again on the way in).
        tables = {t: dict(m) for t, m in self.tables.items()}
        return (Codec, (self.name, dict(self.aliases), dict(self.values), tables, self.description))

    def _check_map(self, what: str, mapping: object) -> dict[str, str]:
        if not isinstance(mapping, Mapping) or not all(
            type(k) is str and type(v) is str for k, v in mapping.items()
        ):
            raise InvalidNamespace(f"codec {self.name!r}: {what} must map str to str", codec=self.name)
        return dict(mapping)

    def _check_codes(self, what: str, mapping: object) -> dict[str, str]:
        checked = self._check_map(what, mapping)
        seen: dict[str, str] = {}
        for name, code in checked.items():
            problem = None
            if not name or not code:
                problem = "is empty"
            elif name.startswith(ESCAPE) or code.startswith(ESCAPE):
                problem = f"starts with the escape character {ESCAPE!r}"
            elif len(code) >= len(name):
                problem = "is not shorter than the name it replaces"
            elif code in seen:
                problem = f"is also the code of {seen[code]!r} (codes must be unique)"
            elif code in checked:
                problem = "is itself a name in the same mapping"
            if problem:
                raise InvalidNamespace(
                    f"codec {self.name!r}: {what} {name!r} -> {code!r}: the code {problem}",
                    codec=self.name,
                    name=name,
                    code=code,
                )
            seen[code] = name
        return checked

    # -- the transforms --------------------------------------------------------

    def compact(self, value: Any) -> Any:
        """The compact form of a JSON value (a new value; the input is not changed).

        Only dict keys and strings change; non-JSON parts (tuples, objects,
        non-str keys, str subclasses) pass through untouched for the encoder
        to reject."""
        return _compact(value, self._key_out, self._str_out)

    def compact_encoded(self, value: Any, data: bytes) -> Any:
        """:meth:`compact` of a checked JSON ``value`` whose orjson encoding
        is ``data`` (the warm write path). A dict record is coded by a plan
        kept per key sequence: its keys' codes, looked up once, and which of
        its values held a list or dict when the plan was made. The scalars
        are mapped through the value codes in C (``map(codes.get, vals,
        vals)``), a list of scalars likewise, and only a nested dict (or a
        list holding containers) is walked. Exact: ``data`` without ``"~``
        has no key or string to escape, and a scalar that is no code is kept
        as it is; a container where the plan has none makes the map raise
        (a list or dict is unhashable), and the plan is made again. Anything
        else is walked."""
        if type(value) is not dict or (b"~" in data and b'"~' in data):
            return _compact(value, self._key_out, self._str_out)
        return _planned(value, self._key_out, self._str_out, self._shapes, _compact)

    def expand_encoded(self, value: Any, data: bytes) -> Any:
        """:meth:`expand` of the JSON value decoded from ``data`` (the read
        path), by a plan kept per key sequence as :meth:`compact_encoded`
        does: ``data`` without ``"~`` has no escape to undo, so a dict
        record's keys and strings become their names by lookups in C, and
        only a nested dict or a list of containers is walked."""
        if type(value) is not dict or (b"~" in data and b'"~' in data):
            return _expand(value, self._key_in, self._str_in)
        return _planned(value, self._key_in, self._str_in, self._in_shapes, _expand)

    def renames_of(self, value: Any, data: bytes, plan: Any = MISSING) -> Renames | None:
        """Every ``(name, code)`` rename :meth:`compact` makes of a dict
        record ``value`` encoded as ``data`` (its arrays may be lists or, as
        in a hot record's private copy, tuples): its keys that have an
        alias or are one, then each string value or string of an array that
        has a code or is one, in order; ``()`` when the codec keeps the
        record as it is. None when that cannot be told without the walk: not
        a dict, ``data`` holds a ``"~`` (a name to escape), or a value is a
        dict or an array holding a container. What a span's
        ``tokens_saved`` counts (``tokens.renamed``), and, found empty, the
        cheap way to know a record needs no coding.

        ``plan``: for a hot record's private copy, its copy plan
        (``values.snapshot``). It lets the usual record be answered by set
        tests in C: when the plan's containers are all arrays of scalars
        holding no string with a code, every value is hashable, and one set
        test tells that no value has a code (the answer is then the key
        renames alone). Any other record takes the loop below."""
        if type(value) is not dict or (b"~" in data and b'"~' in data):
            return None
        keys = () if self._key_names.isdisjoint(value) else self._keys_renamed(tuple(value))
        codes = self._str_out
        if plan is not MISSING:
            names = self._str_names
            plain = True
            if plan:
                for k, sub in plan:
                    x = value[k]
                    if sub or type(x) is not tuple or not names.isdisjoint(x):
                        plain = False
                        break
            if plain and names.isdisjoint(value.values()):
                return keys
        found: list[tuple[str, str]] = []
        for v in value.values():
            t = type(v)
            if t is str:
                if v in codes:
                    found.append((v, codes[v]))
            elif t is list or t is tuple:
                for x in v:
                    u = type(x)
                    if u is str:
                        if x in codes:
                            found.append((x, codes[x]))
                    elif u is dict or u is list or u is tuple:
                        return None
            elif t is dict:
                return None
        return keys + tuple(found) if found else keys

    def renames_of_copy(self, copy: Any, plan: Any, data: bytes) -> Renames | None:
        """:meth:`renames_of` of a hot record's private copy and its copy plan."""
        return self.renames_of(copy, data, plan)

    def _keys_renamed(self, shape: tuple[str, ...]) -> Renames:
        """The ``(key, alias)`` renames of a dict record whose keys are
        ``shape``, in order, remembered per key sequence (bounded)."""
        keys = self._key_renames.get(shape)
        if keys is None:
            out = self._key_out
            keys = tuple([(k, out[k]) for k in shape if k in out])
            if len(self._key_renames) >= _SHAPES_MAX:
                self._key_renames.clear()
            self._key_renames[shape] = keys
        return keys

    def compact_json(self, data: bytes, pairs: Renames) -> bytes | None:
        """The coded JSON of the record :meth:`renames_of` found ``pairs``
        in, made on its JSON ``data``, when every rename is of a key to its
        alias (the usual coded record): ``data`` with each ``"name":``
        replaced by ``"alias":``, in C. None otherwise (a coded string, an
        escape, a name JSON spells differently, or a ``\\`` in ``data``):
        the caller codes the value.

        Exact: ``renames_of`` answers only for a record with no nested dict
        and no string starting with ``~``; without a backslash every quote
        of ``data`` is structural, so ``"name":`` is found only where a key
        is exactly ``name``, a key of the record itself, found once. No
        alias is a name (a codec has no chains), and a record holding a key
        spelled as an alias has an escape among its renames, so one
        replacement never makes a place for another."""
        if b"\\" in data:
            return None
        try:
            edits = self._key_edits[pairs]
        except KeyError:
            if len(self._key_edits) >= _SHAPES_MAX:
                self._key_edits.clear()
            edits = self._key_edits[pairs] = self._edits(pairs)
        if edits is None:
            return None
        for old, new in edits:
            data = data.replace(old, new)
        return data

    def _edits(self, pairs: Renames) -> tuple[tuple[bytes, bytes], ...] | None:
        """The byte edits of :meth:`compact_json` for ``pairs``, remembered
        by them, or None where they would not be exact: an escape, a name
        that JSON spells with an escape, or a pair that is (or could be) a
        string's code: every coded string's pair has its name's value code,
        so only pairs that are all key renames get edits."""
        edits = []
        for name, code in pairs:
            if code[:1] == ESCAPE or self._str_out.get(name) == code:
                return None
            old, new = _json_inner(name), _json_inner(code)
            if old != name.encode() or new != code.encode():
                return None
            edits.append((b'"' + old + b'":', b'"' + new + b'":'))
        return tuple(edits)

    def expand(self, value: Any) -> Any:
        """The readable form of a compact value: inverse of :meth:`compact`.

        Total: any JSON value is accepted (a stray leading ``~`` is dropped)."""
        return _expand(value, self._key_in, self._str_in)

    def keeps(self, data: bytes) -> bool:
        """True if :meth:`compact` returns the value unchanged (equal, same
        types and key order) for the JSON value whose orjson encoding is
        ``data``: no dict key or string of it has an alias or a code, is
        one, or starts with ``~``. Decided on the bytes, in C: every key and
        string of the value is a quoted JSON string of ``data``, spelled as
        orjson spells that name, so a value that needs no code is recognised
        without a walk (and its compact form is ``data`` itself). A ``"~``
        inside a string (an escaped quote) only makes the answer False: the
        caller then compacts the value, which is exact either way.

        The strings are found by splitting ``data`` at its quotes (no name
        of a seed codec has one): every string is then one of the pieces,
        and a piece that is not a string only makes the answer False."""
        if b"~" in data and b'"~' in data:
            return False
        return self._out_names.isdisjoint(data.split(b'"') if self._split else _json_strings(data))

    def expand_json(self, data: bytes) -> bytes | None:
        """The JSON of :meth:`expand` of the value encoded as ``data`` (the
        read path), made on the bytes: each key that is an alias and each
        string that is a code replaced by its name, in C; ``data`` itself
        when nothing is to expand. None when that would not be exact (a
        backslash, a string starting with ``~``, a name not spelled as
        itself or not starting with a letter or digit): the caller expands
        the decoded value.

        Exact: without a backslash every quote of ``data`` is structural,
        so splitting at quotes gives its strings as whole pieces (the names
        found among them are few: one set intersection in C), and in the
        compact JSON of a dict or a list (a bare string is left to the
        walk) a string is a key exactly when a ``:`` follows it, else a
        ``,``, ``]`` or ``}`` does; a piece that begins with a letter or
        digit is a string (JSON's other pieces begin with punctuation). No
        name is an alias or a code of the same mapping (a codec has no
        chains), and a key's edit ends with ``:`` where a string's does not,
        so one replacement never makes a place for another."""
        if data[:1] not in _CONTAINER_OPENS or b"\\" in data or (b"~" in data and b'"~' in data) or not self._split:
            return None
        pieces = data.split(b'"')
        names = self._in_names
        if names.isdisjoint(pieces):
            return data
        edits = self._in_edits
        for name in names.intersection(pieces):
            found = edits.get(name)
            if found is None:
                return None
            for old, new in found:
                data = data.replace(old, new)
        return data

    def expands_nothing(self, data: bytes) -> bool:
        """True if :meth:`expand` returns the value unchanged for the JSON
        value encoded as ``data`` (see :meth:`keeps`): no key or string is an
        alias or a code or starts with ``~``."""
        if b"~" in data and b'"~' in data:
            return False
        return self._in_names.isdisjoint(data.split(b'"') if self._split else _json_strings(data))

    def is_compact(self, value: Any) -> bool:
        """True if ``value`` is exactly what :meth:`compact` produces for some
        value, i.e. it can be stored as it is (legacy data that is already compact)."""
        return _same(self.compact(self.expand(value)), value)

    def describe(self, table: str, code: str) -> str | None:
        """The description of ``code`` in ``table``: ``code`` may be a name of
        the table or the value code stored for it (``"sm"`` for
        ``"sensemaking"``). None if the table or the code is unknown."""
        entries = self.tables.get(table, _EMPTY)
        found = entries.get(code)
        if found is None and code in self._str_in:
            found = entries.get(self._str_in[code])
        return found


#: Plans of dict shapes kept per codec (see Codec.compact_encoded): bounded,
#: emptied when full.
_SHAPES_MAX = 1024


def _planned(
    value: dict[str, Any],
    key_table: dict[str, str],
    str_table: dict[str, str],
    shapes: dict[tuple[Any, ...], Plan],
    walk: Callable[[Any, Mapping[str, str], Mapping[str, str]], Any],
) -> dict[str, Any]:
    """``walk(value, key_table, str_table)`` of a dict record holding no
    escape, by a plan kept in ``shapes`` per key sequence (see
    Codec.compact_encoded)."""
    shape = tuple(value)
    plan = shapes.get(shape)
    get = str_table.get
    vals = list(value.values())
    for _ in range(2):
        if plan is None:
            kget = key_table.get
            plan = (tuple([kget(k, k) for k in shape]),
                    tuple([j for j, v in enumerate(vals) if type(v) is list or type(v) is dict]))  # fmt: skip
            if len(shapes) >= _SHAPES_MAX:
                shapes.clear()
            shapes[shape] = plan
        keys, nested = plan
        if not nested:
            try:
                return dict(zip(keys, map(get, vals, vals)))
            except TypeError:  # a container where the plan had none: plan again
                plan = None
                continue
        flat = vals.copy()
        for j in nested:
            flat[j] = None
        try:
            result = dict(zip(keys, map(get, flat, flat)))
        except TypeError:
            plan = None
            continue
        for j in nested:
            v = vals[j]
            if type(v) is list:
                try:
                    v = list(map(get, v, v))
                except TypeError:  # a list holding containers
                    v = walk(v, key_table, str_table)
            elif type(v) is dict:
                v = walk(v, key_table, str_table)
            else:  # a scalar where the plan had a container
                v = get(v, v)
            result[keys[j]] = v
        return result
    walked: dict[str, Any] = walk(value, key_table, str_table)  # pragma: no cover - a plan made from these values fits
    return walked  # pragma: no cover


#: The quoted strings of a JSON document, as the bytes between the quotes
#: (escapes kept): outside strings JSON has no quote, so each match starts
#: at an opening quote and ends at its closing one.
_json_strings: Callable[[bytes], list[bytes]] = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"').findall


#: How the JSON of a dict or a list begins (Codec.expand_json works on those).
_CONTAINER_OPENS = (b"{", b"[")


def _expand_edits(keys: Mapping[str, str], strs: Mapping[str, str]) -> dict[bytes, tuple[tuple[bytes, bytes], ...]]:
    """Codec.expand_json's byte edits, by the JSON spelling of each alias
    and code that is spelled as itself and begins with a letter or digit:
    as a key (``"a":``) and as a string (``"c"`` before ``,``, ``]`` or
    ``}``)."""
    edits: dict[bytes, list[tuple[bytes, bytes]]] = {}
    for table, ends in ((keys, (b":",)), (strs, (b",", b"]", b"}"))):
        for code, name in table.items():
            inner = _json_inner(code)
            if inner != code.encode() or not code[:1].isalnum() or _json_inner(name) != name.encode():
                continue
            edits.setdefault(inner, []).extend((b'"' + inner + b'"' + end, b'"' + name.encode() + b'"' + end) for end in ends)
    return {inner: tuple(pairs) for inner, pairs in edits.items()}


def _json_inner(name: str) -> bytes:
    return orjson.dumps(name)[1:-1]


# The two walkers are written out in full, not as one walker with a
# per-string callback: they run on every write and read, and a Python call per
# scalar costs about as much as the walk itself (BENCHMARKS.md, "Figures the
# code's comments rely on").


def _compact(value: Any, keys: Mapping[str, str], strs: Mapping[str, str]) -> Any:
    t = type(value)
    if t is str:
        out = strs.get(value)
        if out is not None:
            return out
        return ESCAPE + value if value[:1] == ESCAPE else value
    if t is dict:
        result = {}
        for k, v in value.items():
            if type(k) is str:
                nk = keys.get(k)
                if nk is None:
                    nk = ESCAPE + k if k[:1] == ESCAPE else k
            else:
                nk = k
            tv = type(v)
            if tv is str or tv is dict or tv is list:
                v = _compact(v, keys, strs)
            result[nk] = v
        return result
    if t is list:
        return [_compact(v, keys, strs) if type(v) in _CONTAINERS else v for v in value]
    return value


def _expand(value: Any, keys: Mapping[str, str], strs: Mapping[str, str]) -> Any:
    t = type(value)
    if t is str:
        return value[1:] if value[:1] == ESCAPE else strs.get(value, value)
    if t is dict:
        result = {}
        for k, v in value.items():
            if type(k) is str:
                k = k[1:] if k[:1] == ESCAPE else keys.get(k, k)
            tv = type(v)
            if tv is str or tv is dict or tv is list:
                v = _expand(v, keys, strs)
            result[k] = v
        return result
    if t is list:
        return [_expand(v, keys, strs) if type(v) in _CONTAINERS else v for v in value]
    return value


_CONTAINERS = frozenset({str, dict, list})


def _same(a: Any, b: Any) -> bool:
    """Equality that also tells 1, 1.0 and True apart and checks key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


class CodecRegistry:
    """Codecs by name. A namespace names its codec (``NamespaceSpec.codec``);
    :meth:`get` resolves it. Registering a different codec under a taken name
    raises :class:`InvalidNamespace`."""

    def __init__(self, codecs: Iterable[Codec] = ()) -> None:
        self._codecs: dict[str, Codec] = {}
        for codec in codecs:
            self.register(codec)

    def register(self, codec: Codec) -> Codec:
        old = self._codecs.get(codec.name)
        if old is not None and old != codec:
            raise InvalidNamespace(f"codec {codec.name!r} is already registered differently", codec=codec.name)
        self._codecs[codec.name] = codec
        return codec

    def get(self, name: str) -> Codec:
        """The codec called ``name``; raises :class:`InvalidNamespace` if unknown."""
        codec = self._codecs.get(name)
        if codec is None:
            raise InvalidNamespace(
                f"unknown codec {name!r}; known: {', '.join(sorted(self._codecs)) or '(none)'}", codec=name
            )
        return codec

    def for_spec(self, codec_name: str | None) -> Codec | None:
        """The codec a namespace declares (``None`` when it declares none)."""
        return None if codec_name is None else self.get(codec_name)

    def __contains__(self, name: object) -> bool:
        return name in self._codecs

    def names(self) -> list[str]:
        return sorted(self._codecs)


__all__ = ["ESCAPE", "Codec", "CodecRegistry"]
