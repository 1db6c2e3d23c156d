"""The README's test command is what CI runs, and the test extra installs
what that command needs (pytest-xdist for its two workers)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _pytest_args(line: str) -> list[str]:
    """The arguments after ``-m pytest`` on a shell line."""
    return line.split("-m pytest", 1)[1].split()


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    readme = (REPO / "README.md").read_text()
    block = readme.split("Set up and run the whole test suite", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    (readme_line,) = [line for line in block.splitlines() if "-m pytest" in line]
    ci = (REPO / ".ci" / "run").read_text()
    ci_lines = [line for line in ci.splitlines() if "-m pytest" in line and not line.lstrip().startswith("#")]
    assert ci_lines, ".ci/run runs no pytest"
    assert [_pytest_args(line) for line in ci_lines] == [_pytest_args(readme_line)]
    assert "-n" in _pytest_args(readme_line) and "--dist" in _pytest_args(readme_line)


def test_the_test_extra_installs_the_worker_plugin() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0] for requirement in extras["test"]}
    assert "pytest-xdist" in names
    # the oldest-SDK virtualenv installs its test runner by hand: the workers' plugin too
    oldest = (REPO / ".ci" / "oldest-otel-venv").read_text()
    assert "'pytest-xdist>=" in oldest
    assert ".ci/oldest-otel-venv" in (REPO / ".ci" / "tracing-matrix").read_text()
