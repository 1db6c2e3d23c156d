"""``MemoryManager``: the single access point to every HRM's memory.

The manager is the composition root: it builds the default backend (files
under ``root``), the hot tier, the namespace registry and the codecs, hands
them to one :class:`~hrm_memory.core.pipeline.Pipeline`, and from then on only
builds op values (:mod:`hrm_memory.core.ops`). Every method below is one op run
through that pipeline; a scoped handle (:class:`Scope`) builds the same ops
with its HRM attached, so it cannot skip a check.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace

from hrm_memory.core.backend import PERSISTENT, Backend
from hrm_memory.core.codes import Codec, CodecRegistry
from hrm_memory.core.errors import InvalidArgument, UnknownConsentCategory
from hrm_memory.core.events import Callback, Subscription
from hrm_memory.namespaces import seed, seed_codecs
from hrm_memory.core.ops import (
    ArchiveOp,
    CheckOp,
    CompactOp,
    ConsentOp,
    ContextOp,
    CursorOp,
    DeclareOp,
    DeleteOp,
    EventsSinceOp,
    ExpandOp,
    ExportOp,
    ForgetOp,
    GetOp,
    GetRecordOp,
    HistoryOp,
    ImportOp,
    NamespacesOp,
    Op,
    PutOp,
    QueryAsOfOp,
    QueryOp,
    ReadAsOfOp,
    RecallOp,
    RememberOp,
    StatsOp,
    SubscribeOp,
    UndeclareOp,
    UpdateOp,
)
from hrm_memory.context.render import ContextRenderer
from hrm_memory.core.admin import Admin
from hrm_memory.core.pipeline import Pipeline
from hrm_memory.core.state import Core
from hrm_memory.core.store import Records
from hrm_memory.history.forget import Forget
from hrm_memory.history.keeper import History, Version
from hrm_memory.history.importer import Importer
from hrm_memory.history.portable import Portable
from hrm_memory.recall.index import RecallIndex, SearchIndex
from hrm_memory.recall.memories import Remember
from hrm_memory.recall.search import Recall
from hrm_memory.recall.memories import Remembered
from hrm_memory.context.render import Context
from hrm_memory.recall.search import FUSIONS, Hit
from hrm_memory.core.records import Event, Finding, Record
from hrm_memory.core.spec import CONSENT_CATEGORIES, HISTORY_PREFIX, NamespaceSpec, Registry, key_group
from hrm_memory.storage import DURABILITY, FileBackend, HotTier
from hrm_memory.storage.sealed.keys import FileKeys, KeyProvider, keys_dir
from hrm_memory.storage.memory import SCHEME as MEMORY_SCHEME
from hrm_memory.storage.memory import MemoryBackend
from hrm_memory.storage.sealed.backend import Rotation, SealedBackend, StoreId
from hrm_memory.storage.sealed.wrap import Passphrase
from hrm_memory.recall.textindex import TextIndex
from hrm_memory.tracing.spans import Tracing


def default_root() -> Path:
    """``$HRM_MEMORY_ROOT``, else ``$XDG_DATA_HOME/hrm-memory`` (``~/.local/share/hrm-memory``)."""
    env = os.environ.get("HRM_MEMORY_ROOT")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "hrm-memory"


class Operations:
    """The record operations shared by :class:`MemoryManager` and :class:`Scope`:
    each builds one op and runs it (as the handle's HRM, for a scope)."""

    #: The HRM a scoped handle acts as (None for the manager itself).
    hrm: str | None = None
    #: ``pipeline.run`` bound to this handle's HRM: ``_run(op)``, or on the
    #: hot path ``_run(fields, OpType)`` (see :mod:`hrm_memory.core.ops`).
    _run: Callable[..., Any]

    def read(self, namespace: str, key: str, default: Any = None, *, compact: bool = False, as_of: Any = None) -> Any:
        """The value of ``key`` exactly as written (equal, same types), or
        ``default`` if there is none. ``compact=True`` gives the coded form
        that is stored (field aliases and value codes of the namespace's
        codec). Archived keys are found in the cold tier too. Raises
        :class:`InvalidNamespace`, :class:`UndeclaredNamespace`,
        :class:`InvalidKey`, :class:`CorruptRecord`, :class:`AccessDenied`.

        ``as_of`` (epoch seconds or a timezone-aware datetime): the value
        that was current then (``default`` if the key was absent then), from
        the history the namespace keeps; :class:`HistoryNotKept` when the
        store cannot know (older than the kept history). docs/history.md."""
        if as_of is not None:
            return self._run(ReadAsOfOp(namespace, key, as_of, default, compact, False))
        return self._run((namespace, key, default, compact), GetOp)

    def get_record(self, namespace: str, key: str, *, compact: bool = False, as_of: Any = None) -> Record | None:
        """The :class:`Record` of ``key`` (value, version, times, tier,
        ``persisted``), or None. With ``as_of``, the record current then
        (``tier`` is ``"history"`` for a superseded version), as :meth:`read`."""
        if as_of is not None:
            return self._run(ReadAsOfOp(namespace, key, as_of, None, compact, True))  # type: ignore[no-any-return]
        return self._run(GetRecordOp(namespace, key, compact))  # type: ignore[no-any-return]

    def history(self, namespace: str, key: str, *, compact: bool = False) -> list[Version]:
        """The kept versions of ``key``, newest first, deletions included:
        each a :class:`Version` (``version``, ``value`` as written, or None
        for a deletion, ``created_at``, ``updated_at``, ``deleted``,
        ``current``). How many are kept is the namespace's
        ``NamespaceSpec.history`` (only the current one when it keeps none)."""
        return self._run(HistoryOp(namespace, key, compact))  # type: ignore[no-any-return]

    def forget(self, namespace: str, key: str) -> dict[str, int]:
        """Erase every version of ``key`` from every place it lives: warm
        logs (rewritten), cold archive, kept history, recall index (file,
        WAL and memory), change log, quarantine. Unlike :meth:`delete` (a
        versioned tombstone), nothing of the record is left to read or to
        recover. Returns counts per place. docs/history.md."""
        return self._run(ForgetOp(namespace, key))  # type: ignore[no-any-return]

    def write(self, namespace: str, key: str, value: Any, *, imported: bool = False) -> str:
        """Store ``value`` under ``key``; return the operation's trace id (hex).

        The value must be plain JSON data; anything else raises
        :class:`InvalidValue` and changes nothing. With ``durability="fsync"``
        the record is on stable storage when this returns. In a consent-gated
        namespace whose category is not granted the value stays in this
        process only (``get_record(...).persisted`` is False), unless
        ``imported=True``: data that existed before this store (a migration
        of legacy files) is persisted whatever the consent, and the span
        records ``hrm.memory.imported``."""
        return self._run((namespace, key, value, imported), PutOp)  # type: ignore[no-any-return]

    def update(self, namespace: str, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """Atomically replace the value of ``key`` by ``fn(current)`` and return it.

        ``fn`` gets the current value as written (or ``default`` when there is
        none) and returns the new one. The read and the write happen under the
        namespace's lock (across processes when ``locking=True``), so
        concurrent updates never lose one another. If ``fn`` raises, nothing
        is stored and the exception propagates."""
        return self._run((namespace, key, fn, default), UpdateOp)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; return True if it existed. An archived key is
        removed from view (the cold copy stays until a purge)."""
        return self._run((namespace, key), DeleteOp)  # type: ignore[no-any-return]

    def query(
        self,
        namespace: str = "*",
        key: str = "*",
        *,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
        include_cold: bool = False,
        compact: bool = False,
        as_of: Any = None,
    ) -> list[Record]:
        """Records whose namespace and key match the globs, ordered by
        (namespace, key).

        ``where`` keeps records whose value matches every condition: a field
        (dots reach into nested objects) equal to a value, or an object of
        operators ``$eq $ne $gt $gte $lt $lte $in`` (numbers compare as
        numbers, ``3 == 3.0``); it sees the same form as the result (readable,
        or coded with ``compact=True``). A malformed filter raises
        :class:`InvalidFilter`; an exact namespace that is not declared, or a
        glob that matches none, raises :class:`UndeclaredNamespace`.
        ``limit`` caps the number returned. Archived records are included
        only with ``include_cold=True`` (their ``tier`` is ``"cold"``).

        ``as_of`` answers as the store was then, archived records included:
        every namespace matched must keep history reaching that far, else
        :class:`HistoryNotKept` (a partial answer would be a wrong one)."""
        if as_of is not None:
            return self._run(QueryAsOfOp(namespace, key, where, limit, as_of, compact))  # type: ignore[no-any-return]
        return self._run((namespace, key, where, limit, include_cold, compact), QueryOp)  # type: ignore[no-any-return]

    def recall(
        self,
        query: str,
        *,
        namespaces: str | Sequence[str] = "*",
        kinds: str | Sequence[str] | None = None,
        k: int = 10,
        since: Any = None,
        explain: bool = False,
        include_cold: bool = False,
        where: dict[str, Any] | None = None,
        prefix: str | None = None,
    ) -> list[Hit]:
        """Memories matching ``query`` by meaning, best first: at most ``k``
        :class:`Hit` values (``namespace``, ``key``, ``record``, ``score``,
        ``confidence`` in [0, 1]; ``why`` with ``explain=True``).

        Searches the indexed namespaces (``NamespaceSpec.index``) matching
        ``namespaces`` (a glob or a list of globs) that this handle may read.
        ``kinds`` keeps memories of those kinds; ``since`` (a timezone-aware
        datetime or epoch seconds) those updated since; ``where`` filters the
        values as in :meth:`query`; ``prefix`` keeps keys starting with it.
        The query is classified (temporal, factual, relational, procedural,
        prospective, planning, meta) and routed to the kinds that answer it;
        while the best confidence is below 0.5 the search widens to every
        kind, then to archived records (found at once with
        ``include_cold=True``); ``explain`` shows that path. A hit is always
        the record as :meth:`read` returns it now."""
        return self._run(  # type: ignore[no-any-return]
            RecallOp(query, namespaces, kinds, k, since, explain, include_cold, where, prefix)
        )

    def remember(
        self,
        content: str,
        *,
        kind: str,
        namespace: str | None = None,
        importance: float = 0.5,
        tags: Sequence[str] = (),
        key: str | None = None,
    ) -> Remembered:
        """Store ``content`` as a memory of ``kind`` (episodic, semantic,
        procedural, prospective, working) in ``namespace`` (default
        ``<hrm>.memories`` for a scope, ``shared.memories`` for the manager).

        Trivial content raises :class:`TrivialMemory` with the reason. A
        near-duplicate of an existing memory of the same kind is merged into
        it (semantic, procedural, working; episodic when retold within a day)
        or refused with :class:`DuplicateMemory` (prospective). Returns what
        was done (:class:`Remembered`)."""
        return self._run(  # type: ignore[no-any-return]
            RememberOp(content, kind, namespace, importance, tuple(tags), key)
        )

    def context(
        self,
        hrm: str | None = None,
        *,
        budget: int = 2000,
        query: str | None = None,
        sections: str | Sequence[str] | None = None,
        now: Any = None,
    ) -> Context:
        """An HRM's memory rendered as Markdown for a prompt, never over
        ``budget`` tokens (o200k, headers and footers included).

        Sections (now, goals and commitments, people, patterns and
        preferences, recent history, then a legend of the codes that appear)
        share the budget by weight, what one does not need going to the
        others and what is left to the higher priorities; whole
        entries only, dense lines (no bullets, no field names, codes of a
        field on one line); an entry that does not fit is skipped and
        counted in ``+N more``, and none left out would fit in what
        remains. With
        ``query``, recalled memories lead. ``sections`` keeps only those
        sections; ``now`` (epoch seconds or an aware datetime) fixes the
        clock that relative dates are written against, so the same store
        renders byte-identical text. A scoped handle renders its own HRM.
        Reads a bounded number of records whatever the store's size."""
        return self._run(  # type: ignore[no-any-return]
            ContextOp(self._hrm(hrm), budget, query, sections, now)
        )

    def _hrm(self, hrm: str | None) -> str:
        if hrm is not None:
            return hrm
        if self.hrm is None:
            raise InvalidArgument("context() needs the HRM whose memory to render, e.g. context('altitude')")
        return self.hrm

    def expand(self, namespace: str, value: Any) -> Any:
        """The readable form of a coded ``value`` of ``namespace`` (what
        ``read(..., compact=True)`` returned)."""
        return self._run(ExpandOp(namespace, value))

    def subscribe(
        self,
        namespace: str,
        callback: Callback,
        key: str = "*",
        *,
        remote: bool = True,
        since: str | None = None,
    ) -> Subscription:
        """Call ``callback(Event)`` for every change to a namespace matching
        the glob ``namespace`` (and key glob ``key``).

        Changes made through this manager are delivered after they commit,
        outside every store lock, in commit order per key, on the writing
        thread. With ``remote=True`` (default) changes made by other
        processes on the same root are delivered too, from a background
        thread, in commit order per key: changes to persisted namespaces
        only (a hot namespace's, such as ``focus.fast``, and a gated value
        held for lack of consent stay in their process; docs/storage.md).
        On the file backend that thread sleeps until the file system says the
        change log grew, and polls where it cannot; ``since`` (a
        cursor from :meth:`cursor`) first replays those logged after it. A
        callback that raises is logged and traced; it breaks neither the
        write nor other callbacks. A glob that matches no declared namespace
        raises :class:`UndeclaredNamespace`. Returns a :class:`Subscription`;
        call ``cancel()`` or use it as a context manager."""
        return self._run(SubscribeOp(namespace, callback, key, remote, since))  # type: ignore[no-any-return]

    def cursor(self) -> str:
        """A position in the cross-process change log: keep it, and later
        :meth:`events_since` (or ``subscribe(..., since=...)``) gives what
        happened after it."""
        return self._run(CursorOp())  # type: ignore[no-any-return]

    def events_since(self, cursor: str, namespace: str = "*", key: str = "*") -> tuple[list[Event], str]:
        """Persisted changes logged after ``cursor`` (by any process) matching
        the globs, oldest first, and the cursor to resume from. Raises
        :class:`CursorExpired` when the log no longer reaches back that far."""
        return self._run(EventsSinceOp(cursor, namespace, key))  # type: ignore[no-any-return]

    def namespaces(self) -> list[NamespaceSpec]:
        """The declared namespaces (seed and run-time) this handle may read, sorted by name."""
        return self._run(NamespacesOp())  # type: ignore[no-any-return]

    def batch(self, ops: Iterable[Op]) -> list[Any]:
        """Run ``ops`` in order, each through the pipeline; one result each.

        Not a transaction: the first op that raises stops the batch, and its
        error propagates with the ops before it applied."""
        return [self._run(op) for op in _op_list(ops)]


class MemoryManager(Operations):
    """Read, write, query and update HRM memory across hot, warm and cold tiers.

    Parameters
    ----------
    root:
        Storage root of the default file backend; default :func:`default_root`.
    locking:
        ``True`` takes a per-namespace file lock around every write, delete
        and update, so that concurrent ``update()`` calls from several
        processes never lose one another. Whatever the flag, a write that
        returned is never lost to another process's write.
    durability:
        ``"fsync"`` (default): once a write returns, the record survives power
        loss. ``"flush"``: it survives a crash of the process, not of the OS.
    backend:
        A :class:`~hrm_memory.core.backend.Backend` to use instead of files under
        ``root`` (then ``root``, ``locking``, ``durability``, ``lock_timeout``,
        ``cache_size`` and ``signal_log`` are the backend's business), or a
        ``redis://host:port/db`` URL: the Redis backend (docs/redis.md;
        ``redis+cluster://host:port,host:port/0`` for a Redis Cluster), with
        ``lock_timeout`` and ``signal_log`` applied; its locks always reach
        across hosts and durability is the server's persistence setting.
        ``"memory://"``: the reference backend, every record in this
        process's memory and gone at close (``memory://<name>``: a store
        shared by the managers of this process that open that name, while
        one has it open); its recall index stays in memory too
        (docs/architecture.md).
    lock_timeout:
        Seconds to wait for a file lock before :class:`LockTimeout`.
    namespaces:
        The declared namespaces; default: the seed set of
        :mod:`hrm_memory.namespaces`. Run-time declarations are added from the store.
    codecs:
        The codecs namespaces may name; default: the seed codecs.
    tracer_provider:
        OpenTelemetry provider; default: the global one.
    cache_size:
        Entries of the read cache in front of the warm tier.
    deferred_spans:
        With the OpenTelemetry SDK, record spans on the caller's path and
        finish them on a background thread (see :mod:`hrm_memory.tracing.spans`).
    signal_log:
        Log every persisted change for other processes' subscriptions.
    poll_interval:
        How often (seconds) a process with cross-process subscriptions looks
        for new changes when it polls: on Redis, and on the file backend
        where file-system notifications are off or cannot work.
    notifications:
        On the file backend, cross-process subscribers sleep until the file
        system says the change log grew (``watchdog``; one observer per
        process) and poll only where that cannot work. ``False`` polls
        always.
    embed:
        An embedder for :meth:`recall`'s dense retrieval, fused with the text
        search: a callable (list of texts -> list of vectors) or a LangChain
        ``Embeddings``. None (default) means text search only.
    fusion:
        How text and dense results are fused: ``"weighted"`` (default: the
        text score scaled by the best one and the cosine scaled to [0, 1],
        weighted 0.9/0.1; the measured winner on LoCoMo, see BENCHMARKS.md)
        or ``"rrf"`` (reciprocal rank).
    keys:
        Where the data keys of sealed namespaces (every consent-gated one,
        and those declared with ``encrypt=True``) come from: a
        :class:`~hrm_memory.storage.sealed.keys.KeyProvider`. Default: a key file
        outside the store, ``$HRM_MEMORY_KEYS/<store id>.json`` (else
        ``~/.config/hrm-memory/keys/``); docs/storage.md.

    Thread-safe. Opening reads no stored data, so it costs the same at any size.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        locking: bool = False,
        durability: str = "fsync",
        backend: Backend | str | None = None,
        lock_timeout: float = 10.0,
        namespaces: Iterable[NamespaceSpec] | None = None,
        codecs: Iterable[Codec] | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        cache_size: int = 100_000,
        deferred_spans: bool = True,
        signal_log: bool = True,
        poll_interval: float = 0.005,
        notifications: bool = True,
        embed: Any = None,
        fusion: str = "weighted",
        keys: KeyProvider | None = None,
    ) -> None:
        if durability not in DURABILITY:
            raise InvalidArgument(f"durability must be one of {DURABILITY}, not {durability!r}")
        if fusion not in FUSIONS:
            raise InvalidArgument(f"fusion must be one of {FUSIONS}, not {fusion!r}")
        if not (type(lock_timeout) in (int, float) and lock_timeout >= 0):
            raise InvalidArgument("lock_timeout must be a number >= 0")
        self.root: Path | None
        owns_backend = backend is None or isinstance(backend, str)
        if isinstance(backend, str) and backend.strip().lower().startswith(MEMORY_SCHEME):
            # "memory://[name]": the reference backend, in this process only.
            backend = MemoryBackend(backend.strip(), lock_timeout=lock_timeout, signal_log=signal_log)
            self.root = Path(root).absolute() if root is not None else None
        elif isinstance(backend, str):
            # "redis://host:port/db[?prefix=...]": the Redis backend, imported
            # only when asked for (redis-py is the optional extra "redis").
            from hrm_memory.storage.redis.url import any_scheme_of, refusal

            if any_scheme_of(backend) is None:  # never quote the string: it may hold a password
                raise InvalidArgument(f"backend= takes a Backend, memory:// or a Redis URL: {refusal(backend)}")
            from hrm_memory.storage.redis.backend import RedisBackend

            backend = RedisBackend(backend, lock_timeout=lock_timeout, signal_log=signal_log)
            self.root = Path(root).absolute() if root is not None else None
        elif backend is None:
            files = FileBackend(
                root if root is not None else default_root(),
                locking=bool(locking),
                durability=durability,
                lock_timeout=lock_timeout,
                cache_size=cache_size,
                signal_log=signal_log,
            )
            backend, self.root = files, files.root
        else:
            self.root = Path(root).absolute() if root is not None else None
        self.backend: Backend = backend
        self.locking = bool(locking)
        self.durability = durability
        self._rotations: list[Rotation] = []
        try:
            registry = Registry(seed() if namespaces is None else namespaces)
            if keys is None:
                store_id = StoreId(backend)
                keys = FileKeys(lambda: keys_dir() / f"{store_id.get()}.json")
            sealed = SealedBackend(backend, registry.groups.get, keys, functools.partial(sealed_names, registry))
            core = Core(
                sealed,
                HotTier(),
                registry,
                CodecRegistry(seed_codecs() if codecs is None else codecs),
                Tracing(
                    tracer_provider,
                    deferred=deferred_spans,
                    system=None if isinstance(backend, FileBackend) else backend.system,
                    root=self.root,
                ),
                poll_interval=poll_interval,
                notifications=bool(notifications),
            )
        except BaseException:
            if owns_backend:
                backend.close()  # ours: a failed open leaves no file open
            raise
        # A store that does not persist keeps its derived data in memory too.
        index_dir = None if self.root is None or PERSISTENT not in backend.capabilities else self.root / "index"
        self._sealed = sealed
        #: Where the data keys of sealed namespaces come from (the ``keys`` given, or the key file).
        self.keys: KeyProvider = keys
        core.on_consent(self._shred_revoked)
        core.on_purge(self._shred_purged)
        self._pipeline = compose(core, TextIndex(index_dir), TextIndex(None), embed, fusion)
        self._run = self._pipeline.run
        self.consent = Consent(self._pipeline)

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release files and locks. Idempotent. Hot-tier data ends here.
        Every subscription ends (an async twin's iterators raise
        :class:`StoreClosed`) and its threads are stopped. A key rotation
        still running stops (its older keys stay; a later :meth:`rotate_keys`
        finishes it)."""
        for rotation in self._rotations:
            rotation.cancel()
        self._pipeline.close()

    # -- sealed namespaces ------------------------------------------------------------

    def _shred_revoked(self, category: str, granted: bool, purged: bool) -> None:
        """Consent revoked with purge: destroy the category's keys, so every
        copy of its records anywhere (backups, replicas, exports) stays ciphertext."""
        if not granted and purged:
            self._sealed.shred(category)

    def _shred_purged(self, namespace: str) -> None:
        """A namespace sealed under a key of its own was purged: destroy that key."""
        self._sealed.shred(f"ns:{namespace}")

    def _relink(self, namespace: str, key: str, version: int) -> None:
        """A rotation reseals ``key`` from ``version`` to the next: its kept history follows."""
        core = self._pipeline.core
        spec = core.specs.get(namespace)
        if spec is not None:
            core.relink(spec, key, version, time.time_ns() // 1000)

    def rotate_keys(self, category: str, *, wait: bool = False) -> Rotation:
        """Make a new data key for ``category`` (a consent category, or the
        name of a namespace declared with ``encrypt=True``) and reseal its
        records with it in the background; the older keys are destroyed once
        no record needs them. Reads and writes go on meanwhile. Returns the
        :class:`~hrm_memory.storage.sealed.backend.Rotation` (``wait()``, ``done``,
        ``resealed``, ``destroyed``); ``wait=True`` returns it finished."""
        if self.closed:
            from hrm_memory.core.errors import StoreClosed

            raise StoreClosed("the memory manager is closed")
        self._pipeline.core.load_declared()
        specs = [s for s in self._pipeline.core.registry if s.tier != "hot"]
        if category in CONSENT_CATEGORIES:
            group, names = category, [s.name for s in specs if s.consent == category]
        else:
            spec = self._pipeline.core.spec(category)
            if spec.consent is not None or not spec.encrypt:
                raise InvalidArgument(
                    f"rotate_keys() takes a consent category or a namespace declared with encrypt=True, "
                    f"not {category!r}"
                )
            group, names = f"ns:{spec.name}", [spec.name]
        self.keys.create(group)
        namespaces = [n for name in names for n in (name, HISTORY_PREFIX + name)]
        rotation = Rotation(self._sealed, group, namespaces, self._relink)
        self._rotations = [r for r in self._rotations if not r.done] + [rotation]
        rotation.start()
        if wait:
            rotation.wait()
        return rotation

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran; every operation then raises :class:`StoreClosed`."""
        return self._pipeline.closed

    def __repr__(self) -> str:
        return f"MemoryManager(backend={self.backend!r}, locking={self.locking}, durability={self.durability!r})"

    # -- declarations -----------------------------------------------------------------

    def declare(self, spec: NamespaceSpec | str, **fields: Any) -> NamespaceSpec:
        """Declare a namespace at run time (a spec, or a name plus spec fields).

        Every field is validated before anything is registered or stored
        (:class:`InvalidSpec`); ``schema`` may be a pydantic model class. The
        declaration is stored with the backend so that other processes and
        later sessions know it. Re-declaring an identical spec is a no-op; a
        different one raises :class:`NamespaceConflict` naming the fields."""
        if isinstance(spec, str):
            spec = NamespaceSpec(spec, **fields)
        elif fields:
            raise InvalidArgument("pass either a NamespaceSpec or a name with fields, not both")
        return self._pipeline.run(DeclareOp(spec))  # type: ignore[no-any-return]

    def undeclare(self, namespace: str, *, purge: bool = False) -> dict[str, int]:
        """Forget a run-time namespace. Refused with :class:`NamespaceInUse`
        while it holds records, unless ``purge=True``, which first removes
        every byte of its data (as a consent purge does). Seed namespaces
        cannot be undeclared. Returns what was purged, per place."""
        return self._pipeline.run(UndeclareOp(namespace, purge))  # type: ignore[no-any-return]

    def runner(self, hrm: str | None = None) -> Callable[..., Any]:
        """``run(op)``: the pipeline's run of this store, as HRM ``hrm``
        (None: unrestricted), for handles that build their own ops (scoped
        and async handles)."""
        run = self._pipeline.run
        return run if hrm is None else functools.partial(run, scope=hrm)

    def scope(self, hrm: str) -> Scope:
        """A handle for one HRM: writes only the namespaces it owns, reads
        those and ``shared.*``; anything else raises :class:`AccessDenied`.
        An HRM with no declared namespace raises :class:`UndeclaredNamespace`."""
        self._pipeline.core.check_scope(hrm)
        return Scope(self, hrm)

    # -- tiers and maintenance --------------------------------------------------------

    def archive(self, now: float | None = None) -> dict[str, int]:
        """Move records older than their namespace's TTL (by last update) to
        the cold tier; return the count moved per namespace. A record is
        written to the archive before it is marked there, so a crash in
        between leaves it in both tiers, never in neither."""
        return self._pipeline.run(ArchiveOp(now))  # type: ignore[no-any-return]

    def check(self, fix: bool = False) -> list[Finding]:
        """Walk the whole store and return every inconsistency found (empty
        when sound). With ``fix=True`` damaged bytes are copied to
        ``quarantine/`` and removed from the live files; the findings say
        ``fixed``. Never drops a readable record."""
        return self._pipeline.run(CheckOp(fix))  # type: ignore[no-any-return]

    def compact(self, namespace: str | None = None) -> int:
        """Rewrite logs without superseded lines; return bytes reclaimed."""
        return self._pipeline.run(CompactOp(namespace))  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        """Counts and sizes per namespace and tier, and the backend's own figures."""
        return self._pipeline.run(StatsOp())  # type: ignore[no-any-return]

    # -- portability ------------------------------------------------------------------

    def export(self, out: str | os.PathLike[str] | Any, *, namespaces: str = "*",
               progress: Callable[[int], Any] | None = None, include_keys: bool = False,
               passphrase: Passphrase | str | bytes | None = None) -> dict[str, int]:
        """Write the persisted namespaces matching ``namespaces`` (a glob) to
        ``out`` (a path, created 0600, or a binary file) in the export format
        of docs/history.md: declarations, consent decisions, every record
        with its kept history, tiers and times. Streams: memory stays bounded
        at any size. The same data exports to the same bytes, whichever
        backend holds it. ``progress(n)`` is called as records are written.
        Returns counts (``namespaces``, ``records``, ``versions``).

        Values of sealed namespaces are written sealed, as stored (with their
        key id): the file opens only where their keys are. With
        ``include_keys=True`` it also carries those keys, wrapped under a key
        derived from ``passphrase`` (scrypt; at least 12 bytes): such a file
        opens anywhere with the passphrase, even after the keys here were
        destroyed, so keep it as you would the data (docs/history.md)."""
        op = ExportOp(out, namespaces, progress, include_keys, Passphrase.of(passphrase))
        return self._pipeline.run(op)  # type: ignore[no-any-return]

    def import_(self, source: str | os.PathLike[str] | Any, *,
                progress: Callable[[int], Any] | None = None, apply_consent: bool = False,
                passphrase: Passphrase | str | bytes | None = None) -> dict[str, int]:
        """Read an export (a path or a binary file) into this store, whatever
        its backend, as checked writes: each record passes a write's checks
        (key, value, size limit, schema, consent) and its versions and
        timestamps are checked too. A bad line raises :class:`BadImportLine`
        naming it; a file that can be read twice (a path, a seekable file)
        is checked whole first, so nothing of it is applied. Idempotent:
        what the store already holds as new is left alone. Refuses a newer
        format with :class:`UnsupportedFormat` and a namespace declared
        differently with :class:`NamespaceConflict`, before writing anything.

        Consent stays the caller's: the file's consent decisions are left out
        (``consent_skipped``) and records of a category not granted here are
        held in this process only, as their writes would be (``held``);
        ``apply_consent=True`` applies the file's decisions first. Returns counts.

        Sealed values are opened with this store's keys or the keys the file
        carries (``passphrase`` unwraps them; this store keeps them): a value
        neither opens refuses the file with :class:`KeyUnavailable` (or
        :class:`WrongKey`, also for a wrong passphrase), before anything is written."""
        op = ImportOp(source, progress, apply_consent, Passphrase.of(passphrase))
        return self._pipeline.run(op)  # type: ignore[no-any-return]


class Scope(Operations):
    """A :class:`MemoryManager` seen by one HRM (see :meth:`MemoryManager.scope`).
    Every operation is the manager's, run as this HRM."""

    def __init__(self, manager: MemoryManager, hrm: str) -> None:
        self.manager = manager
        self.hrm = hrm
        self._run = manager.runner(hrm)

    def __repr__(self) -> str:
        return f"Scope({self.hrm!r})"


def compose(core: Core, disk: SearchIndex | None, mem: SearchIndex | None, embed: Any = None,
            fusion: str = FUSIONS[0]) -> Pipeline:
    """The composition root: the pipeline and its components, each given
    exactly its collaborators. Recall gets the index (the persisted one at
    ``disk``, the in-memory one at ``mem``) and the embedder; remember gets
    the index; context gets recall; history keeps superseded versions
    (the core tells it of writes); forget gets history (the backend erases
    through ``Backend.erase``, the index through ``Core.on_erase``); export
    and import get history and the sealing backend (sealed values travel
    sealed)."""
    index = RecallIndex(core, disk, mem, embed)
    recall = Recall(core, index, fusion)
    history = History(core)
    forget = Forget(core, history)
    admin = Admin(core)
    sealed = core.backend if isinstance(core.backend, SealedBackend) else None
    return Pipeline(core, [Records(core), admin, recall, Remember(core, index), ContextRenderer(core, recall),
                           history, forget, Portable(core, history, sealed),
                           Importer(core, history, admin.decide, sealed)])


class Consent:
    """``mm.consent``: grant, revoke and inspect consent per category.

    A namespace gated by a category keeps its values in this process only
    until the category is granted: not one byte reaches the backend. Default,
    when nothing was ever recorded: deny. Decisions are records of
    ``focus.consent`` (key = category), so every process on the store sees them."""

    CATEGORIES: Sequence[str] = CONSENT_CATEGORIES

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    def granted(self, category: str) -> bool:
        """True if ``category`` was granted and not revoked since (default False)."""
        return self._pipeline.core.granted(_category(category))

    def status(self) -> dict[str, bool]:
        """Every category and whether it is granted."""
        return {c: self.granted(c) for c in CONSENT_CATEGORIES}

    def namespaces(self, category: str) -> list[str]:
        """The persisted namespaces gated by ``category``."""
        category = _category(category)
        return [s.name for s in self._pipeline.core.registry if s.consent == category and s.tier != "hot"]

    def grant(self, category: str) -> dict[str, Any]:
        """Grant ``category``. What this session holds for it (written while it
        was denied) is persisted now; later writes go to disk as usual.
        Returns ``{"category", "granted", "persisted": {namespace: count}}``."""
        return self._pipeline.run(ConsentOp(category, True))  # type: ignore[no-any-return]

    def revoke(self, category: str, *, purge: bool = False) -> dict[str, Any]:
        """Revoke ``category``: from now on its namespaces are kept in memory
        only. With ``purge=True`` its data is also removed from disk (warm
        records and their log lines, its cold archive, quarantined copies).
        Returns counts per namespace."""
        return self._pipeline.run(ConsentOp(category, False, purge))  # type: ignore[no-any-return]


def sealed_names(registry: Registry) -> list[str]:
    """The persisted namespaces whose values are sealed, and their kept history."""
    return [n for s in registry if s.tier != "hot" and key_group(s) is not None
            for n in (s.name, HISTORY_PREFIX + s.name)]


def _op_list(ops: Any) -> list[Any]:
    """``ops`` as a list, or :class:`InvalidArgument` for what holds no ops."""
    if isinstance(ops, (str, bytes, dict)) or not isinstance(ops, Iterable):
        raise InvalidArgument(f"batch() takes a list of ops, not {type(ops).__name__}")
    return list(ops)


def _category(category: Any) -> str:
    """``category`` if it is a consent category, else :class:`UnknownConsentCategory`."""
    if type(category) is not str or category not in CONSENT_CATEGORIES:
        raise UnknownConsentCategory(
            f"unknown consent category {category!r}; expected one of {CONSENT_CATEGORIES}", category=category
        )
    return category


__all__ = ["Consent", "MemoryManager", "Operations", "Scope", "compose", "default_root"]
