"""The shape of the installed package, checked on the wheel that ``pip install .`` installs.

- exactly one top-level import package, ``hrm_memory`` (plus the console script);
- its import graph has no circle, and no import from a lower layer to a higher
  one: core <- storage <- features (recall, context, history), namespaces <- manager
  <- adapters, migration <- CLI; storage imports the core and nothing else;
- no private name (``_x``) is imported from another folder of the repository;
- every error class is defined in ``hrm_memory.core.errors`` and exported;
- the core (``hrm_memory.core``) imports no feature subpackage (recall,
  context, integrations, cli) nor the composition root (manager);
- no class derives from a concrete class defined in another module of the
  package: features are composed, not inherited (protocols, errors,
  NamedTuples and enums are contracts, not implementations, and may be
  derived from; the legacy adapters reproduce the legacy class trees).

The graph is read from every ``import`` statement in the source (function-level
imports included: a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import enum
import importlib
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import hrm_memory

REPO = Path(__file__).resolve().parents[2]

#: Layer of each module, by longest matching prefix; a module may import its
#: own layer or lower ones only.
LAYERS: dict[str, int] = {
    "hrm_memory.core": 0,  # contracts, shared state, the pipeline, record and admin handlers
    "hrm_memory.tracing": 0,  # a span per operation: what the pipeline stands on
    "hrm_memory.storage": 1,  # backends: the core only (test_storage_imports_only_the_core)
    "hrm_memory.recall": 2,  # features on top of the core (the recall index's SQLite file is recall's)
    "hrm_memory.context": 2,
    "hrm_memory.history": 2,  # kept versions, as-of reads, forget, export/import
    "hrm_memory.namespaces": 2,
    "hrm_memory": 3,  # the façade re-exports the manager
    "hrm_memory.manager": 3,  # the composition root
    "hrm_memory.aio": 3,
    "hrm_memory.tracing.setup": 3,  # exporter set-ups (the JSONL file under a store's root)
    "hrm_memory.adapters": 4,
    "hrm_memory.integrations": 4,  # the LangGraph store and what comes next: public API only
    "hrm_memory.langgraph": 4,
    "hrm_memory.migration": 4,
    "hrm_memory.cli.token_report": 4,  # also counts the legacy files' tokens
    "hrm_memory.cli.textfmt": 0,  # plain-text tables and JSON (no imports), shared with the migration report
    "hrm_memory.cli": 5,
}
#: Feature subpackages: the core imports none of them.
FEATURES = ("hrm_memory.recall", "hrm_memory.context", "hrm_memory.history", "hrm_memory.integrations", "hrm_memory.cli")
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
    assert "hrm-memory = hrm_memory.cli.main:main" in wheel.read(entry_points).decode()


def test_no_import_goes_up_a_layer(modules: dict[str, ast.Module]) -> None:
    upward = [
        f"{src} (layer {layer(src)}) imports {dst} (layer {layer(dst)})"
        for src, targets in graph(modules).items()
        for dst in targets
        if layer(dst) > layer(src)
    ]
    assert upward == []


def test_the_architecture_page_states_these_layers() -> None:
    """docs/architecture.md's layer table names each prefix of LAYERS in the
    row of its layer, and nothing else: the page a maintainer reads is the
    rule this module checks."""
    page = (REPO / "docs" / "architecture.md").read_text()
    stated: dict[str, int] = {}
    for line in page.splitlines():
        row = re.match(r"\| (\d) \| (`hrm_memory[^|]*)\|", line)
        if row:
            for name in re.findall(r"`(hrm_memory[\w.]*)`", row.group(2)):
                assert name not in stated, f"{name} is in two rows"
                stated[name] = int(row.group(1))
    assert stated == LAYERS


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
        if name != "hrm_memory.core.errors"
        for node in ast.walk(tree)
        # a private class (``_Exists``) is a control-flow signal that never leaves its module
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
        and any(isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id == "MemoryStoreError") for b in node.bases)
    ]
    assert stray == []
    from hrm_memory.core import errors

    defined = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.MemoryStoreError)}
    assert defined <= set(hrm_memory.__all__)
    assert set(errors.__all__) == defined


def test_the_core_imports_no_feature(modules: dict[str, ast.Module]) -> None:
    known = set(modules)
    reached = [
        f"{name}:{line} imports {target}"
        for name, tree in modules.items()
        if name == "hrm_memory.core" or name.startswith("hrm_memory.core.")
        for target, _, line in imports(name, tree, known)
        if target.startswith((*FEATURES, "hrm_memory.manager", "hrm_memory.aio", "hrm_memory.storage"))
    ]
    assert reached == []


def test_storage_imports_only_the_core(modules: dict[str, ast.Module]) -> None:
    """Backends stand on the core's contracts alone: no feature, no manager,
    no namespace catalogue (derived data such as the recall index belongs to
    the feature that derives it)."""
    known = set(modules)
    reached = [
        f"{name}:{line} imports {target}"
        for name, tree in modules.items()
        if name == "hrm_memory.storage" or name.startswith("hrm_memory.storage.")
        for target, _, line in imports(name, tree, known)
        if target.startswith("hrm_memory") and not target.startswith(("hrm_memory.core", "hrm_memory.storage"))
    ]
    assert reached == []


def _contract(base: type) -> bool:
    """A base that is a contract rather than an implementation."""
    return (
        bool(getattr(base, "_is_protocol", False))
        or issubclass(base, BaseException)
        or (issubclass(base, tuple) and hasattr(base, "_fields"))
        or issubclass(base, enum.Enum)
    )


def test_no_class_inherits_from_another_module(modules: dict[str, ast.Module]) -> None:
    inherited = []
    for name in sorted(modules):
        if name.startswith("hrm_memory.adapters") or name == "hrm_memory.langgraph":
            continue
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if not isinstance(cls, type) or cls.__module__ != name:
                continue
            for base in cls.__bases__:
                home = base.__module__
                if home.startswith("hrm_memory") and home != name and not _contract(base):
                    inherited.append(f"{name}.{cls.__name__} derives from {home}.{base.__name__}")
    assert inherited == []


def test_the_rules_catch_a_mixin(tmp_path: Path) -> None:
    """The inheritance rule finds a class tower."""

    class Base:
        pass

    Base.__module__ = "hrm_memory.core.state"
    tower = type("Tower", (Base,), {"__module__": "hrm_memory.core.pipeline"})
    assert not _contract(Base) and tower.__bases__[0].__module__ != tower.__module__


def test_facade_all_is_sorted_and_importable() -> None:
    names = hrm_memory.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        assert getattr(hrm_memory, name) is not None
