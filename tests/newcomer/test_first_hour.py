"""A new user's first hour: each promise a new user meets, kept."""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path

import pytest

from hrm_memory import AsyncMemoryManager, MemoryManager
from hrm_memory.aio import AsyncConsent, AsyncScope
from hrm_memory.manager import Consent, Scope
from tests.helpers.legacy import DATA

#: Sync names whose async twin has another name, or that stay sync on both
#: (building a handle, handing out the pipeline's run, a property).
RENAMED = {"close": "aclose"}
SYNC_ON_BOTH = {"scope", "runner", "closed"}


def _public(cls: type) -> dict[str, inspect.Signature | None]:
    out: dict[str, inspect.Signature | None] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            out[name] = None
        elif callable(member) or isinstance(member, (staticmethod, classmethod)):
            out[name] = inspect.signature(getattr(cls, name))
    return out


@pytest.mark.parametrize(
    ("sync_cls", "async_cls"),
    [(MemoryManager, AsyncMemoryManager), (Scope, AsyncScope), (Consent, AsyncConsent)],
)
def test_every_public_sync_operation_has_an_async_twin(sync_cls: type, async_cls: type) -> None:
    sync, aio = _public(sync_cls), _public(async_cls)
    missing, differ = [], []
    for name, sig in sync.items():
        twin = RENAMED.get(name, name)
        if twin not in aio:
            missing.append(name)
            continue
        if name in SYNC_ON_BOTH or sig is None:
            continue
        assert inspect.iscoroutinefunction(getattr(async_cls, twin)), f"{async_cls.__name__}.{twin} is not a coroutine"
        theirs = aio[twin]
        assert theirs is not None
        mine, its = list(sig.parameters.values()), list(theirs.parameters.values())
        # The same parameters; an async twin may make a required one optional
        # (subscribe's callback: without one, the subscription is iterated).
        if [(p.name, p.kind) for p in mine] != [(p.name, p.kind) for p in its] or any(
            a.default != b.default and not (a.default is inspect.Parameter.empty and b.default is None)
            for a, b in zip(mine, its, strict=True)
        ):
            differ.append(f"{name}{sig} vs {twin}{theirs}")
    assert missing == [] and differ == []


def test_async_recall_remember_and_context_give_the_sync_results(tmp_path: Path) -> None:
    async def main() -> tuple[object, ...]:
        async with AsyncMemoryManager(tmp_path, durability="flush") as amm:
            done = await amm.remember("Gaurav prefers written agendas before every planning meeting", kind="semantic")
            hits = await amm.recall("what does Gaurav prefer before meetings")
            scoped = amm.scope("altitude")
            ctx = await scoped.context(budget=200)
            return done, [h.key for h in hits], ctx.tokens <= 200, await amm.consent.namespaces("conversation")

    done, keys, within, gated = asyncio.run(main())
    with MemoryManager(tmp_path, durability="flush") as mm:
        assert keys == [h.key for h in mm.recall("what does Gaurav prefer before meetings")]
        assert keys and keys[0] == done.key  # type: ignore[attr-defined]
        assert gated == mm.consent.namespaces("conversation")
    assert within


# -- the CLI ----------------------------------------------------------------------


def cli(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``hrm-memory ARGV`` in a subprocess: (exit code, stdout, stderr)."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "hrm_memory.cli.main", *argv],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


def test_query_where_with_broken_json_is_refused(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    assert cli("--root", root, "put", "focus.slow", "a", '{"prio": 3}')[0] == 0
    code, out, err = cli("--root", root, "query", "focus.*", "--where", 'prio={"$gt": 2')
    assert code == 2 and "--where prio" in err and "not valid" in err and out == ""
    code, out, _ = cli("--root", root, "--json", "query", "focus.*", "--where", 'prio={"$gt": 2}')
    assert code == 0 and [r["key"] for r in json.loads(out)] == ["a"]
    code, out, _ = cli("--root", root, "--json", "query", "focus.*", "--where", "prio=word")  # a bare word: a string
    assert code == 0 and json.loads(out) == []


def test_global_options_work_after_the_command(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    assert cli("put", "focus.slow", "k", "7", "--root", root)[0] == 0
    before = cli("--root", root, "--json", "get", "focus.slow", "k")
    after = cli("get", "--json", "focus.slow", "k", "--root", root)
    assert before[0] == after[0] == 0 and json.loads(before[1]) == json.loads(after[1])
    assert json.loads(after[1])["value"] == 7
    # given on both sides, the one after the command is the one that counts; given once, it stays
    assert cli("--root", str(tmp_path / "other"), "ls", "--root", root, "--json", "focus.slow")[0] == 0
    code, out, _ = cli("--json", "consent", "status", "--root", root)
    assert code == 0 and "conversation" in json.loads(out)


def test_error_hints_name_the_command_to_type(tmp_path: Path) -> None:
    code, _, err = cli("--root", str(tmp_path / "s"), "put", "nosuch.place", "k", "1")
    assert code == 2 and "hrm-memory declare" in err and "MemoryManager" not in err and "NamespaceSpec(" not in err
    root = str(tmp_path / "s")
    assert cli("--root", root, "declare", "t.data")[0] == 0
    assert cli("--root", root, "put", "t.data", "k", "1")[0] == 0
    code, _, err = cli("--root", root, "undeclare", "t.data")
    assert code == 2 and "hrm-memory undeclare NAMESPACE --purge" in err and "purge=True" not in err


def test_trace_file_must_be_a_file_in_an_existing_directory(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    code, _, err = cli("--root", root, "--trace", "jsonl", "--trace-file", str(tmp_path), "put", "focus.slow", "k", "1")
    assert code == 2 and "directory" in err
    missing = tmp_path / "nonexistent" / "dir" / "x.jsonl"
    code, _, err = cli("--root", root, "--trace", "jsonl", "--trace-file", str(missing), "put", "focus.slow", "k", "1")
    assert code == 2 and "does not exist" in err and not missing.parent.exists()
    good = tmp_path / "spans.jsonl"
    assert cli("--root", root, "--trace", "jsonl", "--trace-file", str(good), "put", "focus.slow", "k", "1")[0] == 0
    assert good.read_text().count('"db.operation.name":"write"') == 1


def test_the_cli_opens_a_redis_store(tmp_path: Path) -> None:
    from tests.helpers.redis_server import fresh_url, require_redis

    require_redis()
    url = fresh_url()
    assert cli("--backend", url, "put", "altitude.patterns", "timeboxing", '{"s": 0.8}')[0] == 0
    with MemoryManager(tmp_path / "r", backend=url) as mm:  # what the CLI wrote is in the shared store
        assert mm.read("altitude.patterns", "timeboxing") == {"s": 0.8}
        mm.write("altitude.patterns", "deep-work", {"s": 0.6})
    code, out, _ = cli("--json", "ls", "altitude.patterns", env={"HRM_MEMORY_BACKEND": url})
    assert code == 0 and sorted(r["key"] for r in json.loads(out)) == ["deep-work", "timeboxing"]
    code, out, _ = cli("stats", "--json", "--backend", url)
    assert code == 0 and json.loads(out)["backend"] == "redis"
    assert cli("check", "--backend", url)[0] == 0
    code, _, err = cli("--backend", "redis://:secret-pw@127.0.0.1:1/0", "ls")
    assert code == 3 and "secret-pw" not in err


def test_each_example_runs_on_what_its_extra_installs() -> None:
    """An example names the extra it needs (``pip install 'hrm-memory[X]'``);
    every distribution it imports is a dependency or in that extra."""
    import ast
    import importlib.metadata
    import re
    import sys
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]

    def names(reqs: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}

    owners = importlib.metadata.packages_distributions()
    examples = sorted((repo / "examples").glob("*.py"))
    assert examples
    for path in examples:
        text = path.read_text()
        extras = re.findall(r"hrm-memory\[(\w+)\]", text)
        allowed = names(project["dependencies"]) | {n for x in extras for n in names(project["optional-dependencies"][x])}
        imported = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module)
        third = {m for m in imported if m.split(".")[0] not in sys.stdlib_module_names | {"hrm_memory"}}
        missing = {m for m in third if not providers(m, owners) & allowed}
        assert not missing, f"{path.name} imports {sorted(missing)} beyond hrm-memory{extras}"


def providers(module: str, owners: dict[str, list[str]]) -> set[str]:
    """The distributions that ship ``module`` itself (a namespace package
    such as ``langgraph`` is shared by several: the one with the submodule)."""
    import importlib.metadata

    path = module.replace(".", "/")
    found = set()
    for dist in owners.get(module.split(".")[0], []):
        files = importlib.metadata.distribution(dist).files or []
        if any(str(f) in (f"{path}.py", f"{path}/__init__.py") or str(f).startswith(f"{path}/") for f in files):
            found.add(dist.lower().replace("_", "-"))
    return found


def test_the_readme_api_block_runs_as_written(tmp_path: Path) -> None:
    """The README's API block is a program: it runs in a fresh process, as pasted."""
    import os
    import re
    import subprocess
    import sys

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## The API in short"):]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    done = subprocess.run([sys.executable, "-c", block.group(1)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "HRM_MEMORY_ROOT": str(tmp_path / "default")})
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_readme_namespace_table_and_consent_status_agree(tmp_path: Path) -> None:
    """Each namespace's consent category in the README's table is its seed
    declaration's, and ``consent status`` lists it under that category."""
    import re

    from hrm_memory.namespaces import seed

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \| (\w+) \| [^|]* \| ([^|]*) \|", readme, re.M)
    table = {name: consent.strip() for name, _, consent in rows}
    specs = {s.name: s for s in seed()}
    assert set(table) == set(specs)
    code, out, _ = cli("--root", str(tmp_path / "s"), "consent", "status")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    for name, spec in specs.items():
        shown = table[name]
        assert (shown == "-") == (spec.consent is None), name
        if spec.consent is not None:
            assert shown.split()[0] == spec.consent, name
            assert name in lines[spec.consent], f"{name} is missing from 'consent status' under {spec.consent}"


LEGACY_DATA = DATA


def test_migrate_plan_suggests_only_a_folder_it_would_accept() -> None:
    """The repository root holds adapters/the_assist (code, not legacy data):
    it is not suggested, since passing it is refused too."""
    repo = Path(__file__).resolve().parents[2]
    code, _, err = cli("--root", "/nonexistent-never-opened", "migrate", "plan", str(repo))
    assert code == 2 and "no legacy file recognised" in err
    assert "pass " not in err.split("shared/legacy/data)")[-1]


def test_migrate_plan_lists_several_legacy_trees_briefly(tmp_path: Path) -> None:
    import shutil

    if not LEGACY_DATA.is_dir():
        pytest.skip(f"the legacy data is not at {LEGACY_DATA}")
    source = LEGACY_DATA / "the_assist" / "feedback" / "log.json"
    for i in range(30):
        target = tmp_path / f"copy{i:02d}" / "the_assist" / "feedback"
        target.mkdir(parents=True)
        shutil.copy(source, target / "log.json")
    code, _, err = cli("--root", str(tmp_path / "store"), "migrate", "plan", str(tmp_path))
    assert code == 2 and "30 folders under it hold a legacy layout" in err and "and 25 more" in err
    # Brief means a handful of folders, not thirty: the length of the temporary
    # folder's path (which varies from machine to machine) is not the message's.
    brief = err.replace(str(tmp_path), "TMP")
    assert len(brief) < 1000 and max(len(line) for line in brief.splitlines()) < 250
    code, _, _ = cli("--root", str(tmp_path / "store"), "migrate", "plan", str(tmp_path / "copy07"))
    assert code == 0  # a suggested folder is accepted
