"""A Redis backend URL, checked before redis-py sees it; and passwords kept out of messages.

``check(url)`` returns the URL split and validated: scheme (case-insensitive,
surrounding whitespace ignored), host (a bad IPv6 literal refused), port
(1-65535), database (the path ``/<n>`` or ``db=<n>``) and the query options.
Only the options this package documents are taken; an unknown one, a value
of the wrong type, a NaN or infinite timeout is an :class:`InvalidArgument`
naming the option, never redis-py's ``TypeError``/``ValueError`` (or the
``OverflowError`` a socket raised for ``socket_timeout=1e400``) at connect.

``redact(text)`` removes the userinfo (``user:password@``) of anything
URL-like in ``text`` whatever the scheme's case or the number of slashes, and
the value of a ``password=`` query option: every message that could quote a
URL goes through it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from hrm_memory.core.errors import InvalidArgument

SCHEMES = ("redis", "rediss")
#: Redis Cluster (storage/redis/cluster.py): several host:port pairs.
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
#: a scheme, its slashes (any number, "redis:/" included) and a userinfo up
#: to the last "@" of the run of non-space characters: replaced by "***@".
_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.\-]*:/*)[^\s]*@")
_PASSWORD_OPTION = re.compile(r"(?i)((?:^|[?&;\s])(?:password|pass|pwd)=)[^&\s]*")

# Options of ours (handled by redis_conn.parse) and the redis-py ones this
# package passes on; each with its check. Timeouts are finite and bounded.
_MAX_SECONDS = 86_400.0
OURS = ("prefix", "lease_ms", "stream_maxlen")
BOOLS = ("socket_keepalive", "ssl_check_hostname")
PASSED = ("socket_timeout", "socket_connect_timeout", "max_connections", "client_name", *BOOLS)
_TLS_ONLY = ("ssl_check_hostname",)
#: Options taken out before :func:`check` sees the URL (replicas each write
#: waits for: storage/redis/cluster.py's ``topology``), named among the known.
WAIT_OPTIONS = ("wait", "wait_timeout")


def redact(text: object) -> str:
    """``text`` with the userinfo of every URL in it and ``password=`` values replaced by ``***``."""
    s = str(text)
    s = _USERINFO.sub(lambda m: m.group(1) + "***@", s)
    return _PASSWORD_OPTION.sub(lambda m: m.group(1) + "***", s)


def scheme_of(url: object) -> str | None:
    """``"redis"`` or ``"rediss"`` if ``url`` is a Redis URL (any case, surrounding whitespace ignored)."""
    if not isinstance(url, str):
        return None
    head, sep, _ = url.strip().partition("://")
    return head.lower() if sep and head.lower() in SCHEMES else None


def any_scheme_of(url: object) -> str | None:
    """:func:`scheme_of`, Redis Cluster's schemes included."""
    if not isinstance(url, str):
        return None
    head, sep, _ = url.strip().partition("://")
    return head.lower() if sep and head.lower() in SCHEMES + CLUSTER_SCHEMES else None


def normalized(url: str) -> str:
    """``url`` without surrounding white space, its scheme in lower case."""
    head, sep, rest = url.strip().partition("://")
    return head.lower() + sep + rest if sep else url.strip()


def refusal(url: object) -> str:
    """Why ``url`` is not a Redis URL, quoting at most its leading letters (a
    would-be scheme): nothing after them, where a password could be."""
    m = re.match(r"\s*([A-Za-z][A-Za-z0-9+.\-]{0,9})", url) if isinstance(url, str) else None
    given = f"one starting {m.group(1)!r}" if m else f"a {type(url).__name__}" if not isinstance(url, str) else "that"
    return f"a Redis URL starts with redis://, rediss://, redis+cluster:// or rediss+cluster:// (any case), not {given}"


@dataclass(frozen=True)
class Checked:
    scheme: str  # lower case
    netloc: str  # as given (may hold credentials: never shown)
    host: str
    port: int
    db: int
    ours: dict[str, str]
    passed: list[tuple[str, str]]  # redis-py options, validated


def check(url: object) -> Checked:
    scheme = scheme_of(url)
    if scheme is None:
        raise InvalidArgument(refusal(url))
    assert isinstance(url, str)
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or "localhost"
        port = parts.port if parts.port is not None else 6379
    except ValueError as exc:
        # urlsplit's own messages quote no credentials, but pass them through redact all the same.
        raise InvalidArgument(f"bad Redis URL {redact(url.strip())!r}: {redact(exc)}") from None
    if not 0 < port < 65536:
        raise InvalidArgument(f"bad Redis URL: port {port} is not in 1-65535")
    if parts.fragment:
        raise InvalidArgument("bad Redis URL: a '#fragment' means nothing here")
    db = _db(parts.path.lstrip("/"), "the URL path") if parts.path.strip("/") else 0
    ours: dict[str, str] = {}
    passed: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in seen:
            raise InvalidArgument(f"Redis URL option {name!r} is given twice")
        seen.add(name)
        if name in OURS:
            ours[name] = value
        elif name == "db":
            if parts.path.strip("/"):
                raise InvalidArgument("the Redis database is given twice (path and db=)")
            db = _db(value, "db=")
        elif name in PASSED:
            if name in _TLS_ONLY and scheme != "rediss":
                raise InvalidArgument(f"Redis URL option {name!r} applies to rediss:// only")
            passed.append((name, _option(name, value)))
        else:
            known = ", ".join((*OURS, *WAIT_OPTIONS, "db", *PASSED))
            raise InvalidArgument(f"unknown Redis URL option {name!r} (known: {known})")
    return Checked(scheme, parts.netloc, host, port, db, ours, passed)


def _db(text: str, where: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        # Quoted only when plainly not a secret: a path can hold a misplaced "user:password@".
        shown = repr(text[:20]) if text[:20].isalnum() else "that"
        raise InvalidArgument(f"the Redis database ({where}) must be a number 0-999999, not {shown}")
    return int(text)


def _option(name: str, value: str) -> str:
    if name in ("socket_timeout", "socket_connect_timeout"):
        try:
            seconds = float(value)
        except ValueError:
            raise InvalidArgument(f"{name} must be a number of seconds, not {value[:20]!r}") from None
        if not math.isfinite(seconds) or not 0.5 <= seconds <= _MAX_SECONDS:
            # A lease waiter blocks up to 0.25 s in one command: below 0.5 s it would time out.
            raise InvalidArgument(f"{name} must be a number of seconds from 0.5 to {_MAX_SECONDS:.0f}, not {value[:20]!r}")
        return repr(seconds)
    if name == "max_connections":
        if not (value.isascii() and value.isdigit()) or not 1 <= int(value[:7]) <= 100_000 or len(value) > 6:
            raise InvalidArgument(f"max_connections must be a whole number from 1 to 100000, not {value[:20]!r}")
        return value
    if name in BOOLS:
        low = value.lower()
        if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise InvalidArgument(f"{name} must be true or false, not {value[:20]!r}")
        return "1" if low in ("1", "true", "yes", "on") else "0"
    if name == "client_name":
        if not value or len(value) > 128 or any(c.isspace() or not c.isprintable() for c in value):
            raise InvalidArgument("client_name must be 1-128 printable characters without spaces")
        return value
    raise AssertionError(name)


__all__ = ["BOOLS", "Checked", "OURS", "PASSED", "SCHEMES", "check", "redact", "refusal", "scheme_of"]
