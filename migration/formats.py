"""Legacy file bytes <-> record values, and back to the same bytes.

A legacy file becomes one record value:

- JSON files: the parsed value, unchanged (floats keep their exact binary
  value, key order is kept).
- Text files (``.md`` notes, the libedit ``.chat_history``): ``{"raw": <the
  exact text>, ...parsed parts...}``. When the bytes are not valid UTF-8,
  ``raw`` holds a readable copy (U+FFFD for bad bytes) and ``raw_base64`` the
  exact bytes.

Each file also gets *format facts* (``fmt``), enough for :func:`render` to
write the value back as the bytes it came from. :func:`decode` checks that at
once: ``exact`` says whether ``render(stored value, fmt)`` reproduced the file.
When it did not (odd spacing, upper-case ``\\u`` escapes, duplicate keys,
NaN, lone surrogates, invalid JSON ...), the caller keeps the raw bytes as
well, so an export is exact whatever the reason.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from hrm_memory.core import values
from hrm_memory.core.errors import InvalidValue
from hrm_memory.core.spec import MAX_VALUE_BYTES

from .anomalies import Anomaly, Flags

TEXT_KINDS = {"notes": "markdown-notes", "chat_history": "libedit-history"}
HISTORY_HEADER = "_HiStOrY_V2_"


@dataclass
class Decoded:
    """One legacy file, decoded: the record value, its format facts, whether
    rendering the stored value gives the file back byte for byte, and what
    looked odd on the way."""

    value: Any
    fmt: dict[str, Any]
    exact: bool
    anomalies: list[Anomaly] = field(default_factory=list)


def stored_form(value: Any) -> Any:
    """``value`` as the store hands it back (encoded and decoded once)."""
    return orjson.loads(values.encode(value, limit=MAX_VALUE_BYTES))


def decode(kind: str | None, data: bytes) -> Decoded:
    """Decode the bytes of one legacy file of ``kind`` (a layout kind; None
    for a file the layout does not know, which is kept as raw bytes only)."""
    if kind is None:
        return Decoded(None, {"type": "raw"}, False, [Anomaly("unmapped-file", 1, "no layout rule; kept as raw bytes")])
    if kind in TEXT_KINDS:
        return _decode_text(TEXT_KINDS[kind], data)
    return _decode_json(data)


def decode_value(kind: str | None, data: bytes) -> Any:
    """``decode(kind, data).value`` without the format search (for a file
    read again after a scan that already has the format facts)."""
    if kind is None:
        return None
    if kind in TEXT_KINDS:
        return _decode_text(TEXT_KINDS[kind], data).value
    return _decode_json(data, find_format=False).value


def render(value: Any, fmt: dict[str, Any]) -> bytes:
    """The file bytes for a record value written in the format ``fmt``."""
    kind = fmt["type"]
    if kind == "json":
        text = json.dumps(
            value,
            indent=fmt["indent"],
            ensure_ascii=fmt["ensure_ascii"],
            separators=tuple(fmt["separators"]) if fmt.get("separators") else None,
        )
        return (text + ("\n" if fmt["newline"] else "")).encode("utf-8")
    if kind == "text":
        raw, b64 = (value.get("raw"), value.get("raw_base64")) if isinstance(value, dict) else (None, None)
        if isinstance(b64, str):
            return base64.b64decode(b64)
        if isinstance(raw, str):
            return raw.encode("utf-8")
        raise ValueError("a text record needs a 'raw' string (or 'raw_base64')")
    raise ValueError(f"no renderer for format {kind!r}")


# -- JSON --------------------------------------------------------------------------

_INDENTS: tuple[int | str | None, ...] = (2, 4, "\t", None)
_SEPARATORS: tuple[tuple[str, str] | None, ...] = (None, (",", ":"))


def _json_fmt(indent: int | str | None, ensure_ascii: bool, separators: tuple[str, str] | None, newline: bool) -> dict[str, Any]:
    return {
        "type": "json",
        "indent": indent,
        "ensure_ascii": ensure_ascii,
        "separators": list(separators) if separators else None,
        "newline": newline,
    }


def _decode_json(data: bytes, find_format: bool = True) -> Decoded:
    flags = Flags()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        flags.add("invalid-utf8", f"not UTF-8 at byte {exc.start}; parsed a U+FFFD copy")
        text = data.decode("utf-8", "replace")
    try:
        parsed = json.loads(text, object_pairs_hook=_pairs_hook(flags))
    except json.JSONDecodeError as exc:
        flags.add("invalid-json", f"{exc.msg} at line {exc.lineno} column {exc.colno}; stored as {{raw, error}}")
        return _unparsed(text, f"invalid JSON: {exc}", flags)
    value = _sanitize(parsed, "$", flags)
    if data.endswith(b"\n"):
        flags.add("trailing-newline", "the file ends with a newline (the legacy writers add none)", "end of file")
    try:
        stored = stored_form(value)
    except InvalidValue as exc:  # nested too deep, for instance
        flags.add("unstorable", f"the parsed value cannot be stored ({exc}); stored as {{raw, error}}")
        return _unparsed(text, f"unstorable JSON: {exc}", flags)
    if not find_format:
        return Decoded(value, {"type": "json"}, False, flags.items)
    fmt = _find_json_format(stored, data)
    exact = fmt is not None
    if fmt is None:
        fmt = _json_fmt(2 if b"\n  " in data else None, b"\\u" in data, None, data.endswith(b"\n"))
        flags.add("raw-fallback", "the value alone does not give the file back; raw bytes kept")
    return Decoded(value, fmt, exact, flags.items)


def _unparsed(text: str, error: str, flags: Flags) -> Decoded:
    """A JSON file kept as text: ``{"raw", "error"}`` (the bytes go to the manifest)."""
    flags.add("raw-fallback", "the value alone does not give the file back; raw bytes kept")
    return Decoded({"raw": text, "error": error}, _json_fmt(2, True, None, False), False, flags.items)


def _find_json_format(stored: Any, data: bytes) -> dict[str, Any] | None:
    newline = data.endswith(b"\n")
    for indent, ensure_ascii, seps in itertools.product(_INDENTS, (True, False), _SEPARATORS):
        if seps is not None and indent is not None:
            continue  # compact separators only occur without indentation in practice
        fmt = _json_fmt(indent, ensure_ascii, seps, newline)
        if render(stored, fmt) == data:
            return fmt
    return None


def _pairs_hook(flags: Flags) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                flags.add("duplicate-key", f"key {k!r} appears twice; the parser keeps the last")
            out[k] = v
        return out

    return hook


def _sanitize(value: Any, path: str, flags: Flags) -> Any:
    """``value`` with what the store cannot hold replaced (the raw bytes keep
    the original): lone surrogates -> U+FFFD, NaN/Infinity -> their name as a
    string, integers beyond 64 bits -> decimal strings."""
    t = type(value)
    if t is str:
        return _clean_str(value, path, flags)
    if t is float and not math.isfinite(value):
        flags.add("non-finite-number", f"{value!r} is not JSON; stored as a string at {path}", path)
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if t is int and not -(2**63) <= value < 2**64:
        flags.add("big-integer", f"integer beyond 64 bits stored as a string at {path}", path)
        return str(value)
    if t is list:
        return [_sanitize(v, f"{path}[{i}]", flags) for i, v in enumerate(value)]
    if t is dict:
        return {_clean_str(k, path, flags): _sanitize(v, f"{path}.{k}", flags) for k, v in value.items()}
    return value


def _clean_str(s: str, path: str, flags: Flags) -> str:
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        flags.add("lone-surrogate", f"unpaired \\ud8xx-\\udfxx escape at {path}; stored as U+FFFD", path)
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)


# -- text files ---------------------------------------------------------------------


def _decode_text(syntax: str, data: bytes) -> Decoded:
    flags = Flags()
    try:
        text = data.decode("utf-8")
        value: dict[str, Any] = {"raw": text}
    except UnicodeDecodeError as exc:
        flags.add("invalid-utf8", f"not UTF-8 at byte {exc.start}; raw_base64 holds the bytes")
        text = data.decode("utf-8", "replace")
        value = {"raw": text, "raw_base64": base64.b64encode(data).decode("ascii")}
    value.update(parse_history(text, flags) if syntax == "libedit-history" else parse_notes(text, flags))
    fmt = {"type": "text", "syntax": syntax}
    return Decoded(value, fmt, render(stored_form(value), fmt) == data, flags.items)


# libedit history (strvis/strunvis): \ooo octal, \\ , C-style, \M-x meta, \^x control.
_VIS = re.compile(r"\\(?:([0-7]{1,3})|M-(.)|M\^(.)|\^(.)|(.)|$)", re.S)
_CSTYLE = {"\\": b"\\", "n": b"\n", "t": b"\t", "r": b"\r", "b": b"\b", "a": b"\a", "v": b"\v",
           "f": b"\f", "s": b" ", "E": b"\x1b", "0": b"\0", "$": b""}
_PASTE_MARKER = re.compile(r"\x1b\[20[01]~|(?<![0-9])0[01]~")


def unvis(line: str, flags: Flags | None = None) -> str:
    """Decode one libedit history line (``\\040`` is a space, ``\\\\`` a
    backslash, ``\\ooo`` any byte); unknown escapes stay as written."""
    out = bytearray()
    pos = 0
    for m in _VIS.finditer(line):
        out += line[pos : m.start()].encode("utf-8", "surrogatepass")
        octal, meta, meta_ctl, ctl, other = m.groups()
        if octal is not None:
            out.append(int(octal, 8) & 0xFF)
        elif meta is not None:
            out += bytes([(ord(meta) & 0xFF) | 0x80])
        elif meta_ctl is not None:
            out += bytes([(0x7F if meta_ctl == "?" else ord(meta_ctl) & 0x1F) | 0x80])
        elif ctl is not None:
            out += bytes([0x7F if ctl == "?" else ord(ctl) & 0x1F])
        elif other is not None and other in _CSTYLE:
            out += _CSTYLE[other]
        else:
            if flags is not None:
                flags.add("unknown-escape", f"unknown escape {m.group(0)!r} kept as written")
            out += m.group(0).encode("utf-8", "surrogatepass")
        if flags is not None:
            flags.add("libedit-escape", "libedit escapes decoded in entries (raw keeps them)", m.group(0))
        pos = m.end()
    out += line[pos:].encode("utf-8", "surrogatepass")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        if flags is not None:
            flags.add("invalid-utf8", "an entry decodes to bytes that are not UTF-8; U+FFFD in entries (raw is exact)")
        return out.decode("utf-8", "replace")


def parse_history(text: str, flags: Flags) -> dict[str, Any]:
    """``{"header", "entries"}`` of a libedit history file; one entry per line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    elif text:
        flags.add("no-final-newline", "the last line has no newline")
    header = lines[0] if lines and lines[0] == HISTORY_HEADER else None
    if header is None:
        flags.add("missing-history-header", f"first line is not {HISTORY_HEADER}; every line is an entry")
    entries = [unvis(line, flags) for line in lines[1 if header else 0 :]]
    for i, entry in enumerate(entries):
        if _PASTE_MARKER.search(entry):
            flags.add("bracketed-paste", f"leftover bracketed-paste marker in entry {i}", f"entries[{i}]")
        if any(ord(c) > 0x7E for c in entry):
            flags.add("non-ascii", f"entry {i} holds non-ASCII text", f"entries[{i}]")
    dupes = len(entries) - len(set(entries))
    if dupes:
        flags.add("duplicate-entries", f"{len(entries)} entries, {len(set(entries))} distinct", count=dupes)
    return {"header": header, "entries": entries}


_ENTRY_SPLIT = re.compile(r"\n## (?=\d{4}-\d{2}-\d{2} \d{2}:\d{2}(?:\n|$))")
_SENTENCE_END = re.compile(r"[.!?:;)\]}\"'`*>~]\s*$")


def parse_notes(text: str, flags: Flags) -> dict[str, Any]:
    """``{"title", "entries": [{"heading", "body"}]}`` of a NoteCapture file.
    An entry starts at ``\\n## YYYY-MM-DD HH:MM``; a ``## `` line of any other
    shape stays inside the body it is part of."""
    preamble, *parts = _ENTRY_SPLIT.split(text)
    title = preamble.split("\n", 1)[0][2:] if preamble.startswith("# ") else None
    entries = []
    for part in parts:
        heading, _, body = part.partition("\n")
        entries.append({"heading": heading, "body": body[:-1] if body.endswith("\n") else body})
    headings = [e["heading"] for e in entries]
    for h in sorted({h for h in headings if headings.count(h) > 1}):
        flags.add("duplicate-heading", f"heading '## {h}' appears {headings.count(h)} times", h, headings.count(h) - 1)
    last = entries[-1]["body"] if entries else ""
    if entries and "\n" not in last.strip() and not _SENTENCE_END.search(last):
        flags.add("truncated-entry", f"last entry looks cut off: {last[-40:]!r}", entries[-1]["heading"])
    return {"title": title, "entries": entries}


__all__ = ["Decoded", "HISTORY_HEADER", "TEXT_KINDS", "decode", "decode_value", "parse_history", "parse_notes", "render", "stored_form", "unvis"]
