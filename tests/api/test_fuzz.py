"""Fuzzing the API and the CLI with hypothesis.

The rule: whatever goes in, the only exceptions that come out are the
documented typed ones (``MemoryStoreError`` subclasses), plus what the
caller's own update function raises. The CLI's ``main()`` returns an exit
code in {0, 1, 2, 3, 4} or argparse exits with status 2 (0 for ``-h``); it
never lets a traceback out. After each fuzz run the store reads back what was
acknowledged and ``check()`` finds nothing.

``HRM_FUZZ_EXAMPLES`` scales the number of examples (default 150 API runs of up
to 20 operations, 300 CLI invocations).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import io
import math
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hrm_memory import MemoryManager, MemoryStoreError, NamespaceSpec
from hrm_memory.cli import main as cli

EXAMPLES = int(os.environ.get("HRM_FUZZ_EXAMPLES", "150"))

FUZZ_SPECS = [
    NamespaceSpec("fz.data"),
    NamespaceSpec("fz.other"),
    NamespaceSpec("fz.hot", tier="hot"),
    NamespaceSpec("fz.capped", max_keys=3),
    NamespaceSpec("fz.aged", ttl=1.0),
    NamespaceSpec("fz.small", max_value_bytes=64),
]
DECLARED = [s.name for s in FUZZ_SPECS]

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the repo
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# -- strategies -------------------------------------------------------------------------------

any_text = st.text(st.characters(exclude_categories=()), max_size=40)  # lone surrogates included
junk_names = st.from_regex(r"[a-zA-Z0-9_.\-/\\ :*?\[\]\x00é]{0,40}", fullmatch=True)
namespaces = st.one_of(
    st.sampled_from(DECLARED),
    st.sampled_from(["fz", "fz.", ".fz.data", "fz..data", "FZ.DATA", "fz.data.", "fz.con", "../fz", "fz.data/x", "a.b.c.d.e"]),
    junk_names,
    any_text,
    st.sampled_from([None, 1, b"fz.data", ("fz", "data"), 1.5]),
)
keys = st.one_of(
    st.sampled_from(["k", "K", "k ", "ｋ", "k\u200b", "../../etc/passwd", "CON", "a" * 1024, "a" * 1025, "é" * 600]),
    any_text,
    st.text(min_size=1000, max_size=1100),
    st.sampled_from([None, 0, b"k", ("k",), 1.0]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # unbounded: big ints too
    st.floats(allow_nan=True, allow_infinity=True),
    any_text,
    st.binary(max_size=20),
    st.sampled_from([dt.datetime(2020, 1, 1), uuid.UUID(int=7), decimal.Decimal("1.5"), 1j, object(), Ellipsis, b""]),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10,
)
hashables = st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(), st.floats(), st.tuples(st.integers()))
values = st.one_of(json_values, st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.frozensets(hashables, max_size=3),
        st.sets(hashables, max_size=3),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
        st.dictionaries(hashables, inner, max_size=3),  # non-str keys
    ),
    max_leaves=12,
))
wheres = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["s", "n", "a.b", "", "."]) | st.text(max_size=8), values, max_size=3),
    st.dictionaries(hashables, values, max_size=2),  # non-str fields
    st.sampled_from([[], "status=open", 1]),
)
limits = st.one_of(st.none(), st.integers(-3, 5), st.sampled_from([True, 1.0, "2", 10**20]))


class Boom(Exception):
    """Raised by a fuzzed update function: must propagate unchanged."""


ops = st.one_of(
    st.tuples(st.just("write"), namespaces, keys, values),
    st.tuples(st.just("read"), namespaces, keys),
    st.tuples(st.just("get_record"), namespaces, keys),
    st.tuples(st.just("update"), namespaces, keys, values, st.booleans()),
    st.tuples(st.just("delete"), namespaces, keys),
    st.tuples(st.just("query"), namespaces, keys, wheres, limits, st.booleans()),
    st.tuples(st.just("declare"), namespaces),
    st.tuples(st.just("scope"), st.one_of(any_text, st.sampled_from(["fz", "altitude"]), st.none())),
    st.tuples(st.just("archive"), st.one_of(st.none(), st.just(1e10), st.floats())),
)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON types (1 is not 1.0 is not True)."""
    return orjson.dumps(a) == orjson.dumps(b)


def run_op(mm: MemoryManager, model: dict[tuple[str, str], Any], op: tuple[Any, ...]) -> None:
    kind = op[0]
    try:
        if kind == "write":
            _, ns, key, value = op
            mm.write(ns, key, value)
            # Acknowledged: it reads back equal, with the same types.
            assert same(mm.read(ns, key), value), (ns, key, value)
            model[(ns, key)] = value
        elif kind == "read":
            got = mm.read(op[1], op[2])
            if (op[1], op[2]) in model and op[1] in ("fz.data", "fz.other", "fz.small"):
                assert same(got, model[(op[1], op[2])])
        elif kind == "get_record":
            rec = mm.get_record(op[1], op[2])
            assert rec is None or (rec.namespace, rec.key) == (op[1], op[2])
        elif kind == "update":
            _, ns, key, value, boom = op

            def fn(current: Any) -> Any:
                if boom:
                    raise Boom()
                return value

            try:
                new = mm.update(ns, key, fn)
            except Boom:
                return
            assert same(mm.read(ns, key), new)
            model[(ns, key)] = new
        elif kind == "delete":
            if mm.delete(op[1], op[2]):
                assert mm.read(op[1], op[2]) is None
            model.pop((op[1], op[2]), None)
        elif kind == "query":
            _, ns, key, where, limit, cold = op
            recs = mm.query(ns, key, where=where, limit=limit, include_cold=cold)
            assert isinstance(recs, list)
            if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
                assert len(recs) <= limit
        elif kind == "declare":
            mm.declare(op[1])
        elif kind == "scope":
            sc = mm.scope(op[1])
            sc.query("*")
            sc.read("fz.data", "k")
        elif kind == "archive":
            mm.archive(now=op[1])
    except MemoryStoreError:
        pass


def check_model(mm: MemoryManager, model: dict[tuple[str, str], Any]) -> None:
    """Every acknowledged value in a plain warm namespace still reads back."""
    for (ns, key), value in model.items():
        if ns in ("fz.data", "fz.other", "fz.small"):
            assert same(mm.read(ns, key), value), (ns, key)


def test_fuzz_api_only_typed_errors(tmp_path: Path) -> None:
    root = tmp_path / "store"
    model: dict[tuple[str, str], Any] = {}
    with MemoryManager(root, durability="flush", namespaces=FUZZ_SPECS) as mm:
        # Dict values, so that query(where=...) has something to match against.
        for i, ns in enumerate(["fz.data", "fz.other", "fz.hot", "fz.aged"]):
            mm.write(ns, f"seed{i}", {"s": 1, "n": i, "a": {"b": [i]}})

        @SETTINGS
        @given(st.lists(ops, max_size=20))
        # Regressions found by this fuzzer, run first every time.
        @example([("declare", None)])
        @example([("query", "fz.data", "*", {1: 2}, None, False)])
        @example([("archive", float("nan"))])
        def run(batch: list[tuple[Any, ...]]) -> None:
            for op in batch:
                run_op(mm, model, op)

        run()
        check_model(mm, model)
        mm.query("*", include_cold=True)
        assert mm.check() == []
    with MemoryManager(root, namespaces=FUZZ_SPECS) as mm:
        check_model(mm, model)
        mm.query("*", include_cold=True)
        assert mm.check() == []


def test_fuzz_values_round_trip_or_invalid_value(mm: MemoryManager) -> None:
    """Focused on values: an accepted value reads back equal and of the same
    types; a refused one raises InvalidValue (a ValueError and TypeError) and
    stores nothing."""
    from hrm_memory import InvalidValue

    @settings(SETTINGS, max_examples=EXAMPLES * 2)
    @given(values)
    def run(value: Any) -> None:
        mm.write("focus.slow", "v", "before")
        try:
            mm.write("focus.slow", "v", value)
        except InvalidValue as exc:
            assert isinstance(exc, ValueError) and isinstance(exc, TypeError)
            assert mm.read("focus.slow", "v") == "before"
            return
        assert same(mm.read("focus.slow", "v"), value)
        assert not (isinstance(value, float) and not math.isfinite(value))

    run()
    assert mm.check() == []


# -- the CLI ----------------------------------------------------------------------------------------

SUBCOMMANDS = ["get", "put", "rm", "ls", "query", "stats", "check", "archive", "demo", "trace", "tail", "show"]
TOKENS = [
    "--json", "--durability", "fsync", "flush", "--locking", "--cold", "--where", "--limit", "--fix",
    "--now", "--trace", "console", "jsonl", "-n", "--file", "-", "--", "-h",
    "altitude.patterns", "focus.slow", "focus.fast", "shared.people", "focus.*", "*", "k", "s=1",
    '{"s": 1}', '"text"', "[1, 2]", "nan", "inf", "-inf", "1e308", "1e999", "-1", "0", "10", "x=",
    "null", "1" * 30, "..", "/", "\\", "fz.data",
]  # fmt: skip
arg = st.one_of(st.sampled_from(TOKENS), st.text(max_size=12), junk_names)
ns_arg = st.one_of(st.sampled_from(["altitude.patterns", "focus.slow", "focus.fast", "shared.people", "focus.*", "*"]), arg)
num_arg = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "1e999"]), st.sampled_from(["1e308", "-1", "0", "3", "1e10", "x"]), arg
)
json_arg = st.one_of(json_values.map(lambda v: orjson.dumps(v).decode()), arg)


@st.composite
def cli_calls(draw: st.DrawFn) -> list[str]:
    """Well-formed calls of every subcommand, with fuzzed arguments."""
    argv: list[str] = []
    for opt in draw(st.lists(st.sampled_from(["--json", "--locking", "--durability", "--trace"]), max_size=3, unique=True)):
        argv.append(opt)
        if opt == "--durability":
            argv.append(draw(st.sampled_from(["fsync", "flush"]) | arg))
        elif opt == "--trace":
            argv.append(draw(st.sampled_from(["console", "jsonl"]) | arg))
    cmd = draw(st.sampled_from(["get", "put", "rm", "ls", "query", "stats", "check", "archive", "demo", "trace"]))
    argv.append(cmd)
    if cmd in ("get", "rm"):
        argv += [draw(ns_arg), draw(arg)]
    elif cmd == "put":
        argv += [draw(ns_arg), draw(arg), draw(json_arg | st.just("-"))]
    elif cmd == "ls":
        argv += draw(st.lists(ns_arg, max_size=1)) + draw(st.lists(st.just("--cold"), max_size=1))
    elif cmd == "query":
        argv += [draw(ns_arg)] + draw(st.lists(arg, max_size=1))
        for _ in range(draw(st.integers(0, 2))):
            argv += ["--where", draw(st.sampled_from(["s=1", "a.b=[1]", "=1", "s", "n=x", "s=nan"]) | arg)]
        argv += draw(st.lists(st.tuples(st.just("--limit"), num_arg), max_size=1).map(lambda x: [t for p in x for t in p]))
        argv += draw(st.lists(st.just("--cold"), max_size=1))
    elif cmd == "check":
        argv += draw(st.lists(st.just("--fix"), max_size=1))
    elif cmd == "archive":
        argv += draw(st.lists(st.tuples(st.just("--now"), num_arg), max_size=1).map(lambda x: [t for p in x for t in p]))
    elif cmd == "trace":
        if draw(st.booleans()):
            argv += ["tail"] + draw(st.lists(st.tuples(st.just("-n"), num_arg), max_size=1).map(lambda x: [t for p in x for t in p]))
        else:
            argv += ["show", draw(arg)]
    return argv


argvs = st.one_of(
    cli_calls(),
    cli_calls().flatmap(lambda a: st.permutations(a)),  # the same words, out of order
    st.lists(st.one_of(st.sampled_from(SUBCOMMANDS), arg), max_size=7),  # junk
)


def _unsafe(token: str) -> bool:
    """Arguments that would leave the sandbox of the test rather than test the
    CLI: another --root (or an abbreviation), a span file elsewhere, OTLP
    network export, and 'trace tail --follow' (runs until Ctrl-C)."""
    if token.startswith("--r") or token.startswith("--trace-") or "otlp" in token:
        return True
    if token.startswith("--fo") or token == "--follow":
        return True
    return token.startswith("-") and not token.startswith("--") and "f" in token


def test_fuzz_cli_never_tracebacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cli-store"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HRM_MEMORY_TRACE_FILE", raising=False)
    seen: dict[Any, int] = {}

    @settings(SETTINGS, max_examples=EXAMPLES * 2)
    @given(argvs, st.text(max_size=30))
    # Regressions found by this fuzzer, run first every time.
    @example(["archive", "--now", "nan"], "")
    @example(["archive", "--now", "1e999"], "")
    def run(tokens: list[str], stdin_text: str) -> None:
        argv = ["--root", str(root), *(t for t in tokens if not _unsafe(t))]
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin_text))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code: Any = cli.main(argv)
            except SystemExit as exc:
                code = ("exit", exc.code)
        seen[code] = seen.get(code, 0) + 1
        assert code in (0, 1, 2, 3, 4) or code in (("exit", 2), ("exit", 0)), (argv, code, err.getvalue())
        if code == 4:
            raise AssertionError(f"check found problems after {argv}: {out.getvalue()}")
        assert "Traceback" not in err.getvalue(), (argv, err.getvalue())

    run()
    print(f"\n[cli fuzz] exit codes seen: {dict(sorted(seen.items(), key=str))}")
    with MemoryManager(root) as mm:
        mm.query("*", include_cold=True)
        assert mm.check() == []
