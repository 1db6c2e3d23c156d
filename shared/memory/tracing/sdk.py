"""The deferred path's second half: pending records become SDK spans.

:mod:`hrm_memory.tracing.spans` records one object per operation on the caller's
thread (:class:`~hrm_memory.tracing.spans._DeferredSpan`); a :class:`Recorder`
per SDK provider keeps them and turns them, a batch at a time, into real
``ReadableSpan`` objects handed to the provider's sampler and span processors.

Where and when a batch is finished (``python -m benchmarks.bench_tracing
--wall`` measures it; BENCHMARKS.md, "Tracing and the hot path"):

- **On the caller's thread, every** :attr:`Recorder.BATCH` **records**: the
  operation that fills a batch finishes it (builds the spans, calls each
  processor's ``on_end``, and every :attr:`Recorder.CHUNK` spans its
  ``force_flush``, so a batch processor's bounded queue never drops one).
  The median operation pays only for its record. A drainer thread costs more
  in wall time than the work it moves: with the GIL only one thread runs, so
  it saves the caller nothing in a busy loop, and it gets the GIL only at the
  caller's switch interval (thousands of records by then), so records and
  spans outlive the young GC generation and are read on the other core, out
  of its caches. In batches on one thread, each batch's objects die young.
  A finished record goes back to a free list for the next operation.
- **On the drainer thread** (one per provider, exiting after a second
  idle): the last records of a burst, once the count stops moving for a
  tick (:attr:`Recorder.TICK`); and every batch after three batches in a row
  took over :attr:`Recorder.SLOW` a span on the caller *and* the caller's
  thread waited meanwhile (voluntary context switches, from ``getrusage``:
  an exporter that waits on the network, through ``SimpleSpanProcessor`` or
  a batch processor's ``force_flush``; a thread merely descheduled by other
  processes, on a loaded machine, does not count): the caller then only wakes the thread (one
  ``Event.set`` a batch) and yields the GIL to it, for
  :attr:`Recorder.RETRY` batches; then one batch on the caller's thread
  again tells whether it still should.
- ``provider.force_flush()``, ``shutdown()``, ``MemoryManager.close()``,
  :func:`hrm_memory.tracing.spans.flush` and interpreter exit drain what is pending
  on the calling thread first.

A processor that raises in ``on_end`` or ``force_flush`` is logged
(``hrm_memory.tracing.spans``) and loses no other span; the operation is not failed.

The SDK internals this path relies on (the provider's processor list, the
spans' fields) are read only through :mod:`hrm_memory.tracing.sdk_internals`,
which checks them once and otherwise sends spans through the public API.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from hrm_memory.core import tokens
from hrm_memory.tracing import sdk_internals
from hrm_memory.tracing.keys import GLOB as _GLOB
from hrm_memory.tracing.keys import GENAI_OPERATIONS, HIDE, cut, key_rule, record_id, strip_content

try:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.sdk.trace.sampling import DEFAULT_ON

    _DEFAULT_SAMPLER = DEFAULT_ON.get_description()  # type: ignore[no-untyped-call]
except ImportError:  # pragma: no cover - the SDK is a dependency, but optional in spirit
    pass

_OK = Status(StatusCode.UNSET)
_HIDE = HIDE
#: ``gen_ai.operation.name`` of every search.
_SEARCH = GENAI_OPERATIONS["recall"]
_yield_gil = time.sleep
_clock = time.perf_counter

try:  # how many times this thread has waited (blocked), as counted by the kernel
    import resource

    _RUSAGE_THREAD = resource.RUSAGE_THREAD  # Linux

    def _waits() -> int:
        return resource.getrusage(_RUSAGE_THREAD).ru_nvcsw

except (ImportError, AttributeError):  # pragma: no cover - elsewhere: every slow batch counts
    import itertools

    _waits = itertools.count().__next__
_logger = logging.getLogger("hrm_memory.tracing.spans")

_INTERNAL = trace.SpanKind.INTERNAL
_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_NOT_SAMPLED = trace.TraceFlags(trace.TraceFlags.DEFAULT)
_DEFAULT_STATE = trace.DEFAULT_TRACE_STATE


#: TokensSaved's ``obj`` when the value is to be read back from its JSON.
DECODE: Any = object()


class TokensSaved:
    """A span attribute computed when the span is finished, not when the
    operation runs: tokens of the value as written minus tokens of its
    coded form (what a warm record stores, and what compact reads and
    ``context()`` show), counted with the real tokenizer
    (:mod:`hrm_memory.core.tokens`). Counted only for a span that is kept:
    with the SDK's default sampler, a span dropped because its parent was
    not sampled is never counted (a custom sampler is given the counted
    attribute, as exported).

    ``readable`` is the value's JSON; ``obj`` the value itself, private to
    the record (a hot record's copy, and ``plan`` its copy plan when known:
    ``values.snapshot``; :data:`DECODE` to read it back from ``readable``);
    ``stored`` the coded JSON when the write made it, and ``pairs`` the
    renames the write found (``Codec.renames_of``; None: not found that
    way), when it looked."""

    __slots__ = ("codec", "obj", "pairs", "plan", "readable", "stored")

    def __init__(self, readable: bytes, codec: Any, obj: Any = DECODE, plan: Any = DECODE,
                 stored: bytes | None = None, pairs: Any = DECODE) -> None:  # fmt: skip
        self.readable = readable
        self.codec = codec
        self.obj = obj
        self.plan = plan
        self.stored = stored
        self.pairs = pairs

    def into(self, attrs: dict[str, Any], by_renames: dict[Any, int] | None = None) -> None:
        """Put the count in ``attrs`` in this object's place. A count that
        fails (a defect of ours) is logged and the attribute left out: it
        never fails the operation that made the span, loses the span or the
        rest of its batch, or exports a wrong number.

        ``by_renames``, when given, is told the count of a write whose
        renames were listed and alone decide it (``tokens.renamed``
        answered): ``{renames: count}``, so that the caller can give the
        next write with the same renames its count without asking again."""
        try:
            n = attrs["hrm.memory.tokens_saved"] = self.value()
        except Exception:  # noqa: BLE001 - see above
            del attrs["hrm.memory.tokens_saved"]
            _logger.exception("hrm-memory: tokens_saved could not be counted; the span goes without it")
            return
        pairs = self.pairs
        if by_renames is not None and type(pairs) is tuple and (not pairs or tokens.renamed(pairs) is not None):
            by_renames[pairs] = n

    def value(self) -> int:
        """Exact, counted the cheapest way this write allows: a dict record
        whose renames the codec can list (``Codec.renames_of``: its renamed
        keys and coded strings) is counted from those (``tokens.renamed``:
        each name's count, remembered; none: 0); anything else from the two
        texts (``tokens.saved``)."""
        pairs = self.pairs
        if pairs is DECODE:
            obj = self.obj
            if obj is DECODE:
                pairs = self.codec.renames_of(orjson.loads(self.readable), self.readable)
            elif self.plan is DECODE:  # a value without its copy plan
                pairs = self.codec.renames_of(obj, self.readable)
            else:  # a hot record's copy: decided in C for the usual record
                pairs = self.codec.renames_of_copy(obj, self.plan, self.readable)
        if pairs is not None:
            if not pairs:
                return 0
            n = tokens.renamed(pairs)
            if n is not None:
                return n
        stored = self.stored
        if stored is None:
            stored = orjson.dumps(self.codec.compact(orjson.loads(self.readable)))
        return tokens.saved(self.readable, stored)


class Recorder:
    """Pending span records of one SDK provider, and the thread that finishes them."""

    BATCH = 256  # records that wake the drainer thread
    FREE = 1024  # finished records kept for reuse
    CHUNK = 256  # spans between two force_flush() of the processors (see drain)
    IDLE_EXIT = 1.0  # seconds without records before the drainer thread exits
    RETRY = 64  # batches on the drainer thread before the caller's is tried again
    SLOW = 20e-6  # seconds a span: a drain on the caller's thread slower than this moves to the drainer thread
    TICK = 0.02  # the drainer's timer: the last records of a burst wait at most this long

    def __init__(self, provider: Any, scope: Any, hook: type) -> None:
        self.provider = provider
        self.scope = scope
        self.pending: list[Any] = []
        #: Records already finished, for Tracing.start to fill in again: an
        #: operation then allocates no object the garbage collector tracks
        #: (each one it must count and walk until it dies).
        self.free: list[Any] = []
        #: The pending count at which an operation calls :meth:`kick`: 1 while
        #: no drainer thread runs (the first record starts it), BATCH while it
        #: waits, never again once woken until it has drained.
        self.due = 1
        self.lock = threading.Lock()
        self.draining = threading.RLock()  # re-entrant: a processor may force_flush from on_end
        self.ready = threading.Event()
        self.thread: threading.Thread | None = None
        self.unflushed = 0
        #: Batches are finished on the thread of the operation that fills
        #: them, until one is slow (an exporter that waits on the network):
        #: then by the drainer thread.
        self.inline = True
        self.slow = 0
        self.retry = 0
        gen = provider.id_generator
        self.new_trace_id: Callable[[], int]
        self.new_span_id: Callable[[], int]
        self.bits: Callable[[int], int] | None = None
        if type(gen) is RandomIdGenerator:
            import random

            bits = self.bits = random.getrandbits
            self.new_trace_id = lambda: bits(128) or 1
            self.new_span_id = lambda: bits(64) or 1
        else:
            self.new_trace_id = gen.generate_trace_id
            self.new_span_id = gen.generate_span_id
        self.hook = hook
        # First in the pipeline: it finishes our spans before the others flush.
        sdk_internals.put_first(provider, hook(self))

    def kick(self) -> None:
        """A batch is full, or the first record came: finish the batch here,
        or wake the drainer thread (start it if none)."""
        if not self.inline:
            self.retry -= 1
            if self.retry <= 0:  # now and then, the caller's thread again (it was descheduled, say)
                self.inline = True
                self.slow = 2  # one slow batch sends it back
        if self.inline and self.thread is not None and self.draining.acquire(blocking=False):
            # On the caller's thread: no hand-off to another thread (and
            # core), and every object of the batch dies young.
            try:
                t0 = _clock()
                waits = _waits()
                n = self._drain()
                # Slow, and this thread waited (a network exporter): not just
                # descheduled by other processes (an involuntary switch).
                if n and _clock() - t0 > n * self.SLOW and _waits() != waits:
                    self.slow += 1
                    if self.slow >= 3:
                        self.inline = False  # three in a row: the drainer thread, for RETRY batches
                        self.retry = self.RETRY
                else:
                    self.slow = 0
            finally:
                self.draining.release()
            return
        with self.lock:  # serialised with the thread's exit, so a record is never left without one
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="hrm-memory-spans", daemon=True)
                self.thread.start()
                self.due = self.BATCH
                return
            self.due = 1 << 62  # no further kick until the thread waits again (it sets BATCH)
            self.ready.set()
        # Let the drainer have the interpreter now: else it waits for the
        # caller's switch interval (5 ms: thousands of records, out of the
        # caches, many surviving into older GC generations).
        _yield_gil(0)

    def _run(self) -> None:
        idle_since = time.monotonic()
        ready = self.ready
        last = -1
        while True:
            self.due = self.BATCH
            woken = ready.wait(self.TICK)
            ready.clear()
            n = len(self.pending)
            if n:
                idle_since = time.monotonic()
                # Woken for a batch, or the caller paused (the count stopped
                # moving): a busy caller finishes its own batches when inline.
                if woken or n == last or not self.inline:
                    self._drain_logged()
                    last = -1
                else:
                    last = n
            elif time.monotonic() - idle_since > self.IDLE_EXIT:
                with self.lock:
                    self.due = 1
                    if not self.pending:
                        self.thread = None
                        return

    def _drain_logged(self) -> None:
        try:
            self.drain()
        except Exception:  # noqa: BLE001 - the thread goes on for the next spans
            _logger.exception("hrm-memory: a span processor failed")

    def drain(self) -> int:
        """Turn every pending record into an SDK span; return how many.

        One drain at a time, start to finish: a flush (``close()``,
        ``force_flush()``) that finds the drainer thread part-way through a
        batch waits for it, so every span has reached the processors when it
        returns."""
        with self.draining:
            return self._drain()

    def _drain(self) -> int:
        total = 0
        while True:
            with self.lock:
                # The list is never replaced: a caller may have loaded
                # ``rec.pending`` just before this runs and append right
                # after; its record then stays for the next drain.
                pending = self.pending
                batch = pending[: self.CHUNK - self.unflushed]  # at most CHUNK between two flushes
                del pending[: len(batch)]
            if not batch:
                return total
            total += len(batch)
            downstream = [p for p in sdk_internals.processors(self.provider) if type(p) is not self.hook]
            self._deliver(batch, downstream)
            if len(self.free) < self.FREE:
                self.free += batch  # no longer referenced by anyone: end() was their last use
            self.unflushed += len(batch)
            if self.unflushed >= self.CHUNK:
                # Hand the spans on before the next chunk: a batch
                # processor has a bounded queue and would drop what it
                # cannot hold (its worker may not run: we hold the GIL).
                self.unflushed = 0
                for p in downstream:
                    try:
                        p.force_flush()
                    except Exception:  # noqa: BLE001 - as in _deliver
                        _logger.exception("hrm-memory: a span processor failed")

    def _deliver(self, batch: list[Any], downstream: list[Any]) -> None:
        provider = self.provider
        on_ends = [p.on_end for p in downstream]
        only = on_ends[0] if len(on_ends) == 1 else None
        sampler = provider.sampler
        resource = provider.resource
        scope = self.scope
        new_trace_id = self.new_trace_id
        new_span_id = self.new_span_id
        bits = self.bits  # random.getrandbits for the SDK's RandomIdGenerator: called inline
        make_span = sdk_internals.make_span
        # The SDK's default sampler decides from the parent alone; skip the
        # call (and the context it needs) in that case.
        default_sampler = sampler.get_description() == _DEFAULT_SAMPLER
        last_parent: Any = None
        parent_ctx: Any = None
        # tokens_saved of the writes whose renames alone decide it, by those
        # renames (TokensSaved.into): the writes of one record shape list the
        # same renames (the codec's cached tuple), and are counted once a batch.
        by_renames: dict[Any, int] = {}
        # Whether each namespace's spans may name their key (keys.key_rule:
        # its consent gate and whether its categories are granted), asked
        # once a batch per manager's consent view; a span then looks only at
        # its own attributes, and only for a namespace whose records persist.
        rules_of: dict[Any, dict[str, int]] = {}
        rules: dict[str, int] = {}
        view: Any = None
        for rec in batch:
            name, const, ids, consent_of, _ = info = rec.op
            attrs = rec.attrs
            parent = rec.parent
            tid = rec.tid
            ns = rec.ns
            key = rec.key
            if key is not None:
                if ids < 0:
                    key = None  # the operation erases it
                elif consent_of is not None and ns is not None:
                    if consent_of is not view:  # another manager's spans (one provider, several stores)
                        view = consent_of
                        rules = rules_of.setdefault(consent_of, {})
                    rule = rules.get(ns)
                    if rule is None:
                        rule = rules[ns] = key_rule(info, consent_of, ns)
                    # KEPT: named only if the record was persisted (not kept
                    # in memory for lack of consent, nor read from the hot tier).
                    if rule and (rule == _HIDE or (attrs and (attrs.get("hrm.memory.persisted") is False
                                                              or attrs.get("hrm.memory.tier") == "hot"))):  # fmt: skip
                        key = None
            if attrs is not None and ns is not None and key is not None and len(key) <= 256:
                # One new dict, the operation's attributes last (they win):
                # cheaper than a copy of the constants and three updates.
                if ids == 1 or (ids == 2 and _GLOB.isdisjoint(key)):
                    a = {"db.system.name": const["db.system.name"], "db.operation.name": const["db.operation.name"],
                         "gen_ai.operation.name": name, "gen_ai.memory.store.id": ns, "db.collection.name": ns,
                         "gen_ai.memory.record.id": key, "hrm.memory.key": key, **attrs}  # fmt: skip
                else:
                    a = {"db.system.name": const["db.system.name"], "db.operation.name": const["db.operation.name"],
                         "gen_ai.operation.name": name, "gen_ai.memory.store.id": ns, "db.collection.name": ns,
                         "hrm.memory.key": key, **attrs}  # fmt: skip
            elif attrs is not None and ns is not None and key is None:
                # A span that names no key (hidden, or none): the same dict as
                # below, in one display instead of a copy, two stores and an update.
                a = {"db.system.name": const["db.system.name"], "db.operation.name": const["db.operation.name"],
                     "gen_ai.operation.name": name, "gen_ai.memory.store.id": ns, "db.collection.name": ns,
                     **attrs}  # fmt: skip
            else:
                a = const.copy()
                if ns is not None:
                    a["db.collection.name"] = a["gen_ai.memory.store.id"] = ns
                if key is not None:  # a key the span may name (decided above)
                    short = cut(key)
                    a["hrm.memory.key"] = short
                    if record_id(ids, key):
                        a["gen_ai.memory.record.id"] = short
                if attrs:
                    a.update(attrs)
            # Only a search records its query text and what it found (when opted in).
            if name == _SEARCH and attrs and ("gen_ai.memory.query.text" in a or "gen_ai.memory.records" in a):
                strip_content(info, ns, a)
            if not tid:
                tid = (bits(128) or 1) if bits is not None else new_trace_id()
            flags = _SAMPLED
            if default_sampler:
                if parent is None:
                    state = _DEFAULT_STATE
                elif parent.trace_flags.sampled:
                    state = parent.trace_state
                else:
                    continue  # dropped: its tokens are never counted
                if attrs:
                    saved = a.get("hrm.memory.tokens_saved")
                    if saved is not None and type(saved) is TokensSaved:
                        pairs = saved.pairs
                        n = by_renames.get(pairs) if type(pairs) is tuple else None
                        if n is None:
                            saved.into(a, by_renames)
                        else:
                            a["hrm.memory.tokens_saved"] = n
            else:
                if attrs:  # the sampler sees the attributes as exported
                    saved = a.get("hrm.memory.tokens_saved")
                    if saved is not None and type(saved) is TokensSaved:
                        saved.into(a)
                if parent is not last_parent:
                    last_parent = parent
                    parent_ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent else None
                result = sampler.should_sample(parent_ctx, tid, name, _INTERNAL, a)
                decision = result.decision
                if not decision.is_recording():
                    continue
                if not decision.is_sampled():
                    flags = _NOT_SAMPLED
                if result.attributes:
                    a.update(result.attributes)
                state = result.trace_state or _DEFAULT_STATE
            sid = (bits(64) or 1) if bits is not None else new_span_id()
            span = make_span(name, tid, sid, flags, state, parent, resource, a, rec.status or _OK,
                             rec.start, rec.stop, scope)  # fmt: skip
            if only is not None:
                try:
                    only(span)
                except Exception:  # noqa: BLE001 - one processor's failure loses no other span
                    _logger.exception("hrm-memory: a span processor failed")
            else:
                for on_end in on_ends:
                    try:
                        on_end(span)
                    except Exception:  # noqa: BLE001 - nor does it keep the span from the others
                        _logger.exception("hrm-memory: a span processor failed")


class DrainHook:
    """A span processor placed first in the provider's pipeline: its only job
    is to finish our pending spans before the others flush or shut down."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = weakref.ref(recorder)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def _on_ending(self, span: Any) -> None:
        return None

    def on_end(self, span: Any) -> None:
        return None

    def shutdown(self) -> None:
        self.force_flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        rec = self._recorder()
        if rec is not None:
            rec.drain()
        return True
