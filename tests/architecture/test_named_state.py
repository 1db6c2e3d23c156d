"""Records are read by name where the code passes them around, and what every
record operation starts with is written once.

- The record handlers (``core/store.py``) look the namespace up and check the
  key in one function (``Records._spec_of``), not once per handler.
- The warm tier picks a key's bucket with ``bucket_of`` and brings the bucket
  up to date with ``BucketFiles.refresh``; the one copy of their common cases
  is ``WarmTier.get``'s, whose comment names the benchmark row that keeps it.
- No record field is read by its position (``e[4]``, ``stored[1]``) in the
  warm tier, the hot tier or the record handlers; decoded lines and other
  true sequences are unpacked into names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "shared" / "memory" / "core" / "store.py"
TIER = REPO / "storage" / "file" / "warm" / "tier.py"
#: Names these modules give true sequences, indexed by place: bytes and strings,
#: the first or last of a sorted list, and the first of the errors collected
#: while a write goes on (``unconfirmed``).
SEQUENCES = {"line", "name", "entries", "lost", "unconfirmed"}
RECORD_FILES = [STORE, REPO / "storage" / "hot.py", *sorted((REPO / "storage" / "file" / "warm").glob("*.py"))]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _calls(tree: ast.AST, name: str) -> int:
    """How many calls of a function or method named ``name`` there are in ``tree``."""
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ((isinstance(node.func, ast.Name) and node.func.id == name)
             or (isinstance(node.func, ast.Attribute) and node.func.attr == name))
    )


def test_the_record_preamble_is_one_function() -> None:
    """``_spec_of`` holds the preamble; ``_put`` and ``_stored`` call it. The
    one copy is the hot read's (``_get``), kept because calling ``_spec_of``
    there costs more than 5% of a hot read: its comment names the
    BENCHMARKS.md row that shows it."""
    tree = _tree(STORE)
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    for name, fn in functions.items():
        copies = _calls(fn, "isprintable")
        assert copies == (1 if name in ("_spec_of", "_get") else 0), name
    for handler in ("_put", "_stored"):
        assert _calls(functions[handler], "_spec_of") == 1, handler
    source = STORE.read_text()
    assert "row \"hot read, _spec_of called\"" in source
    bench = (REPO / "BENCHMARKS.md").read_text()
    section = bench[bench.index("## Named state: instructions per operation before and after"):]
    assert "hot read, _spec_of called" in section


def test_the_warm_read_holds_the_one_copy_of_the_bucket_look_up() -> None:
    """``WarmTier.get`` computes a key's bucket and checks its freshness
    itself (calling ``bucket_of`` and ``refresh`` there costs more than 5% of
    a warm read), the tier's other operations call them; the copy's comment
    names the BENCHMARKS.md row that shows what it saves."""
    tier_tree = _tree(TIER)
    assert _calls(tier_tree, "bucket_of") >= 3
    tier = next(n for n in ast.walk(tier_tree) if isinstance(n, ast.ClassDef) and n.name == "WarmTier")
    get = next(n for n in tier.body if isinstance(n, ast.FunctionDef) and n.name == "get")
    assert _calls(get, "bucket_of") == 0 and _calls(get, "_crc32") == 1 and _calls(get, "refresh") == 1
    row = "warm read, bucket_of and refresh called"
    assert f'row "{row}"' in " ".join(TIER.read_text().replace("#", " ").split())
    bench = (REPO / "BENCHMARKS.md").read_text()
    section = bench[bench.index("## Named state: instructions per operation before and after"):]
    assert row in section


@pytest.mark.parametrize("path", RECORD_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_record_field_is_read_by_position(path: Path) -> None:
    """A subscript by a number literal is allowed only on a true sequence:
    one of SEQUENCES or made from one (``line[8]``, ``entries[-1]``,
    ``name.split("-", 1)[0]``)."""
    found = []
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Subscript):
            continue
        index = node.slice
        if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
            index = index.operand
        if isinstance(index, ast.Constant) and type(index.value) is int:
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if not (isinstance(root, ast.Name) and root.id in SEQUENCES):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found
