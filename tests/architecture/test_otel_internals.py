"""OpenTelemetry's private names are read in one module only.

``hrm_memory.tracing.sdk_internals`` reads what the API and SDK do not publish
(the global provider slot, the runtime context, the provider's processor
list, a finished span's fields), checks it once and falls back to the public
API. Every other module of the package uses OpenTelemetry's public API: no
``from opentelemetry... import _x``, and no ``obj._x`` where ``_x`` is a
private attribute of an OpenTelemetry module or object (``self._x`` of the
package's own classes aside).
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from pathlib import Path

import opentelemetry.context
import opentelemetry.trace
from opentelemetry.sdk.trace import ReadableSpan, SynchronousMultiSpanProcessor, TracerProvider

import hrm_memory

ALLOWED = "hrm_memory.tracing.sdk_internals"


def _private(names: list[str]) -> set[str]:
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def otel_private_names() -> set[str]:
    """Private names of the OpenTelemetry modules and objects the package touches."""
    provider = TracerProvider(shutdown_on_exit=False)
    try:
        tracer = provider.get_tracer("probe")
        span = tracer.start_span("probe")
        span.end()
        opentelemetry.context.get_current()  # some API versions make the runtime context on first use
        objects: list[object] = [
            vars(opentelemetry.context)["_RUNTIME_CONTEXT"],
            opentelemetry.trace,
            opentelemetry.context,
            provider,
            tracer,
            span,
            span.get_span_context(),
            SynchronousMultiSpanProcessor(),
            ReadableSpan(name="probe"),
        ]
        names: set[str] = set()
        for obj in objects:
            names |= _private(dir(obj))
            names |= _private(list(vars(obj))) if hasattr(obj, "__dict__") else set()
        return names
    finally:
        provider.shutdown()


def package_sources() -> dict[str, Path]:
    found = {}
    for info in pkgutil.walk_packages(hrm_memory.__path__, "hrm_memory."):
        spec = importlib.util.find_spec(info.name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            found[info.name] = Path(spec.origin)
    return found


def otel_private_uses(tree: ast.AST, private: set[str]) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opentelemetry"):
            found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.startswith("opentelemetry") and any(p.startswith("_") for p in a.name.split("."))]  # fmt: skip
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in private
        ):
            found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
        elif isinstance(node, ast.Attribute) and node.attr in private:
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_only_sdk_internals_reads_opentelemetry_private_names() -> None:
    private = otel_private_names()
    assert {"_TRACER_PROVIDER", "_active_span_processor", "_span_processors", "_name", "_context"} <= private
    sources = package_sources()
    assert ALLOWED in sources and "hrm_memory.tracing.spans" in sources and "hrm_memory.core.pipeline" in sources
    offenders = {}
    for name, path in sorted(sources.items()):
        if name == ALLOWED:
            continue
        uses = otel_private_uses(ast.parse(path.read_text(), str(path)), private)
        if uses:
            offenders[name] = uses
    assert offenders == {}


def test_the_rule_sees_each_kind_of_private_use() -> None:
    """The check above finds what it is there to find."""
    private = otel_private_names()
    code = (
        "from opentelemetry.context import _RUNTIME_CONTEXT\n"
        "import opentelemetry.trace as t\n"
        "x = t._TRACER_PROVIDER\n"
        "provider._active_span_processor._span_processors = ()\n"
        "span._name = 'n'\n"
        "self._name = 'mine'\n"
        "getattr(provider, '_active_span_processor', None)\n"
        "ctx = _RUNTIME_CONTEXT._current_context.get()\n"
    )
    uses = otel_private_uses(ast.parse(code), private)
    assert sorted(u.split(":")[0] for u in uses) == ["1", "3", "4", "4", "5", "7", "8"]
