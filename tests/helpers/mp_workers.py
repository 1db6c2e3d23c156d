"""Worker processes for the multi-process, crash-under-concurrency and fault
tests, plus the checkers that replay their logs against a store.

Run as ``python -m tests.helpers.mp_workers COMMAND ...`` with cwd = the repo:

``counter ROOT N [--nolock]``
    Open the store, print ``READY``, wait for a line on stdin (the start
    barrier), do N ``update(+1)`` on ``t.counter/n`` and print one JSON line
    ``{"t0": ..., "t1": ...}`` (``time.monotonic()``, which on Linux is one
    clock for every process, so phases of several processes line up).

``serve ROOT [--locking] [--durability D] [--lock-timeout S]``
    Print ``READY``, then execute one JSON command per stdin line and answer
    one JSON line each (see :func:`serve`). They drive "the other process"
    step by step, and to hold a namespace lock on demand.

``mixed ROOT SECONDS SEED WID LOG``
    Random writes, updates, deletes, reads and queries on keys shared with the
    other workers (``locking=True``), for SECONDS after the start barrier.
    Every operation is logged to LOG (JSON lines) with its begin and end time.
    Reads check what this process can know for sure (its own appends are all
    there, versions never go back); a violation exits with status 1.

``churn ROOT SECONDS KEY...``
    Print ``READY``, wait for the barrier, then for SECONDS rewrite the given
    keys (each value ``{"v": key}``) and compact their namespace
    (``t.fault``) after every write, so that another process reads while the
    bucket file is replaced under it. Prints the number of compactions.

``bigwriter ROOT SECONDS WID [--locking]``
    Print ``READY``, wait for the barrier, then for SECONDS write 5-12 KB
    values to 8 keys of one bucket (``t.fault``; they span pages, so other
    processes can see them half-written), reading in between; compaction is
    off. Prints the number of acknowledged writes and of reads that raised
    CorruptRecord.

``ownwriter ROOT SECONDS WID``
    ``locking=False``; print ``READY``, wait for the barrier, then for SECONDS
    rewrite this worker's own keys (and add new ones) in one bucket of
    ``t.fault`` with 20-60 KB values, automatic compaction on and frequent.
    Prints one JSON object: key -> the last acknowledged sequence number.

``crashmix ROOT SEED WID NOPS``
    Like ``mixed`` with ``durability="fsync"``, NOPS operations, and the
    crash-test protocol on stdout: ``B <op JSON>`` before an operation and
    ``A <result JSON>`` once it is acknowledged.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hrm_memory.storage.file.warm import tier as warm_tier
from hrm_memory import CorruptRecord, MemoryManager, MemoryStoreError, NamespaceSpec

SPECS = [
    NamespaceSpec("t.counter"),
    NamespaceSpec("t.vis"),
    NamespaceSpec("t.mix"),
    NamespaceSpec("t.mix2"),
    NamespaceSpec("t.crash"),
    NamespaceSpec("t.fault"),
]

#: Keys of the mixed and crash workloads. ``L*`` keys only ever get list
#: appends through update(); ``V*`` keys get writes, replacing updates and
#: deletes. Few keys, so that the processes collide on them all the time.
L_KEYS = [f"L{i}" for i in range(12)]
V_KEYS = [f"V{i}" for i in range(24)]


def _append(wid: int, seq: int):  # type: ignore[no-untyped-def]
    def fn(v: Any) -> Any:
        return (v or []) + [[wid, seq]]

    return fn


def _replace(wid: int, seq: int):  # type: ignore[no-untyped-def]
    def fn(v: Any) -> Any:
        prev = [v["w"], v["s"]] if isinstance(v, dict) else None
        return {"w": wid, "s": seq, "u": 1, "prev": prev}

    return fn


def _pick_op(rng: random.Random, namespaces: list[str], with_reads: bool) -> list[Any]:
    ns = rng.choice(namespaces)
    roll = rng.random()
    if not with_reads:
        roll *= 0.7
    if roll < 0.25:
        return ["append", ns, rng.choice(L_KEYS)]
    if roll < 0.45:
        return ["write", ns, rng.choice(V_KEYS)]
    if roll < 0.55:
        return ["replace", ns, rng.choice(V_KEYS)]
    if roll < 0.70:
        return ["delete", ns, rng.choice(V_KEYS)]
    if roll < 0.85:
        return ["read", ns, rng.choice(L_KEYS + V_KEYS)]
    return ["query", ns, rng.choice(["V*", "L*", "*", "V1?"])]


def _do(mm: MemoryManager, op: list[Any], wid: int, seq: int) -> Any:
    kind, ns, key = op
    if kind == "append":
        mm.update(ns, key, _append(wid, seq))
        return None
    if kind == "write":
        mm.write(ns, key, {"w": wid, "s": seq, "pad": "x" * (seq % 200)})
        return None
    if kind == "replace":
        mm.update(ns, key, _replace(wid, seq))
        return None
    if kind == "delete":
        return mm.delete(ns, key)
    raise AssertionError(kind)


# -- commands -------------------------------------------------------------------


def counter(argv: list[str]) -> int:
    root, n = argv[0], int(argv[1])
    locking = "--nolock" not in argv
    with MemoryManager(root, locking=locking, durability="flush", namespaces=SPECS) as mm:
        mm.read("t.counter", "n")  # open the bucket before the clock starts
        print("READY", flush=True)
        sys.stdin.readline()
        t0 = time.monotonic()
        for _ in range(n):
            mm.update("t.counter", "n", lambda v: (v or 0) + 1)
        t1 = time.monotonic()
    print(json.dumps({"t0": t0, "t1": t1, "pid": os.getpid()}), flush=True)
    return 0


def serve(argv: list[str]) -> int:
    """Commands (JSON lists) and answers (JSON ``{"ok": result}`` or
    ``{"err": type name, "typed": is a MemoryStoreError, "errno": n, "msg": text}``):

    ``["write", ns, key, value]``, ``["read", ns, key]``, ``["delete", ns, key]``,
    ``["version", ns, key]``, ``["append", ns, key, item]``, ``["bump", ns, key, n]``
    (n updates +1), ``["uid"]``, ``["check"]``,
    ``["hold", ns]`` (take the namespace's lock and keep it), ``["release"]``,
    ``["exit"]``.
    """
    root = argv[0]
    locking = "--locking" in argv
    durability = argv[argv.index("--durability") + 1] if "--durability" in argv else "flush"
    timeout = float(argv[argv.index("--lock-timeout") + 1]) if "--lock-timeout" in argv else 10.0
    held = None
    with MemoryManager(
        root, locking=locking, durability=durability, lock_timeout=timeout, namespaces=SPECS
    ) as mm:
        print("READY", flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            try:
                if cmd[0] == "write":
                    res: Any = mm.write(cmd[1], cmd[2], cmd[3]) and None
                elif cmd[0] == "read":
                    res = mm.read(cmd[1], cmd[2])
                elif cmd[0] == "delete":
                    res = mm.delete(cmd[1], cmd[2])
                elif cmd[0] == "version":
                    rec = mm.get_record(cmd[1], cmd[2])
                    res = None if rec is None else rec.version
                elif cmd[0] == "append":
                    item = cmd[3]
                    res = mm.update(cmd[1], cmd[2], lambda v: (v or []) + [item])
                elif cmd[0] == "bump":
                    for _ in range(cmd[3]):
                        res = mm.update(cmd[1], cmd[2], lambda v: (v or 0) + 1)
                elif cmd[0] == "uid":
                    res = os.getuid()
                elif cmd[0] == "check":
                    res = [str(f) for f in mm.check()]
                elif cmd[0] == "hold":
                    held = mm.backend.locks.hold(cmd[1], cross_process=True)
                    held.__enter__()
                    res = os.getpid()
                elif cmd[0] == "release":
                    if held is not None:
                        held.__exit__(None, None, None)
                        held = None
                    res = None
                elif cmd[0] == "exit":
                    print(json.dumps({"ok": None}), flush=True)
                    break
                else:
                    raise ValueError(f"unknown command {cmd[0]!r}")
                answer = {"ok": res}
            except Exception as exc:  # noqa: BLE001 - reported to the test, which judges it
                answer = {
                    "err": type(exc).__name__,
                    "typed": isinstance(exc, MemoryStoreError),
                    "errno": getattr(exc, "errno", None),
                    "msg": str(exc),
                }
            print(json.dumps(answer), flush=True)
    return 0


def mixed(argv: list[str]) -> int:
    root, seconds, seed, wid, log_path = argv[0], float(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    warm_tier.COMPACT_MIN_GARBAGE = 16 * 1024  # compact often, under the other processes' feet
    rng = random.Random(seed)
    namespaces = ["t.mix", "t.mix2"]
    log: list[list[Any]] = []
    own_appends: dict[tuple[str, str], list[int]] = defaultdict(list)
    seen_version: dict[tuple[str, str], int] = {}
    problems: list[str] = []
    with MemoryManager(root, locking=True, durability="flush", namespaces=SPECS) as mm:
        print("READY", flush=True)
        sys.stdin.readline()
        deadline = time.monotonic() + seconds
        seq = 0
        while time.monotonic() < deadline:
            seq += 1
            op = _pick_op(rng, namespaces, with_reads=True)
            kind, ns, key = op
            t0 = time.monotonic()
            if kind == "read":
                if key.startswith("L"):
                    value = mm.read(ns, key)
                    mine = [s for w, s in (value or []) if w == wid]
                    if mine != own_appends[(ns, key)]:
                        problems.append(f"{ns}/{key}: own appends {own_appends[(ns, key)]} read as {mine}")
                else:
                    rec = mm.get_record(ns, key)
                    # A deleted key reads as None; its tombstone still counted a version.
                    if rec is not None:
                        if rec.version < seen_version.get((ns, key), 0):
                            problems.append(f"{ns}/{key}: version went back to {rec.version}")
                        seen_version[(ns, key)] = rec.version
                        if not (isinstance(rec.value, dict) and {"w", "s"} <= rec.value.keys()):
                            problems.append(f"{ns}/{key}: unexpected value {rec.value!r}")
                continue
            if kind == "query":
                for rec in mm.query(ns, key):
                    ok = isinstance(rec.value, list) if rec.key.startswith("L") else isinstance(rec.value, dict)
                    if not ok:
                        problems.append(f"query {ns}/{rec.key}: unexpected value {rec.value!r}")
                continue
            result = _do(mm, op, wid, seq)
            t1 = time.monotonic()
            if kind == "append":
                own_appends[(ns, key)].append(seq)
            log.append([wid, seq, kind, ns, key, t0, t1, result])
    with open(log_path, "w") as f:
        for row in log:
            f.write(json.dumps(row) + "\n")
    for p in problems[:20]:
        print("PROBLEM " + p, file=sys.stderr)
    return 1 if problems else 0


def churn(argv: list[str]) -> int:
    root, seconds, keys = argv[0], float(argv[1]), argv[2:]
    with MemoryManager(root, locking=True, durability="flush", namespaces=SPECS) as mm:
        print("READY", flush=True)
        sys.stdin.readline()
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            key = keys[n % len(keys)]
            mm.write("t.fault", key, {"v": key})
            mm.compact("t.fault")
            n += 1
    print(n, flush=True)
    return 0


BIG_KEYS = [k for k in (f"u{i}" for i in range(5000)) if warm_tier.bucket_of(k) == 5][:8]


def bigwriter(argv: list[str]) -> int:
    root, seconds, wid = argv[0], float(argv[1]), int(argv[2])
    warm_tier.COMPACT_MIN_GARBAGE = 1 << 62  # isolate appends from compaction
    locking = "--locking" in argv
    with MemoryManager(root, locking=locking, durability="flush", namespaces=SPECS) as mm:
        print("READY", flush=True)
        sys.stdin.readline()
        deadline = time.monotonic() + seconds
        n = read_errors = 0
        while time.monotonic() < deadline:
            n += 1
            key = BIG_KEYS[(n * 7 + wid) % len(BIG_KEYS)]
            mm.write("t.fault", key, {"w": wid, "i": n, "pad": "x" * (5000 + (n * 37) % 7000)})
            try:
                mm.read("t.fault", BIG_KEYS[n % len(BIG_KEYS)])
            except CorruptRecord:
                read_errors += 1
    print(n, read_errors, flush=True)
    return 0


def crashmix(argv: list[str]) -> int:
    root, seed, wid, nops = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    warm_tier.COMPACT_MIN_GARBAGE = 4096  # so that kills land inside compactions too
    rng = random.Random(seed)
    out = sys.stdout
    with MemoryManager(root, locking=True, durability="fsync", namespaces=SPECS) as mm:
        out.write("READY\n")
        out.flush()
        sys.stdin.readline()
        for seq in range(1, nops + 1):
            op = _pick_op(rng, ["t.crash"], with_reads=False)
            t0 = time.monotonic()
            out.write("B " + json.dumps([wid, seq, *op, t0]) + "\n")
            out.flush()
            result = _do(mm, op, wid, seq)
            out.write("A " + json.dumps([result, time.monotonic()]) + "\n")
            out.flush()
    out.write("DONE\n")
    out.flush()
    return 0


# -- driving the workers (used by the tests, in the test process) -----------------------

REPO = Path(__file__).resolve().parents[2]


def spawn(*args: str, prefix: Sequence[str] = ()) -> subprocess.Popen[str]:
    """Start a worker; ``prefix`` runs it through a wrapper (e.g. setpriv)."""
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "tests.helpers.mp_workers", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(procs: Sequence[subprocess.Popen[str]]) -> None:
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if line.strip() != "READY":
            p.kill()
            _, err = p.communicate()
            raise AssertionError(f"worker did not start: {line!r}\n{err}")


def release(procs: Sequence[subprocess.Popen[str]]) -> None:
    """Wait until every worker has printed READY, then start them at once
    (a ``go`` line on each one's stdin)."""
    wait_ready(procs)
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


def finish(p: subprocess.Popen[str], timeout: float = 120) -> str:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"worker failed ({p.returncode}):\n{err}"
    assert "Traceback" not in err, err
    return out


class Peer:
    """Another process on the same root, driven one command at a time (``serve``)."""

    def __init__(self, root: str | os.PathLike[str], *extra: str, prefix: Sequence[str] = ()) -> None:
        self.proc = spawn("serve", str(root), *extra, prefix=prefix)
        wait_ready([self.proc])

    def ask(self, *cmd: Any) -> dict[str, Any]:
        """Send a command; return the raw answer (``{"ok": ...}`` or ``{"err": ...}``)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(list(cmd)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"peer died: {self.proc.stderr.read() if self.proc.stderr else ''}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, *cmd: Any) -> Any:
        answer = self.ask(*cmd)
        if "err" in answer:
            raise AssertionError(f"peer: {cmd[0]} failed: {answer}")
        return answer["ok"]

    def send(self, *cmd: Any) -> None:
        """Send without waiting; collect the answer later with :meth:`receive`."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(list(cmd)) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "peer died"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("exit")
            except (AssertionError, BrokenPipeError):
                pass
        finish(self.proc, timeout=30)


# -- checkers (used by the tests, in the test process) ---------------------------------


class Op:
    """One mutation as logged by a worker."""

    __slots__ = ("wid", "seq", "kind", "ns", "key", "t0", "t1", "result")

    def __init__(self, wid: int, seq: int, kind: str, ns: str, key: str, t0: float, t1: float, result: Any) -> None:
        self.wid, self.seq, self.kind, self.ns, self.key = wid, seq, kind, ns, key
        self.t0, self.t1, self.result = t0, t1, result

    def __repr__(self) -> str:
        return f"Op({self.wid}/{self.seq} {self.kind} {self.ns}/{self.key} [{self.t0:.6f}, {self.t1:.6f}] -> {self.result})"

    @property
    def mutates(self) -> bool:
        """Whether the op bumped the key's version (a delete only when it found the key)."""
        return self.kind != "delete" or self.result is not False


def parse_crash_log(lines: Iterable[str]) -> tuple[list[Op], Op | None]:
    """(acknowledged ops, the op in flight when the writer died or None)."""
    acked: list[Op] = []
    pending: list[Any] | None = None
    for line in lines:
        if line.startswith("B "):
            pending = json.loads(line[2:])
        elif line.startswith("A ") and pending is not None:
            result, t1 = json.loads(line[2:])
            wid, seq, kind, ns, key, t0 = pending
            acked.append(Op(wid, seq, kind, ns, key, t0, t1, result))
            pending = None
    if pending is None:
        return acked, None
    wid, seq, kind, ns, key, t0 = pending
    # Unknown outcome: it may have committed (result unknown) or not.
    return acked, Op(wid, seq, kind, ns, key, t0, float("inf"), None)


def replay_check(mm: MemoryManager, ops: list[Op], in_flight: list[Op] = ()) -> tuple[list[str], list[Op]]:  # type: ignore[assignment]
    """Compare the store with the acknowledged operations; return (problems,
    the in-flight ops found to have committed).

    - ``L`` keys: the list holds every acknowledged append exactly once, each
      process's in its order, and nothing that was never attempted; an
      in-flight append may be there (once) or not.
    - ``V`` keys: the version equals the number of acknowledged mutations
      (+1 if an in-flight mutation of the key committed), and the current
      state (value, or deleted) comes from an operation that no other
      mutation of the key *started after it had returned* (with every
      mutation serialised by the namespace lock, the last one in lock order
      cannot have returned before another began).
    """
    problems: list[str] = []
    committed: list[Op] = []
    by_key: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in ops:
        by_key[(op.ns, op.key)].append(op)
    pending_by_key = {(op.ns, op.key): op for op in in_flight}
    keys = set(by_key) | set(pending_by_key)
    for ns, key in sorted(keys):
        acked = by_key.get((ns, key), [])
        pending = pending_by_key.get((ns, key))
        rec = mm.get_record(ns, key)
        raw = _raw_version(mm, ns, key)
        if key.startswith("L"):
            got = [tuple(x) for x in (rec.value if rec is not None else [])]
            want = [(o.wid, o.seq) for o in acked]
            counts = Counter(got)
            dup = [x for x, n in counts.items() if n > 1]
            if dup:
                problems.append(f"{ns}/{key}: appended twice: {dup[:5]}")
            missing = [x for x in want if x not in counts]
            if missing:
                problems.append(f"{ns}/{key}: acknowledged appends lost: {missing[:5]} (of {len(want)})")
            allowed = set(want) | ({(pending.wid, pending.seq)} if pending else set())
            extra = [x for x in got if x not in allowed]
            if extra:
                problems.append(f"{ns}/{key}: entries never acknowledged: {extra[:5]}")
            if pending is not None and (pending.wid, pending.seq) in counts:
                committed.append(pending)
            for wid in {w for w, _ in got}:
                seqs = [s for w, s in got if w == wid]
                if seqs != sorted(seqs):
                    problems.append(f"{ns}/{key}: appends of worker {wid} out of order")
            n_app = len(want) + (1 if pending is not None and (pending.wid, pending.seq) in counts else 0)
            if raw != n_app:
                problems.append(f"{ns}/{key}: version {raw}, expected {n_app} (one per append)")
            continue
        muts = [o for o in acked if o.mutates]
        expected = len(muts)
        candidates = list(muts)
        if pending is not None and pending.kind != "read":
            if raw == expected + 1:
                committed.append(pending)
                candidates.append(pending)
                expected += 1
        if raw != expected:
            problems.append(f"{ns}/{key}: version {raw}, expected {expected} acknowledged mutations")
        if not candidates:
            if rec is not None:
                problems.append(f"{ns}/{key}: holds {rec.value!r} but no mutation was acknowledged")
            continue
        # The last mutation in lock order is one that did not return before
        # another one began.
        maximal = [o for o in candidates if not any(m is not o and o.t1 < m.t0 for m in candidates)]
        if rec is None:
            if not any(o.kind == "delete" for o in maximal):
                problems.append(f"{ns}/{key}: deleted, but no delete can be the last mutation: {maximal}")
        else:
            ident = (rec.value.get("w"), rec.value.get("s")) if isinstance(rec.value, dict) else None
            if not any(o.kind in ("write", "replace") and (o.wid, o.seq) == ident for o in maximal):
                problems.append(f"{ns}/{key}: value from {ident}, not one of the possible last mutations {maximal}")
    return problems, committed


def _raw_version(mm: MemoryManager, ns: str, key: str) -> int:
    """The key's version including a tombstone (get_record hides deleted keys)."""
    from hrm_memory.storage.file.warm.tier import bucket_of

    b = mm.backend.warm.files.bucket(ns, bucket_of(key))
    with b.lock:
        mm.backend.warm.files.refresh(b)
        e = b.index.get(key)
    return 0 if e is None else e.version


def read_log(path: str) -> list[Op]:
    with open(path) as f:
        return [Op(*json.loads(line)) for line in f if line.strip()]


def ownwriter(argv: list[str]) -> int:
    root, seconds, wid = argv[0], float(argv[1]), int(argv[2])
    warm_tier.COMPACT_MIN_GARBAGE = 64 * 1024  # compact often, under the other writer's feet
    mine = [k for k in (f"w{wid}-{i}" for i in range(20000)) if warm_tier.bucket_of(k) == 5]
    acked: dict[str, int] = {}
    with MemoryManager(root, durability="flush", namespaces=SPECS) as mm:
        print("READY", flush=True)
        sys.stdin.readline()
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            n += 1
            key = mine[n % 6] if n % 25 else mine[6 + (n // 25) % (len(mine) - 6)]  # 6 rewritten keys, a new one now and then
            mm.write("t.fault", key, {"w": wid, "n": n, "pad": "x" * (20000 + (n * 7919) % 40000)})
            acked[key] = n
    print(json.dumps(acked), flush=True)
    return 0


def main() -> int:
    cmd, argv = sys.argv[1], sys.argv[2:]
    return {"counter": counter, "serve": serve, "mixed": mixed, "churn": churn, "bigwriter": bigwriter, "ownwriter": ownwriter, "crashmix": crashmix}[cmd](argv)


if __name__ == "__main__":
    sys.exit(main())
