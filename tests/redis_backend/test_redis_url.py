"""Redis URLs (a real redis-server where one is reached).

The password of a URL never appears in an error message, whatever the
scheme's case, the slashes or surrounding whitespace (``REDIS://:pw@...``,
``Redis://...``, ``redis:/:pw@...``, a leading space). Every bad URL is an
``InvalidArgument`` naming what is wrong, not a ``TypeError`` (an unknown
option), ``ValueError`` (a bad port, ``db=x``, ``max_connections=x``, a bad
IPv6 address, ``socket_timeout=nan``) or ``OverflowError``
(``socket_timeout=1e400``).
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from hrm_memory import BackendUnavailable, InvalidArgument, MemoryManager, MemoryStoreError
from hrm_memory.storage.redis.url import redact
from tests.helpers.redis_server import free_port, require_redis, shared_server

SECRET = "Zq9-pW-7f3Kx1"


def _message_of(call: object) -> tuple[BaseException, str]:
    with pytest.raises(BaseException) as info:
        call()  # type: ignore[operator]
    exc = info.value
    text = "".join(traceback.format_exception(exc))
    return exc, text + repr(exc) + str(exc) + repr(getattr(exc, "__dict__", {}))


@pytest.mark.parametrize(
    "url",
    [
        f"REDIS://:{SECRET}@127.0.0.1:1/0?foo=1",
        f"Redis://user:{SECRET}@127.0.0.1:1/0?db=x",
        f"redis:/:{SECRET}@127.0.0.1:1/0",
        f"redis:///:{SECRET}@127.0.0.1/0",
        f" redis://:{SECRET}@127.0.0.1:99999/0",
        f"http://:{SECRET}@127.0.0.1/0",
        f":{SECRET}@127.0.0.1/0",
        f"redis://:{SECRET}@[::1/0",
        f"redis://:{SECRET}@127.0.0.1/0?socket_timeout=nan",
        f"redis://:{SECRET}@127.0.0.1/0?password={SECRET}&bogus=1",
        f"redis://:{SECRET}@host/0 trailing words",
    ],
)
def test_refused_url_never_quotes_its_password(tmp_path: Path, url: str) -> None:
    """The password is not in the message for any spelling (upper case, one
    slash, a leading space), and ?foo=1 is an InvalidArgument too."""
    exc, text = _message_of(lambda: MemoryManager(tmp_path / "r", backend=url))
    assert isinstance(exc, InvalidArgument) and isinstance(exc, ValueError), repr(exc)
    assert SECRET not in text


def test_unreachable_server_with_any_scheme_case_is_typed_and_redacted(tmp_path: Path) -> None:
    """An upper-case scheme is a Redis URL (it was refused, quoting the
    password); the server not answering is BackendUnavailable without it."""
    port = free_port()
    for scheme in ("REDIS", "Redis", " redis"):
        url = f"{scheme}://:{SECRET}@127.0.0.1:{port}/0?socket_connect_timeout=0.5"
        exc, text = _message_of(lambda: MemoryManager(tmp_path / "r", backend=url).close())
        assert isinstance(exc, BackendUnavailable), repr(exc)
        assert SECRET not in text


def test_upper_case_scheme_reaches_a_real_server(tmp_path: Path) -> None:
    require_redis()
    url = shared_server().fresh_url().replace("redis://", "REDIS://", 1)
    with MemoryManager(tmp_path / "r", backend=url) as mm:
        mm.write("focus.slow", "k", {"v": 1})
        assert mm.read("focus.slow", "k") == {"v": 1}


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("unknown_option=1", "unknown_option"),
        ("retry_on_timeout=yes", "retry_on_timeout"),
        ("db=x", "db"),
        ("max_connections=x", "max_connections"),
        ("max_connections=0", "max_connections"),
        ("socket_timeout=nan", "socket_timeout"),
        ("socket_timeout=1e400", "socket_timeout"),
        ("socket_timeout=inf", "socket_timeout"),
        ("socket_timeout=abc", "socket_timeout"),
        ("socket_connect_timeout=-1", "socket_connect_timeout"),
        ("socket_keepalive=maybe", "socket_keepalive"),
        ("ssl_check_hostname=1", "ssl_check_hostname"),
        ("lease_ms=x", "lease_ms"),
        ("prefix=a&prefix=b", "prefix"),
    ],
)
def test_bad_option_is_invalid_argument_naming_it(tmp_path: Path, query: str, names: str) -> None:
    """An InvalidArgument at construction: not a TypeError, ValueError or
    OverflowError (at construction or at the first command), and never
    accepted silently."""
    require_redis()
    url = f"redis://127.0.0.1:{shared_server().port}/0?{query}"
    exc, _ = _message_of(lambda: MemoryManager(tmp_path / "r", backend=url).close())
    assert isinstance(exc, InvalidArgument) and isinstance(exc, MemoryStoreError), repr(exc)
    assert names in str(exc)


@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:x/0", "redis://127.0.0.1:99999/0", "redis://127.0.0.1:0/0", "redis://[::1/0",
     "redis://[zz::1]:6379/0", "redis://127.0.0.1/x", "redis://127.0.0.1/0/1", "redis://127.0.0.1/0#frag"],
)  # fmt: skip
def test_bad_host_port_or_database_is_invalid_argument(tmp_path: Path, url: str) -> None:
    exc, _ = _message_of(lambda: MemoryManager(tmp_path / "r", backend=url).close())
    assert isinstance(exc, InvalidArgument), repr(exc)


def test_redact_covers_url_like_text() -> None:
    for text in (
        f"REDIS://:{SECRET}@h", f"Redis://u:{SECRET}@h:1/2", f"redis:/:{SECRET}@h", f"  rediss://:{SECRET}@h",
        f"error at redis://u:{SECRET}@h/0 (x)", f"redis://:{SECRET}@with@at@h", f"x?password={SECRET}&a=1",
    ):  # fmt: skip
        assert SECRET not in redact(text), text
