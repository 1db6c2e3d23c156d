"""Worker processes for the Redis Cluster tests (tests/redis_backend/test_redis_cluster.py).

python -m tests.helpers.cluster_workers writer URL NAME NS,NS,...
    Print READY, wait for a line on stdin, then until stdin closes: for each
    namespace in turn, ``update()`` its key ``counter`` (the value keeps a
    count and the list of op ids applied) and write a key of its own
    ``<NAME>-<i>``. One line per op, flushed: ``A U <ns> <op id> <t>`` (the
    update returned), ``A W <ns> <key> <t>`` (the write returned),
    ``E U|W <ns> <id> <error type> <t>`` (it raised: maybe applied, maybe
    not). ``t`` is time.monotonic().

python -m tests.helpers.cluster_workers events URL NS N
    Print READY, wait for a line, write keys k0..k<N-1> to NS (a few ms
    apart), print DONE.

python -m tests.helpers.cluster_workers follow URL CURSOR
    Read the change log from CURSOR with events_since() in a loop; after each
    batch print one line ``{"events": [[ns, key, version], ...], "cursor": c}``
    (a batch and the cursor after it in one write, so a reader killed at
    any moment resumes from the last whole line without loss or repeat).

python -m tests.helpers.cluster_workers subscribe URL CURSOR TOTAL
    subscribe("*", since=CURSOR); print each event as ``[ns, key, version]``
    until the events printed by this process and the earlier ones (TOTAL in
    all) are in; then print DONE.
"""

from __future__ import annotations

import json
import sys
import threading
import time


def _writer(url: str, name: str, namespaces: list[str]) -> None:
    from hrm_memory import MemoryManager, MemoryStoreError

    stop = threading.Event()
    with MemoryManager(None, backend=url) as mm:
        print("READY", flush=True)
        sys.stdin.readline()
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
        i = 0
        while not stop.is_set():
            for ns in namespaces:
                op = f"{name}.{i}"

                def bump(v: object, op: str = op) -> dict[str, object]:
                    cur = v if isinstance(v, dict) else {"n": 0, "ops": []}
                    return {"n": int(cur["n"]) + 1, "ops": [*cur["ops"], op]}

                try:
                    mm.update(ns, "counter", bump)
                    print(f"A U {ns} {op} {time.monotonic():.4f}", flush=True)
                except MemoryStoreError as exc:
                    print(f"E U {ns} {op} {type(exc).__name__} {time.monotonic():.4f}", flush=True)
                key = f"{name}-{i}"
                try:
                    mm.write(ns, key, {"i": i, "by": name})
                    print(f"A W {ns} {key} {time.monotonic():.4f}", flush=True)
                except MemoryStoreError as exc:
                    print(f"E W {ns} {key} {type(exc).__name__} {time.monotonic():.4f}", flush=True)
                i += 1


def _events(url: str, ns: str, n: int) -> None:
    from hrm_memory import MemoryManager

    with MemoryManager(None, backend=url) as mm:
        print("READY", flush=True)
        sys.stdin.readline()
        for i in range(n):
            mm.write(ns, f"k{i}", {"i": i})
            time.sleep(0.003)
        print("DONE", flush=True)


def _follow(url: str, cursor: str) -> None:
    from hrm_memory import MemoryManager

    with MemoryManager(None, backend=url) as mm:
        print(json.dumps({"events": [], "cursor": cursor}), flush=True)
        while True:
            events, cursor = mm.events_since(cursor)
            if events:
                rows = [[e.namespace, e.key, e.version] for e in events]
                print(json.dumps({"events": rows, "cursor": cursor}), flush=True)
            time.sleep(0.01)


def _subscribe(url: str, cursor: str, total: int) -> None:
    from hrm_memory import Event, MemoryManager

    got = [0]
    done = threading.Event()
    lock = threading.Lock()

    def on_event(ev: Event) -> None:
        with lock:
            print(json.dumps([ev.namespace, ev.key, ev.version]), flush=True)
            got[0] += 1
            if got[0] >= total:
                done.set()

    with MemoryManager(None, backend=url, poll_interval=0.005) as mm:
        sub = mm.subscribe("*", on_event, since=cursor)
        done.wait(120)
        sub.cancel()
    print("DONE", flush=True)


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    if what == "writer":
        _writer(args[0], args[1], args[2].split(","))
    elif what == "events":
        _events(args[0], args[1], int(args[2]))
    elif what == "follow":
        _follow(args[0], args[1])
    elif what == "subscribe":
        _subscribe(args[0], args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown worker {what!r}")
