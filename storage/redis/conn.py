"""Connecting to Redis, and what its failures become.

``connect(url)`` builds one redis-py client (a thread-safe connection pool)
from a ``redis://`` or ``rediss://`` URL. The URL's query may carry this
package's own options (removed before redis-py sees the URL):

- ``prefix`` (default ``hrm:``): the start of every key this store uses, so
  several stores can share one server and database;
- ``lease_ms`` (default 10000): how long a namespace lease lasts without use;
- ``stream_maxlen`` (default 100000): change-log entries kept (approximately);

and redis-py's own (``socket_timeout``, ``socket_connect_timeout``, ...).
Socket timeouts default to 5 s (commands) and 2 s (connecting), so an
operation against a server that stopped answering fails within a bounded
time; redis-py's automatic retries are off (a retried write could apply
twice), so every failure reaches the caller as a typed error:
:class:`BackendUnavailable` (the server cannot be reached, is loading its
data, or did not answer in time), :class:`StorageError` (it refused a write:
out of memory, read-only replica, persistence failing) or
:class:`CorruptRecord` (one of our keys holds something else).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from hrm_memory.core.errors import BackendUnavailable, CorruptRecord, InvalidArgument, MemoryStoreError, StorageError
from redis.backoff import NoBackoff
from redis.exceptions import ClusterCrossSlotError, ClusterDownError, MovedError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .url import check, redact

SCHEMES = ("redis://", "rediss://")
DEFAULT_PREFIX = "hrm:"


@dataclass(frozen=True)
class Settings:
    """What the URL says, with the package's own options taken out."""

    url: str  # for redis-py (may hold a password: never logged)
    shown: str  # the same without credentials, for info() and messages
    prefix: str
    lease_ms: int
    stream_maxlen: int


def parse(url: str, *, prefix: str | None = None) -> Settings:
    checked = check(url)  # scheme (any case), host, port, db and every option validated: redis_url.py
    ours = {"prefix": prefix or DEFAULT_PREFIX, "lease_ms": "10000", "stream_maxlen": "100000"}
    for name, value in checked.ours.items():
        if name != "prefix" or prefix is None:
            ours[name] = value
    try:
        lease_ms, maxlen = int(ours["lease_ms"]), int(ours["stream_maxlen"])
    except ValueError:
        raise InvalidArgument("lease_ms and stream_maxlen must be integers") from None
    if lease_ms < 100 or maxlen < 1000:
        raise InvalidArgument("lease_ms must be >= 100 and stream_maxlen >= 1000")
    if not ours["prefix"] or any(c.isspace() for c in ours["prefix"]):
        raise InvalidArgument("the key prefix must be a non-empty string without spaces")
    path = f"/{checked.db}"
    clean = urlunsplit((checked.scheme, checked.netloc, path, urlencode(checked.passed), ""))
    shown = f"{checked.scheme}://{checked.host}:{checked.port}{path}"
    return Settings(clean, shown, ours["prefix"], lease_ms, maxlen)


def connect(settings: Settings) -> redis.Redis:
    """A client over a connection pool: timeouts on, automatic retries off."""
    return redis.Redis.from_url(
        settings.url,
        **{
            "socket_timeout": 5.0,
            "socket_connect_timeout": 2.0,
            **_url_timeouts(settings.url),
            "retry": Retry(NoBackoff(), 0),
            "health_check_interval": 0,
            "decode_responses": False,
        },
    )


#: ``client.execute_command``, typed: every call of this package goes through it.
Command = Callable[..., Any]


def command(client: redis.Redis) -> Command:
    cmd: Command = client.execute_command
    return cmd


def _url_timeouts(url: str) -> dict[str, float]:
    """Timeouts the URL sets itself (validated by ``parse``) win over the defaults above."""
    return {n: float(v) for n, v in parse_qsl(urlsplit(url).query) if n in ("socket_timeout", "socket_connect_timeout")}


def failure(exc: RedisError, what: str, shown: str, namespace: str | None = None) -> MemoryStoreError:
    """The typed error for a failed Redis call (``what``: the operation)."""
    kind = type(exc).__name__
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError)):  # cluster: failing over
        # BusyLoadingError (the server is loading its data after a restart)
        # is a ConnectionError in redis-py: unavailable for now, too.
        return BackendUnavailable(
            f"Redis at {shown} is unavailable ({kind}: {redact(exc)}) during {what}; nothing was changed by the failed "
            "call unless it had reached the server (a write whose answer was lost may have been applied: read "
            "it back)",
            backend=shown,
            operation=what,
            namespace=namespace,
        )
    text = redact(exc)
    if isinstance(exc, ResponseError) and text.startswith(("WRONGTYPE", "ERR Error running script")):
        return CorruptRecord(
            f"Redis at {shown}: a key of this store holds data it did not write ({text[:200]}) during {what}",
            namespace=namespace,
        )
    if isinstance(exc, (MovedError, ClusterCrossSlotError)):  # a cluster node behind a redis:// URL
        text = f"{text[:150]}; this server is a Redis Cluster node: use a redis+cluster:// URL"
    return StorageError(f"Redis at {shown} refused {what} ({kind}: {text[:200]})", namespace=namespace, path=shown)


__all__ = ["DEFAULT_PREFIX", "SCHEMES", "Command", "Settings", "command", "connect", "failure", "parse"]
