"""The one definition of the "after" figures every command reports.

``tokens --legacy``, ``migrate plan``, ``migrate apply``, ``migrate verify``
(and export, rollback) report *stored bytes* and *tokens after* for a legacy
file. All of them mean the same thing, :data:`AFTER`: the record's value as
the store holds it, i.e. the namespace codec's compact form, serialized as
compact JSON by :func:`stored_json`. Plan and ``tokens --legacy`` have no
store, so they compute that form with :func:`would_store` from the value the
migration writes (:func:`record_value`); apply, verify, export and rollback
read it back from the store (``get_record(..., compact=True).value``). The
figures agree because it is the same value in the same encoding; a test
compares all four commands on the shipped legacy data.

What is not counted, in every command: the record's metadata (version,
timestamps, the ``imported`` flag) and the migration's own manifest (raw
copies, anomaly details), which are bookkeeping no reader is given.
"""

from __future__ import annotations

from typing import Any

import orjson
from hrm_memory.core.codes import Codec
from hrm_memory.core.errors import MemoryStoreError
from hrm_memory.core.spec import NamespaceSpec

from .formats import decode_value

#: What "stored bytes" and "tokens after" mean, said in every report.
AFTER = (
    "after = the record's value as stored: its namespace codec's compact form as compact JSON "
    "(record metadata and the migration manifest not counted)"
)


def stored_json(compact_value: Any) -> bytes:
    """The stored form's bytes: a value already in its compact form, as compact JSON."""
    return orjson.dumps(compact_value)


def codec_of(spec: NamespaceSpec | None) -> Codec | None:
    """The codec a store built from the seed codecs uses for ``spec`` (None:
    the value is stored as it is)."""
    if spec is None or not spec.codec:
        return None
    from hrm_memory import CodecRegistry
    from hrm_memory.namespaces import seed_codecs

    try:
        return CodecRegistry(seed_codecs()).for_spec(spec.codec)
    except (ImportError, MemoryStoreError):
        return None


def would_store(spec: NamespaceSpec | None, value: Any, codec: Codec | None = None) -> bytes:
    """What the store would hold for ``value`` written to ``spec``'s
    namespace (plan and ``tokens --legacy`` have no store to ask)."""
    codec = codec_of(spec) if codec is None else codec
    return stored_json(codec.compact(value) if codec is not None else value)


def record_value(kind: str | None, data: bytes) -> Any:
    """The value migrate writes for a legacy file of ``kind`` (None: no record)."""
    return decode_value(kind, data)


__all__ = ["AFTER", "codec_of", "record_value", "stored_json", "would_store"]
