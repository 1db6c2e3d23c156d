"""The shape of the installed package, checked on the wheel that ``pip install .`` installs.

- exactly one top-level import package, ``hrm_memory`` (plus the console script);
- its import graph has no circle, and no import from a lower layer to a higher
  one: core <- storage, namespaces <- manager <- adapters, migration <- CLI;
- no private name (``_x``) is imported from another folder of the repository;
- every error class is defined in ``hrm_memory.errors`` and exported;
- no module is over 600 lines.

The graph is read from every ``import`` statement in the source (function-level
imports included: a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import hrm_memory

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 600

#: Layer of each module, by longest matching prefix; a module may import its
#: own layer or lower ones only.
LAYERS: dict[str, int] = {
    "hrm_memory": 2,  # the façade re-exports the manager
    "hrm_memory.errors": 0,
    "hrm_memory.records": 0,
    "hrm_memory.spec": 0,
    "hrm_memory.values": 0,
    "hrm_memory.codes": 0,
    "hrm_memory.schemas": 0,
    "hrm_memory.filters": 0,
    "hrm_memory.ops": 0,
    "hrm_memory.backend": 0,
    "hrm_memory.events": 0,
    "hrm_memory.tracing": 0,
    "hrm_memory.tracing_sdk": 0,
    "hrm_memory.tokens": 0,
    "hrm_memory.textfmt": 0,
    "hrm_memory.steps": 0,
    "hrm_memory.admin": 0,
    "hrm_memory.pipeline": 0,
    "hrm_memory.recall": 0,
    "hrm_memory.recall_text": 0,
    "hrm_memory.recall_purges": 0,  # issue 22: every recall index learns of purges
    "hrm_memory.search_index": 0,
    "hrm_memory.memories": 0,
    "hrm_memory.context": 0,
    "hrm_memory.context_fill": 0,
    "hrm_memory.embedders": 0,  # optional embedder (the embed extra), imported lazily
    "hrm_memory.storage": 1,
    "hrm_memory.storage.redis_backend": 1,  # issue 11: the Redis backend and its parts
    "hrm_memory.storage.redis_changes": 1,
    "hrm_memory.storage.redis_conn": 1,
    "hrm_memory.storage.redis_scripts": 1,
    "hrm_memory.storage.redis_upkeep": 1,
    "hrm_memory.namespaces": 1,
    "hrm_memory.manager": 2,
    "hrm_memory.aio": 2,
    "hrm_memory.telemetry": 2,
    "hrm_memory.span_file": 2,  # issue 22: the span file read with bounds
    "hrm_memory.token_report": 3,  # also counts the legacy files' tokens
    "hrm_memory.adapters": 3,
    "hrm_memory.langgraph": 3,  # the LangGraph store (optional dependency)
    "hrm_memory.langgraph_codec": 3,
    "hrm_memory.langgraph_ttl": 3,
    "hrm_memory.migration": 3,
    "hrm_memory.cli": 4,
    "hrm_memory.cli_trace": 4,
    "hrm_memory.cli_recall": 4,
    "hrm_memory.demo": 4,
}
#: Folder of the repository each subpackage comes from (the core is shared/memory).
FOLDERS = ("hrm_memory.storage", "hrm_memory.namespaces", "hrm_memory.adapters", "hrm_memory.migration")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("hrm_memory-*.whl")
    return zipfile.ZipFile(path)


@pytest.fixture(scope="module")
def modules(wheel: zipfile.ZipFile) -> dict[str, ast.Module]:
    found = {}
    for name in wheel.namelist():
        if name.endswith(".py"):
            parts = name[:-3].split("/")
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = ast.parse(wheel.read(name), name)
    return found


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{module} has no layer: add it to LAYERS"
    return LAYERS[best]


def folder(module: str) -> str:
    return next((f for f in FOLDERS if module == f or module.startswith(f + ".")), "hrm_memory")


def imports(name: str, tree: ast.Module, known: set[str]) -> Iterator[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import statement."""
    package = name if any(k.startswith(name + ".") for k in known) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:  # "from pkg import module"
                    yield sub, [], node.lineno
                else:
                    yield base, [alias.name], node.lineno


def graph(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    known = set(modules)
    return {
        name: {target for target, _, _ in imports(name, tree, known) if target in known and target != name}
        for name, tree in modules.items()
    }


def test_one_top_level_package(wheel: zipfile.ZipFile) -> None:
    tops = {n.split("/", 1)[0] for n in wheel.namelist() if ".dist-info/" not in n}
    assert tops == {"hrm_memory"}
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "hrm-memory = hrm_memory.cli:main" in wheel.read(entry_points).decode()


def test_no_import_goes_up_a_layer(modules: dict[str, ast.Module]) -> None:
    upward = [
        f"{src} (layer {layer(src)}) imports {dst} (layer {layer(dst)})"
        for src, targets in graph(modules).items()
        for dst in targets
        if layer(dst) > layer(src)
    ]
    assert upward == []


def test_no_import_circle(modules: dict[str, ast.Module]) -> None:
    edges = graph(modules)
    # Tarjan's strongly connected components: any component of two or more
    # modules is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert circles == []


def test_no_private_name_crosses_a_folder(modules: dict[str, ast.Module]) -> None:
    known = set(modules)
    crossing = []
    for name, tree in modules.items():
        for target, names, line in imports(name, tree, known):
            if not target.startswith("hrm_memory") or folder(target) == folder(name):
                continue
            private = [n for n in [*target.split("."), *names] if n.startswith("_") and not n.startswith("__")]
            if private:
                crossing.append(f"{name}:{line} imports {', '.join(private)} from {target}")
    assert crossing == []


def test_every_error_is_defined_in_errors_and_exported(modules: dict[str, ast.Module]) -> None:
    stray = [
        f"{name}: {node.name}"
        for name, tree in modules.items()
        if name != "hrm_memory.errors"
        for node in ast.walk(tree)
        # a private class (``_Exists``) is a control-flow signal that never leaves its module
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
        and any(isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id == "MemoryStoreError") for b in node.bases)
    ]
    assert stray == []
    from hrm_memory import errors

    defined = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.MemoryStoreError)}
    assert defined <= set(hrm_memory.__all__)
    assert set(errors.__all__) == defined


def test_no_module_over_the_limit(wheel: zipfile.ZipFile) -> None:
    long = {n: len(wheel.read(n).splitlines()) for n in wheel.namelist() if n.endswith(".py")}
    assert {n: c for n, c in long.items() if c > MAX_LINES} == {}


def test_facade_all_is_sorted_and_importable() -> None:
    names = hrm_memory.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        assert getattr(hrm_memory, name) is not None
