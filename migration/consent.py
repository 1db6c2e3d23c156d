"""Carrying the legacy consent decisions over at ``apply`` (docs/migration.md,
"Consent"): the legacy ``consent.json`` flags become ``mm.consent`` grants or
revokes, each its own op (and span), listed in the report."""

from __future__ import annotations

from typing import Any

from hrm_memory import MemoryManager

from .inventory import Inventory
from .report import Report

#: The legacy consent.json flags and the ``mm.consent`` category each one
#: decides (the same mapping as locked_system.memory.consent.CATEGORIES).
CONSENT_FLAGS: dict[str, str] = {
    "conversation_history": "conversation",
    "interaction_signals": "signals",
    "learned_preferences": "preferences",
}
#: What the legacy ConsentPreferences assumes for a flag missing from the file.
CONSENT_DEFAULTS: dict[str, bool] = {"conversation_history": True, "interaction_signals": True, "learned_preferences": False}
CONSENT_NAMESPACE = "focus.consent"


def legacy_consent(report: Report, inv: Inventory) -> list[tuple[str, str, bool]] | None:
    """(flag, category, granted) per flag of the legacy consent.json; None
    when the tree has none (or it is not an object). A flag missing from the
    file counts as the legacy default; one that is not true/false is left out."""
    f = next((f for f in inv.files if f.kind == "consent"), None)
    if f is None:
        return None
    value = f.extra.get("consent")
    if not isinstance(value, dict) or "error" in value and "raw" in value:
        report.warnings.append(f"{f.rel}: not a consent object; no consent decision carried over")
        return None
    out = []
    for flag, category in CONSENT_FLAGS.items():
        wanted = value.get(flag, CONSENT_DEFAULTS[flag])
        if type(wanted) is not bool:
            report.warnings.append(f"{f.rel}: {flag} is {wanted!r}, not true or false; consent {category!r} left as it is")
            continue
        out.append((flag, category, wanted))
    return out


def consent_changes(mm: MemoryManager, legacy: list[tuple[str, str, bool]], run: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What apply does with each legacy flag.

    - The store has no decision for the category: the legacy one is taken
      (``granted`` / ``revoked``).
    - The store agrees: ``unchanged``.
    - The store disagrees and its decision is the one an earlier apply
      carried over (same record version): the legacy file changed since, and
      its decision is taken.
    - The store disagrees and its decision was taken in the store (by the
      user, an adapter, ...): ``kept``; a migration never overrides it.
    A revoke here never purges: imported data stays imported."""
    made = (run or {}).get("consent") or {}
    out = []
    for flag, category, wanted in legacy:
        rec = mm.get_record(CONSENT_NAMESPACE, category)
        granted = rec.value.get("granted") if rec is not None and isinstance(rec.value, dict) else None
        before = granted if type(granted) is bool else None
        ours = made.get(category)
        by_apply = rec is not None and isinstance(ours, dict) and ours.get("version") == rec.version
        if before is wanted:
            action = "unchanged"
        elif before is None or by_apply:
            action = "granted" if wanted else "revoked"
        else:
            action = "kept"
        out.append({"category": category, "flag": flag, "legacy": wanted, "before": before,
                    "after": before if action == "kept" else wanted, "action": action, "by_apply": by_apply})
    return out


def carry_consent(report: Report, mm: MemoryManager, changes: list[dict[str, Any]], run: dict[str, Any] | None) -> dict[str, Any]:
    """Apply ``changes``; record them in the report. Returns the decisions
    this migration is answerable for (kept in the run marker)."""
    made: dict[str, Any] = {}
    for c in changes:
        category, action = c.pop("category"), c["action"]
        by_apply = c.pop("by_apply")
        if action == "granted":
            mm.consent.grant(category)
        elif action == "revoked":
            mm.consent.revoke(category)  # no purge: what was imported stays
        elif action == "kept":
            state = {True: "granted", False: "denied"}
            report.warnings.append(
                f"consent {category!r}: the legacy consent.json says {c['flag']}={str(c['legacy']).lower()} but the store's own "
                f"decision is {state[bool(c['before'])]}; kept (mm.consent.grant/revoke changes it)"
            )
        rec = mm.get_record(CONSENT_NAMESPACE, category)
        if rec is not None and (action in ("granted", "revoked") or (action == "unchanged" and by_apply)):
            made[category] = {"granted": c["legacy"], "flag": c["flag"], "version": rec.version}
        report.consent.append({"category": category, **c})
    return made


# -- export (and the bytes verify compares) -------------------------------------------
