"""Recall stems a question's ASCII words in Python (hrm_memory.recall.porter)
instead of asking SQLite: every stem must be the one FTS5's ``porter``
tokenizer gives, or a word's document frequency is looked up under the
wrong term (a wrong idf, a word taken for absent)."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hrm_memory.recall.porter import stem

#: Every suffix a rule of the algorithm looks at, and a few endings that
#: combine them, so that random stems reach every rule and its conditions.
SUFFIXES = (
    "ational", "tional", "enci", "anci", "izer", "logi", "bli", "alli", "entli", "eli", "ousli", "ization",
    "ation", "ator", "alism", "iveness", "fulness", "ousness", "aliti", "iviti", "biliti", "ical", "ness", "icate",
    "iciti", "ful", "ative", "alize", "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment",
    "ent", "ion", "sion", "tion", "ou", "ism", "ate", "iti", "ous", "ive", "ize", "s", "es", "ies", "sses", "ss",
    "ed", "eed", "ing", "y", "ll", "e", "at", "bl", "iz", "ying", "ated", "bled", "ized", "hopping", "ly",
)
LETTERS = "bcdfghjklmnpqrstvwxzaeiouy"


class Fts5Stems:
    """FTS5's own stems, from a scratch table's vocabulary."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.executescript(
            "CREATE VIRTUAL TABLE q USING fts5(w, tokenize='porter unicode61 remove_diacritics 2');"
            "CREATE VIRTUAL TABLE qv USING fts5vocab(q, 'instance');"
        )

    def __call__(self, words: list[str]) -> dict[str, str]:
        self.db.execute("DELETE FROM q")
        self.db.executemany("INSERT INTO q(rowid, w) VALUES (?, ?)", list(enumerate(words)))
        got = dict(self.db.execute("SELECT doc, term FROM qv").fetchall())
        return {w: got[i] for i, w in enumerate(words)}


FTS5 = Fts5Stems()


def _mismatches(words: list[str]) -> list[tuple[str, str, str | None]]:
    theirs = FTS5(words)
    return [(w, theirs[w], stem(w)) for w in words if stem(w) != theirs[w]]


def _legacy_words() -> Iterator[str]:
    root = Path(os.environ.get("HRM_LEGACY_DATA", "/work/shared/legacy/data"))
    for path in sorted(root.rglob("*")) if root.is_dir() else ():
        if path.is_file() and path.suffix in (".md", ".json", ".txt", ".yaml", ".yml"):
            yield from re.findall(r"[a-z0-9]+", path.read_text(errors="replace").lower())


def test_the_stem_of_every_english_word_of_the_legacy_data_is_fts5s() -> None:
    words = sorted(set(_legacy_words())) or ["running", "generalizations", "happy", "caresses"]
    assert _mismatches(words) == []


def test_the_stems_of_the_rules_own_examples_are_fts5s() -> None:
    words = ["caresses", "ponies", "ties", "caress", "cats", "feed", "agreed", "plastered", "bled", "motoring",
             "sing", "conflated", "troubled", "sized", "hopping", "tanned", "falling", "hissing", "fizzed",
             "failing", "filing", "happy", "sky", "relational", "conditional", "rational", "valenci", "hesitanci",
             "digitizer", "conformabli", "radicalli", "differentli", "vileli", "analogousli", "vietnamization",
             "predication", "operator", "feudalism", "decisiveness", "hopefulness", "callousness", "formaliti",
             "sensitiviti", "sensibiliti", "triplicate", "formative", "formalize", "electriciti", "electrical",
             "hopeful", "goodness", "revival", "allowance", "inference", "airliner", "gyroscopic", "adjustable",
             "defensible", "irritant", "replacement", "adjustment", "dependent", "adoption", "homologou",
             "communism", "activate", "angulariti", "homologous", "effective", "bowdlerize", "probate", "rate",
             "cease", "controll", "roll", "a", "ab", "yyy", "aed", "ies", "sses", "eed", "ing", "xyzzy", "y2k",
             "2024", "abc123ing", "a" * 64 + "ing", "a" * 65 + "ing",
             # FTS5 takes a leading 'y' for a consonant when it looks for a vowel before -ed, -ing, -y
             "ysted", "yying", "ysly", "ymmed", "ybing"]
    assert _mismatches(words) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(LETTERS, max_size=7), st.sampled_from(SUFFIXES), st.sampled_from(("",) + SUFFIXES)),
                min_size=1, max_size=200))
def test_the_stem_of_a_word_made_of_the_rules_suffixes_is_fts5s(parts: list[tuple[str, str, str]]) -> None:
    words = sorted({head + a + b for head, a, b in parts})
    assert _mismatches(words) == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=70), min_size=1, max_size=200))
def test_the_stem_of_any_ascii_word_is_fts5s(words: list[str]) -> None:
    assert _mismatches(sorted(set(words))) == []


def test_a_word_that_is_not_lower_case_ascii_is_left_to_sqlite() -> None:
    for word in ("café", "naïve", "Running", "über", "日本", "a_b", "", "x y"):
        assert stem(word) is None
