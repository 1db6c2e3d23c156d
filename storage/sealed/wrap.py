"""Data keys wrapped for an export, under a key derived from a passphrase.

An export carries sealed values as they are stored; only when asked
(``export(..., include_keys=True, passphrase=...)``) does it carry the data
keys that open them, each encrypted (*wrapped*) with AES-256-GCM under a
key-encryption key derived from the caller's passphrase with scrypt.

Why a passphrase and scrypt: an export is a file that travels (to another
machine, a backup disk, a colleague) and is opened where none of this
store's infrastructure is: a passphrase needs nothing there but itself, and
scrypt makes every guess at it cost memory and time (the parameters and the
random salt are in the file, so they can be raised later without a format
change). A caller whose secret already is a strong random key (one a KMS
hands out) passes it as the passphrase: scrypt then costs one derivation,
not a weakness. The associated data binds each wrapped key to its group and
key id, so a wrapped key cannot be passed off as another.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any, NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from hrm_memory.core.errors import InvalidArgument, WrongKey

from .keys import KEY_BYTES, DataKey

#: scrypt cost written into new exports: 2**15 * 8 * 128 bytes = 32 MiB of memory per derivation.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
#: The most an import will spend on a file's scrypt parameters (a file cannot ask for more).
MAX_SCRYPT_MEMORY = 1 << 30
SALT_BYTES = 16
MIN_PASSPHRASE = 12
_NONCE = 12
_AD = b"hrm-memory export key 1\x00"


class Passphrase:
    """The secret an export's keys are wrapped under. Its repr hides it, so
    an op, a traceback or a log line that shows one never shows the secret."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str | bytes) -> None:
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if not isinstance(secret, bytes):
            raise InvalidArgument(f"a passphrase is a str or bytes, not {type(secret).__name__}")
        if len(secret) < MIN_PASSPHRASE:
            raise InvalidArgument(f"a passphrase is at least {MIN_PASSPHRASE} bytes long")
        self._secret = secret

    def __repr__(self) -> str:
        return "Passphrase(<hidden>)"

    @classmethod
    def of(cls, value: Passphrase | str | bytes | None) -> Passphrase | None:
        """``value`` as a Passphrase (None stays None)."""
        return value if value is None or isinstance(value, Passphrase) else cls(value)

    def derive(self, kdf: Kdf) -> bytes:
        """The key-encryption key for ``kdf`` (scrypt of the passphrase)."""
        return Scrypt(salt=kdf.salt, length=KEY_BYTES, n=kdf.n, r=kdf.r, p=kdf.p).derive(self._secret)


class Kdf(NamedTuple):
    """How the key-encryption key is derived: scrypt's parameters and salt."""

    n: int
    r: int
    p: int
    salt: bytes

    @classmethod
    def new(cls) -> Kdf:
        return cls(SCRYPT_N, SCRYPT_R, SCRYPT_P, os.urandom(SALT_BYTES))

    def to_dict(self) -> dict[str, Any]:
        return {"name": "scrypt", "n": self.n, "r": self.r, "p": self.p,
                "salt": base64.b64encode(self.salt).decode()}

    @classmethod
    def from_dict(cls, data: Any) -> Kdf:
        """Checked: scrypt only, a power of two ``n``, at most
        :data:`MAX_SCRYPT_MEMORY` of memory, a salt of at least 16 bytes."""
        if type(data) is not dict or data.get("name") != "scrypt":
            raise InvalidArgument("the keys' kdf must be {\"name\": \"scrypt\", ...}")
        n, r, p = data.get("n"), data.get("r"), data.get("p")
        if not all(type(x) is int and x >= 1 for x in (n, r, p)):
            raise InvalidArgument("scrypt's n, r and p must be integers >= 1")
        assert isinstance(n, int) and isinstance(r, int) and isinstance(p, int)
        if n < 2 or n & (n - 1) or 128 * n * r * p > MAX_SCRYPT_MEMORY:
            raise InvalidArgument(f"scrypt parameters n={n} r={r} p={p} are not a power of two n within "
                                  f"{MAX_SCRYPT_MEMORY >> 20} MiB")
        salt = _b64(data.get("salt"), "salt")
        if len(salt) < SALT_BYTES:
            raise InvalidArgument(f"the scrypt salt must be at least {SALT_BYTES} bytes")
        return cls(n, r, p, salt)


class WrappedKey(NamedTuple):
    """One data key as an export carries it."""

    group: str
    key_id: str
    current: bool
    blob: bytes  # nonce + AES-GCM(kek, secret) + tag

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "id": self.key_id, "current": self.current,
                "wrapped": base64.b64encode(self.blob).decode()}

    @classmethod
    def from_dict(cls, data: Any) -> WrappedKey:
        if type(data) is not dict:
            raise InvalidArgument("a wrapped key is {\"group\", \"id\", \"current\", \"wrapped\"}")
        group, key_id, current = data.get("group"), data.get("id"), data.get("current")
        if type(group) is not str or not group or type(key_id) is not str or not key_id.isalnum():
            raise InvalidArgument("a wrapped key names its group and an alphanumeric key id")
        if type(current) is not bool:
            raise InvalidArgument("a wrapped key's current is true or false")
        blob = _b64(data.get("wrapped"), "wrapped")
        if len(blob) != _NONCE + KEY_BYTES + 16:
            raise InvalidArgument(f"a wrapped key is {_NONCE + KEY_BYTES + 16} bytes")
        return cls(group, key_id, current, blob)


def _b64(value: Any, field: str) -> bytes:
    if type(value) is not str:
        raise InvalidArgument(f"{field} must be base64")
    try:
        return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        raise InvalidArgument(f"{field} must be base64") from None


def _ad(group: str, key_id: str) -> bytes:
    return _AD + group.encode() + b"\x00" + key_id.encode()


def wrap(kek: bytes, group: str, key: DataKey, current: bool) -> WrappedKey:
    nonce = os.urandom(_NONCE)
    return WrappedKey(group, key.key_id, current,
                      nonce + AESGCM(kek).encrypt(nonce, key.secret, _ad(group, key.key_id)))


def unwrap(kek: bytes, wrapped: WrappedKey) -> DataKey:
    """The data key, or :class:`WrongKey` when ``kek`` does not open it (a
    wrong passphrase, or an altered file)."""
    blob = wrapped.blob
    try:
        secret = AESGCM(kek).decrypt(blob[:_NONCE], blob[_NONCE:], _ad(wrapped.group, wrapped.key_id))
    except InvalidTag:
        raise WrongKey(
            f"the passphrase does not open the export's key {wrapped.key_id!r} of {wrapped.group!r} "
            "(a wrong passphrase, or the file was altered)", group=wrapped.group, key_id=wrapped.key_id,
        ) from None
    return DataKey(wrapped.key_id, secret)


__all__ = ["Kdf", "MIN_PASSPHRASE", "Passphrase", "WrappedKey", "unwrap", "wrap"]
