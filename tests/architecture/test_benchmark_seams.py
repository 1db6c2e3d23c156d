"""Benchmarks use the public API or a seam docs/architecture.md names:
every module of the package a benchmark imports is one the README or a docs
page shows how to import, or is named in the row of that benchmark in the
page's table "Seams benchmarks use"; so is every test helper it borrows."""

from __future__ import annotations

import ast
import re
from importlib.util import find_spec
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _documented_imports() -> set[str]:
    """Modules the README and the docs import in their examples."""
    texts = [(REPO / "README.md").read_text(), *(p.read_text() for p in (REPO / "docs").glob("*.md"))]
    found: set[str] = set()
    for text in texts:
        found.update(re.findall(r"(?m)^\s*from (hrm_memory[\w.]*) import ", text))
        found.update(re.findall(r"(?m)^\s*import (hrm_memory[\w.]*)", text))
    return found


def _seam_rows() -> dict[str, str]:
    """benchmark file -> the text of its row(s) in the seams table."""
    page = (REPO / "docs" / "architecture.md").read_text()
    table = page.split("## Seams benchmarks use", 1)[1]
    rows: dict[str, str] = {}
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or not cells[1].strip().startswith("`"):
            continue
        for name in re.findall(r"`([\w.]+\.py)`", cells[1]):
            rows[name] = rows.get(name, "") + cells[2]
    return rows


def _imported_modules(path: Path) -> set[str]:
    """Package and test-helper modules the file imports (``from pkg import
    module`` counted as ``pkg.module`` when that module exists)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            for alias in node.names:
                parts = f"{node.module}.{alias.name}".split(".")
                if parts[0] == "hrm_memory" and _is_module(parts[1:]):
                    found.add(".".join(parts))
    return {m for m in found if m.startswith(("hrm_memory", "tests."))}


def _is_module(parts: list[str]) -> bool:
    try:
        return find_spec(".".join(["hrm_memory", *parts])) is not None
    except ModuleNotFoundError:
        return False


def test_every_internal_module_a_benchmark_imports_is_a_named_seam() -> None:
    public = _documented_imports()
    rows = _seam_rows()
    unnamed = []
    checked = 0
    for path in sorted((REPO / "benchmarks").glob("*.py")):
        for module in sorted(_imported_modules(path)):
            if module in public:
                continue
            checked += 1
            seam = module.removeprefix("hrm_memory.")
            if module.startswith("tests."):
                seam = module.rsplit(".", 1)[1] + ".py"
            row = rows.get(path.name, "")
            if seam not in row:
                unnamed.append(f"{path.name}: {module}")
    assert checked >= 15
    assert not unnamed, unnamed


def test_the_public_import_paths_are_found() -> None:
    public = _documented_imports()
    assert {"hrm_memory", "hrm_memory.langgraph", "hrm_memory.adapters"} <= public
