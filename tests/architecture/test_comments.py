"""Comments and docs say what is true and why; history lives in commit messages.

- No source or doc file cites a ticket: an issue, round, session or item
  number, a "must-show", or a ``DESIGN`` document that is not in the
  repository (design rationale the code cites lives in ``docs/``).
- No comment or docstring in the package holds a measured figure: the figure
  goes in BENCHMARKS.md and the comment keeps the reason, pointing there.

What the patterns allow, and why:

- ``--rounds 3`` and other command-line options (a ``-`` before the word):
  a benchmark's knob, not a ticket.
- Another project's issue, cited as ``owner/repo#N``
  (``langchain-ai/langgraph#8831``): a public reference anyone can open.
- Whole durations in ``ms`` or ``s``, plain percentages and multipliers
  (``5 ms by default``, ``under 0.8x``, ``75% fewer tokens``): settings,
  limits and targets are facts of the code. A figure that reads as measured
  is refused: a time in ``µs``/``us``/``ns`` or in fractions of a ms, a
  count of instructions, ``~N`` of ms, s, % or x, and "N x faster/slower/
  cheaper" or "N% faster/slower/cheaper".
- Benchmarks (``benchmarks/``) describe what they measure, so only the
  ticket rule applies to them; tests are not scanned.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: The folders of the package's source.
PACKAGE = ("shared", "storage", "namespaces", "adapters", "migration")

#: An issue, round, session or item number, or a must-show.
TICKET = re.compile(r"(?i)(?<![\w-])(?:issues?|rounds?|sessions?|items?)\s+#?\d|\bmust[- ]shows?\b")
#: A design document cited by name (none is in the repository: docs/ is).
DESIGN_DOC = re.compile(r"\bDESIGN\b")
#: A figure that reads as measured (see the module docstring).
MEASURED = re.compile(
    r"(?i)\d[\d,.]*\s*(?:µs|us|ns)\b"
    r"|\d+\.\d+\s*ms\b"
    r"|\d[\d,.]*k?\s+instructions\b"
    r"|~\s*\d[\d,.]*\s*(?:ms|s|%|x)(?!\w)"
    r"|\d[\d.]*\s*x\s+(?:faster|slower|cheaper)\b"
    r"|\d[\d.]*%\s+(?:faster|slower|cheaper)\b"
)

#: Files whose owners clean them on their own branches; each entry goes when
#: its file is clean (test_pending_files_still_need_it fails until it does).
PENDING_TICKETS: set[str] = set()
PENDING_FIGURES: set[str] = set()


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _python(folders: tuple[str, ...]) -> list[Path]:
    return sorted(p for d in folders for p in (REPO / d).rglob("*.py") if "__pycache__" not in p.parts)


def source_and_docs() -> list[Path]:
    docs = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md", REPO / "BENCHMARKS.md"]
    return _python((*PACKAGE, "benchmarks")) + docs


def ticket_lines(text: str) -> list[str]:
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if TICKET.search(line) or DESIGN_DOC.search(line)]  # fmt: skip


def comment_lines(source: str) -> Iterator[tuple[int, str]]:
    """Every line of every comment and docstring (a string that is a whole
    statement) of ``source``, with its line number."""
    before = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        is_doc = tok.type == tokenize.STRING and before in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        if tok.type == tokenize.COMMENT or is_doc:
            for k, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + k, line.strip()
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            before = tok.type


def figure_lines(source: str) -> list[str]:
    return [f"{n}: {line}" for n, line in comment_lines(source) if MEASURED.search(line)]


def test_no_source_or_doc_file_cites_a_ticket() -> None:
    found = {}
    for path in source_and_docs():
        if _rel(path) in PENDING_TICKETS:
            continue
        lines = ticket_lines(path.read_text(encoding="utf-8"))
        if lines:
            found[_rel(path)] = lines
    assert not found, "say what is true and why; the history is in the commit messages:\n" + "\n".join(
        f"{p}:{line}" for p, lines in found.items() for line in lines
    )


def test_no_comment_in_the_package_holds_a_measured_figure() -> None:
    found = {}
    for path in _python(PACKAGE):
        if _rel(path) in PENDING_FIGURES:
            continue
        lines = figure_lines(path.read_text(encoding="utf-8"))
        if lines:
            found[_rel(path)] = lines
    assert not found, "move the figure to BENCHMARKS.md and point there:\n" + "\n".join(
        f"{p}:{line}" for p, lines in found.items() for line in lines
    )


def test_pending_files_still_need_it() -> None:
    clean = [p for p in sorted(PENDING_TICKETS) if not ticket_lines((REPO / p).read_text(encoding="utf-8"))]
    clean += [p for p in sorted(PENDING_FIGURES) if not figure_lines((REPO / p).read_text(encoding="utf-8"))]
    assert not clean, f"clean now: remove from the pending sets: {clean}"


@pytest.mark.parametrize(
    "line",
    [
        "# the memchr is cheaper (issue 13).",
        "See issue #4, item 22.",
        "## Round 2, session 3: the pipeline",
        "Must-show 1 is not met.",
        "(DESIGN guarantee 5)",
    ],
)
def test_a_ticket_is_caught(line: str) -> None:
    assert ticket_lines(line)


@pytest.mark.parametrize(
    "line",
    [
        "python -m benchmarks.bench_crypto --records 1500 --rounds 3",
        "(langchain-ai/langgraph#8831: its order is unspecified)",
        "one round trip per shard; a design target",
        "a session's copies wait for consent",
    ],
)
def test_what_is_not_a_ticket_passes(line: str) -> None:
    assert not ticket_lines(line)


@pytest.mark.parametrize(
    "source",
    [
        "x = 1  # ~3x cheaper than the two-byte search\n",
        "x = 1  # the walk costs about 6 us for a 6-field record\n",
        "x = 1  # sre: ~150 instructions a byte\n",
        'def f():\n    """Pays 0.2 µs a call."""\n',
        "x = 1  # ~15% of a read\n",
        "x = 1  # 2x faster than filelock\n",
        "x = 1  # 0.14 ms for one code over a 2,000-token text\n",
    ],
)
def test_a_measured_figure_is_caught(source: str) -> None:
    assert figure_lines(source)


@pytest.mark.parametrize(
    "source",
    [
        "x = 1  # polls every 5 ms by default; gives up after 1 s\n",
        "x = 1  # under 0.8x improving, over 1.2x declining\n",
        "x = 1  # target: 75% fewer tokens on average\n",
        'x = f"{t:.1f} us"\n',
        "updated_us = 0  # microseconds since the epoch\n",
    ],
)
def test_what_is_not_a_measured_figure_passes(source: str) -> None:
    assert not figure_lines(source)
