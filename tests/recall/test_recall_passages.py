"""Recall by passage: a record is ranked by the passage that
answers (a message of a conversation, an entry of a map or list, a paragraph
of a note), each hit carries that passage as ``snippet``, and its confidence
says whether the passage shares anything specific with the question."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hrm_memory import MemoryManager, NamespaceSpec
from hrm_memory.recall import text as rt
from hrm_memory.recall.search import CASCADE_BELOW
from tests.helpers.legacy import DATA

REPO = Path(__file__).resolve().parents[2]
#: the real legacy data (../shared/legacy/data beside the repository; elsewhere, say where)
LEGACY_DATA = DATA

FILLER = [f"filler message {i} about the weather and the garden, nothing planned" for i in range(40)]


def conversation(answer_at: int, answer: str) -> dict[str, object]:
    messages = [{"role": "user" if i % 2 else "assistant", "content": text} for i, text in enumerate(FILLER)]
    messages[answer_at] = {"role": "assistant", "content": answer}
    return {"timestamp": "2026-01-09_20-29-16", "messages": messages}


PEOPLE = {"people": {name.lower(): {"name": name, "details": {"role": role, "note": note}}
                     for name, role, note in [
                         ("Priya", "sister", "lives in Pune, visits in March"),
                         ("Omar", "manager", "runs the Thursday staff meeting"),
                         ("Lena", "neighbour", "waters the plants when we travel"),
                         ("Tomas", "dentist", "clinic on Elm Street"),
                         ("Gaurav", "work colleague", "owns the dataset handoff"),
                         ("Bella", "daughter", "cheer competition on Saturday"),
                         ("Ines", "accountant", "files the taxes in April"),
                         ("Kofi", "friend", "plays five-a-side on Tuesdays"),
                         ("Mara", "coach", "weekly call on Monday mornings"),
                         ("Yuki", "landlord", "rent due on the first"),
                         ("Sven", "mentor", "quarterly lunch"),
                         ("Ada", "aunt", "birthday in June"),
                     ]}}


def test_a_conversation_and_a_map_are_recalled_by_the_passage_that_answers(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        mm.write("altitude.conversations", "c1", conversation(23, "The dentist appointment is on Thursday at 4pm."))
        mm.write("altitude.context", "entities_people", PEOPLE)
        (hit, *_) = mm.recall("when is the dentist appointment?", k=3)
        assert hit.key == "c1" and "Thursday at 4pm" in hit.snippet
        assert "filler" not in hit.snippet  # the message, not the conversation
        (hit, *_) = mm.recall("who is Omar", k=3)
        assert hit.key == "entities_people" and "manager" in hit.snippet and "Thursday staff meeting" in hit.snippet
        assert not any(other in hit.snippet for other in ("Priya", "Lena", "Tomas"))
        for hit in mm.recall("garden weather", k=10):
            assert len(hit.snippet) <= rt.SNIPPET_CHARS + 2  # bounded (two ellipses at most)


def test_a_long_note_is_cut_into_paragraphs_and_the_snippet_is_the_matching_text(tmp_path: Path) -> None:
    note = "\n\n".join([
        "# Personal notes",
        " ".join(["Shopping list and errands for the week, bread, milk, eggs."] * 6),
        "The patent filing is due on the 14th; the attorney needs the drawings first.",
        " ".join(["Thoughts about the garden: tomatoes, basil and a new fence."] * 6),
    ])
    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        mm.write("focus.notes", "personal", {"raw": note})
        (hit,) = mm.recall("when is the patent filing due", k=1)
        assert hit.snippet.startswith("raw: The patent filing is due on the 14th")
        assert "tomatoes" not in hit.snippet and "bread" not in hit.snippet
        assert hit.record.value == {"raw": note}  # the record is whole beside its passage


def test_confidence_is_low_when_the_passage_shares_nothing_specific(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        for i in range(60):
            mm.write("focus.notes", f"n{i}", f"project status update number {i}: on track")
        mm.write("focus.notes", "zebra", "project zebra: the migration to the new warehouse slipped a week")
        (good, *_) = mm.recall("zebra project migration", k=3)
        assert good.key == "zebra" and good.confidence >= CASCADE_BELOW
        # "quasar" is nowhere: every hit shares only "project", a word in every note
        weak = mm.recall("project quasar", k=3)
        assert weak and all(h.confidence < CASCADE_BELOW for h in weak), [(h.key, h.confidence) for h in weak]
        assert max(h.confidence for h in weak) < good.confidence / 2


def test_what_was_said_just_before_ranks_a_turn_but_never_finds_it_alone(tmp_path: Path) -> None:
    turns = ["Do you still play the cello these days?", "Yes, I practise every evening, the cello is my calm.",
             "My brother plays too, but only at weddings.", "The cello at the shop was too expensive though."]
    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        mm.declare(NamespaceSpec("chat.turns", index=("text",), kind="episodic"))
        for i, text in enumerate(turns):
            mm.write("chat.turns", f"t{i}", {"text": text})
        # both answers name the cello; the one right after the question about playing it ranks first
        hits = mm.recall("play cello", namespaces="chat.turns", k=4)
        assert [h.key for h in hits][:2] == ["t0", "t1"] or hits[0].key == "t1"
        assert hits.index(next(h for h in hits if h.key == "t1")) < hits.index(next(h for h in hits if h.key == "t3"))
        # "weddings" is in t2 only: t3, whose near text holds it, is not served for it
        assert [h.key for h in mm.recall("weddings", namespaces="chat.turns")] == ["t2"]


def test_cli_recall_shows_the_snippet(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MemoryManager(root, durability="flush") as mm:
        mm.write("altitude.conversations", "c1", conversation(11, "Booked the Austin flights for January 20."))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hrm_memory.cli.main", "--root", str(root), *args],
                              capture_output=True, text=True, timeout=60)

    out = cli("recall", "Austin flights", "-k", "1")
    assert out.returncode == 0, out.stderr
    assert "SNIPPET" in out.stdout and "Booked the Austin flights for January 20." in out.stdout
    assert "filler" not in out.stdout
    (hit,) = json.loads(cli("--json", "recall", "Austin flights", "-k", "1").stdout)
    assert hit["snippet"] == "assistant: Booked the Austin flights for January 20."
    assert len(hit["value"]["messages"]) == 40  # the record as written, beside it


def test_context_with_a_query_recalls_the_passage_not_the_whole_record(tmp_path: Path) -> None:
    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        mm.write("altitude.conversations", "c1", conversation(31, "Grandma's eye appointment is Monday at 3pm."))
        ctx = mm.context("altitude", budget=1500, query="grandma eye appointment")
        assert "Monday at 3pm" in ctx.text
        assert "filler message 7 " not in ctx.text  # not the other 39 messages


def test_an_index_of_whole_records_is_rebuilt_as_passages(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MemoryManager(root, durability="flush") as mm:
        mm.write("altitude.conversations", "c1", conversation(5, "The plumber comes on Friday morning."))
        assert mm.recall("plumber")
    db = sqlite3.connect(root / "index" / "recall.db")  # the layout before passages: one row a record
    db.executescript("DROP TABLE fts; CREATE VIRTUAL TABLE fts USING fts5(body, ctx,"
                     " tokenize='porter unicode61 remove_diacritics 2');")
    db.close()
    with MemoryManager(root, durability="flush") as mm:
        (hit,) = mm.recall("plumber")
        assert hit.snippet == "assistant: The plumber comes on Friday morning."


# -- the HRMs' own data -----------------------------------------------------------

#: Questions a user of these HRMs asks, and text the passage answering each holds.
LEGACY_QUESTIONS = [
    ("who is Gaurav?", "work colleague"),
    ("who is Bella", "daughter"),
    ("who is Stewart?", "dataset handoff"),
    ("who is Donna", "sees around corners"),
    ("when is the patent session?", "Sunday"),
    ("when is the eye appointment?", "Monday"),
    ("when is the subscription audit?", "Wednesday evening"),
    ("when is the storage cleanout due?", "weekends"),
    ("what does the user prefer in communication?", "numbers"),
    ("what are my north stars?", "family_present"),
]


@pytest.mark.skipif(not LEGACY_DATA.is_dir(), reason="needs ../shared/legacy/data beside the repository")
def test_questions_on_the_migrated_legacy_data_are_answered_by_a_top_3_snippet(tmp_path: Path) -> None:
    from hrm_memory.migration import engine

    with MemoryManager(tmp_path / "s", durability="flush") as mm:
        assert engine.apply(mm, LEGACY_DATA).ok
        answered, missed = 0, []
        for question, answer in LEGACY_QUESTIONS:
            hits = mm.recall(question, k=3)
            if any(answer.lower() in h.snippet.lower() for h in hits):
                answered += 1
            else:
                missed.append((question, [(h.namespace, h.key, h.snippet[:80]) for h in hits]))
        assert answered >= 8, missed
