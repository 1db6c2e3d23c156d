"""The Redis backend on a Redis Cluster, and the replicated-write mode.

``MemoryManager(backend="redis+cluster://h1:p1,h2:p2/0?prefix=...")`` runs
the same :class:`~hrm_memory.storage.redis.backend.RedisBackend` on redis-py's
:class:`redis.cluster.RedisCluster` client; what differs is here:

- :func:`topology` reads the URL (both forms): the seed nodes of a cluster,
  and the options of the replicated mode, ``wait=N`` (a write returns once N
  replicas have it: ``WAIT N wait_timeout`` on the connection that ran the
  write's script) and ``wait_timeout`` (milliseconds, default 1000);
- :class:`ClusterSide`: what the backend does differently on a cluster (the
  namespace registry, a purge of a namespace's own stream, asking every node
  to rewrite its files);
- :class:`ClusterChangeLog`: the change log as one stream per namespace,
  read as one log through a composite cursor;
- :class:`Replicated`: the write path of the replicated mode.

Key names: :mod:`hrm_memory.storage.redis.keys`. docs/redis.md says what each
mode promises when a primary dies.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from hrm_memory.core.errors import BackendUnavailable, InvalidArgument, InvalidCursor, NotReplicated
from hrm_memory.core.records import Event
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import SSLConnection, parse_url
from redis.exceptions import AskError, MovedError, RedisClusterException, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .changes import Outage, RedisChangeLog, _before, check_kept, parse_id
from .url import any_scheme_of, normalized, redact, refusal
from .conn import SCHEMES, Command, Settings, _url_timeouts, failure, parse
from .keys import KeyLayout
from .purge import persist
from .scripts import SCRIPTS, Script

log = logging.getLogger("hrm_memory.redis")

# redis-py's cluster module is not typed: its names, as Any.
_Cluster: Any = RedisCluster
_Node: Any = ClusterNode
_parse_url: Any = parse_url

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
ALL_SCHEMES = SCHEMES + CLUSTER_SCHEMES
_READ = SCRIPTS["read"]
_BATCH = 1000

#: KEYS: the registry of namespaces. ARGV: namespace. A script (not a bare
#: SADD) so that the replicated mode waits for it like for any write.
REGISTER = Script("redis.call('SADD', KEYS[1], ARGV[1]) return 1")


#: KEYS: a namespace's waiters list. Wakes one waiter (harmless: it looks
#: again) and, being a write that is always replicated, lets the replicated
#: mode wait for every earlier change of the namespace's primary (a purge's
#: deletions, which are not scripts) before the call returns.
FENCE = Script("redis.call('RPUSH', KEYS[1], '1') redis.call('LTRIM', KEYS[1], -4, -1) "
               "redis.call('PEXPIRE', KEYS[1], 5000) return 1")


def fence(top: Topology, wcmd: Command, waiters: str, namespace: str) -> None:
    """In the replicated mode: return once a replica has every change made so
    far on the primary that owns ``waiters``' slot (``NotReplicated`` if not).
    Nothing to do without ``wait=``."""
    if top.wait:
        try:
            FENCE(wcmd, (waiters,))
        except RedisError as exc:
            raise failure(exc, "a purge", top.settings.shown, namespace) from None


@dataclass(frozen=True)
class Topology:
    """A Redis URL, read: one server or a cluster, and the write mode."""

    settings: Settings
    cluster: bool
    nodes: tuple[tuple[str, int], ...]  # a cluster's seed nodes
    wait: int  # replicas a write must reach before it returns (0: do not wait)
    wait_timeout_ms: int


def topology(url: str, *, prefix: str | None = None) -> Topology:
    if any_scheme_of(url) is None:  # never quote the string: it may hold a password
        raise InvalidArgument(refusal(url))
    assert isinstance(url, str)
    url = normalized(url)
    try:
        parts = urlsplit(url)
        if not url.startswith(CLUSTER_SCHEMES):
            parts.port  # noqa: B018  (a bad port or IPv6 address raises here; a cluster's hosts are read below)
    except ValueError as exc:
        raise InvalidArgument(f"bad Redis URL {redact(url)!r}: {redact(exc)}") from None
    if parts.fragment:
        raise InvalidArgument("bad Redis URL: a '#fragment' means nothing here")
    wait, wait_timeout, rest = "0", "1000", []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "wait":
            wait = value
        elif name == "wait_timeout":
            wait_timeout = value
        else:
            rest.append((name, value))
    try:
        n, ms = int(wait), int(wait_timeout)
    except ValueError:
        raise InvalidArgument("wait and wait_timeout must be integers (replicas; milliseconds)") from None
    if not (0 <= n <= 16) or not (1 <= ms <= 60000):
        raise InvalidArgument("wait must be 0..16 replicas and wait_timeout 1..60000 milliseconds")
    try:
        socket_timeout = _url_timeouts(url).get("socket_timeout", 5.0)
    except (ValueError, OverflowError):
        if url.startswith(CLUSTER_SCHEMES):
            raise InvalidArgument("socket_timeout and socket_connect_timeout must be positive numbers of seconds") from None
        socket_timeout = 5.0  # one server: parse() below refuses it, naming the option
    if n and ms >= socket_timeout * 1000:
        raise InvalidArgument(
            f"wait_timeout ({ms} ms) must be shorter than socket_timeout ({socket_timeout} s): WAIT answers after it"
        )
    query = urlencode(rest)
    if not url.startswith(CLUSTER_SCHEMES):
        settings = parse(urlunsplit((parts.scheme, parts.netloc, parts.path, query, "")), prefix=prefix)
        return Topology(settings, False, (), n, ms)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    nodes = []
    for item in hosts.split(","):
        host, colon, port = item.rpartition(":")
        if not colon:
            host, port = item, "6379"
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgument(f"a cluster URL lists seed nodes as host:port,host:port; {item[:40]!r} is not one")
        nodes.append((host, int(port)))
    if parts.path not in ("", "/", "/0"):
        raise InvalidArgument("a Redis Cluster has one database, 0: the URL's path is /0 or nothing")
    scheme = parts.scheme.replace("+cluster", "")
    first = (userinfo + at if at else "") + hosts.split(",")[0]
    base = parse(urlunsplit((scheme, first, "/0", query, "")), prefix=prefix)
    if "{" in base.prefix or "}" in base.prefix:
        raise InvalidArgument("on a cluster the key prefix may not hold { or } (it is part of the hash tag)")
    shown = f"{parts.scheme}://" + ",".join(f"{h}:{p}" for h, p in nodes) + "/0"
    return Topology(replace(base, shown=shown), True, tuple(nodes), n, ms)


def connect_cluster(top: Topology) -> Any:
    """redis-py's cluster client: it follows MOVED/ASK redirections itself;
    its retries of failed commands are off, as on one server (a retried write
    could apply twice), so a failover reaches the caller as
    :class:`BackendUnavailable` until the cluster has promoted a replica."""
    kw: dict[str, Any] = dict(_parse_url(top.settings.url))
    for name in ("host", "port", "db", "path"):
        kw.pop(name, None)
    if kw.pop("connection_class", None) is SSLConnection:
        kw["ssl"] = True
    if int(redis.__version__.split(".")[0]) < 6:  # redis-py 5 retries by this count, not by ``retry``
        kw["cluster_error_retry_attempts"] = 0
    try:
        return _Cluster(
            startup_nodes=[_Node(h, p) for h, p in top.nodes],
            **{
                "socket_timeout": 5.0,
                "socket_connect_timeout": 2.0,
                **kw,
                **_url_timeouts(top.settings.url),
                "retry": Retry(NoBackoff(), 0),
                "decode_responses": False,
            },
        )
    except (RedisError, RedisClusterException) as exc:
        raise BackendUnavailable(
            f"Redis Cluster at {top.settings.shown} could not be reached ({type(exc).__name__}: {exc})",
            backend=top.settings.shown,
            operation="connecting",
        ) from None


def cluster_command(client: Any) -> Command:
    """``client.execute_command``, with the cluster client's own errors (no
    reachable node, no node for a slot) as redis-py connection errors, so the
    backend's handlers turn them into :class:`BackendUnavailable`.

    A script is sent to the node that owns its first key's slot, the slot
    computed once per key name: left to itself, redis-py computes the slot of
    every key of every script call (in Python) to check they agree, which
    the key layout guarantees (a write names 6 keys: the client CPU this
    saves is in BENCHMARKS.md, "Redis Cluster"). A ``MOVED`` reply still makes
    redis-py look the owner up again."""
    run = client.execute_command
    owner_of = client.nodes_manager.get_node_from_slot
    slots: dict[Any, int] = {}

    def cmd(*args: Any, **kw: Any) -> Any:
        try:
            if args[0] == "EVALSHA" and args[2]:
                slot = slots.get(args[3])
                if slot is None:
                    if len(slots) > 100_000:
                        slots.clear()
                    slot = slots[args[3]] = client.keyslot(args[3])
                return run(*args, target_nodes=owner_of(slot), **kw)
            return run(*args, **kw)
        except RedisClusterException as exc:
            raise RedisConnectionError(f"{type(exc).__name__}: {exc}") from exc

    return cmd


class Replicated:
    """The write path of the replicated mode (``wait=N``): a write script and
    ``WAIT N timeout`` go in one pipeline on one connection of the primary
    that owns the keys (``WAIT`` counts the replicas that acknowledged this
    connection's writes), and a write that fewer than N replicas confirmed
    raises :class:`NotReplicated`. Other commands pass through."""

    def __init__(self, client: Any, cmd: Command, wanted: int, timeout_ms: int, shown: str) -> None:
        self._client = client
        self._cmd = cmd
        self._cluster = isinstance(client, RedisCluster)
        self.wanted = wanted
        self.timeout_ms = timeout_ms
        self._shown = shown

    def _node(self, key: str) -> Any:
        if not self._cluster:
            return self._client
        try:
            node = self._client.get_node_from_key(key)
        except (RedisClusterException, IndexError, KeyError) as exc:
            raise RedisConnectionError(f"no node for {key!r}: {exc}") from exc
        return self._client.get_redis_connection(node)

    def _refresh(self) -> None:
        if self._cluster:
            try:
                self._client.nodes_manager.initialize()
            except (RedisError, RedisClusterException) as exc:
                log.debug("cluster: slot map not refreshed yet (%s)", exc)

    def __call__(self, *args: Any) -> Any:
        if args[0] != "EVALSHA" or not int(args[2]):
            return self._cmd(*args)
        key = args[3]
        for _ in range(5):
            pipe = self._node(key).pipeline(transaction=False)
            pipe.execute_command(*args)
            pipe.execute_command("WAIT", self.wanted, self.timeout_ms)
            try:
                res, acked = pipe.execute(raise_on_error=False)
            except (RedisConnectionError, RedisTimeoutError):
                self._refresh()  # a dead primary: learn the new map for the next call
                raise
            if isinstance(res, (MovedError, AskError)):
                self._refresh()  # the script did not run there: try the owner
                continue
            if isinstance(res, Exception):
                raise res
            if isinstance(acked, Exception):
                raise acked
            if int(acked) < self.wanted:
                raise NotReplicated(
                    f"Redis at {self._shown}: the write was applied on the primary but only {int(acked)} of "
                    f"{self.wanted} replicas confirmed it within {self.timeout_ms} ms; a failover now may lose it",
                    backend=self._shown,
                    operation="a replicated write",
                    acked=int(acked),
                    wanted=self.wanted,
                )
            return res
        raise RedisConnectionError(f"the cluster kept redirecting {key!r}: its slots are moving")


class ClusterSide:
    """What the backend does differently on a cluster."""

    def __init__(self, client: Any, cmd: Command, layout: KeyLayout, shown: str) -> None:
        self.client = client
        self.cmd = cmd
        self.layout = layout
        self.shown = shown

    def register(self, wcmd: Command, namespace: str) -> bool:
        """Add ``namespace`` to the registry (before its first write in this
        process: a namespace is never written unlisted). In the replicated
        mode :class:`NotReplicated` says the registry's primary has it but
        its replicas did not confirm it: the caller's write goes on (it must
        be readable, as any write that raised ``NotReplicated``) and the
        caller raises :meth:`unconfirmed` after it."""
        try:
            REGISTER(wcmd, (self.layout.namespaces,), namespace)
        except RedisError as exc:
            raise failure(exc, "registering a namespace", self.shown, namespace) from None
        return True

    def unconfirmed(self, exc: NotReplicated, namespace: str, key: str) -> NotReplicated:
        """What a write whose record was applied, but whose namespace's entry
        in the registry was not confirmed by the replicas, raises."""
        acked, wanted = getattr(exc, "acked", 0), getattr(exc, "wanted", 0)
        return NotReplicated(
            f"Redis at {self.shown}: the write of {namespace}/{key!r} was applied, but the store's registry "
            f"entry for {namespace!r} (on another key, maybe another shard) was confirmed by only {acked} of "
            f"{wanted} replicas; a failover of the registry's primary now may leave the namespace unlisted "
            "(left out of its change log); the next write registers it again",
            backend=self.shown,
            operation="registering a namespace",
            namespace=namespace,
            acked=acked,
            wanted=wanted,
        )

    def registered(self) -> list[str]:
        try:
            return sorted(m.decode() for m in self.cmd("SMEMBERS", self.layout.namespaces))
        except RedisError as exc:
            raise failure(exc, "listing namespaces", self.shown) from None

    def namespaces(self) -> list[str]:
        """Registered namespaces that hold data (records, archive or quarantine)."""
        names = self.registered()
        if not names:
            return []
        try:
            pipe = self.client.pipeline()
            for ns in names:
                k = self.layout.of(ns)
                pipe.execute_command("EXISTS", k.live, k.cold, k.quarantine)
            found = pipe.execute()
        except (RedisError, RedisClusterException) as exc:
            raise failure(as_redis_error(exc), "listing namespaces", self.shown) from None
        return [ns for ns, n in zip(names, found) if int(n)]

    def purge_events(self, namespace: str) -> int:
        """The namespace's change stream is its own: removed whole."""
        stream = self.layout.of(namespace).stream
        try:
            n = int(self.cmd("XLEN", stream))
            self.cmd("UNLINK", stream)
        except RedisError as exc:
            raise failure(exc, "purging the change log", self.shown, namespace) from None
        return n

    def rewrite_files(self) -> int:
        """Every node (replicas too: they hold copies) redoes its files from
        memory as it is now, as one server does after a purge
        (``redis/purge.py`'s `persist``: a running rewrite waited out, a new one
        made and waited for); a node that refuses (``CONFIG`` disabled, or
        unreachable) is logged and skipped."""
        made = 0
        for where, r, opened in self._every_node():

            def config(name: str, r: Any = r) -> str:
                return str(r.config_get(name).get(name) or "")

            try:
                made += persist(r.execute_command, config)
            except RedisError as exc:
                log.warning("purge: %s could not rewrite its files (%s); old copies stay until it does", where, exc)
            finally:
                if opened:
                    r.close()
        return made

    def _every_node(self) -> list[tuple[str, Any, bool]]:
        """``(host:port, client, opened here)`` for every primary and every
        replica. The replicas are read from ``CLUSTER NODES``: the slot map
        redis-py keeps leaves out a replica that had no data yet when it was
        loaded. A replica's client is opened like its primary's (same
        connection class and options) and closed by the caller."""
        out: list[tuple[str, Any, bool]] = []
        seen: set[tuple[str, int]] = set()
        primary: Any = None
        for node in self.client.get_nodes():
            r = self.client.get_redis_connection(node)
            seen.add((node.host, int(node.port)))
            out.append((f"{node.host}:{node.port}", r, False))
            primary = primary or r
        if primary is None:
            return out
        try:
            listing = primary.execute_command("CLUSTER", "NODES")
        except RedisError as exc:
            log.warning("purge: the cluster's replicas could not be listed (%s); their files are not redone", exc)
            return out
        text = listing.decode() if isinstance(listing, bytes) else str(listing)
        for line in text.splitlines():
            fields = line.split()
            if len(fields) < 3 or "slave" not in fields[2] or any(f in fields[2] for f in ("fail", "noaddr", "handshake")):
                continue
            host, _, port = fields[1].split("@")[0].rpartition(":")
            if not port.isdigit() or (host, int(port)) in seen:
                continue
            seen.add((host, int(port)))
            pool = primary.connection_pool
            kwargs = {**pool.connection_kwargs, "host": host, "port": int(port)}
            replica = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))
            out.append((f"{host}:{port}", replica, True))
        return out


def as_redis_error(exc: Exception) -> RedisError:
    """A cluster client's own exception (not a ``RedisError``: a cross-slot
    transaction, no node for a slot) as a connection error, so that
    ``failure`` types it; a ``RedisError`` as it is."""
    return exc if isinstance(exc, RedisError) else RedisConnectionError(f"{type(exc).__name__}: {exc}")


# -- the change log on a cluster ------------------------------------------------------

_CURSOR = "n1:"
_NS = re.compile(r"\A_?[a-z][a-z0-9_.]{0,140}\Z")  # "_h.<ns>": a namespace's kept history (history/keeper.py)


def encode_cursor(pos: dict[str, str]) -> str:
    return _CURSOR + ",".join(f"{ns}={pos[ns]}" for ns in sorted(pos) if pos[ns] != "0-0")


def decode_cursor(cursor: str) -> dict[str, str]:
    """``n1:<ns>=<stream id>,...``: the last entry read of each namespace (a
    namespace left out: nothing of it read yet)."""
    if not isinstance(cursor, str) or not cursor.startswith(_CURSOR):
        raise InvalidCursor(f"not a Redis Cluster change-log cursor: {str(cursor)[:60]!r} (expected 'n1:...')")
    pos: dict[str, str] = {}
    body = cursor[len(_CURSOR):]
    for part in body.split(",") if body else ():
        ns, eq, entry_id = part.partition("=")
        if not eq or not _NS.match(ns) or ns in pos:
            raise InvalidCursor(f"not a Redis Cluster change-log cursor: {cursor[:60]!r}")
        parse_id(entry_id)
        pos[ns] = entry_id
    return pos


class ClusterChangeLog:
    """Implements :class:`hrm_memory.core.backend.ChangeLog` over one stream per
    namespace. Entries are in commit order per namespace (each is appended by
    the change's own script); across namespaces there is no total order on a
    cluster (their streams live on different shards): :meth:`read` merges
    them by stream id, which is the writing primary's clock, a reasonable
    but not a causal order. The cursor is composite (the position in each
    namespace's stream), so a subscriber that resumes from it gets every
    entry after it once. Thread-safe."""

    def __init__(self, client: Any, cmd: Command, layout: KeyLayout, maxlen: int, shown: str) -> None:
        self._client = client
        self._cmd = cmd
        self._layout = layout
        self.maxlen = maxlen
        self._shown = shown
        self._w = RedisChangeLog(client, "", maxlen, shown)  # entry format, writer token, pending set
        self._outage = Outage(f"Redis Cluster at {shown}")

    @property
    def token(self) -> str:
        return self._w.token

    @token.setter
    def token(self, value: str) -> None:
        self._w.token = value

    @property
    def gaps(self) -> int:
        return self._w.gaps

    def entry_parts(self, op: str, namespace: str, key: str, trace_id: str) -> tuple[bytes, bytes]:
        return self._w.entry_parts(op, namespace, key, trace_id)

    def entry(self, op: str, namespace: str, key: str, version: int, trace_id: str) -> bytes:
        return self._w.entry(op, namespace, key, version, trace_id)

    def logged(self, op: str, namespace: str, key: str, version: int) -> None:
        self._w.logged(op, namespace, key, version)

    def append(self, op: str, namespace: str, key: str, version: int, trace_id: str) -> None:
        if self._w.already_logged(op, namespace, key, version):
            return
        try:
            self._cmd("XADD", self._layout.stream_of(namespace), "MAXLEN", "~", self.maxlen, "*", "e",
                      self.entry(op, namespace, key, version, trace_id))
        except RedisError as exc:
            self._w.gaps += 1
            log.warning("change log: could not record %s %s/%s (%s); other hosts miss it", op, namespace, key, exc)

    # -- reading ---------------------------------------------------------------------

    def _names(self) -> list[str]:
        try:
            return sorted(m.decode() for m in self._cmd("SMEMBERS", self._layout.namespaces))
        except RedisError as exc:
            raise failure(exc, "listing namespaces", self._shown) from None

    def _ends(self, names: list[str], first: bool = False) -> dict[str, str]:
        """The last (or first) entry id of each namespace's stream that has one."""
        if not names:
            return {}
        try:
            pipe = self._client.pipeline()
            for ns in names:
                if first:
                    pipe.execute_command("XRANGE", self._layout.stream_of(ns), "-", "+", "COUNT", 1)
                else:
                    pipe.execute_command("XREVRANGE", self._layout.stream_of(ns), "+", "-", "COUNT", 1)
            found = pipe.execute()
        except (RedisError, RedisClusterException) as exc:
            raise failure(as_redis_error(exc), "reading the change log", self._shown) from None
        return {ns: got[0][0].decode() for ns, got in zip(names, found) if got}

    def cursor(self) -> str:
        return encode_cursor(self._ends(self._names()))

    def oldest(self) -> str:
        return encode_cursor({ns: _before(first) for ns, first in self._ends(self._names(), first=True).items()})

    def _fresh(self, pos: dict[str, str]) -> dict[str, str]:
        """Namespaces with entries after ``pos``: their last entry id."""
        names = sorted(set(self._names()) | pos.keys())
        return {ns: last for ns, last in self._ends(names).items()
                if parse_id(last) > parse_id(pos.get(ns, "0-0"))}

    def changed(self, cursor: str) -> bool:
        pos = decode_cursor(cursor)
        return self._outage.poll(lambda: bool(self._fresh(pos)))

    def notify(self, wake: Callable[[], None]) -> None:
        """None: a subscriber polls (:meth:`changed`, two round trips) every
        ``poll_interval`` (docs/redis.md)."""
        return None

    def _run_read(self, namespace: str, start: str, end: str) -> list[Any]:
        try:
            removed, first, entries = _READ(self._cmd, (self._layout.stream_of(namespace),), "(" + start, end, _BATCH)
        except RedisError as exc:
            raise failure(exc, "a change-log read", self._shown, namespace) from None
        check_kept(start, removed, first, f"cursor for {namespace} ({start})")
        return entries  # type: ignore[no-any-return]

    def read(self, cursor: str, upto: str | None = None, *, skip_own: bool = True) -> tuple[list[Event], str]:
        pos = decode_cursor(cursor)
        stop = decode_cursor(upto) if upto is not None else None
        merged: list[tuple[tuple[int, int], str, Event]] = []
        for ns in sorted(self._fresh(pos)):
            end = "+"
            if stop is not None:
                if ns not in stop or parse_id(stop[ns]) <= parse_id(pos.get(ns, "0-0")):
                    continue
                end = stop[ns]
            start = pos.get(ns, "0-0")
            while True:
                entries = self._run_read(ns, start, end)
                for entry_id, fields in entries:
                    start = entry_id.decode()
                    ev = self._w.parse(fields, skip_own)
                    if ev is not None:
                        merged.append((parse_id(start), ns, ev))
                if len(entries) < _BATCH:
                    break
            pos[ns] = start
        merged.sort(key=lambda m: (m[0], m[1]))
        return [ev for _, _, ev in merged], encode_cursor(pos)

    def close(self) -> None:
        """The client belongs to the backend, which closes it."""


def side_for(top: Topology, layout: KeyLayout) -> tuple[Any, Command, ClusterSide | None]:
    """The client, its command function and (on a cluster) the cluster side."""
    from .conn import command, connect

    if not top.cluster:
        client = connect(top.settings)
        return client, command(client), None
    cclient = connect_cluster(top)
    cmd = cluster_command(cclient)
    return cclient, cmd, ClusterSide(cclient, cmd, layout, top.settings.shown)


def change_log(top: Topology, client: Any, cmd: Command, layout: KeyLayout,
               signal_log: bool) -> RedisChangeLog | ClusterChangeLog | None:
    """The change log: one stream (one server), one per namespace (a cluster), or none."""
    if not signal_log:
        return None
    if top.cluster:
        return ClusterChangeLog(client, cmd, layout, top.settings.stream_maxlen, top.settings.shown)
    return RedisChangeLog(client, layout.stream, top.settings.stream_maxlen, top.settings.shown)


def write_command(top: Topology, client: Any, cmd: Command) -> Command:
    """The command function write scripts run through: ``cmd`` itself, or in
    the replicated mode one that waits for the replicas."""
    if top.wait == 0:
        return cmd
    return Replicated(client, cmd, top.wait, top.wait_timeout_ms, top.settings.shown)


__all__ = [
    "ALL_SCHEMES",
    "CLUSTER_SCHEMES",
    "ClusterChangeLog",
    "ClusterSide",
    "as_redis_error",
    "change_log",
    "Replicated",
    "Topology",
    "connect_cluster",
    "decode_cursor",
    "encode_cursor",
    "fence",
    "side_for",
    "topology",
    "write_command",
]
