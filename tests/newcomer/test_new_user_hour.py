"""What a new user met in a first hour with a fresh clone: each step as they
took it (the console script, the README's own calls), and what they should
have seen. Redis runs as a real redis-server (tests/helpers/redis_server.py)
and a real 6-node cluster (tests/helpers/redis_cluster.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from hrm_memory import MemoryManager
from tests.helpers.legacy import DATA

SCRIPT = Path(sys.executable).parent / "hrm-memory"
REPO = Path(__file__).resolve().parents[2]


def hrm(*args: str, root: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user types it."""
    env = dict(os.environ)
    env.pop("HRM_MEMORY_BACKEND", None)
    argv = [str(SCRIPT), *(["--root", str(root)] if root is not None else []), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, input=stdin, timeout=120)


# -- stats on Redis -------------------------------------------------------------------


def _stats_on(url: str, tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "host", backend=url) as mm:
        mm.write("altitude.patterns", "timeboxing", {"s": 0.8})
    out = hrm("--backend", url, "stats")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and out.stderr == ""
    head, *table = out.stdout.splitlines()
    prefix = url.rsplit("prefix=", 1)[1]
    assert f"prefix: {prefix}" in head and "url: redis" in head
    assert any(line.split()[:3] == ["altitude.patterns", "warm", "1"] for line in table), out.stdout


def test_stats_on_a_redis_server_prints_its_table(tmp_path: Path) -> None:
    from tests.helpers.redis_server import fresh_url

    _stats_on(fresh_url(), tmp_path)


def test_stats_on_a_redis_cluster_prints_its_table(tmp_path: Path) -> None:
    from tests.helpers.redis_cluster import shared_cluster

    _stats_on(shared_cluster().fresh_url(), tmp_path)


# -- the CLI says the same thing the same way -------------------------------------------


def test_forget_of_a_missing_key_exits_1_as_rm_get_and_history_do(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for command in ("rm", "get", "history", "forget"):
        out = hrm(command, "focus.lanes", "nope", root=root)
        assert out.returncode == 1, (command, out.stdout, out.stderr)
        assert "not found: focus.lanes 'nope'" in out.stderr, (command, out.stderr)
    assert hrm("put", "focus.lanes", "lane1", '{"title": "Ship v1"}', root=root).returncode == 0
    out = hrm("forget", "focus.lanes", "lane1", root=root)
    assert out.returncode == 0 and out.stdout.startswith("forgotten: "), out
    assert hrm("get", "focus.lanes", "lane1", root=root).returncode == 1


def test_importing_a_file_again_says_nothing_new(tmp_path: Path) -> None:
    src, dst, dump = tmp_path / "src", tmp_path / "dst", tmp_path / "dump.jsonl"
    assert hrm("put", "shared.people", "dana", '{"role": "manager"}', root=src).returncode == 0
    assert hrm("put", "altitude.patterns", "timeboxing", '{"s": 0.8}', root=src).returncode == 0
    assert hrm("export", str(dump), root=src).returncode == 0
    first = hrm("import", str(dump), root=dst)
    assert first.returncode == 0 and first.stdout.startswith("imported 2 new records (0 already there"), first.stdout
    again = hrm("import", str(dump), root=dst)
    assert again.returncode == 0
    assert again.stdout.startswith("nothing new: the 2 records were already in the store"), again.stdout
    assert "imported 2" not in again.stdout


def test_undeclare_of_an_empty_namespace_on_redis_counts_no_item(tmp_path: Path) -> None:
    from tests.helpers.redis_server import RedisServer

    with RedisServer(tmp_path / "redis", appendonly=True) as server:  # a purge then rewrites the AOF
        _undeclare_counts(server.fresh_url())


def _undeclare_counts(url: str) -> None:
    assert hrm("--backend", url, "declare", "planner.drafts").returncode == 0
    out = hrm("--backend", url, "undeclare", "planner.drafts")
    assert out.returncode == 0 and out.stdout.strip() == "undeclared planner.drafts", out.stdout
    assert hrm("--backend", url, "declare", "planner.drafts").returncode == 0
    assert hrm("--backend", url, "put", "planner.drafts", "d1", '"draft"').returncode == 0
    out = hrm("--backend", url, "undeclare", "planner.drafts", "--purge")
    # the record and its change-log entry; the persistence files redone are not items
    assert out.returncode == 0 and out.stdout.strip() == "undeclared planner.drafts (2 item(s) purged)", out.stdout


def test_the_redis_url_error_names_wait_and_wait_timeout_among_the_known_options() -> None:
    from hrm_memory import InvalidArgument

    for scheme in ("redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1,127.0.0.1:2/0"):
        with pytest.raises(InvalidArgument) as err:
            MemoryManager(None, backend=f"{scheme}?wait=0&wait_timeout=500&bogus=1")
        message = str(err.value)
        assert "'bogus'" in message
        known = message.split("known: ", 1)[1]
        assert "wait," in known and "wait_timeout" in known and "prefix" in known


def test_history_prints_one_line_per_version(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for i in range(3):
        value = orjson.dumps({"title": "Ship v1", "steps": ["plan", "build"], "i": i}).decode()
        assert hrm("put", "shared.people", "dana", value, root=root).returncode == 0
    out = hrm("history", "shared.people", "dana", root=root)
    assert out.returncode == 0
    head, *rows = out.stdout.splitlines()
    assert head.split() == ["VERSION", "UPDATED_AT", "DELETED", "CURRENT", "VALUE"]
    assert [row.split()[0] for row in rows] == ["3", "2", "1"], out.stdout
    assert orjson.loads(rows[0][head.index("VALUE"):]) == {"title": "Ship v1", "steps": ["plan", "build"], "i": 2}


def test_tokens_on_an_empty_store_reports_nothing_to_count(tmp_path: Path) -> None:
    out = hrm("tokens", root=tmp_path / "store")
    assert out.returncode == 0, out.stderr
    assert "nothing to count" in out.stdout and "NOT met" not in out.stdout and "TOTAL" not in out.stdout
    data = orjson.loads(hrm("tokens", "--json", root=tmp_path / "store").stdout)
    assert data["rows"] == [] and data["target_met"] is False


def test_mcp_undeclared_namespace_error_says_what_a_model_can_do(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'hrm-memory[mcp]'")
    import anyio
    from mcp.client.client import Client

    from hrm_memory.integrations.mcp_server import build_server
    from hrm_memory.integrations.mcp_tools import MemoryTools

    with MemoryManager(tmp_path / "store", durability="flush") as mm:
        server = build_server(MemoryTools(mm))

        async def body() -> str:
            async with Client(server) as client:
                result = await client.call_tool("write_record", {"namespace": "nosuch.place", "key": "k", "value": 1})
                assert result.is_error
                return str(result.content[0].text)  # type: ignore[union-attr]

        text = anyio.run(body)
    assert "UndeclaredNamespace: namespace 'nosuch.place' is not declared" in text, text
    assert "list_namespaces" in text and "MemoryManager" not in text and "NamespaceSpec" not in text


# -- context ------------------------------------------------------------------------


def test_a_scored_pattern_is_shown_under_its_key(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "store", durability="flush") as mm:
        mm.write("altitude.patterns", "timeboxing", {"s": 0.8})  # the README's own write
        text = mm.context("altitude", budget=600).text
        assert text.splitlines() == ["## Patterns and preferences", "timeboxing:s=0.8"], text
        mm.write("altitude.patterns", "exit_criteria", {"s": 0.9})
        mm.write("altitude.patterns", "weak_signal", {"s": 0.2})  # under the shown score, as a code map's
        lines = mm.context("altitude", budget=600).text.splitlines()
        assert lines[0] == "## Patterns and preferences"
        assert sorted(" ".join(lines[1:]).split()) == ["exit_criteria:s=0.9", "timeboxing:s=0.8"], lines


def _recalled(text: str) -> tuple[list[str], int]:
    """The Recalled section's lines and its ``+N more`` count."""
    lines = text.split("## Recalled\n", 1)[1].split("\n## ", 1)[0].splitlines()
    more = int(lines.pop()[1:].split()[0]) if lines and lines[-1].startswith("+") else 0
    return lines, more


def _words(text: str) -> set[str]:
    return {w for w in "".join(c if c.isalnum() else " " for c in text.lower()).split() if len(w) > 2}


def _hit_of(line: str, snippets: list[str]) -> int:
    """The hit whose snippet the line was rendered from (most words shared)."""
    mine = _words(line)
    return max(range(len(snippets)), key=lambda i: len(mine & _words(snippets[i])) / (len(mine | _words(snippets[i])) or 1))


def _check_follows_recall(mm: MemoryManager, query: str, budget: int) -> list[str]:
    hits = mm.scope("altitude").recall(query, k=10)  # what context recalls: the HRM's namespaces, 10 hits
    lines, more = _recalled(mm.context("altitude", budget=budget, query=query).text)
    assert lines, "nothing recalled"
    order = [_hit_of(line, [h.snippet for h in hits]) for line in lines]
    assert order == list(range(len(lines))), (order, lines)  # recall's best hits, in recall's order
    assert more and len(lines) + more <= len(hits)  # the rest counted (a near-duplicate of a line shown is not)
    return lines


def test_the_recalled_section_follows_recalls_ranking(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "store", durability="flush") as mm:
        # The best hits say "patent" most and are long; the weakest are short.
        mm.write("altitude.memories", "a", {"text": "Patent patent patent: the patent draft for the patent office is due "
                                                 "after the prototype review with the patent attorney next month"})
        mm.write("altitude.memories", "b", {"text": "The patent attorney asked for patent drawings and the claims "
                                                 "list before the filing fee is paid"})
        chores = ["buy stamps for the patent letters", "call the bank about the patent loan",
                  "print the patent sketches at the library", "email Dana the patent summary tonight",
                  "book a room to rehearse the patent pitch", "ask grandma which patent lawyer she knew"]
        for i, chore in enumerate(chores):
            mm.write("altitude.memories", f"c{i}", {"text": chore})
        mm.write("altitude.memories", "d", {"text": "patent fee"})
        lines = _check_follows_recall(mm, "patent", budget=60)
        assert lines[0].startswith("Patent patent patent")


@pytest.mark.skipif(not DATA.is_dir(), reason="needs the legacy data (../shared/legacy/data or HRM_LEGACY_DATA)")
def test_the_recalled_section_follows_recalls_ranking_on_the_migrated_data(tmp_path: Path) -> None:
    from hrm_memory.migration import engine

    with MemoryManager(tmp_path / "store", durability="flush") as mm:
        engine.apply(mm, DATA)
        _check_follows_recall(mm, "patent", budget=600)


# -- recall -------------------------------------------------------------------------


def test_a_perfect_single_hit_scores_1_and_scores_are_shares_of_the_best(tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert hrm("put", "altitude.memories", "m1", '{"text": "The user prefers green tea"}', root=root).returncode == 0
    out = hrm("recall", "tea", root=root)
    assert out.returncode == 0
    assert out.stdout.splitlines()[1].split()[:3] == ["altitude.memories", "m1", "1"], out.stdout
    with MemoryManager(root, durability="flush") as mm:
        for i, drink in enumerate(["black tea after lunch", "tea tea tea, always tea", "coffee and tea at dawn"]):
            mm.write("altitude.memories", f"d{i}", {"text": f"The user drinks {drink}"})
        hits = mm.recall("tea")
        scores = [h.score for h in hits]
        assert len(hits) == 4 and scores[0] == 1.0
        assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
        assert [h.score for h in hits if h.score >= 0.5] and all(h.confidence > 0.5 for h in hits)


def test_langgraph_search_scores_a_perfect_single_hit_1(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from hrm_memory.integrations.langgraph import MemoryStore

    with MemoryStore(root=str(tmp_path / "s"), durability="flush") as store:
        store.put(("prefs",), "drink", {"text": "The user prefers green tea"})
        hits = store.search(("prefs",), query="tea")
        assert [h.key for h in hits] == ["drink"] and hits[0].score == 1.0


def test_the_snippet_of_a_remembered_memory_is_its_sentence(tmp_path: Path) -> None:
    sentence = "The user prefers green tea in the morning"
    with MemoryManager(tmp_path / "store", durability="flush") as mm:
        mm.remember(sentence, kind="semantic")
        mm.remember("The user walks the dog before breakfast every day", kind="semantic", tags=["routine", "dog"])
        hits = mm.recall("tea")
        assert hits[0].snippet == sentence
        dog = mm.recall("dog")[0]
        assert dog.snippet == "The user walks the dog before breakfast every day; tags: dog, routine"


@pytest.mark.skipif(not DATA.is_dir(), reason="needs the legacy data (../shared/legacy/data or HRM_LEGACY_DATA)")
def test_who_is_bella_answers_with_her_entry_before_passages_that_mention_her(tmp_path: Path) -> None:
    from hrm_memory.migration import engine

    with MemoryManager(tmp_path / "store", durability="flush") as mm:
        engine.apply(mm, DATA)
        hits = mm.recall("who is Bella?", k=5)
    snippets = [h.snippet for h in hits]
    entry = next(i for i, s in enumerate(snippets) if s.startswith("bella:") and "daughter" in s)
    # A passage that only mentions her (the trips one) is below her entry, or not in the top 5 at all.
    trips = [i for i, s in enumerate(snippets) if "FOUR separate trips" in s]
    assert hits[0].snippet.startswith("bella:") and all(entry < i for i in trips), snippets


# -- what recall searches, said where a user looks ---------------------------------------


def test_recall_with_no_hit_names_what_it_searched_and_the_unindexed_data(tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert hrm("put", "focus.lanes", "lane1", '{"title": "Ship v1"}', root=root).returncode == 0
    out = hrm("recall", "ship", root=root)
    assert out.returncode == 1 and out.stdout.strip() == "(none)"
    first, second = out.stderr.splitlines()
    assert first.startswith("nothing found in the 21 indexed namespace(s) searched: altitude.coaching, ")
    assert "shared.people" in first and "focus.lanes" not in first
    assert second.startswith("not searched (declared without an index), holding records: focus.lanes;")
    assert "hrm-memory query NS" in second
    out = hrm("recall", "ship", "--ns", "shared.*", root=root)  # only what the globs match is named
    assert out.returncode == 1 and "focus.lanes" not in out.stderr and "shared.people" in out.stderr
    out = hrm("context", "focus", root=root)
    assert out.returncode == 0 and out.stdout.strip() == ""
    assert out.stderr.startswith("the context of focus is empty: it is built from the indexed namespaces focus "
                                 "may read (focus.conversation, ") and "holding records: focus.lanes" in out.stderr
    assert hrm("put", "focus.notes", "n1", '{"text": "ship v1 on friday"}', root=root).returncode == 0
    found = hrm("recall", "ship", root=root)
    assert found.returncode == 0 and found.stderr == "" and "focus.notes" in found.stdout


def test_recall_help_says_what_is_searched_and_what_the_figures_mean() -> None:
    out = hrm("recall", "--help")
    text = " ".join(out.stdout.split())
    assert out.returncode == 0
    assert "declared with an index" in text and "'recall index'" in text and "never searched" in text
    assert "the first is 1" in text and "filter on it" in text


# -- docs and the test run ------------------------------------------------------------


def test_the_langgraph_example_without_an_argument_leaves_no_folder_behind(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.graph", reason="the example needs langgraph (pip install -e '.[test]')")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "langgraph_memory.py")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "remembered: likes tea" in proc.stdout.split("run 2", 1)[1]
    assert list(scratch.iterdir()) == []


def test_hrm_legacy_data_names_the_legacy_folder_for_every_test_that_reads_it(tmp_path: Path) -> None:
    env = {**os.environ, "HRM_LEGACY_DATA": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", "from tests.helpers.legacy import DATA; print(DATA)"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path), out.stderr
    # no test finds the folder by a path of its own (it would not follow the variable)
    own = [p.relative_to(REPO).as_posix() for p in sorted((REPO / "tests").rglob("*.py"))
           if p.name not in ("legacy.py", Path(__file__).name)
           and ('"legacy" / "data"' in p.read_text() or "HRM_MEMORY_LEGACY_DATA" in p.read_text())]
    assert own == []
    assert "HRM_LEGACY_DATA" in (REPO / "README.md").read_text()


def test_the_test_run_prints_no_pytest_asyncio_deprecation_warning() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/integrations/test_mcp_unit.py"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PytestDeprecationWarning" not in out.stdout + out.stderr
    assert "asyncio_default_fixture_loop_scope" not in out.stdout + out.stderr


def test_the_cluster_commands_of_docs_redis_md_start_a_cluster_the_store_runs_on(tmp_path: Path) -> None:
    from tests.helpers.redis_cluster import free_cluster_port
    from tests.helpers.redis_server import require_redis

    require_redis()
    doc = (REPO / "docs" / "redis.md").read_text()
    block = doc.split("**Starting a cluster to try it**", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    ports: list[int] = []
    for _ in range(6):
        ports.append(free_cluster_port(ports))
    for doc_port, port in zip(range(7000, 7006), ports):  # free ports, never a user's 7000
        block = block.replace(str(doc_port), str(port))
    block = block.replace("hrm-memory --backend", f"{SCRIPT} --backend")
    script = "set -e\n" + block.replace("redis-cli -p", "sleep 2; redis-cli -p", 1)  # let the cluster settle
    try:
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=180)
    finally:
        for port in ports:  # stopped even when a step failed (the block's own last line stops them otherwise)
            subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, timeout=30)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "cluster_state:ok" in out.stdout
    assert f"url: redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/0  prefix: hrm:  cluster: True" in out.stdout
    assert any(line.split()[:3] == ["shared.people", "warm", "1"] for line in out.stdout.splitlines()), out.stdout
