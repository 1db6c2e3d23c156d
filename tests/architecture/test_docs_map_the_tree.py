"""The docs' map of the repository is the repository: the README's layout
table names every package folder (or its row names the sub-folder), its
sentence on where tests live names every folder under ``tests/``, and every
source file the docs cite, and every folder the README and
docs/architecture.md cite, is in the tree."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
SOURCE_ROOTS = ("shared/memory", "storage", "namespaces", "adapters", "migration")


def _layout_rows() -> dict[str, str]:
    """The layout table's rows: folder -> the row's text."""
    rows = {}
    for line in README.splitlines():
        m = re.match(r"\| `([\w/]+)/` \| `hrm_memory[\w.]*` \|", line)
        if m:
            rows[m.group(1)] = line
    return rows


def _package_folders() -> list[str]:
    found = []
    for root in SOURCE_ROOTS:
        for init in (REPO / root).rglob("__init__.py"):
            found.append(init.parent.relative_to(REPO).as_posix())
    return sorted(found)


def test_every_row_of_the_layout_table_is_a_package_folder() -> None:
    rows = _layout_rows()
    assert len(rows) >= 10
    for folder in rows:
        assert (REPO / folder / "__init__.py").is_file(), folder


def test_every_package_folder_is_in_the_layout_table() -> None:
    """A folder is listed, or the row of the nearest listed folder above it
    names its first step down (``warm/`` in the row of ``storage/file/``)."""
    rows = _layout_rows()
    missing = []
    for folder in _package_folders():
        if folder in rows:
            continue
        parent = folder
        while parent not in rows:
            parent = parent.rpartition("/")[0]
            assert parent, f"{folder}: no listed folder above it"
        step = folder[len(parent) + 1 :].split("/")[0]
        if f"`{step}/`" not in rows[parent]:
            missing.append(folder)
    assert not missing, missing


def test_the_readme_names_every_test_folder() -> None:
    start = README.index("Tests are filed by")
    sentence = README[start : README.index("\n\n", start)]
    sentence = " ".join(sentence.split())
    folders = sorted(p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert len(folders) >= 15
    unnamed = [name for name in folders if not re.search(rf"[(\s`/]{name}[\s,:)/`]", sentence)]
    assert not unnamed, unnamed


#: Files of other projects a doc cites by their own paths (LangGraph's store
#: suites, run against our store).
ELSEWHERE = {"docs/langgraph.md": {"tests/test_store.py", "test_async_store.py", "test_ttl.py"}}
#: Docs whose folder names are the repository's (the others also name the
#: folders a store keeps on disk: ``events/``, ``quarantine/``).
MAPS = ("README.md", "docs/architecture.md")


def _tracked() -> tuple[list[str], set[str]]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    folders = {parent.as_posix() for f in files for parent in Path(f).parents if parent.as_posix() != "."}
    return files, folders


def _cited(text: str) -> set[str]:
    """Relative paths written in backticks: ``core/state.py``, ``storage/file/``."""
    return {m.group(1) for m in re.finditer(r"`([\w][\w./-]*(?:\.py|/))`", text) if "//" not in m.group(1)}


def test_every_cited_source_file_and_folder_is_in_the_tree() -> None:
    """A path may be written from any folder down (``warm/files.py`` inside
    ``storage/file/``): it names something when a tracked path ends with it."""
    files, folders = _tracked()
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    missing = []
    for doc in docs:
        rel = doc.relative_to(REPO).as_posix()
        for path in _cited(doc.read_text()) - ELSEWHERE.get(rel, set()):
            if path.endswith(".py"):
                found = any(f == path or f.endswith("/" + path) for f in files)
            elif rel in MAPS:
                found = any(d == path[:-1] or d.endswith("/" + path[:-1]) for d in folders)
            else:
                continue
            if not found:
                missing.append(f"{rel}: {path}")
    assert len(docs) >= 10
    assert not missing, missing
