"""Issue 22, first hour 4: one definition of "stored bytes" and "tokens
after" for the same legacy data, the same figure from every command.

Before the fix, on the shipped data: ``tokens --legacy`` said 320,631 B /
78,873 tokens after (text files counted as ``{"raw": text}`` only, not the
parsed entries migrate stores), ``migrate plan``/``verify`` 331,832 B /
81,612, ``migrate apply`` 351,551 B / 84,560 (it read the record back
expanded, not as stored) and docs/migration.md 331,866 B / 81,646 (stale).
``tokens --legacy`` on a folder one level too high counted its 108 files as
"other" instead of refusing as migrate does; "target 75%" was unexplained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from hrm_memory.cli.main import main
from hrm_memory.core.tokens import get_counter
from hrm_memory.migration.doc import figures_line
from hrm_memory.migration.engine import plan
from tests.helpers.legacy import DATA

REPO = Path(__file__).resolve().parents[2]
REAL = DATA
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"legacy data not found at {REAL}")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[Any, str, str]:
    capsys.readouterr()
    try:
        rc: Any = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def after_figures(capsys: pytest.CaptureFixture[str], root: Path, *command: str) -> tuple[int, int, int]:
    """(stored bytes, tokens before, tokens after) of one command's --json TOTAL."""
    rc, out, err = run(capsys, "--root", str(root), "--durability", "flush", "--json", *command)
    assert rc == 0, (command, err)
    data = orjson.loads(out)
    if command[0] == "tokens":
        total = data["total"]
        return total["compact_bytes"], total["legacy_tokens"], total["compact_tokens"]
    total = data["by_kind"][-1]
    assert total["kind"] == "TOTAL"
    return total["stored_bytes"], total["tokens_before"], total["tokens_after"]


@pytest.fixture(autouse=True)
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HRM_MEMORY_ROOT", str(tmp_path / "env-root"))


@needs_real
def test_every_command_reports_the_same_stored_bytes_and_tokens_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = after_figures(capsys, tmp_path / "a", "tokens", "--legacy", str(REAL))
    plan = after_figures(capsys, tmp_path / "b", "migrate", "plan", str(REAL))
    apply = after_figures(capsys, tmp_path / "b", "migrate", "apply", str(REAL))
    verify = after_figures(capsys, tmp_path / "b", "migrate", "verify", str(REAL))
    assert tokens == plan == apply == verify, {"tokens": tokens, "plan": plan, "apply": apply, "verify": verify}
    assert plan[1] > plan[2] > 0 and plan[0] > 0
    # Each report says what "after" means, in the same words.
    _, text, _ = run(capsys, "--root", str(tmp_path / "b"), "migrate", "verify", str(REAL))
    assert "after = the record's value as stored: its namespace codec's compact form as compact JSON" in text
    _, text, _ = run(capsys, "--root", str(tmp_path / "a"), "tokens", "--legacy", str(REAL))
    assert "the record migrate stores (the record's value as stored: its namespace codec's compact form" in text


@needs_real
def test_docs_figures_are_the_commands_figures() -> None:
    if get_counter().info.get("counter") != "exact":
        pytest.skip("docs/migration.md quotes exact o200k_base counts; only the estimate is available here")
    doc = (REPO / "docs" / "migration.md").read_text()
    line = figures_line(REAL)
    assert line in doc, f"regenerate: python -m hrm_memory.migration.doc --figures ../shared/legacy/data\n{line}"
    total = plan(REAL, tokens=True).by_kind()[-1]
    readme = " ".join((REPO / "README.md").read_text().split())
    said = (f"{total['stored_bytes']:,} stored bytes and {total['tokens_after']:,} tokens "
            f"against {total['tokens_before']:,}")
    assert said in readme, f"README's tokens --legacy figures: {said}"


def refusal(capsys: pytest.CaptureFixture[str], root: Path, folder: Path) -> tuple[str, str]:
    """The messages of ``tokens --legacy`` and ``migrate plan`` on ``folder`` (both must exit 2)."""
    rc_t, out_t, err_t = run(capsys, "--root", str(root), "tokens", "--legacy", str(folder))
    rc_m, _, err_m = run(capsys, "--root", str(root), "migrate", "plan", str(folder))
    assert (rc_t, rc_m) == (2, 2) and out_t == "", (err_t, err_m)
    return err_t.split("error: ", 1)[1], err_m.split("error: ", 1)[1]


@needs_real
def test_tokens_legacy_refuses_the_folder_one_level_too_high_as_migrate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens, migrate = refusal(capsys, tmp_path / "s", REAL.parent)
    assert tokens == migrate
    assert tokens.startswith(f"no legacy file recognised in {REAL.parent}") and f"pass {REAL} instead" in tokens


def test_tokens_legacy_refuses_a_folder_without_legacy_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same without the shipped data: a copy's parent, and a folder of other files."""
    data = tmp_path / "top" / "data"
    (data / "the_assist" / "feedback").mkdir(parents=True)
    (data / "the_assist" / "feedback" / "log.json").write_bytes(b'{"entries": []}\n')
    (tmp_path / "top" / "notes.txt").write_text("not legacy\n")
    tokens, migrate = refusal(capsys, tmp_path / "s", tmp_path / "top")
    assert tokens == migrate and f"pass {data} instead" in tokens
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.json").write_bytes(b"{}")
    tokens, migrate = refusal(capsys, tmp_path / "s", other)
    assert tokens == migrate and tokens.startswith(f"no legacy file recognised in {other}")
    rc, out, _ = run(capsys, "--root", str(tmp_path / "s"), "--json", "tokens", "--legacy", str(data))
    assert rc == 0 and orjson.loads(out)["total"]["files"] == 1


@needs_real
def test_the_target_says_what_it_is_and_whether_it_is_met(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text, _ = run(capsys, "--root", str(tmp_path / "a"), "tokens", "--legacy", str(REAL))
    assert rc == 0
    line = next(ln for ln in text.splitlines() if ln.startswith("target "))
    assert "75% fewer tokens on average than the legacy form" in line and "the project's goal" in line
    rc, out, _ = run(capsys, "--root", str(tmp_path / "a"), "--json", "tokens", "--legacy", str(REAL))
    data = orjson.loads(out)
    assert data["target_met"] is (data["mean_saved_pct"] >= data["target_saved_pct"])
    assert ("NOT met" in line) is (not data["target_met"])
