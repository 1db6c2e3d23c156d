"""Ready-made tracing set-ups for a user who has none, and the JSONL span file.

``setup_tracing("console" | "jsonl" | "otlp", ...)`` builds an SDK
``TracerProvider`` with a batch processor and the chosen exporter, and makes
it the global provider unless told otherwise. The JSONL file is what
``hrm-memory trace tail`` and ``trace show`` read: one span per line.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from contextlib import contextmanager
from urllib.parse import urlsplit
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

from hrm_memory.tracing import keys, span_file
from hrm_memory.core.errors import Unsupported
from hrm_memory.storage.fsutil import make_dirs

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
    """Appends one JSON object per span to a file (mode 0600), one write per
    batch, under the file's lock (:func:`hrm_memory.tracing.span_file.append`:
    a scrub that removes a forgotten key may replace the file meanwhile)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()
        make_dirs(self.path.parent, durable=False)
        self._fd: int | None = span_file.open_for_append(self.path)
        self._lock = threading.Lock()
        span_file.register(self)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = b"".join(orjson.dumps(span_to_dict(s), default=str) + b"\n" for s in spans)
        with self._lock:
            if self._fd is None:
                return SpanExportResult.FAILURE
            try:
                self._fd = span_file.append(self._fd, self.path, data)
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


#: Seconds an OTLP export waits for the collector to accept a connection;
#: with nothing listening, spans are dropped after it with one warning.
OTLP_CONNECT_TIMEOUT = 1.0
#: Seconds an OTLP export may take in all once connected (the exporter's retries included).
OTLP_EXPORT_TIMEOUT = 5.0
_log = logging.getLogger("hrm_memory.tracing")


def otlp_endpoint(endpoint: str | None = None) -> str:
    """The OTLP/HTTP traces URL: ``endpoint``, else
    ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``$OTEL_EXPORTER_OTLP_ENDPOINT``
    + ``/v1/traces``, else ``http://localhost:4318/v1/traces``."""
    if endpoint:
        return endpoint
    env = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if env:
        return env
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
    return base.rstrip("/") + "/v1/traces"


class ReachableOtlp(SpanExporter):
    """An OTLP exporter that first checks, in at most
    :data:`OTLP_CONNECT_TIMEOUT`, that something accepts connections at the
    endpoint: if nothing does, the batch is dropped with one warning (once per
    exporter), instead of the exporter's retries and a line per retry."""

    def __init__(self, inner: SpanExporter, url: str) -> None:
        self.inner = inner
        self.url = url
        parsed = urlsplit(url)
        self.host = parsed.hostname or "localhost"
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.warned = False

    def _reachable(self) -> bool:
        try:
            socket.create_connection((self.host, self.port), timeout=OTLP_CONNECT_TIMEOUT).close()
            return True
        except OSError:
            return False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self._reachable():
            if not self.warned:
                self.warned = True
                _log.warning(
                    "hrm-memory: no OTLP collector at %s (nothing accepted a connection within %.1f s): "
                    "spans dropped; start one (docs/tracing.md) or use --trace jsonl",
                    self.url, OTLP_CONNECT_TIMEOUT,
                )
            return SpanExportResult.FAILURE
        return self.inner.export(spans)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def setup_tracing(
    kind: str,
    *,
    path: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    service_name: str = "hrm-memory",
    set_global: bool = True,
    out: TextIO | None = None,
    capture_content: bool | None = None,
) -> TracerProvider:
    """A provider exporting to the console, a JSONL file (``path``: what
    ``hrm-memory trace tail/show`` read) or an OTLP/HTTP collector
    (``endpoint``, default :func:`otlp_endpoint`: ``$OTEL_EXPORTER_OTLP_ENDPOINT``
    or ``http://localhost:4318``), through a batch processor; made the
    global provider unless ``set_global=False``. With nothing listening at
    the OTLP endpoint, an export costs at most :data:`OTLP_CONNECT_TIMEOUT`
    and logs one warning. ``capture_content=True`` records the query text
    and the records found of searches that reach no consent-gated namespace
    (off by default; see :func:`hrm_memory.tracing.keys.capture_content`).
    OTLP needs the extra ``pip install 'hrm-memory[otlp]'``; without it
    :class:`Unsupported` is raised."""
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
        url = otlp_endpoint(endpoint)
        exporter = ReachableOtlp(OTLPSpanExporter(endpoint=url, timeout=OTLP_EXPORT_TIMEOUT), url)
    else:
        raise Unsupported(f"unknown tracing set-up {kind!r}; choose one of {KINDS}")
    if capture_content is not None:
        keys.capture_content(capture_content)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    if set_global:
        trace.set_tracer_provider(provider)
    return provider


@contextmanager
def command_span(provider: Any, command: str) -> Iterator[None]:
    """One root span for a unit of work (``hrm-memory put``: the CLI command),
    current while it runs, so that its operations' spans are its children:
    one trace per command. Nothing without a provider. A failure sets
    ``error.type`` (the exception's class), never its message."""
    if provider is None:
        yield
        return
    tracer = provider.get_tracer("hrm-memory")
    with tracer.start_as_current_span(
        f"hrm-memory {command}", kind=trace.SpanKind.INTERNAL, attributes={"hrm.memory.command": command},
        record_exception=False, set_status_on_exception=False,
    ) as span:  # fmt: skip
        try:
            yield
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__qualname__))
            raise


# -- reading the JSONL file --------------------------------------------------------

_TRACE_ID_HEX = frozenset("0123456789abcdef")


def _as_span(obj: Any) -> dict[str, Any] | None:
    """``obj`` as a span the viewer can show, or None if it is not one. The
    file is read as untrusted: a span needs string ``name``, ``trace_id`` and
    ``span_id``; any other field of the wrong type is replaced by its default."""
    if not isinstance(obj, dict):
        return None
    name, trace_id, span_id = obj.get("name"), obj.get("trace_id"), obj.get("span_id")
    if not (isinstance(name, str) and isinstance(trace_id, str) and trace_id and isinstance(span_id, str)):
        return None
    span = dict(obj)
    span["trace_id"] = trace_id.lower()
    parent = obj.get("parent_span_id")
    span["parent_span_id"] = parent if isinstance(parent, str) else None
    for field in ("start_ns", "end_ns"):
        value = obj.get(field)
        span[field] = value if type(value) is int else 0
    dur = obj.get("duration_us")
    span["duration_us"] = float(dur) if isinstance(dur, (int, float)) and not isinstance(dur, bool) else 0.0
    attrs = obj.get("attributes")
    span["attributes"] = attrs if isinstance(attrs, dict) else {}
    status = obj.get("status")
    span["status"] = status if isinstance(status, str) else None
    return span


def parse_span_line(line: bytes) -> dict[str, Any] | None:
    """One line of the span file as a span, or None (not JSON, not a span)."""
    try:
        return _as_span(orjson.loads(line))
    except orjson.JSONDecodeError:
        return None


def load_spans(path: Path, keep: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """The spans of a JSONL span file (the last ``keep`` only, if given), and
    how many complete lines were not spans (garbage, another program's
    output, a line over ``span_file.MAX_LINE``). A last line without its
    newline is one still being written: skipped, not counted. Read in
    bounded chunks; a file that is not a regular file is ``BadInput``."""
    return _load(path, keep)[:2]


def _load(path: Path, keep: int | None) -> tuple[list[dict[str, Any]], int, int]:
    """``load_spans``, and the offset after the last complete line."""
    spans: Any = deque(maxlen=keep) if keep is not None else []
    skipped = 0
    pos = 0
    fd = span_file.open_span_file(path)
    try:
        for line, pos in span_file.lines(fd):
            span = parse_span_line(line) if line is not span_file.OVERLONG else None
            if span is not None:
                spans.append(span)
            elif line.strip():
                skipped += 1
    finally:
        os.close(fd)
    return list(spans), skipped, pos


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans of a JSONL span file; lines that are not spans are skipped."""
    return load_spans(path)[0]


def trace_ids(spans: Sequence[dict[str, Any]]) -> list[str]:
    """The distinct trace ids of ``spans``, in order of first appearance."""
    return list(dict.fromkeys(s["trace_id"] for s in spans))


def match_trace_id(spans: Sequence[dict[str, Any]], prefix: str) -> list[str]:
    """The trace ids of ``spans`` that start with ``prefix`` (case-insensitive);
    a full id matches itself only. ``trace tail`` prints 8-character prefixes."""
    prefix = prefix.lower()
    return [t for t in trace_ids(spans) if t.startswith(prefix)]


def is_trace_id_prefix(text: str) -> bool:
    """True if ``text`` could start a trace id: 1 to 32 hexadecimal digits."""
    return 0 < len(text) <= 32 and set(text.lower()) <= _TRACE_ID_HEX


def format_span(span: dict[str, Any], indent: str = "") -> str:
    attrs = span.get("attributes")
    if not isinstance(attrs, dict):
        attrs = {}
    target = str(attrs.get("db.collection.name") or "")
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
    dur = span.get("duration_us")
    if not isinstance(dur, (int, float)) or isinstance(dur, bool):
        dur = 0.0
    dur_text = f"{dur / 1000:.2f} ms" if dur >= 1000 else f"{dur:.1f} us"
    status = span.get("status")
    status_text = "" if status in (None, "UNSET", "OK") else f" [{status}]"
    label = str(span.get("name"))
    op = attrs.get("db.operation.name")
    if isinstance(op, str) and op not in label:
        label = f"{label} {op}"  # search_memory read, search_memory query...
    return f"{indent}{label:<22} {target:<40} {dur_text:>10}  {' '.join(details)}{status_text}".rstrip()


def show_trace(spans: list[dict[str, Any]], trace_id: str) -> list[str]:
    """The spans of one trace as an indented tree, children under parents.
    Iterative, and every span is shown once: a file with parent cycles or
    very deep chains (damaged or hand-made) still prints, it does not recurse."""
    mine = [s for s in spans if s.get("trace_id") == trace_id]
    ids = {s.get("span_id") for s in mine}
    children: dict[Any, list[dict[str, Any]]] = {}
    for s in mine:
        parent = s.get("parent_span_id")
        is_root = parent not in ids or parent == s.get("span_id")
        children.setdefault(None if is_root else parent, []).append(s)

    def start(s: dict[str, Any]) -> int:
        value = s.get("start_ns")
        return value if type(value) is int else 0

    lines: list[str] = []
    shown: set[int] = set()
    seen_ids: set[Any] = set()
    roots = sorted(children.get(None, []), key=start)
    # Spans only reachable through a cycle have no root: show them at the top too.
    root_ids = {id(s) for s in roots}
    pending = [s for s in mine if id(s) not in root_ids]
    stack: list[tuple[dict[str, Any], int]] = [(s, 0) for s in reversed(roots)]
    while True:
        while stack:
            s, depth = stack.pop()
            if id(s) in shown:
                continue
            shown.add(id(s))
            lines.append(format_span(s, "  " * min(depth, 64)))
            sid = s.get("span_id")
            if sid in seen_ids:
                continue  # a duplicated span id: its children were listed once already
            seen_ids.add(sid)
            kids = sorted(children.get(sid, []), key=start)
            stack.extend((k, depth + 1) for k in reversed(kids))
        rest = [s for s in pending if id(s) not in shown]
        if not rest:
            break
        stack.append((min(rest, key=start), 0))
    return lines


def _tail_line(span: dict[str, Any]) -> str:
    return f"{span['trace_id'][:8]} {format_span(span)}"


def tail(path: Path, n: int, follow: bool, out: TextIO, poll: float = 0.2) -> Iterator[None]:
    """Print the last ``n`` spans, then (``follow``) new ones as they arrive.
    A generator so the caller decides when to stop (Ctrl-C in the CLI).
    Lines that are not spans are skipped. Reads in bounded chunks and keeps
    ``n`` spans at most (``span_file``)."""
    spans, _, pos = _load(path, max(n, 0)) if path.exists() else ([], 0, 0)
    for s in spans[-n:] if n > 0 else []:
        print(_tail_line(s), file=out)
    if not follow:
        return
    out.flush()
    while True:
        yield None
        try:
            fd = span_file.open_span_file(path)
        except FileNotFoundError:
            pos = 0
            time.sleep(poll)
            continue
        try:
            size = os.fstat(fd).st_size
            if size < pos:
                pos = 0  # rotated or truncated
            for line, pos in span_file.lines(fd, pos, size):
                span = parse_span_line(line) if line is not span_file.OVERLONG else None
                if span is not None:
                    print(_tail_line(span), file=out, flush=True)
        finally:
            os.close(fd)
        time.sleep(poll)
