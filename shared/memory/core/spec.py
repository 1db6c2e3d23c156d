"""Namespace declarations and the registry that holds them.

A namespace is declared as data (:class:`NamespaceSpec`): its home tier, how
long its entries stay warm before they age into the cold archive, its consent
category, its caps. The seed set lives in the top-level ``namespaces`` package;
more can be declared at run time and are then remembered in the store.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from hrm_memory.core.errors import (
    InvalidKey,
    InvalidNamespace,
    InvalidSpec,
    NamespaceConflict,
    UndeclaredNamespace,
)

TIERS = ("hot", "warm")
DAY = 24 * 3600.0

#: Kinds of memory (:meth:`MemoryManager.remember`, ``NamespaceSpec.kind``):
#: what happened (episodic), what is true (semantic), how to do something
#: (procedural), what is to be done (prospective), what matters right now (working).
KINDS = ("episodic", "semantic", "procedural", "prospective", "working")

# An index path: "$" (the whole value) or dotted fields, each optionally
# followed by "[*]" (every element) or "[n]" (one element).
_PATH_RE = re.compile(r"\$|[^.\[\]]+(?:\[(?:\*|[0-9]+)\])*(?:\.[^.\[\]]+(?:\[(?:\*|[0-9]+)\])*)*", re.ASCII)

#: Consent categories a namespace may be gated by (as the legacy ConsentManager had them).
CONSENT_CATEGORIES = ("conversation", "signals", "preferences")

#: Pydantic model classes given directly as a schema, by the name the spec
#: stores ("module:QualName"); :class:`hrm_memory.core.schemas.Schemas` looks here
#: before importing, so a class defined in a test or a notebook works too.
SCHEMA_CLASSES: dict[str, type] = {}

# Namespaces become directory names, so they are kept to a strict ASCII
# alphabet: no separators, no dots at the ends, nothing Unicode can disguise.
_NS_RE = re.compile(r"[a-z][a-z0-9_]{0,31}(?:\.[a-z][a-z0-9_]{0,31}){1,3}", re.ASCII)

# Windows device names stay reserved whatever follows the dot ("con.txt"),
# so a store copied to such a machine must not contain them as segments.
_RESERVED = frozenset(
    ["con", "prn", "aux", "nul"]
    + [f"com{i}" for i in range(10)]
    + [f"lpt{i}" for i in range(10)]
)

#: The store-internal namespace of a namespace's kept versions is this prefix
#: and its name (a declared name never starts with ``_``).
HISTORY_PREFIX = "_h."

#: Keys are stored inside files, never used as file names, so they may hold any
#: printable text; the limit keeps index memory and log lines bounded.
MAX_KEY_BYTES = 1024
#: Absolute ceiling for one encoded value; a namespace may declare less.
MAX_VALUE_BYTES = 16 * 1024 * 1024


def check_namespace(name: object) -> str:
    """Return ``name`` if it is a well-formed namespace, else raise :class:`InvalidNamespace`."""
    if not isinstance(name, str) or not _NS_RE.fullmatch(name):
        raise InvalidNamespace(
            f"invalid namespace {name!r}: expected 'hrm.name' in lowercase ASCII "
            "(letters, digits, '_'; 2 to 4 dotted segments of at most 32 characters)",
            namespace=name,
        )
    for segment in name.split("."):
        if segment in _RESERVED:
            raise InvalidNamespace(
                f"invalid namespace {name!r}: {segment!r} is a reserved device name",
                namespace=name,
            )
    return name


def check_key(key: object, namespace: str | None = None) -> str:
    """Return ``key`` if it is a usable key, else raise :class:`InvalidKey`.

    A key is any non-empty string of at most ``MAX_KEY_BYTES`` UTF-8 bytes with
    no control characters (NUL included) and no lone surrogates."""
    if type(key) is str and 0 < len(key) <= MAX_KEY_BYTES // 4 and key.isprintable():
        # The common case, decided in C: printable excludes control
        # characters and lone surrogates, and 4 bytes per character bound
        # the UTF-8 length.
        return key
    if not isinstance(key, str):
        raise InvalidKey(f"key must be a str, not {type(key).__name__}", namespace=namespace, key=key)
    if not key:
        raise InvalidKey("key must not be empty", namespace=namespace, key=key)
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidKey("key holds a lone surrogate", namespace=namespace, key=key) from None
    if size > MAX_KEY_BYTES:
        raise InvalidKey(
            f"key is {size} bytes long; the limit is {MAX_KEY_BYTES}", namespace=namespace, key=key[:64]
        )
    if not key.isprintable() and any(ch < " " or "\x7f" <= ch < "\xa0" for ch in key):
        raise InvalidKey("key holds a control character", namespace=namespace, key=key)
    return key


@dataclass(frozen=True, slots=True)
class Keep:
    """How much history a namespace keeps (``NamespaceSpec.history``): the
    superseded versions of each key (deletions included), at most
    ``versions`` of them and none superseded more than ``days`` ago; None
    for no limit of that kind (one of the two must be given). The current
    version is always there; see docs/history.md."""

    versions: int | None = None
    days: float | None = None

    def __post_init__(self) -> None:
        v, d = self.versions, self.days
        if v is not None and (type(v) is not int or v < 1):
            raise InvalidSpec(f"Keep(versions=...) must be None or an int >= 1, not {v!r}", namespace=None,
                              field="history")
        if d is not None and (type(d) not in (int, float) or not math.isfinite(d) or not d > 0):
            raise InvalidSpec(f"Keep(days=...) must be None or a positive number, not {d!r}", namespace=None,
                              field="history")
        if v is None and d is None:
            raise InvalidSpec("Keep() needs versions=N and/or days=D", namespace=None, field="history")

    def to_dict(self) -> dict[str, Any]:
        return {"versions": self.versions, "days": self.days}


@dataclass(frozen=True, slots=True)
class NamespaceSpec:
    """The declaration of one namespace.

    - ``tier``: home tier, ``"hot"`` (this process only, for the session) or
      ``"warm"`` (persisted).
    - ``ttl``: seconds after the last update when an entry moves from warm to
      the cold archive on :meth:`MemoryManager.archive`; ``None`` keeps it warm.
    - ``consent``: consent category gating persistence, or ``None``.
    - ``max_keys``: keep at most this many keys; the oldest (by creation) move
      to the cold archive (warm) or are dropped (hot) when it is exceeded.
    - ``max_value_bytes``: largest encoded value accepted.
    - ``owner``: the HRM allowed to write it through a scoped handle
      (defaults to the first segment).
    - ``codec`` / ``schema``: names of a codec and a schema, resolved by the
      manager (``None`` for none).
    - ``index``: opts the namespace in to :meth:`MemoryManager.recall`, in
      LangGraph's convention: ``("$",)`` indexes the whole value's text, or
      paths such as ``("text", "tags[*]", "who.name")``; ``None`` for none.
    - ``kind``: the kind of memory its records are (one of :data:`KINDS`),
      which routes queries to it; a record's own ``"kind"`` field wins.
    - ``history``: how many superseded versions to keep (:class:`Keep`), for
      :meth:`MemoryManager.history` and ``as_of`` reads; None keeps none.
      Only persisted versions are kept: never for a hot namespace, nor for
      values of a gated namespace held while consent is not granted.
    - ``encrypt``: seal the values at rest (docs/storage.md, "Sealed
      namespaces") under a key of the namespace's own. A namespace with a
      ``consent`` category is sealed whatever this says, under its
      category's key.
    """

    name: str
    tier: str = "warm"
    ttl: float | None = None
    consent: str | None = None
    max_keys: int | None = None
    max_value_bytes: int = 1024 * 1024
    owner: str | None = None
    description: str = ""
    codec: str | None = None
    schema: str | None = None
    index: tuple[str, ...] | None = None
    kind: str | None = None
    history: Keep | None = None
    encrypt: bool = False

    def __post_init__(self) -> None:
        # Every field is checked here, so a bad spec never reaches a registry
        # or the store (a persisted bad spec would break every later write).
        check_namespace(self.name)
        name = self.name

        def bad(field: str, expected: str) -> InvalidSpec:
            value = getattr(self, field)
            return InvalidSpec(
                f"namespace {name!r}: {field} must be {expected}, not {value!r}", namespace=name, field=field
            )

        if self.tier not in TIERS:
            raise bad("tier", f"one of {TIERS}")
        ttl = self.ttl
        if ttl is not None and (type(ttl) not in (int, float) or not math.isfinite(ttl) or not ttl > 0):
            raise bad("ttl", "None or a positive number of seconds")
        if self.consent is not None and self.consent not in CONSENT_CATEGORIES:
            raise bad("consent", f"None or one of {CONSENT_CATEGORIES}")
        if self.max_keys is not None and (type(self.max_keys) is not int or self.max_keys < 1):
            raise bad("max_keys", "None or an int >= 1")
        if type(self.max_value_bytes) is not int or not 0 < self.max_value_bytes <= MAX_VALUE_BYTES:
            raise bad("max_value_bytes", f"an int in 1..{MAX_VALUE_BYTES}")
        if self.owner is not None and not (
            type(self.owner) is str and self.owner.isidentifier() and self.owner.isascii() and self.owner.islower()
        ):
            raise bad("owner", "None or a lowercase HRM name")
        if type(self.description) is not str:
            raise bad("description", "a str")
        if self.codec is not None and not (type(self.codec) is str and self.codec):
            raise bad("codec", "None or the name of a registered codec (a str)")
        schema = self.schema
        if isinstance(schema, type) and hasattr(schema, "model_validate"):
            # A pydantic model class: stored by its import path, kept here so
            # that this process needs no import to find it.
            ref = f"{schema.__module__}:{schema.__qualname__}"
            SCHEMA_CLASSES[ref] = schema
            object.__setattr__(self, "schema", ref)
        elif schema is not None and not (type(schema) is str and schema):
            raise bad("schema", "None, a pydantic model class, or 'package.module:Model' (a str)")
        index = self.index
        if index is not None:
            if isinstance(index, str) or not isinstance(index, (list, tuple)):
                raise bad("index", 'None or a sequence of paths such as ["$"] or ["text", "tags[*]"]')
            if not index or not all(type(p) is str and _PATH_RE.fullmatch(p) for p in index):
                raise bad("index", 'a non-empty sequence of paths: "$" or dotted fields with [*] or [n]')
            object.__setattr__(self, "index", tuple(index))
        if self.kind is not None and self.kind not in KINDS:
            raise bad("kind", f"None or one of {KINDS}")
        history = self.history
        if isinstance(history, dict):
            try:
                history = Keep(**history)
            except TypeError:
                raise bad("history", "None or Keep(versions=N, days=D)") from None
            object.__setattr__(self, "history", history)
        if history is not None:
            if not isinstance(history, Keep):
                raise bad("history", "None or Keep(versions=N, days=D)")
            if self.tier == "hot":
                raise bad("history", "None for a hot namespace (its records live in this process only)")
        if type(self.encrypt) is not bool:
            raise bad("encrypt", "a bool")
        if self.owner is None:
            object.__setattr__(self, "owner", self.name.split(".", 1)[0])

    @property
    def hrm(self) -> str:
        return self.name.split(".", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON data (what the store persists for a run-time declaration)."""
        data = asdict(self)
        if self.index is not None:
            data["index"] = list(self.index)
        if self.history is None:
            del data["history"]  # as declarations made before the field existed were stored
        if not self.encrypt:
            del data["encrypt"]  # likewise
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NamespaceSpec:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def conflict(new: NamespaceSpec, old: NamespaceSpec, where: str = "") -> NamespaceConflict:
    """The error for re-declaring ``old`` as ``new``: which fields differ, and how."""
    a, b = old.to_dict(), new.to_dict()
    fields = [f for f in a if a[f] != b.get(f)]
    detail = "; ".join(f"{f}: {a[f]!r} declared, {b.get(f)!r} asked" for f in fields)
    return NamespaceConflict(
        f"namespace {new.name!r} is already declared differently{' ' + where if where else ''} ({detail})",
        namespace=new.name,
        fields=fields,
    )


def key_group(spec: NamespaceSpec) -> str | None:
    """The key group sealing ``spec``'s values at rest: its consent category,
    ``ns:<name>`` for one declared with ``encrypt=True``, else None (stored
    as it is). Its kept history is sealed under the same group."""
    if spec.consent is not None:
        return spec.consent
    return f"ns:{spec.name}" if spec.encrypt else None


class Registry:
    """The declared namespaces, by name. Thread-safe."""

    def __init__(self, specs: Iterable[NamespaceSpec] = ()) -> None:
        self._specs: dict[str, NamespaceSpec] = {}
        self._groups: dict[str, str] = {}
        self._lock = threading.Lock()
        for spec in specs:
            self.declare(spec)

    @property
    def specs(self) -> dict[str, NamespaceSpec]:
        """The live name -> spec dict (read it, never change it: the hot path's lookup)."""
        return self._specs

    @property
    def groups(self) -> dict[str, str]:
        """The live name -> key group dict of the sealed namespaces and of
        their kept history (:func:`key_group`); a name it lacks is stored as
        it is. Read it, never change it: every read and write of a store
        with sealed namespaces looks here. A spec's entries are in place
        before the spec is, and stay until it is gone, so no thread sees a
        sealed namespace declared and unsealed."""
        return self._groups

    def check(self, spec: NamespaceSpec) -> None:
        """Raise :class:`NamespaceConflict` if ``spec.name`` is declared differently."""
        if not isinstance(spec, NamespaceSpec):
            raise InvalidSpec(f"expected a NamespaceSpec, not {type(spec).__name__}", namespace=None)
        old = self._specs.get(spec.name)
        if old is not None and old != spec:
            raise conflict(spec, old)

    def declare(self, spec: NamespaceSpec) -> NamespaceSpec:
        """Add ``spec``; re-declaring an identical spec is a no-op, a different one
        raises :class:`NamespaceConflict` naming the fields that differ."""
        with self._lock:
            self.check(spec)
            group = key_group(spec)
            if group is not None:
                self._groups[spec.name] = self._groups[HISTORY_PREFIX + spec.name] = group
            self._specs[spec.name] = spec
            return spec

    def remove(self, name: str) -> None:
        with self._lock:
            self._specs.pop(name, None)
            self._groups.pop(name, None)
            self._groups.pop(HISTORY_PREFIX + name, None)

    def get(self, name: str) -> NamespaceSpec:
        """The spec of ``name``; raises :class:`UndeclaredNamespace` (or
        :class:`InvalidNamespace` for a malformed name)."""
        spec = self._specs.get(name)
        if spec is None:
            check_namespace(name)
            raise UndeclaredNamespace(
                f"namespace {name!r} is not declared; declare it with "
                "MemoryManager.declare(NamespaceSpec(...)) first",
                namespace=name,
            )
        return spec

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[NamespaceSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._specs)
