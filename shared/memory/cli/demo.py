"""``hrm-memory demo``: a short tour of the API on a real store."""

from __future__ import annotations

import time
from typing import TextIO

from hrm_memory.manager import MemoryManager


def run_demo(mm: MemoryManager, out: TextIO) -> None:
    def say(text: str = "") -> None:
        print(text, file=out)

    say(f"hrm-memory demo on {mm.root} (durability={mm.durability})")
    say()
    say("1. write: every HRM writes its own namespaces (warm tier: on disk, fsynced)")
    for code, score in [("timeboxing", 0.9), ("exit_criteria", 0.8), ("risk_id", 0.6)]:
        trace_id = mm.write("altitude.patterns", code, {"s": score})
        say(f"   altitude.patterns/{code} = {{'s': {score}}}   trace {trace_id[:8]}...")
    mm.write("shared.north_stars", "current", ["tech_products", "family_present", "fin_indep"])
    mm.write("shared.people", "gaurav", {"r": "wk", "t": ["q1_planning"]})
    say("   shared.north_stars/current and shared.people/gaurav written")
    say()
    say("2. read, and read with a default")
    say(f"   read altitude.patterns/timeboxing -> {mm.read('altitude.patterns', 'timeboxing')}")
    say(f"   read altitude.patterns/nope (default {{}}) -> {mm.read('altitude.patterns', 'nope', default={})}")
    say()
    say("3. query: namespace and key globs, a field filter, a limit")
    for r in mm.query("altitude.*", "*i*"):
        say(f"   {r.namespace}/{r.key} v{r.version} {r.value}")
    strong = mm.query("altitude.patterns", where={"s": 0.9})
    say(f"   where s == 0.9 -> {[r.key for r in strong]}")
    say()
    say("4. update: atomic read-modify-write (hot tier: this process only)")
    for _ in range(3):
        n = mm.update("focus.fast", "turns", lambda v: (v or 0) + 1)
    turns = mm.get_record("focus.fast", "turns")
    say(f"   focus.fast/turns -> {n} (record persisted: {turns.persisted if turns else None})")
    say()
    say("5. scope: an HRM may write only its own namespaces")
    focus = mm.scope("focus")
    try:
        focus.write("altitude.patterns", "timeboxing", {"s": 0})
    except PermissionError as exc:
        say(f"   scope('focus').write('altitude.patterns', ...) -> {type(exc).__name__}: {exc}")
    say(f"   scope('focus').read('shared.people', 'gaurav') -> {focus.read('shared.people', 'gaurav')}")
    say()
    say("6. archive: warm records past their TTL move to the cold tier, still readable")
    mm.write("focus.gates", "framing-1", {"gate": "framing", "to": "execution"})
    moved = mm.archive(now=time.time() + 31 * 86400)
    rec = mm.get_record("focus.gates", "framing-1")
    say(f"   archive (31 days later) -> {moved}")
    say(f"   read focus.gates/framing-1 -> {rec.value if rec else None} (tier: {rec.tier if rec else None})")
    say(f"   query focus.gates -> {len(mm.query('focus.gates'))} warm, "
        f"{len(mm.query('focus.gates', include_cold=True))} with include_cold=True")
    say()
    say("7. delete and check")
    say(f"   delete altitude.patterns/risk_id -> {mm.delete('altitude.patterns', 'risk_id')}")
    findings = mm.check()
    say(f"   check() -> {findings if findings else 'no findings: the store is sound'}")
