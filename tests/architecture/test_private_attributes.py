"""No module reads or writes a private attribute of an object it does not own.

A name with one leading underscore (``_x``; dunders such as ``__init__`` are
protocol, not private) belongs to the object that holds it. What one
component must learn from another reaches it through a public method or a
listener the core offers (``Core.on_commit``, ``Core.on_purge``,
``Core.on_erase``, ...), never through the other's private state.

The rule, checked on the source of every module of the installed package
(found through the import system, so the editable install and the wheel
give the same list):

- ``self._x`` and ``cls._x`` are an object's own state (the names a method
  calls its instance and its class by);
- every other ``obj._x``, read, written or deleted, is a reach into another
  object's state and fails, whatever ``obj`` is: another component, an
  object the same function just made, a module (``module._NAME``) or a
  library's class. So does ``getattr``/``setattr``/``hasattr``/``delattr``
  with a literal private name;
- NamedTuple's ``_replace``, ``_asdict``, ``_fields``, ``_make`` and
  ``_field_defaults`` are public API despite the underscore.

The one exception (:data:`ALLOWED`): OpenTelemetry internals the tracing
package reads for its span fast path, guarded at start-up, all in one
module (``tracing/sdk_internals.py``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Underscore names that are public API (NamedTuple's).
PUBLIC = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
#: The names an object's own methods reach it by.
OWN = frozenset({"self", "cls"})
#: module -> the private names it may read of objects it does not own (None: any).
#: The one exception: the OpenTelemetry SDK internals of the tracing fast path.
ALLOWED: dict[str, frozenset[str] | None] = {
    "hrm_memory.tracing.sdk_internals": None,
}
#: Built-ins that name an attribute by a string.
BY_NAME = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in PUBLIC


def reaches(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """``(line, private name, source)`` of every reach into another object's private state."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in OWN:
                continue
            yield node.lineno, node.attr, ast.unparse(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in BY_NAME
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and private(node.args[1].value)
        ):
            target = node.args[0]
            if isinstance(target, ast.Name) and target.id in OWN:
                continue
            yield node.lineno, node.args[1].value, ast.unparse(node)


def installed_modules() -> dict[str, Path]:
    """Every module of the package, by name: the packages the project
    declares, each module found where the import system finds it."""
    with open(REPO / "pyproject.toml", "rb") as f:
        packages = tomllib.load(f)["tool"]["setuptools"]["packages"]
    found: dict[str, Path] = {}
    for name in packages:
        package = importlib.import_module(name)
        assert package.__file__ is not None
        found[name] = Path(package.__file__)
        for info in pkgutil.iter_modules(package.__path__, name + "."):
            if info.ispkg:
                continue
            spec = importlib.util.find_spec(info.name)
            assert spec is not None and spec.origin is not None, info.name
            found[info.name] = Path(spec.origin)
    return found


def violations(name: str, source: str) -> list[str]:
    allowed = ALLOWED.get(name, frozenset())
    return [
        f"{name}:{line} {text}"
        for line, attr, text in reaches(ast.parse(source))
        if allowed is not None and attr not in allowed
    ]


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    found = installed_modules()
    assert {"hrm_memory.core.state", "hrm_memory.storage.redis.upkeep", "hrm_memory.migration.engine"} <= set(found)
    return found


def test_no_module_reaches_into_another_objects_private_state(modules: dict[str, Path]) -> None:
    found = [v for name in sorted(modules) for v in violations(name, modules[name].read_text(encoding="utf-8"))]
    assert found == [], f"{len(found)} reaches into private state:\n" + "\n".join(found)


def test_every_exception_is_still_needed(modules: dict[str, Path]) -> None:
    """An allowed name no module reads any more leaves the list, so it stays the list of what is true."""
    for name, names in ALLOWED.items():
        if name not in modules:
            continue  # the tracing package moved it: its own module's entry covers it
        used = {attr for _, attr, _ in reaches(ast.parse(modules[name].read_text(encoding="utf-8")))}
        assert names is None or names <= used, f"{name} no longer reads {sorted(names - used)}"


@pytest.mark.parametrize(
    "source",
    [
        "def f(other):\n    return other._state\n",
        "def f(other):\n    other._state = 1\n",
        "def f(other):\n    del other._state\n",
        "def f():\n    made = Thing()\n    made._bind(1)\n",  # an object the function made is still another object
        "import mod\nmod._HIDDEN\n",
        "def f(self):\n    return self.core._epoch\n",  # a collaborator's private state, through self
        "def f(o):\n    return getattr(o, '_state', None)\n",
        "def f(o):\n    setattr(o, '_state', 1)\n",
        "def f(parser):\n    return parser._actions\n",
    ],
)
def test_the_rule_finds_a_reach(source: str) -> None:
    assert violations("hrm_memory.example", source) != []


@pytest.mark.parametrize(
    "source",
    [
        "class C:\n    def f(self):\n        self._state = 1\n        return self._state\n",
        "class C:\n    @classmethod\n    def f(cls):\n        return cls._table\n",
        "def f(row):\n    return row._replace(a=1), row._asdict(), row._fields\n",
        "def f(o):\n    return o.__class__, o.__dict__\n",
        "def f(self):\n    return getattr(self, '_state')\n",
    ],
)
def test_the_rule_leaves_own_state_and_public_names(source: str) -> None:
    assert violations("hrm_memory.example", source) == []
