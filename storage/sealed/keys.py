"""Data keys for sealed namespaces, kept apart from the data they open.

A *key group* names the records one data key seals: a consent category
(``"conversation"``, ...) for every namespace it gates, or ``"ns:<name>"`` for
a namespace that opts in with ``NamespaceSpec(encrypt=True)`` and has no
category. A group has at most one *current* key (what new records are sealed
with) and any number of older ones kept only to open records a rotation has
not reached yet.

:class:`KeyProvider` is the seam a KMS or an OS keyring plugs into; two ship:

- :class:`FileKeys` (the default): one JSON file per store, mode 0600 in a
  0700 directory outside the store root: ``$HRM_MEMORY_KEYS/<store id>.json``,
  else ``$XDG_CONFIG_HOME/hrm-memory/keys/<store id>.json`` (default
  ``~/.config/hrm-memory/keys``). Every change replaces the file whole
  (write, fsync, rename) under an ``flock`` on ``<file>.lock``, so a kill
  leaves the old file or the new one and concurrent processes never lose
  one another's keys. Readers notice another process's change by the file's
  identity (inode, size, mtime).
- :class:`EnvKeys`: keys handed in by the environment (``$HRM_MEMORY_KEYRING``,
  the same JSON as the key file's ``groups``); it cannot make or keep new
  keys, so a group it lacks refuses writes with :class:`KeyUnavailable`.
"""

from __future__ import annotations

import base64
import fcntl
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import orjson

from hrm_memory.core.errors import KeyUnavailable, StorageError, WrongKey

from .. import fsutil as _fs

#: Bytes of a data key (AES-256).
KEY_BYTES = 32
KEY_FILE_FORMAT = 1
#: How long (seconds) a process trusts what it last read of the key file
#: before it looks at the file again (another process's change is seen
#: within this; a rotation waits longer than this before destroying a key).
STALE_AFTER = 0.05


class DataKey(NamedTuple):
    """One data key: its id (what a sealed record names) and its secret."""

    key_id: str
    secret: bytes


class KeyProvider(Protocol):
    """Where data keys come from and where they are destroyed."""

    def current(self, group: str) -> DataKey | None:
        """The key new records of ``group`` are sealed with, or None."""
        ...

    def get(self, group: str, key_id: str) -> bytes | None:
        """The secret of ``key_id`` in ``group``, or None when it is not here
        (never made here, or destroyed)."""
        ...

    def create(self, group: str) -> DataKey:
        """A new key that becomes ``group``'s current one; older keys stay
        (readable) until :meth:`destroy`."""
        ...

    def ensure(self, group: str) -> DataKey:
        """The current key, made if there is none (at most one is made
        however many processes ask at once)."""
        ...

    def ids(self, group: str) -> list[str]:
        """Every key id ``group`` holds, the current one included."""
        ...

    def destroy(self, group: str, key_ids: list[str] | None = None) -> int:
        """Destroy ``key_ids`` of ``group`` (every key when None); the count destroyed."""
        ...

    def adopt(self, group: str, key: DataKey, current: bool) -> None:
        """Keep ``key``, made elsewhere (an import carried it), so the records
        sealed with it open here; with ``current`` it becomes ``group``'s
        current key only if the group has none (a key this store made stays
        the one its new records are sealed with). A key by that id with
        another secret is refused (:class:`WrongKey`), and so is a key that
        cannot be kept (:class:`KeyUnavailable`)."""
        ...


def keys_dir() -> Path:
    """``$HRM_MEMORY_KEYS``, else ``$XDG_CONFIG_HOME/hrm-memory/keys`` (``~/.config/...``)."""
    env = os.environ.get("HRM_MEMORY_KEYS")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "hrm-memory" / "keys"


def _new_id() -> str:
    return secrets.token_hex(6)


def _groups_of(data: Any, where: str) -> dict[str, dict[str, Any]]:
    """The ``groups`` object, checked: ``{group: {"current": id|None, "keys": {id: base64}}}``."""
    if type(data) is not dict or not all(
        type(g) is str and type(v) is dict and type(v.get("keys")) is dict for g, v in data.items()
    ):
        raise KeyUnavailable(f"the keys in {where} are not in the expected form", where=where)
    return data


def _drop_keys(groups: dict[str, dict[str, Any]], group: str, key_ids: list[str] | None, *, drop_empty: bool) -> int:
    """Remove ``key_ids`` (None: every key) of ``group`` from a keyring's
    groups; the group's current key goes with them, and (``drop_empty``) the
    group once it holds none. Returns how many keys went."""
    g = groups.get(group)
    if g is None:
        return 0
    gone = list(g["keys"]) if key_ids is None else [k for k in key_ids if k in g["keys"]]
    for k in gone:
        del g["keys"][k]
    if g.get("current") in gone:
        g["current"] = None
    if drop_empty and not g["keys"]:
        del groups[group]
    return len(gone)


def _secret(b64: Any, where: str) -> bytes:
    try:
        raw = base64.b64decode(b64, validate=True)
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise KeyUnavailable(f"a key in {where} is not {KEY_BYTES} bytes of base64", where=where)
    return raw


class FileKeys:
    """Keys in one 0600 JSON file (see the module docstring). ``path`` may be
    a callable resolved on first use (the default file is named by the store
    id, which is read from the store only when a key is first needed)."""

    def __init__(self, path: str | os.PathLike[str] | Callable[[], Path]) -> None:
        if callable(path):
            self._locate: Callable[[], Path] = path
        else:
            fixed = Path(path)
            self._locate = lambda: fixed
        self._path: Path | None = None
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._groups: dict[str, dict[str, Any]] = {}
        self._secrets: dict[tuple[str, str], bytes] = {}  # decoded, per (group, key id)
        self._looked = 0.0  # monotonic time of the last stat

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = Path(self._locate()).absolute()
        return self._path

    def __repr__(self) -> str:
        return f"FileKeys({str(self._path) if self._path else '<not resolved>'!r})"

    # -- reading --------------------------------------------------------------------

    def _fresh(self) -> dict[str, dict[str, Any]]:
        """The groups as the file holds them (re-read when it changed; looked
        at again at most every :data:`STALE_AFTER` seconds)."""
        now = time.monotonic()
        if now - self._looked < STALE_AFTER and self._stamp is not None:
            return self._groups
        self._looked = now
        path = self.path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._stamp, self._groups, self._secrets = None, {}, {}
            return self._groups
        except OSError as exc:
            raise _fs.storage_error(exc, "read the key file", path) from None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp != self._stamp:
            try:
                data = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError) as exc:
                raise KeyUnavailable(f"the key file {path} cannot be read: {exc}", where=str(path)) from None
            groups = _groups_of(data.get("groups") if type(data) is dict else None, str(path))
            self._secrets = {(g, k): _secret(b64, str(path)) for g, v in groups.items() for k, b64 in v["keys"].items()}
            self._groups, self._stamp = groups, stamp
        return self._groups

    def current(self, group: str) -> DataKey | None:
        with self._lock:
            g = self._fresh().get(group)
            if g is None or g.get("current") is None:
                return None
            kid = g["current"]
            secret = self._secrets.get((group, kid))
            if secret is None:
                raise KeyUnavailable(f"the key file {self.path} names {kid!r} current for {group!r} but lacks it",
                                     group=group, where=str(self.path))
            return DataKey(kid, secret)

    def get(self, group: str, key_id: str) -> bytes | None:
        with self._lock:
            self._fresh()
            found = self._secrets.get((group, key_id))
            if found is None:
                # A key id this process has not seen is news: another process
                # made it since the last look, which may be under STALE_AFTER old.
                self._looked = 0.0
                self._fresh()
                found = self._secrets.get((group, key_id))
            return found

    def ids(self, group: str) -> list[str]:
        with self._lock:
            g = self._fresh().get(group)
            return [] if g is None else sorted(g["keys"])

    # -- changing -------------------------------------------------------------------

    def _change(self, edit: Callable[[dict[str, dict[str, Any]]], Any]) -> Any:
        """Run ``edit`` on the file's groups under its flock, then replace the file."""
        path = self.path
        with self._lock:
            try:
                _fs.make_dirs(path.parent, durable=True)
                fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | _fs.NOFOLLOW, _fs.FILE_MODE)
            except OSError as exc:
                raise _fs.storage_error(exc, "open the key file's lock", path) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._stamp = None  # read under the lock, whatever was cached
                self._looked = 0.0
                groups = {g: {"current": v.get("current"), "keys": dict(v["keys"])} for g, v in self._fresh().items()}
                result = edit(groups)
                body = orjson.dumps({"format": KEY_FILE_FORMAT, "groups": groups}, option=orjson.OPT_SORT_KEYS)
                try:
                    _fs.atomic_write(path, body, durable=True)
                except OSError as exc:
                    raise _fs.storage_error(exc, "write the key file", path) from None
                self._stamp, self._looked = None, 0.0
                return result
            finally:
                os.close(fd)  # releases the flock

    def create(self, group: str) -> DataKey:
        key = DataKey(_new_id(), secrets.token_bytes(KEY_BYTES))

        def edit(groups: dict[str, dict[str, Any]]) -> DataKey:
            g = groups.setdefault(group, {"current": None, "keys": {}})
            g["keys"][key.key_id] = base64.b64encode(key.secret).decode()
            g["current"] = key.key_id
            return key

        return self._change(edit)  # type: ignore[no-any-return]

    def ensure(self, group: str) -> DataKey:
        have = self.current(group)
        if have is not None:
            return have

        def edit(groups: dict[str, dict[str, Any]]) -> DataKey:
            g = groups.setdefault(group, {"current": None, "keys": {}})
            if g.get("current") is not None:  # another process made it first
                return DataKey(g["current"], _secret(g["keys"][g["current"]], str(self.path)))
            key = DataKey(_new_id(), secrets.token_bytes(KEY_BYTES))
            g["keys"][key.key_id] = base64.b64encode(key.secret).decode()
            g["current"] = key.key_id
            return key

        return self._change(edit)  # type: ignore[no-any-return]

    def destroy(self, group: str, key_ids: list[str] | None = None) -> int:
        if not self.path.exists():
            return 0

        def edit(groups: dict[str, dict[str, Any]]) -> int:
            return _drop_keys(groups, group, key_ids, drop_empty=True)

        return self._change(edit)  # type: ignore[no-any-return]

    def adopt(self, group: str, key: DataKey, current: bool) -> None:
        if self.get(group, key.key_id) == key.secret and (not current or self.current(group) is not None):
            return  # held already: the file is not rewritten

        def edit(groups: dict[str, dict[str, Any]]) -> None:
            g = groups.setdefault(group, {"current": None, "keys": {}})
            have = g["keys"].get(key.key_id)
            if have is not None and _secret(have, str(self.path)) != key.secret:
                raise _clash(group, key.key_id, str(self.path))
            g["keys"][key.key_id] = base64.b64encode(key.secret).decode()
            if current and g.get("current") is None:
                g["current"] = key.key_id

        self._change(edit)


class EnvKeys:
    """Keys from an environment variable (default ``HRM_MEMORY_KEYRING``):
    JSON ``{group: {"current": id, "keys": {id: base64 of 32 bytes}}}``.
    Read once; :meth:`create` is refused (the application makes and keeps
    keys); :meth:`destroy` forgets keys in this process only (remove them
    from where the environment got them too)."""

    def __init__(self, variable: str = "HRM_MEMORY_KEYRING") -> None:
        self.variable = variable
        raw = os.environ.get(variable)
        try:
            data = {} if not raw else orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise KeyUnavailable(f"${variable} is not JSON", where=f"${variable}") from None
        self._groups = _groups_of(data, f"${variable}")
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EnvKeys({self.variable!r})"

    def current(self, group: str) -> DataKey | None:
        with self._lock:
            g = self._groups.get(group)
            kid = None if g is None else g.get("current")
            return None if kid is None or g is None else DataKey(kid, _secret(g["keys"].get(kid), f"${self.variable}"))

    def get(self, group: str, key_id: str) -> bytes | None:
        with self._lock:
            g = self._groups.get(group)
            if g is None or key_id not in g["keys"]:
                return None
            return _secret(g["keys"][key_id], f"${self.variable}")

    def ids(self, group: str) -> list[str]:
        with self._lock:
            g = self._groups.get(group)
            return [] if g is None else sorted(g["keys"])

    def create(self, group: str) -> DataKey:
        raise KeyUnavailable(
            f"${self.variable} holds no key for {group!r} and keys from the environment are made by the "
            "application: add one", group=group, where=f"${self.variable}",
        )

    def ensure(self, group: str) -> DataKey:
        have = self.current(group)
        return have if have is not None else self.create(group)

    def destroy(self, group: str, key_ids: list[str] | None = None) -> int:
        with self._lock:
            return _drop_keys(self._groups, group, key_ids, drop_empty=False)


    def adopt(self, group: str, key: DataKey, current: bool) -> None:
        have = self.get(group, key.key_id)
        if have == key.secret:
            return
        if have is not None:
            raise _clash(group, key.key_id, f"${self.variable}")
        raise KeyUnavailable(
            f"key {key.key_id!r} of {group!r} is not in ${self.variable}, and keys from the environment are "
            "kept by the application: add it there (or import into a store with a key file)",
            group=group, key_id=key.key_id, where=f"${self.variable}",
        )


def _clash(group: str, key_id: str, where: str) -> WrongKey:
    return WrongKey(f"{where} holds another key by the id {key_id!r} of {group!r}; it was not replaced",
                    group=group, key_id=key_id, where=where)


def make_keyring(groups: dict[str, list[DataKey]]) -> str:
    """The JSON :class:`EnvKeys` reads, for ``groups`` (the last key of each
    list is the current one): a helper for applications and tests."""
    return orjson.dumps({
        g: {"current": ks[-1].key_id if ks else None,
            "keys": {k.key_id: base64.b64encode(k.secret).decode() for k in ks}}
        for g, ks in groups.items()
    }).decode()


__all__ = ["DataKey", "EnvKeys", "FileKeys", "KeyProvider", "KEY_BYTES", "keys_dir", "make_keyring"]
