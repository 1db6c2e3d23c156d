"""Namespace declarations and the registry that holds them.

A namespace is declared as data (:class:`NamespaceSpec`): its home tier, how
long its entries stay warm before they age into the cold archive, its consent
category, its caps. The seed set lives in the top-level ``namespaces`` package;
more can be declared at run time and are then remembered in the store.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from .errors import InvalidKey, InvalidNamespace, UndeclaredNamespace

TIERS = ("hot", "warm")
DAY = 24 * 3600.0

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

    def __post_init__(self) -> None:
        check_namespace(self.name)
        if self.tier not in TIERS:
            raise InvalidNamespace(
                f"namespace {self.name!r}: home tier must be one of {TIERS}, not {self.tier!r}",
                namespace=self.name,
            )
        if self.ttl is not None and not self.ttl > 0:
            raise InvalidNamespace(f"namespace {self.name!r}: ttl must be positive", namespace=self.name)
        if self.max_keys is not None and self.max_keys < 1:
            raise InvalidNamespace(f"namespace {self.name!r}: max_keys must be >= 1", namespace=self.name)
        if not 0 < self.max_value_bytes <= MAX_VALUE_BYTES:
            raise InvalidNamespace(
                f"namespace {self.name!r}: max_value_bytes must be in 1..{MAX_VALUE_BYTES}",
                namespace=self.name,
            )
        if self.owner is None:
            object.__setattr__(self, "owner", self.name.split(".", 1)[0])

    @property
    def hrm(self) -> str:
        return self.name.split(".", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NamespaceSpec:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


class Registry:
    """The declared namespaces, by name. Thread-safe."""

    def __init__(self, specs: Iterable[NamespaceSpec] = ()) -> None:
        self._specs: dict[str, NamespaceSpec] = {}
        self._lock = threading.Lock()
        for spec in specs:
            self.declare(spec)

    def declare(self, spec: NamespaceSpec) -> NamespaceSpec:
        """Add ``spec``; re-declaring an identical spec is a no-op, a different one an error."""
        if not isinstance(spec, NamespaceSpec):
            raise InvalidNamespace(f"expected a NamespaceSpec, not {type(spec).__name__}", namespace=spec)
        with self._lock:
            old = self._specs.get(spec.name)
            if old is not None and old != spec:
                raise InvalidNamespace(
                    f"namespace {spec.name!r} is already declared differently", namespace=spec.name
                )
            self._specs[spec.name] = spec
            return spec

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
