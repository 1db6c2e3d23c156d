"""``the_assist.core.integrity``: boot/shutdown bookkeeping (storage parts).

Records: ``("altitude.integrity", "integrity" | "preflight_log" | "version_log")``
and one ``("altitude.checkpoints", <UTC %Y-%m-%dT%H-%M-%SZ>)`` per boot.
Every timestamp here is UTC with a literal ``Z``, as in legacy.

The preflight checks the memory records, not a code tree: ``verified_dirs``
and ``verified_files`` are empty (there are no legacy source files to verify).
A damaged record fails it; a missing one is reported as "missing" only (the
curator and proactive stores are not adapted, so they exist only if migrated).
The state hash is the legacy one: MD5 of the concatenated hex MD5 digests of
the compressed, curator and proactive state, each serialized as the legacy
writer did (``json.dumps(indent=2)``), so it equals the hash of the legacy
files for the same content.

The console helpers (``boot_or_warn``, ``shutdown_safe``,
``boot_or_warn_with_context``, ``get_boot_context``,
``get_boot_context_for_ai``) are not adapted.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hrm_memory import MISSING, CorruptRecord, MemoryManager

from hrm_memory.adapters._doc import Doc, create_unique, unique_order
from hrm_memory.adapters.runtime import get_manager

NAMESPACE = "altitude.integrity"
CHECKPOINTS = "altitude.checkpoints"

#: legacy file name (as in preflight's memory_status) -> record
MEMORY_RECORDS: dict[str, tuple[str, str]] = {
    "compressed/state.json": ("altitude.compressed", "state"),
    "curator/state.json": ("altitude.agents", "curator"),
    "proactive/state.json": ("altitude.agents", "proactive"),
}
UNCLEAN = "Previous session did not shut down cleanly"
CHANGED = "Memory state changed outside of session"


def _utc_now() -> str:
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat() + "Z"


def _doc(key: str, mm: MemoryManager | None = None) -> Doc:
    return Doc(mm or get_manager(), NAMESPACE, key)


def _default_integrity() -> dict[str, Any]:
    return {
        "session_count": 0,
        "last_boot": None,
        "last_shutdown": None,
        "last_hash": None,
        "clean_shutdown": True,
        "agents": {},
    }


def _memory_status(mm: MemoryManager) -> tuple[dict[str, str], dict[str, Any]]:
    """Per legacy file: "valid", "missing" or "corrupt: ..."; and the readable values."""
    status: dict[str, str] = {}
    found: dict[str, Any] = {}
    for name, (namespace, key) in MEMORY_RECORDS.items():
        try:
            value = mm.read(namespace, key, MISSING)
        except CorruptRecord as exc:
            status[name] = f"corrupt: {exc}"
            continue
        if value is MISSING:
            status[name] = "missing"
        else:
            status[name] = "valid"
            found[name] = value
    return status, found


def _state_hash(found: dict[str, Any]) -> str:
    digests = "".join(
        hashlib.md5(json.dumps(found[name], indent=2).encode()).hexdigest() for name in MEMORY_RECORDS if name in found
    )
    return hashlib.md5(digests.encode()).hexdigest()


def state_hash() -> str:
    """The legacy state hash of the current compressed, curator and proactive state."""
    return _state_hash(_memory_status(get_manager())[1])


def run_preflight(base_dir: Path | None = None) -> dict[str, Any]:
    """Check the memory records and the last shutdown; store and return the report."""
    mm = get_manager()
    status, found = _memory_status(mm)
    errors = [f"Memory file corrupt: {name}" for name, s in status.items() if s.startswith("corrupt")]
    warnings: list[str] = []
    integrity = _doc("integrity", mm).load(_default_integrity())
    if integrity.get("last_boot") and integrity.get("clean_shutdown") is False:
        warnings.append(UNCLEAN)
    if integrity.get("last_hash") and integrity["last_hash"] != _state_hash(found):
        warnings.append(CHANGED)
    report = {
        "timestamp": _utc_now(),
        "status": "failed" if errors else "warning" if warnings else "passed",
        "verified_dirs": [],
        "verified_files": [],
        "memory_status": status,
        "errors": errors,
        "warnings": warnings,
    }
    _doc("preflight_log", mm).save(report)
    return report


def _log_version(mm: MemoryManager, entry: dict[str, Any]) -> None:
    def fn(log: dict[str, Any]) -> dict[str, Any]:
        versions = log.setdefault("version_log", [])
        versions.append({"version": len(versions) + 1, **entry})
        log["last_updated"] = entry["timestamp"]
        return log

    _doc("version_log", mm).modify(fn, {"version_log": []})


def boot(agent_id: str = "orchestrator") -> tuple[bool, dict[str, Any]]:
    """Preflight; unless it failed: a checkpoint, a version-log entry, and the
    session counted in the integrity record."""
    preflight = run_preflight()
    if preflight["status"] == "failed":
        return False, preflight
    mm = get_manager()
    now = datetime.now(timezone.utc)
    timestamp = now.replace(tzinfo=None).isoformat() + "Z"
    digest = _state_hash(_memory_status(mm)[1])
    session = _doc("integrity", mm).load(_default_integrity()).get("session_count", 0) + 1
    checkpoint = {
        "timestamp": timestamp,
        "session": session,
        "agent": agent_id,
        "preflight_status": preflight["status"],
        "state_hash": digest,
        "verified_files": preflight["verified_files"],
        "warnings": preflight["warnings"],
    }
    key = create_unique(mm, CHECKPOINTS, now.strftime("%Y-%m-%dT%H-%M-%SZ"), checkpoint)
    _log_version(
        mm,
        {"timestamp": timestamp, "session": session, "agent": agent_id, "status": "boot", "checkpoint_file": key + ".json"},
    )

    def fn(integrity: dict[str, Any]) -> dict[str, Any]:
        integrity["session_count"] = session
        integrity["last_boot"] = timestamp
        integrity["clean_shutdown"] = False
        integrity["last_hash"] = digest
        integrity.setdefault("agents", {})[agent_id] = {"last_boot": timestamp, "status": "active"}
        return integrity

    _doc("integrity", mm).modify(fn, _default_integrity())
    return True, preflight


def shutdown(agent_id: str = "orchestrator", verify_writes: bool = True) -> tuple[bool, dict[str, Any]]:
    """Log the shutdown; clean unless ``verify_writes`` finds a damaged memory
    record. Returns (clean, {timestamp, session, clean, state_hash,
    memory_status})."""
    mm = get_manager()
    status, found = _memory_status(mm)
    clean = not verify_writes or not any(s.startswith("corrupt") for s in status.values())
    timestamp = _utc_now()
    digest = _state_hash(found)
    session = _doc("integrity", mm).load(_default_integrity()).get("session_count", 0)
    _log_version(
        mm, {"timestamp": timestamp, "session": session, "agent": agent_id, "status": "shutdown", "clean": clean}
    )

    def fn(integrity: dict[str, Any]) -> dict[str, Any]:
        integrity["last_shutdown"] = timestamp
        integrity["clean_shutdown"] = clean
        integrity["last_hash"] = digest
        agent = integrity.setdefault("agents", {}).setdefault(agent_id, {})
        agent["status"] = "stopped"
        agent["last_shutdown"] = timestamp
        return integrity

    _doc("integrity", mm).modify(fn, _default_integrity())
    return clean, {"timestamp": timestamp, "session": session, "clean": clean, "state_hash": digest, "memory_status": status}


def get_status() -> dict[str, Any]:
    """The integrity record (session count, last boot and shutdown, hash, agents)."""
    status: dict[str, Any] = _doc("integrity").load(_default_integrity())
    return status


def get_recent_checkpoints(n: int = 5) -> list[dict[str, Any]]:
    """The ``n`` newest checkpoints, newest first."""
    records = get_manager().query(CHECKPOINTS, include_cold=True)
    records.sort(key=lambda r: unique_order(r.key), reverse=True)
    return [r.value for r in records[:n]]


def _not_adapted(name: str) -> NotImplementedError:
    return NotImplementedError(
        f"integrity.{name} is a console helper; the adapter covers storage only "
        "(use boot(), shutdown(), run_preflight() and get_status())"
    )


def boot_or_warn(*args: Any, **kwargs: Any) -> Any:
    raise _not_adapted("boot_or_warn")


def shutdown_safe(*args: Any, **kwargs: Any) -> Any:
    raise _not_adapted("shutdown_safe")


def boot_or_warn_with_context(*args: Any, **kwargs: Any) -> Any:
    raise _not_adapted("boot_or_warn_with_context")


def get_boot_context(*args: Any, **kwargs: Any) -> Any:
    raise _not_adapted("get_boot_context")


def get_boot_context_for_ai(*args: Any, **kwargs: Any) -> Any:
    raise _not_adapted("get_boot_context_for_ai")


__all__ = [
    "boot",
    "get_recent_checkpoints",
    "get_status",
    "run_preflight",
    "shutdown",
    "state_hash",
]
