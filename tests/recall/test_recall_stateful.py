"""After any sequence of write / update / delete /
archive / revoke (with and without purge) / grant / reopen, and after a
process SIGKILLed between (or inside) its steps, recall never returns a
record that ``read`` would not return, and finds every live indexed record
whose text holds the query's rare term.

The oracle is the store itself: for every key ever used, ``get_record`` says
what ``read`` returns now (value, version, tier). For each rare term,
``recall(term)`` must return every live record holding it and nothing but
records ``read`` returns at that very version; archived ones only through the
cold stage of the cascade, and all of them with ``include_cold=True``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hrm_memory import MemoryManager, NamespaceSpec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

NOTES = NamespaceSpec("t.notes", index=("text",), ttl=60.0, description="indexed, ages into cold")
CHAT = NamespaceSpec("t.chat", index=("text",), consent="conversation", description="indexed, gated")
SPECS = (NOTES, CHAT)
NAMESPACES = [s.name for s in SPECS]
KEYS = [f"k{i}" for i in range(6)]
#: Rare terms: none is a prefix of another, none occurs in the filler.
TERMS = [f"zq{c}{c}{c}7" for c in "abcde"]
FILLER = ["the", "quiet", "river", "carried", "lanterns", "past", "sleeping", "houses", "toward", "a", "harbour"]


def text_of(value: Any) -> str:
    return value.get("text", "") if isinstance(value, dict) else ""


def check_recall(mm: MemoryManager) -> None:
    """The invariant: recall agrees with read, for every rare term."""
    records = {}
    for ns in NAMESPACES:
        for key in KEYS:
            rec = mm.get_record(ns, key)
            if rec is not None:
                assert rec.value == mm.read(ns, key)
                records[(ns, key)] = rec
    for term in TERMS:
        live = {ref for ref, rec in records.items() if rec.tier != "cold" and term in text_of(rec.value)}
        cold = {ref for ref, rec in records.items() if rec.tier == "cold" and term in text_of(rec.value)}
        hits = mm.recall(term, namespaces="t.*", k=1000, explain=True)
        got = {(h.namespace, h.key): h for h in hits}
        assert len(got) == len(hits), "a record recalled twice"
        assert live <= set(got), f"{term}: live records not found: {live - set(got)}"
        assert set(got) <= live | cold, f"{term}: recalled what read does not return: {set(got) - live - cold}"
        for ref, hit in got.items():
            rec = records[ref]
            assert (hit.record.value, hit.record.version, hit.record.tier) == (rec.value, rec.version, rec.tier), ref
        if set(got) & cold:
            path = hits[0].why["path"]  # type: ignore[index]
            assert any(stage["cold"] for stage in path), f"{term}: archived record served without the cold stage"
        every = {(h.namespace, h.key) for h in mm.recall(term, namespaces="t.*", k=1000, include_cold=True)}
        assert every == live | cold, f"{term}: include_cold gave {every}, expected {live | cold}"


def open_manager(root: Path) -> MemoryManager:
    mm = MemoryManager(root, durability="flush")
    for spec in SPECS:
        mm.declare(spec)
    return mm


texts = st.lists(st.sampled_from(FILLER), min_size=1, max_size=5).flatmap(
    lambda words: st.lists(st.sampled_from(TERMS), min_size=0, max_size=2, unique=True).map(
        lambda terms: " ".join([*words, *terms])
    )
)
namespaces = st.sampled_from(NAMESPACES)
keys = st.sampled_from(KEYS)


class RecallMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="hrm-recall-stateful-"))
        self.mm = open_manager(self.dir)

    def teardown(self) -> None:
        self.mm.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(ns=namespaces, key=keys, text=texts)
    def write(self, ns: str, key: str, text: str) -> None:
        self.mm.write(ns, key, {"text": text})

    @rule(ns=namespaces, key=keys, text=texts)
    def update(self, ns: str, key: str, text: str) -> None:
        self.mm.update(ns, key, lambda v: {**(v or {}), "text": text})

    @rule(ns=namespaces, key=keys)
    def delete(self, ns: str, key: str) -> None:
        self.mm.delete(ns, key)

    @rule()
    def archive(self) -> None:
        self.mm.archive(now=time.time() + 3600)

    @rule(purge=st.booleans())
    def revoke(self, purge: bool) -> None:
        self.mm.consent.revoke("conversation", purge=purge)

    @rule()
    def grant(self) -> None:
        self.mm.consent.grant("conversation")

    @rule()
    def reopen(self) -> None:
        self.mm.close()
        self.mm = open_manager(self.dir)

    @rule(ns=namespaces, key=keys, text=texts, delete=st.booleans())
    def another_manager_writes(self, ns: str, key: str, text: str, delete: bool) -> None:
        """Another manager on the root (as another process would): its
        change reaches ours through the change log only."""
        with MemoryManager(self.dir, durability="flush") as other:
            if delete:
                other.delete(ns, key)
            else:
                other.write(ns, key, {"text": text})

    @rule(term=st.sampled_from(TERMS))
    def recall_between(self, term: str) -> None:
        self.mm.recall(term, namespaces="t.*")  # moves the index's cursor, counts accesses

    @invariant()
    def recall_agrees_with_read(self) -> None:
        check_recall(self.mm)


RecallMachine.TestCase.settings = settings(
    max_examples=20,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestRecallMachine = RecallMachine.TestCase


# -- a process SIGKILLed between (and inside) its steps ------------------------------

CHILD = f"TERMS = {TERMS!r}\nFILLER = {FILLER!r}\nKEYS = {KEYS!r}\n" + r"""
import random, sys, time
from hrm_memory import MemoryManager, NamespaceSpec
NOTES = NamespaceSpec("t.notes", index=("text",), ttl=60.0, description="indexed, ages into cold")
CHAT = NamespaceSpec("t.chat", index=("text",), consent="conversation", description="indexed, gated")
rng = random.Random(int(sys.argv[2]))
with MemoryManager(sys.argv[1], durability="flush") as mm:
    mm.declare(NOTES)
    mm.declare(CHAT)
    print("READY", flush=True)
    while True:
        ns = rng.choice(["t.notes", "t.chat"])
        key = rng.choice(KEYS)
        text = " ".join(rng.sample(FILLER, rng.randint(1, 4)) + rng.sample(TERMS, rng.randint(0, 2)))
        roll = rng.random()
        if roll < 0.40:
            mm.write(ns, key, {"text": text})
        elif roll < 0.55:
            mm.update(ns, key, lambda v: {**(v or {}), "text": text})
        elif roll < 0.70:
            mm.delete(ns, key)
        elif roll < 0.85:
            mm.recall(rng.choice(TERMS), namespaces="t.*")
        elif roll < 0.90:
            mm.archive(now=time.time() + 3600)
        elif roll < 0.95:
            mm.consent.grant("conversation")
        else:
            mm.consent.revoke("conversation", purge=rng.random() < 0.5)
"""


def test_recall_after_sigkill_between_steps(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rng = random.Random(1515)
    started = time.monotonic()
    with open_manager(root) as long_lived:
        check_recall(long_lived)  # reconciled now; from here on it catches up from the log
        for round_ in range(20):
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(root), str(rng.randrange(1 << 30))],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            try:
                assert child.stdout is not None
                line = child.stdout.readline()
                assert line.strip() == "READY", child.stderr.read() if child.stderr else line
                time.sleep(rng.uniform(0.0, 0.3))
                assert child.poll() is None, child.stderr.read() if child.stderr else "child ended"
                os.kill(child.pid, signal.SIGKILL)
            finally:
                child.kill()
                child.wait(timeout=30)
                for stream in (child.stdout, child.stderr):
                    if stream is not None:
                        stream.close()
            with MemoryManager(root, durability="flush") as fresh:
                check_recall(fresh)
            check_recall(long_lived)
            assert time.monotonic() - started < 120, f"too slow: {round_ + 1} rounds"
