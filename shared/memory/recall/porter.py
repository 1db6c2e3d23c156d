"""The stem SQLite's FTS5 ``porter`` tokenizer gives an ASCII word, in Python.

Recall looks a query word's document frequency up in the index's vocabulary,
which holds stems. Asking SQLite for a stem costs a round trip through a
scratch FTS5 table (an insert, a read of its vocabulary and a delete, each
several statements inside FTS5); this module gives the same stem from the
rules FTS5 applies (Martin Porter's 1980 algorithm as FTS5 implements it,
with its own order of rules and its few departures from the paper), so a
question of new words costs no statement for its stems.

Only words of ASCII letters and digits, lower case, are stemmed here (what
the ``unicode61`` tokenizer makes of such a word is the word itself); any
other word is left to SQLite (:func:`stem` returns None). Nothing is
remembered here: the index remembers the stems of the words it was asked
about, with its own state.
tests/recall/test_recall_porter.py compares every result with FTS5's own.
"""

from __future__ import annotations

import re

_ASCII_WORD = re.compile(r"[a-z0-9]+")
#: FTS5 passes longer tokens (in bytes) through unstemmed, and shorter ones.
MAX_TOKEN, MIN_TOKEN = 64, 3


def _vowel(c: str, y_is_vowel: bool) -> bool:
    return c in "aeiou" or (y_is_vowel and c == "y")


def _gobble_vc(s: str, start: int, end: int, prev_consonant: bool) -> int:
    """Past the first vowel-then-consonant run of ``s[start:end]`` (given
    whether the letter before ``start`` was a consonant): the offset (from
    ``start``) just after that consonant, or 0 when there is none."""
    consonant = prev_consonant
    i = start
    while i < end:
        consonant = not _vowel(s[i], consonant)
        if not consonant:
            break
        i += 1
    i += 1
    while i < end:
        consonant = not _vowel(s[i], consonant)
        if consonant:
            return i - start + 1
        i += 1
    return 0


def _m_gt0(s: str, n: int) -> bool:
    """Porter's (m > 0) on the stem ``s[:n]``."""
    return _gobble_vc(s, 0, n, False) != 0


def _m_gt1(s: str, n: int) -> bool:
    """(m > 1)."""
    first = _gobble_vc(s, 0, n, False)
    return first != 0 and _gobble_vc(s, first, n, True) != 0


def _m_eq1(s: str, n: int) -> bool:
    """(m = 1)."""
    first = _gobble_vc(s, 0, n, False)
    return first != 0 and _gobble_vc(s, first, n, True) == 0


def _o_star(s: str, n: int) -> bool:
    """(*o): the stem ends consonant, vowel, consonant, the last not w, x or y."""
    if s[n - 1] in "wxy":
        return False
    mask = 0
    consonant = False
    for i in range(n):
        consonant = not _vowel(s[i], consonant)
        mask = ((mask << 1) | consonant) & 0x7
    return mask == 0x5


def _m_gt1_s_or_t(s: str, n: int) -> bool:
    """(m > 1 and (*S or *T))."""
    return s[n - 1] in "st" and _m_gt1(s, n)


def _has_vowel(s: str, n: int) -> bool:
    """(*v*), as FTS5 reads it: a 'y' is a vowel anywhere but first."""
    return any(_vowel(s[i], i > 0) for i in range(n))


# (suffix, condition on the stem left, replacement), in FTS5's order. The
# first suffix the word ends with, and is longer than, is the one: when its
# condition fails, no other rule of the step is tried.
_STEP2 = (
    ("ational", _m_gt0, "ate"), ("tional", _m_gt0, "tion"), ("enci", _m_gt0, "ence"), ("anci", _m_gt0, "ance"),
    ("izer", _m_gt0, "ize"), ("logi", _m_gt0, "log"), ("bli", _m_gt0, "ble"), ("alli", _m_gt0, "al"),
    ("entli", _m_gt0, "ent"), ("eli", _m_gt0, "e"), ("ousli", _m_gt0, "ous"), ("ization", _m_gt0, "ize"),
    ("ation", _m_gt0, "ate"), ("ator", _m_gt0, "ate"), ("alism", _m_gt0, "al"), ("iveness", _m_gt0, "ive"),
    ("fulness", _m_gt0, "ful"), ("ousness", _m_gt0, "ous"), ("aliti", _m_gt0, "al"), ("iviti", _m_gt0, "ive"),
    ("biliti", _m_gt0, "ble"),
)
_STEP3 = (
    ("ical", _m_gt0, "ic"), ("ness", _m_gt0, ""), ("icate", _m_gt0, "ic"), ("iciti", _m_gt0, "ic"),
    ("ful", _m_gt0, ""), ("ative", _m_gt0, ""), ("alize", _m_gt0, "al"),
)
_STEP4 = (
    ("al", _m_gt1, ""), ("ance", _m_gt1, ""), ("ence", _m_gt1, ""), ("er", _m_gt1, ""), ("ic", _m_gt1, ""),
    ("able", _m_gt1, ""), ("ible", _m_gt1, ""), ("ant", _m_gt1, ""), ("ement", _m_gt1, ""), ("ment", _m_gt1, ""),
    ("ent", _m_gt1, ""), ("ion", _m_gt1_s_or_t, ""), ("ou", _m_gt1, ""), ("ism", _m_gt1, ""), ("ate", _m_gt1, ""),
    ("iti", _m_gt1, ""), ("ous", _m_gt1, ""), ("ive", _m_gt1, ""), ("ize", _m_gt1, ""),
)


def _by_penultimate(rules: tuple[tuple[str, object, str], ...]) -> dict[str, list[tuple[str, object, str]]]:
    """A step's rules by their suffix's next-to-last letter (the only rules a
    word can end with are those of its own next-to-last letter)."""
    out: dict[str, list[tuple[str, object, str]]] = {}
    for rule in rules:
        out.setdefault(rule[0][-2], []).append(rule)
    return out


_STEPS = tuple(_by_penultimate(step) for step in (_STEP2, _STEP3, _STEP4))


def _apply(word: str, rules: dict[str, list[tuple[str, object, str]]]) -> str:
    if len(word) < 2:
        return word
    for suffix, cond, out in rules.get(word[-2], ()):
        n = len(word) - len(suffix)
        if n > 0 and word.endswith(suffix):
            return word[:n] + out if cond(word, n) else word  # type: ignore[operator]
    return word


def stem(word: str) -> str | None:
    """FTS5's porter stem of ``word``; None when ``word`` is not lower-case
    ASCII letters and digits (SQLite's tokenizer then decides)."""
    if not _ASCII_WORD.fullmatch(word):
        return None
    n = len(word)
    if n > MAX_TOKEN or n < MIN_TOKEN:
        return word
    w = word
    # Step 1a
    if w[-1] == "s":
        if w[-2] == "e":
            n = len(w)
            if (n > 4 and w[-4] == "s" and w[-3] == "s") or (n > 3 and w[-3] == "i"):
                w = w[:-2]
            else:
                w = w[:-1]
        elif w[-2] != "s":
            w = w[:-1]
    # Step 1b
    removed = False
    if len(w) >= 2 and w[-2] == "e":
        if len(w) > 3 and w.endswith("eed"):
            if _m_gt0(w, len(w) - 3):
                w = w[:-1]
        elif len(w) > 2 and w.endswith("ed") and _has_vowel(w, len(w) - 2):
            w, removed = w[:-2], True
    elif len(w) >= 2 and w[-2] == "n":
        if len(w) > 3 and w.endswith("ing") and _has_vowel(w, len(w) - 3):
            w, removed = w[:-3], True
    if removed:
        if len(w) > 2 and w[-2:] in ("at", "bl", "iz"):
            w += "e"
        else:
            c = w[-1]
            if not _vowel(c, False) and c not in "lsz" and len(w) >= 2 and c == w[-2]:
                w = w[:-1]
            elif _m_eq1(w, len(w)) and _o_star(w, len(w)):
                w += "e"
    # Step 1c
    if w[-1] == "y" and _has_vowel(w, len(w) - 1):
        w = w[:-1] + "i"
    # Steps 2 to 4
    for rules in _STEPS:
        w = _apply(w, rules)
    # Step 5a
    if w[-1] == "e":
        n = len(w) - 1
        if _m_gt1(w, n) or (_m_eq1(w, n) and not _o_star(w, n)):
            w = w[:-1]
    # Step 5b
    if len(w) > 1 and w[-1] == "l" and w[-2] == "l" and _m_gt1(w, len(w) - 1):
        w = w[:-1]
    return w


__all__ = ["stem"]
