"""Sealed namespaces: values encrypted at rest, erased by destroying their key.

:class:`SealedBackend` wraps any :class:`~hrm_memory.core.backend.Backend` and
is one itself. For a namespace whose key group is not None (a consent-gated
namespace, its kept history ``_h.<name>``, or one declared with
``encrypt=True``) it seals each value on the way in (``put``, ``archive``) and
opens it on the way out (``get``, ``scan``); every other namespace passes
through untouched, and so does everything that is not a value (keys,
versions, times, declarations, the change log, locks). The backend below sees
ciphertext only, so its files, its server, its replicas, its backups and an
export hold nothing readable once the key is gone.

The sealed form is a JSON string, so every backend and format that carries a
value carries it unchanged::

    "hrmenc:1:<key id>:<base64 of nonce (12 bytes) + ciphertext + tag (16 bytes)>"

AES-256-GCM (``cryptography``) with a random nonce; the associated data binds
the ciphertext to its key group, namespace and key, so a value copied to
another key or namespace does not open. Record keys stay plaintext: the
backends find, lock, order and erase records by key (a file's bucket, a Redis
hash field), and ``forget``/``purge`` must reach them without a key; keep
what must stay secret in values.

A record that cannot be opened raises :class:`KeyUnavailable` (its key is
not here) or :class:`WrongKey` (a key by that id is here and does not open
it); ``check()`` lists such records as findings and changes nothing. A
plaintext record in a sealed namespace (written before the namespace was
sealed) is read as it is, reported by ``check()`` (``unsealed-record``) and
sealed by its next write or a key rotation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hrm_memory.core.backend import Backend, ChangeLog, PurgeEpochs
from hrm_memory.core.errors import KeyUnavailable, MemoryStoreError, WrongKey
from hrm_memory.core.records import Finding, Stored

from .keys import STALE_AFTER, DataKey, KeyProvider
from .wrap import WrappedKey, wrap

MAGIC = b'"hrmenc:1:'
_NONCE = 12
_AD = b"hrm-memory sealed 1\x00"
_NONCE_KEY = b"hrm-memory synthetic nonce 1\x00"
#: The store-internal namespace holding the store's id (names its key file).
STORE_NAMESPACE = "_store"
STORE_ID_KEY = "id"

#: ``group_of(namespace) -> key group or None`` (None: stored as it is).
GroupOf = Callable[[str], "str | None"]
#: ``relink(namespace, key, version)``: a record is about to be resealed from
#: ``version`` to the next (the kept history's keeper keeps its chain).
Relink = Callable[[str, str, int], None]


class Sealed(NamedTuple):
    """What a sealed value names: its key id and the encrypted bytes."""

    key_id: str
    blob: bytes


def parse(value: bytes) -> Sealed | None:
    """The parts of a sealed value, or None for a plaintext one."""
    if not value.startswith(MAGIC) or not value.endswith(b'"'):
        return None
    rest = value[len(MAGIC) : -1]
    colon = rest.find(b":")
    if colon <= 0:
        return None
    try:
        blob = binascii.a2b_base64(rest[colon + 1 :], strict_mode=True)
    except binascii.Error:
        return None
    if len(blob) < _NONCE + 16:
        return None
    return Sealed(rest[:colon].decode("ascii", "replace"), blob)


def _ad(group: str, namespace: str, key: str) -> bytes:
    return b"\x00".join((_AD + group.encode(), namespace.encode(), key.encode("utf-8", "surrogatepass")))


class StoreId:
    """The store's random id, kept in the store itself (record ``id`` of
    ``_store``) so two stores never share a key file; made on first need."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._id: str | None = None

    def get(self) -> str:
        if self._id is None:
            st = self._backend.get(STORE_NAMESPACE, STORE_ID_KEY)
            if st is None:
                with self._backend.lock(STORE_NAMESPACE, cross_process=True):
                    st = self._backend.get(STORE_NAMESPACE, STORE_ID_KEY)
                    if st is None:
                        body = orjson.dumps({"id": os.urandom(12).hex()})
                        st = self._backend.put(STORE_NAMESPACE, STORE_ID_KEY, body, _now_us())
            self._id = str(orjson.loads(st.value)["id"])
        return self._id


def _now_us() -> int:
    return time.time_ns() // 1000


class Cipher:
    """Seal and open values of one key group with the keys of a provider."""

    def __init__(self, keys: KeyProvider) -> None:
        self.keys = keys
        self._aead: dict[bytes, AESGCM] = {}
        self._nonce_keys: dict[bytes, bytes] = {}
        self._lock = threading.Lock()

    def _aes(self, secret: bytes) -> AESGCM:
        aes = self._aead.get(secret)
        if aes is None:
            with self._lock:
                aes = self._aead.setdefault(secret, AESGCM(secret))
        return aes

    def forget_cached(self) -> None:
        """Drop cached cipher states (after keys were destroyed)."""
        with self._lock:
            self._aead.clear()
            self._nonce_keys.clear()

    def seal(self, group: str, namespace: str, key: str, value: bytes) -> bytes:
        dk = self.keys.ensure(group)
        nonce = os.urandom(_NONCE)
        blob = nonce + self._aes(dk.secret).encrypt(nonce, value, _ad(group, namespace, key))
        return MAGIC + dk.key_id.encode("ascii") + b":" + base64.b64encode(blob) + b'"'

    def seal_fixed(self, group: str, namespace: str, key: str, value: bytes) -> bytes:
        """:meth:`seal` with a synthetic nonce (an HMAC of the associated data
        and the value under a key derived from the data key), for an export:
        the same value of the same record under the same key seals to the
        same bytes, so an export depends only on what the store holds. It
        reveals only that two such values are equal."""
        dk = self.keys.ensure(group)
        ad = _ad(group, namespace, key)
        mac = hmac.new(self._nonce_key(dk.secret), len(ad).to_bytes(4, "big") + ad + value, hashlib.sha256)
        nonce = mac.digest()[:_NONCE]
        blob = nonce + self._aes(dk.secret).encrypt(nonce, value, ad)
        return MAGIC + dk.key_id.encode("ascii") + b":" + base64.b64encode(blob) + b'"'

    def _nonce_key(self, secret: bytes) -> bytes:
        nk = self._nonce_keys.get(secret)
        if nk is None:
            nk = hashlib.sha256(_NONCE_KEY + secret).digest()
            with self._lock:
                self._nonce_keys[secret] = nk
        return nk

    def open(self, group: str, namespace: str, key: str, value: bytes,
             extra: Mapping[tuple[str, str], bytes] | None = None) -> bytes:
        """The plaintext of ``value`` (as it is when not sealed), opened with
        this provider's key, or one of ``extra`` (``(group, key id) -> secret``)."""
        sealed = parse(value)
        if sealed is None:
            return value  # plaintext written before the namespace was sealed
        secret = extra.get((group, sealed.key_id)) if extra else None
        if secret is None:
            secret = self.keys.get(group, sealed.key_id)
        where = f"{namespace}/{key!r}"
        if secret is None:
            raise KeyUnavailable(
                f"record {where} is sealed with key {sealed.key_id!r} of {group!r}, which is not here "
                "(destroyed, or the store was opened without its keys)",
                namespace=namespace, key=key, group=group, key_id=sealed.key_id,
            )
        blob = sealed.blob
        try:
            return self._aes(secret).decrypt(blob[:_NONCE], blob[_NONCE:], _ad(group, namespace, key))
        except InvalidTag:
            raise WrongKey(
                f"record {where} does not open with key {sealed.key_id!r} of {group!r}: another key by that "
                "id, or bytes altered or moved from another record",
                namespace=namespace, key=key, group=group, key_id=sealed.key_id,
            ) from None


class SealedBackend:
    """A :class:`Backend` that seals the values of the namespaces ``group_of``
    names a key group for, around ``inner`` (see the module docstring).
    ``group_of`` runs on every read and write: the manager gives its
    registry's ``groups.get``, a dict look-up."""

    def __init__(self, inner: Backend, group_of: GroupOf, keys: KeyProvider,
                 names: Callable[[], list[str]] | None = None) -> None:
        self.inner = inner
        self.group_of = group_of
        #: The namespaces ``check()`` walks (default: those the backend counts).
        self.names: Callable[[], list[str]] = names if names is not None else lambda: sorted(inner.stats())
        self.cipher = Cipher(keys)
        self.system = inner.system
        self.capabilities = inner.capabilities
        # The lock is the inner backend's own method (taken on every write).
        self.lock: Callable[..., AbstractContextManager[Any]] = inner.lock
        #: ``get(namespace, key)`` and ``put(namespace, key, value, now_us,
        #: min_version=1, created_us=None)`` of the Backend protocol: the
        #: inner backend's, opening and sealing the values of sealed namespaces.
        self.get: Callable[[str, str], Stored | None]
        self.put: Callable[..., Stored]
        self.get, self.put = self._records()

    def __repr__(self) -> str:
        return f"SealedBackend({self.inner!r})"

    @property
    def provider(self) -> KeyProvider:
        """Where this backend's data keys come from."""
        return self.cipher.keys

    @property
    def changes(self) -> ChangeLog | None:
        return self.inner.changes

    @property
    def purges(self) -> PurgeEpochs | None:
        """The inner backend's purge epochs, for the recall index (None when it keeps none)."""
        return self.inner.purges

    # -- records ------------------------------------------------------------------

    def _opened(self, group: str, namespace: str, st: Stored) -> Stored:
        return st._replace(value=self.cipher.open(group, namespace, st.key, st.value))

    def _records(self) -> tuple[Callable[[str, str], Stored | None], Callable[..., Stored]]:
        """``get`` and ``put``, as closures over what they use: they run on
        every read and write, and an ungated namespace's should cost the
        inner backend's call and one look-up, no more."""
        inner_get, inner_put, group_of = self.inner.get, self.inner.put, self.group_of
        opened, seal = self._opened, self.cipher.seal

        def get(namespace: str, key: str) -> Stored | None:
            st = inner_get(namespace, key)
            if st is None:
                return None
            group = group_of(namespace)
            return st if group is None else opened(group, namespace, st)

        def put(namespace: str, key: str, value: bytes, now_us: int, min_version: int = 1,
                created_us: int | None = None) -> Stored:
            group = group_of(namespace)
            if group is None:
                return inner_put(namespace, key, value, now_us, min_version, created_us)
            st = inner_put(namespace, key, seal(group, namespace, key, value), now_us, min_version, created_us)
            return st._replace(value=value)

        return get, put

    def delete(self, namespace: str, key: str, now_us: int) -> Stored | None:
        old = self.inner.delete(namespace, key, now_us)
        if old is None:
            return None
        group = self.group_of(namespace)
        if group is None:
            return old
        try:
            return self._opened(group, namespace, old)
        except KeyUnavailable:
            return old._replace(value=b"null")  # deleted all the same; its value is not this op's answer

    def scan(self, namespace: str, *, include_cold: bool = False, strict: bool = True) -> Iterator[Stored]:
        group = self.group_of(namespace)
        it = self.inner.scan(namespace, include_cold=include_cold, strict=strict)
        if group is None:
            return it
        return (self._opened(group, namespace, st) for st in it)

    def keys(self, namespace: str) -> list[tuple[str, int, int]]:
        return self.inner.keys(namespace)

    # -- tiers ----------------------------------------------------------------------

    def archive(self, namespace: str, records: list[Stored]) -> list[str]:
        group = self.group_of(namespace)
        if group is not None:
            seal = self.cipher.seal
            records = [st._replace(value=seal(group, namespace, st.key, st.value)) for st in records]
        return self.inner.archive(namespace, records)

    def purge(self, namespace: str) -> dict[str, int]:
        return self.inner.purge(namespace)

    def erase(self, namespace: str, key: str) -> dict[str, int]:
        return self.inner.erase(namespace, key)  # erasing needs no key: the bytes go, sealed or not

    # -- declarations ---------------------------------------------------------------

    def declarations(self) -> dict[str, dict[str, Any]] | None:
        return self.inner.declarations()

    def declare(self, name: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        return self.inner.declare(name, spec)

    def undeclare(self, name: str) -> bool:
        return self.inner.undeclare(name)

    # -- maintenance ----------------------------------------------------------------

    def check(self, fix: bool = False) -> list[Finding]:
        """The inner backend's findings, then every record of a sealed
        namespace that does not open (``sealed-unreadable``) or is plaintext
        (``unsealed-record``). Sealed records are never changed here."""
        findings = self.inner.check(fix)
        for namespace in self.names():
            group = self.group_of(namespace)
            if group is None:
                continue
            try:
                records = list(self.inner.scan(namespace, include_cold=True, strict=False))
            except MemoryStoreError:
                continue  # what stops a scan is the inner check's finding
            for st in records:
                sealed = parse(st.value)
                if sealed is None:
                    findings.append(Finding(
                        "unsealed-record", f"{namespace}/{st.key}",
                        "plaintext in a sealed namespace; sealed by its next write or a key rotation",
                        namespace=namespace, extra={"key": st.key},
                    ))
                    continue
                try:
                    self.cipher.open(group, namespace, st.key, st.value)
                except KeyUnavailable as exc:
                    findings.append(Finding(
                        "sealed-unreadable", f"{namespace}/{st.key}", str(exc), namespace=namespace,
                        extra={"key": st.key, "group": group, "key_id": sealed.key_id,
                               "reason": "wrong-key" if isinstance(exc, WrongKey) else "no-key"},
                    ))
        return findings

    def compact(self, namespace: str | None = None) -> int:
        return self.inner.compact(namespace)

    def stats(self) -> dict[str, dict[str, int]]:
        return self.inner.stats()

    def info(self) -> dict[str, Any]:
        return self.inner.info()

    def close(self) -> None:
        self.inner.close()

    # -- exports and imports ----------------------------------------------------------

    def scan_as_stored(self, namespace: str, *, include_cold: bool = False, strict: bool = True) -> Iterator[Stored]:
        """The records of ``namespace`` as the backend below holds them
        (sealed values stay sealed): what an export writes."""
        return self.inner.scan(namespace, include_cold=include_cold, strict=strict)

    def export_value(self, group: str, namespace: str, key: str, stored: bytes) -> bytes:
        """A stored value as an export carries it: sealed as stored, or (a
        plaintext one written before the namespace was sealed) sealed now."""
        if parse(stored) is not None:
            return stored
        return self.cipher.seal_fixed(group, namespace, key, stored)

    def export_seal(self, group: str, namespace: str, key: str, plain: bytes) -> bytes:
        """An opened value (a kept version) sealed for an export (:meth:`Cipher.seal_fixed`)."""
        return self.cipher.seal_fixed(group, namespace, key, plain)

    def export_keys(self, groups: list[str], kek: bytes) -> list[WrappedKey]:
        """Every key of ``groups`` this store holds, wrapped under ``kek``."""
        provider = self.cipher.keys
        out: list[WrappedKey] = []
        for group in groups:
            current = provider.current(group)
            for key_id in provider.ids(group):
                secret = provider.get(group, key_id)
                if secret is not None:
                    is_current = current is not None and current.key_id == key_id
                    out.append(wrap(kek, group, DataKey(key_id, secret), is_current))
        return out

    def open_imported(self, group: str, namespace: str, key: str, sealed: bytes,
                      extra: Mapping[tuple[str, str], bytes]) -> bytes:
        """The plaintext of an imported sealed value, opened with this store's
        keys or ``extra`` (the file's); :class:`KeyUnavailable` or
        :class:`WrongKey` when neither opens it."""
        if parse(sealed) is None:
            raise WrongKey(f"the value of {namespace}/{key!r} is not sealed, as every value of a sealed "
                           "namespace in this format is", namespace=namespace, key=key, group=group)
        return self.cipher.open(group, namespace, key, sealed, extra)

    def adopt(self, group: str, key: DataKey, current: bool) -> None:
        """Keep an imported key (:meth:`KeyProvider.adopt`)."""
        self.cipher.keys.adopt(group, key, current)

    def put_sealed(self, namespace: str, key: str, sealed: bytes, now_us: int, min_version: int,
                   created_us: int, cold: bool) -> Stored:
        """Store ``sealed`` (a sealed value, checked to open) as it is, with
        its version and times, archived when ``cold``: an import keeps the
        ciphertext the export carried. The stored record (its value sealed)."""
        stored = self.inner.put(namespace, key, sealed, now_us, min_version, created_us)
        if cold:
            self.inner.archive(namespace, [stored])
        return stored

    # -- keys -----------------------------------------------------------------------

    def shred(self, group: str) -> int:
        """Destroy every key of ``group``: every copy of its sealed records,
        wherever it is, stays ciphertext for good. The count destroyed."""
        n = self.cipher.keys.destroy(group)
        self.cipher.forget_cached()
        return n

    def reseal(self, group: str, namespaces: list[str], stop: threading.Event | None = None,
               relink: Relink | None = None) -> int:
        """Seal again with ``group``'s current key every record of
        ``namespaces`` sealed with another (or plaintext), one record at a
        time under its namespace's lock (reads and writes go on between
        records); the count resealed. A record keeps its value and times and
        takes the next version (no change event: its value did not change);
        ``relink(namespace, key, version)`` is called first, under the lock,
        so the kept history stays reachable from the new version. An archived
        record is archived again. Stops early when ``stop`` is set."""
        current = self.cipher.keys.ensure(group)
        n = 0
        for namespace in namespaces:
            for st in list(self.inner.scan(namespace, include_cold=True, strict=False)):
                if stop is not None and stop.is_set():
                    return n
                sealed = parse(st.value)
                if sealed is not None and sealed.key_id == current.key_id:
                    continue
                with self.inner.lock(namespace, cross_process=True):
                    now = self.inner.get(namespace, st.key)
                    if now is None or now.version != st.version:
                        continue  # written (with the current key) or deleted since
                    sealed = parse(now.value)
                    if sealed is not None and sealed.key_id == current.key_id:
                        continue
                    plain = self.cipher.open(group, namespace, now.key, now.value)
                    if relink is not None:
                        relink(namespace, now.key, now.version)
                    new = self.inner.put(
                        namespace, now.key, self.cipher.seal(group, namespace, now.key, plain), now.updated_us,
                        now.version, now.created_us,
                    )
                    if now.tier == "cold":
                        self.inner.archive(namespace, [new])
                n += 1
        return n

    def stale(self, group: str, namespaces: list[str]) -> int:
        """How many records of ``namespaces`` are not sealed with ``group``'s current key."""
        current = self.cipher.keys.current(group)
        n = 0
        for namespace in namespaces:
            for st in self.inner.scan(namespace, include_cold=True, strict=False):
                sealed = parse(st.value)
                if sealed is None or current is None or sealed.key_id != current.key_id:
                    n += 1
        return n




class Rotation:
    """A key rotation running in the background (``MemoryManager.rotate_keys``):
    every record of ``namespaces`` is sealed again with ``group``'s current
    key, then the older keys are destroyed, only once a full pass finds no
    record left under one. Reads and writes go on meanwhile (each record is
    resealed under its own lock). A kill at any point leaves every record
    readable (the older keys still exist until the end); a later rotation
    finishes the work."""

    def __init__(self, backend: SealedBackend, group: str, namespaces: list[str],
                 relink: Relink | None = None) -> None:
        self.group = group
        self._relink = relink
        self.namespaces = namespaces
        self.resealed = 0
        self.destroyed: list[str] = []
        self.error: BaseException | None = None
        self._backend = backend
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"hrm-memory-rotate-{group}", daemon=True)

    def start(self) -> Rotation:
        self._thread.start()
        return self

    def _run(self) -> None:
        backend, provider = self._backend, self._backend.provider
        try:
            for _ in range(100):
                self.resealed += backend.reseal(self.group, self.namespaces, self._stop, self._relink)
                if self._stop.is_set():
                    return
                if backend.stale(self.group, self.namespaces) == 0:
                    # A writer elsewhere may still hold the older key as
                    # current for up to STALE_AFTER: look once more after that.
                    time.sleep(3 * STALE_AFTER)
                    if backend.stale(self.group, self.namespaces) == 0:
                        break
            else:
                return  # writers kept using an older key: keep every key, report nothing destroyed
            current = provider.current(self.group)
            old = [k for k in provider.ids(self.group) if current is None or k != current.key_id]
            if old:
                provider.destroy(self.group, old)
                backend.cipher.forget_cached()
            self.destroyed = old
        except BaseException as exc:  # kept for wait(); the older keys stay
            self.error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the end; True when it ended. Raises what stopped it."""
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error
        return not self._thread.is_alive()

    def cancel(self) -> None:
        """Stop after the record in hand (the older keys stay; resumable)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def __repr__(self) -> str:
        state = "done" if self.done else "running"
        return f"Rotation({self.group!r}, {state}, resealed={self.resealed}, destroyed={len(self.destroyed)})"


__all__ = ["Cipher", "GroupOf", "MAGIC", "Relink", "Rotation", "STORE_NAMESPACE", "Sealed", "SealedBackend", "StoreId", "parse"]
