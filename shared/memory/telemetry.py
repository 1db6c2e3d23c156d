"""Ready-made tracing set-ups for a user who has none, and the JSONL span file.

``setup_tracing("console" | "jsonl" | "otlp", ...)`` builds an SDK
``TracerProvider`` with a batch processor and the chosen exporter, and makes
it the global provider unless told otherwise. The JSONL file is what
``hrm-memory trace tail`` and ``trace show`` read: one span per line.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)

from .errors import Unsupported
from .storage.fsutil import FILE_MODE, NOFOLLOW, make_dirs

KINDS = ("console", "jsonl", "otlp")


def default_trace_file(root: Path) -> Path:
    env = os.environ.get("HRM_MEMORY_TRACE_FILE")
    return Path(env) if env else root / "traces" / "spans.jsonl"


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    start = span.start_time or 0
    end = span.end_time or start
    return {
        "name": span.name,
        "trace_id": format(ctx.trace_id, "032x") if ctx else None,
        "span_id": format(ctx.span_id, "016x") if ctx else None,
        "parent_span_id": format(span.parent.span_id, "016x") if span.parent else None,
        "start_ns": start,
        "end_ns": end,
        "duration_us": round((end - start) / 1000, 3),
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "service": (span.resource.attributes.get("service.name") if span.resource else None),
    }


class JsonlSpanExporter(SpanExporter):
    """Appends one JSON object per span to a file (mode 0600), one write per batch."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        make_dirs(self.path.parent, durable=False)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, FILE_MODE)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = b"".join(orjson.dumps(span_to_dict(s), default=str) + b"\n" for s in spans)
        with self._lock:
            if self._fd is None:
                return SpanExportResult.FAILURE
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError:
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def setup_tracing(
    kind: str,
    *,
    path: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    service_name: str = "hrm-memory",
    set_global: bool = True,
    out: TextIO | None = None,
) -> TracerProvider:
    """A provider exporting to the console, a JSONL file (``path``) or an
    OTLP/HTTP collector (``endpoint``, default the exporter's own default,
    ``http://localhost:4318/v1/traces``). OTLP needs the extra
    ``pip install 'hrm-memory[otlp]'``; without it :class:`Unsupported` is raised."""
    exporter: SpanExporter
    if kind == "console":
        exporter = ConsoleSpanExporter(out=out) if out is not None else ConsoleSpanExporter()
    elif kind == "jsonl":
        if path is None:
            raise Unsupported("setup_tracing('jsonl') needs path=")
        exporter = JsonlSpanExporter(path)
    elif kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
        except ImportError:
            raise Unsupported(
                "the OTLP exporter is not installed: pip install 'hrm-memory[otlp]' "
                "(opentelemetry-exporter-otlp-proto-http)"
            ) from None
        exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
    else:
        raise Unsupported(f"unknown tracing set-up {kind!r}; choose one of {KINDS}")
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    if set_global:
        trace.set_tracer_provider(provider)
    return provider


# -- reading the JSONL file --------------------------------------------------------


def read_spans(path: Path) -> list[dict[str, Any]]:
    spans = []
    with open(path, "rb") as f:
        for line in f:
            try:
                spans.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue  # a line still being written
    return spans


def format_span(span: dict[str, Any], indent: str = "") -> str:
    attrs = span.get("attributes") or {}
    target = attrs.get("db.collection.name") or ""
    key = attrs.get("hrm.memory.key")
    if key is not None:
        target = f"{target}/{key}"
    details = []
    for name, label in (
        ("hrm.memory.tier", "tier"),
        ("hrm.memory.hit", "hit"),
        ("hrm.memory.bytes", "bytes"),
        ("hrm.memory.version", "v"),
        ("db.response.returned_rows", "rows"),
        ("hrm.memory.persisted", "persisted"),
        ("error.type", "error"),
    ):
        if name in attrs:
            details.append(f"{label}={attrs[name]}")
    dur = span.get("duration_us", 0.0)
    dur_text = f"{dur / 1000:.2f} ms" if dur >= 1000 else f"{dur:.1f} us"
    status = "" if span.get("status") in (None, "UNSET", "OK") else f" [{span['status']}]"
    return f"{indent}{span['name']:<16} {target:<40} {dur_text:>10}  {' '.join(details)}{status}".rstrip()


def show_trace(spans: list[dict[str, Any]], trace_id: str) -> list[str]:
    """The spans of one trace as an indented tree, children under parents."""
    mine = [s for s in spans if s.get("trace_id") == trace_id]
    ids = {s["span_id"] for s in mine}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for s in mine:
        parent = s.get("parent_span_id")
        children.setdefault(parent if parent in ids else None, []).append(s)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda s: s["start_ns"]):
            lines.append(format_span(s, "  " * depth))
            walk(s["span_id"], depth + 1)

    walk(None, 0)
    return lines


def tail(path: Path, n: int, follow: bool, out: TextIO, poll: float = 0.2) -> Iterator[None]:
    """Print the last ``n`` spans, then (``follow``) new ones as they arrive.
    A generator so the caller decides when to stop (Ctrl-C in the CLI)."""
    spans = read_spans(path) if path.exists() else []
    for s in spans[-n:] if n else []:
        print(f"{s['trace_id'][:8]} {format_span(s)}", file=out)
    if not follow:
        return
    pos = path.stat().st_size if path.exists() else 0
    buf = b""
    while True:
        yield None
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < pos:
            pos = 0  # rotated or truncated
        if size > pos:
            with open(path, "rb") as f:
                f.seek(pos)
                buf += f.read(size - pos)
            pos = size
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    s = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                print(f"{s['trace_id'][:8]} {format_span(s)}", file=out, flush=True)
        time.sleep(poll)
