"""The recall index: SQLite FTS5 over the readable text of indexed namespaces.

Derived data, never the truth: every hit is checked against the store before
it is served (:mod:`hrm_memory.recall.search`), and the index is caught up from the
change log or rebuilt from the records after a crash. Two instances serve a
manager: one file (``<root>/index/recall.db``) for persisted records, and one
in process memory for the hot tier and for consent-gated values awaiting
consent, so gated text never reaches the disk before consent.

The file is private (0600, in a 0700 directory that must not be a link),
opened in WAL mode so several processes can share it (writes serialise on
SQLite's own lock), with ``secure_delete`` so that deleted rows are zeroed
and a purge leaves no text behind in free pages; a purge also merges the
FTS segments (``optimize``) and truncates the WAL.

The tokenizer is FTS5's ``porter unicode61``: Unicode-aware words, diacritics
folded, English suffixes stemmed ("walking" finds "walked").
"""

from __future__ import annotations

import logging
import math
import re
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from hrm_memory.core.errors import CorruptRecord, StorageError
from hrm_memory.core.records import Finding
from hrm_memory.recall.index import Doc
from hrm_memory.recall.porter import stem as porter_stem
from hrm_memory.recall.text import light_stem as rt_stem
from hrm_memory.storage import fsutil as _fs
from hrm_memory.recall import index_health as health

log = logging.getLogger("hrm_memory.recall")

FILE_NAME = "recall.db"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs(
    id INTEGER PRIMARY KEY,
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_us INTEGER NOT NULL,
    updated_us INTEGER NOT NULL,
    tier TEXT NOT NULL,
    kind TEXT,
    importance REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    UNIQUE(ns, key)
);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body, ctx, near, tokenize='porter unicode61 remove_diacritics 2');
CREATE INDEX IF NOT EXISTS docs_newest ON docs(ns, updated_us DESC, key, tier, version);
CREATE INDEX IF NOT EXISTS docs_order ON docs(ns, created_us, key);
DROP INDEX IF EXISTS docs_recent;
CREATE TABLE IF NOT EXISTS vecs(id INTEGER PRIMARY KEY, vec BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# Per connection: the index's vocabulary (document frequency per stemmed
# term), and a scratch table that stems a query's words the way the index does.
_TEMP_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab(main, 'fts', 'row');
CREATE VIRTUAL TABLE IF NOT EXISTS temp.qwords USING fts5(w, tokenize='porter unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE IF NOT EXISTS temp.qstems USING fts5vocab(temp, 'qwords', 'instance');
"""
#: A query word found in more than this share of the documents (and in more
#: than DF_FLOOR of them, and in any case in more than DF_CAP) is left out of
#: the query when rarer words remain: its bm25 weight is near zero, yet
#: scoring its matches is most of a query's time; the cap bounds that work
#: at a million records, where 2% is 20,000 matches a word (BENCHMARKS.md,
#: "Figures the code's comments rely on").
DF_SHARE, DF_FLOOR, DF_CAP = 0.02, 200, 5000
#: What one query may rank: its words' passage counts, summed. Ranking costs
#: about a microsecond a matching passage (FTS5 reads each one's length from
#: its own table), so past this the commonest of the words left are left out
#: too, the rarest always kept: a query costs the same at 100k records as at
#: 10M. A small store rarely reaches it: a word is capped at 2% of the
#: passages (at least 200), so under 10k passages only a query of more than
#: 15 words at that cap does. A query left with one word in more passages than this (every
#: word common) ranks the newest POSTINGS passages holding it.
POSTINGS = 3000

#: A record is indexed as passages (:func:`hrm_memory.recall.text.passages`),
#: one FTS row each: row id ``(record id << PART_BITS) | passage number``.
PART_BITS = 10
PARTS = 1 << PART_BITS
#: What a passage's ``near`` column holds: the text of the passages written
#: just before it in its namespace (in its record, then the record created
#: before it), this many, each cut to NEAR_CHARS. A turn of a conversation
#: is often answered by what was said just before it.
NEAR_PASSAGES, NEAR_CHARS = 2, 300
#: Weights of the three columns in bm25: the passage's text, its record's
#: context (key words, namespace, kind) and what was written just before it.
#: The near weight and window were chosen on LoCoMo conversations 0-4 (near
#: 0.3-0.6, window 1-3), never on the five reported (benchmarks/bench_recall.py).
BODY_WEIGHT, CTX_WEIGHT, NEAR_WEIGHT = 1.0, 0.4, 0.4
_BM25 = f"bm25(fts, {BODY_WEIGHT}, {CTX_WEIGHT}, {NEAR_WEIGHT})"
#: The text ranking a search starts from: the best passages by bm25, no filter.
RANKED = f"SELECT rowid, {_BM25} AS s FROM fts WHERE fts MATCH ? ORDER BY s LIMIT ?"
#: The same, over the passages from a row id on (a window of the newest).
_RANKED_FROM = f"SELECT rowid, {_BM25} AS s FROM fts WHERE fts MATCH ? AND rowid >= ? ORDER BY s LIMIT ?"
#: The row id of the n-th newest passage a match finds (FTS5 walks a word's
#: passages newest first without scoring them, far cheaper than ranking).
_NTH_NEWEST = "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?"
#: Words as FTS5's unicode61 splits them (letters and digits).
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
#: The newest passages matching an expression, unranked (FTS5 walks an AND
#: from its rarest word and stops at the limit).
_NEWEST_MATCHES = "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT ?"
#: The same, oldest first: FTS5 walks a word's list forwards skipping through
#: it, while a walk newest first reads the whole list of each word (of every
#: segment) before its first match; so the forward walk comes first, and the
#: newest-first one only when more passages match than are ranked.
_OLDEST_MATCHES = "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid LIMIT ?"
#: How many of the newest passages holding every word of a question
#: :meth:`TextIndex.exact` ranks.
EXACT_CAP = 256
#: bm25's constants (FTS5's own), for the scores :meth:`TextIndex.exact` gives.
_K1, _B = 1.2, 0.75
#: How many of the best matches a search ranks by text alone before
#: filtering them, per row it returns, on its second try (the first takes
#: :func:`first_probe`).
PROBE = 8
#: Query words whose stems a process remembers (a dict of short strings).
STEM_CACHE = 50_000
#: A catch-up after which at least this many records were indexed by this
#: connection since its last merge, and at least half the index's records,
#: ends by merging the full-text segments into one (FTS5's
#: ``optimize``): a bulk build leaves a dozen segments, and every word a query
#: looks up is looked up in each. Merging rewrites the postings, so it waits
#: until that many have been written since: a cost proportional to what was
#: indexed, never paid for a few changes.
MERGE_AFTER = 5_000


#: A write of at most this many records keeps the document frequencies
#: this connection remembers, each moved by what the write added and removed
#: (the words of the passages it wrote and deleted, stemmed in Python); a
#: larger one (a bulk catch-up) forgets them, as does a write of text that
#: is not ASCII (whose tokens only SQLite's tokenizer can tell), a write by
#: another process, and every erase or purge.
KEEP_COUNTS_UP_TO = 64
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+")


class _Moved:
    """What one write transaction changed in the counts: each stem's number
    of passages (``stems``) and the number of records (``docs``); ``exact``
    false once a text was met whose stems cannot be told here. ``cache``
    is the index's ``word -> stem`` memo (:meth:`TextIndex._stems`): a
    write's words are mostly words stemmed before."""

    __slots__ = ("stems", "docs", "exact", "cache")

    def __init__(self, cache: dict[str, str]) -> None:
        self.stems: dict[str, int] = {}
        self.docs = 0
        self.exact = True
        self.cache = cache

    def passage(self, sign: int, *texts: str) -> None:
        """A passage (its columns' texts) added (``sign`` 1) or removed (-1)."""
        if not self.exact:
            return
        held = _stems_of(texts, self.cache)
        if held is None:
            self.exact = False
            return
        stems = self.stems
        for st in held:
            stems[st] = stems.get(st, 0) + sign

    def rewritten(self, old: Sequence[str], new: Sequence[str]) -> None:
        """A passage whose columns changed from ``old`` to ``new``."""
        if not self.exact:
            return
        before, after = _stems_of(old, self.cache), _stems_of(new, self.cache)
        if before is None or after is None:
            self.exact = False
            return
        stems = self.stems
        for st in after - before:
            stems[st] = stems.get(st, 0) + 1
        for st in before - after:
            stems[st] = stems.get(st, 0) - 1


def _stems_of(texts: Sequence[str], cache: dict[str, str]) -> set[str] | None:
    """The stems FTS5 indexes a passage of ``texts`` (its columns) under,
    when every text is ASCII (None otherwise: only SQLite's tokenizer can
    tell); each word's stem looked up in, or added to, ``cache``."""
    out: set[str] = set()
    for text in texts:
        if not text.isascii():
            return None
        for token in _ASCII_TOKEN.findall(text.lower()):
            st = cache.get(token)
            if st is None:
                st = porter_stem(token)
                if st is None:
                    return None
                if len(cache) > STEM_CACHE:
                    cache.clear()
                cache[token] = st
            out.add(st)
    return out


def _within_postings(terms: Sequence[str], freq: dict[str, int], budget: int | None = None) -> list[str]:
    """``terms`` rarest first while their passage counts sum to at most
    ``budget`` (None: :data:`POSTINGS`; the rarest always), in their own order."""
    budget = POSTINGS if budget is None else budget
    chosen: set[str] = set()
    total = 0
    for t in sorted(terms, key=lambda t: (freq[t], t)):
        if chosen and total + freq[t] > budget:
            break
        chosen.add(t)
        total += freq[t]
    return [t for t in terms if t in chosen]


def _near(before: list[str], parts: Sequence[str], i: int) -> str:
    """The near column of passage ``i`` of a record of ``parts``: the
    :data:`NEAR_PASSAGES` passages written before it (``before``: the last
    ones of the previous record), each cut to :data:`NEAR_CHARS`."""
    return "\n".join(p[:NEAR_CHARS] for p in [*before, *parts[:i]][-NEAR_PASSAGES:])


def first_probe(limit: int) -> int:
    """Matches a search for ``limit`` rows ranks on its first try: a quarter
    more, for the rows its filter drops."""
    return limit + limit // 4


def _in(values: Sequence[Any]) -> tuple[str, list[Any]]:
    """Placeholders for ``IN (...)`` and their arguments, padded with NULLs
    (which match nothing) to a power of two: a few statement shapes that
    SQLite's statement cache keeps, instead of one to prepare per list length
    (preparing cost 3-4 times what running did)."""
    n = 1 << max(0, len(values) - 1).bit_length()
    return ",".join("?" * n), [*values, *([None] * (n - len(values)))]


class Row(NamedTuple):
    """A search candidate (``score``: bm25, lower is better)."""

    id: int
    ns: str
    key: str
    version: int
    updated_us: int
    tier: str
    kind: str | None
    importance: float
    hits: int
    body: str
    score: float
    #: the passage that matched best (its number in the record's passages)
    part: int = 0



def _idf(n: int, f: int) -> float:
    """bm25's inverse document frequency of a word held by ``f`` of ``n`` passages."""
    return math.log(1 + (n - f + 0.5) / (f + 0.5))


class TextIndex:
    """One FTS5 index (a file under ``directory``, or memory when None). Thread-safe."""

    def __init__(self, directory: Path | None) -> None:
        self.path = None if directory is None else directory / FILE_NAME
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._stem_cache: dict[str, str] = {}
        self._df_cache: dict[str, int] = {}
        self._df_version: tuple[int, int] | None = None
        self._commits = 0  # changes this connection made to the documents that the counts were not moved by
        self._moved: _Moved | None = None  # what the write transaction under way changed in the counts
        self._ino: int | None = None  # of the file this connection opened
        self.set_aside: list[tuple[str, str]] = []  # (where, why): damaged files this instance moved aside
        self._passages = 0
        self._count_version: tuple[int, int] | None = None
        self._top_id = 0
        self._top_version: tuple[int, int] | None = None
        self._unmerged = 0  # records this connection indexed since it last merged the segments

    def exists(self) -> bool:
        """Open here, or a file on disk (a check that creates nothing)."""
        return self._db is not None or (self.path is not None and self.path.is_file())

    @property
    def persistent(self) -> bool:
        return self.path is not None

    def opened(self) -> bool:
        """Whether this instance holds a connection (it read or wrote the index)."""
        return self._db is not None

    def peek(self, name: str) -> str | None:
        """The meta value ``name`` (None: none, or unreadable), read without
        creating, migrating or locking anything when the index is not open:
        a read-only connection, closed at once (what ``close()`` of an idle
        store may need, at a fraction of an open's cost)."""
        if self._db is not None:
            return self.meta(name)
        if self.path is None or not self.path.is_file():
            return None
        try:
            db = sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True, timeout=health.BUSY_TIMEOUT)
            try:
                row = db.execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()
            finally:
                db.close()
        except sqlite3.Error:
            return None
        return None if row is None else str(row[0])

    @contextmanager
    def _locked(self, what: str = "a recall index operation") -> Iterator[None]:
        """Hold the lock; SQLite's errors come out typed (``index_health``):
        a busy or full index as ``IndexBusy``/``StorageError``; a damaged
        file is set aside under ``quarantine/`` and replaced by an empty one,
        and ``IndexRebuilt`` tells the caller to run its operation again."""
        with self._lock:
            try:
                yield
            except sqlite3.OperationalError as exc:
                self._end_transaction()
                raise health.operational(exc, self.path, what) from None
            except sqlite3.DatabaseError as exc:
                self._damaged(str(exc))

    def _end_transaction(self) -> None:
        db = self._db
        if db is not None and db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _damaged(self, problem: str) -> NoReturn:
        """Set the damaged file aside, start an empty one, raise ``IndexRebuilt``."""
        if self.path is None:
            raise CorruptRecord(f"the in-memory recall index failed ({problem})")
        self.close()
        kept = health.set_aside(self.path, self._ino)
        self.set_aside.append((str(kept or self.path), problem))
        log.warning("recall index %s is damaged (%s): set aside as %s; rebuilding it", self.path, problem, kept)
        raise health.IndexRebuilt(
            f"the recall index {self.path} was damaged ({problem}); it was moved to {kept} and is being rebuilt",
            path=str(kept or self.path),
        )

    def check(self, fix: bool) -> list[Finding]:
        """``check()`` of the index file: damage found now (``PRAGMA
        quick_check``) or set aside by this process since it opened, as
        ``corrupt-index`` findings; with ``fix``, a damaged file is set aside
        (the next recall rebuilds it)."""
        if self.path is None:
            return []
        findings = [
            Finding("corrupt-index", where, f"damaged recall index set aside ({problem}); rebuilt from the store",
                    fixed=True)
            for where, problem in self.set_aside
        ]
        if fix:
            self.set_aside.clear()
        with self._lock:
            problem = health.quick_check(self.path)
            if problem is not None:
                kept = None
                if fix:
                    self.close()
                    kept = health.set_aside(self.path, None)
                findings.append(Finding(
                    "corrupt-index", str(self.path),
                    f"the recall index is damaged: {problem}" + (f"; moved to {kept}, rebuilt by the next recall"
                                                                 if kept else "; check(fix=True) sets it aside"),
                    fixed=fix,
                ))
        return findings

    def _absent(self) -> bool:
        """No index to read or change: none opened here and no file."""
        return self._db is None and (self.path is None or not self.path.exists())

    def _conn(self) -> sqlite3.Connection:
        db = self._db
        if db is not None:
            return db
        if self.path is None:
            db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        else:
            problem = health.header_problem(self.path)
            if problem is not None:
                self._ino = os.lstat(self.path).st_ino
                self._damaged(problem)
            db = self._open_file(self.path)
            self._ino = os.lstat(self.path).st_ino
        try:
            old = db.execute("SELECT sql FROM sqlite_master WHERE name='fts'").fetchone()
            if old is not None and "near" not in old[0]:
                # an index of whole records (before passages): derived data, rebuilt
                db.executescript("DROP TABLE IF EXISTS fts; DROP TABLE IF EXISTS docs; DROP TABLE IF EXISTS vecs;"
                                 " DROP TABLE IF EXISTS meta;")
            db.executescript(_SCHEMA + _TEMP_SCHEMA)
        except sqlite3.OperationalError:
            db.close()
            raise
        except sqlite3.DatabaseError as exc:
            db.close()
            self._damaged(str(exc))
        self._db = db
        return db

    @staticmethod
    def _open_file(path: Path) -> sqlite3.Connection:
        directory = path.parent
        _fs.ensure_real_dirs(directory.parent, directory.name)
        try:
            _fs.make_dirs(directory, durable=False)
            for name in (path.name, path.name + "-wal", path.name + "-shm", path.name + "-journal"):
                p = directory / name
                if p.is_symlink():
                    raise StorageError(f"{p} is a symbolic link; hrm-memory never follows links", path=str(p))
            # Created here with 0600 (SQLite would use the umask); -wal and
            # -shm take the main file's permissions.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _fs.NOFOLLOW, _fs.FILE_MODE)
            os.close(fd)
        except OSError as exc:
            raise _fs.storage_error(exc, "open the recall index", path) from None
        db = sqlite3.connect(str(path), timeout=health.BUSY_TIMEOUT, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # derived data: rebuilt from the logs if lost
            db.execute("PRAGMA secure_delete=ON")
        except BaseException:
            db.close()  # a damaged file: no descriptor left open behind the error
            raise
        return db

    # -- writing ----------------------------------------------------------------

    def apply(self, upserts: Sequence[Doc], removals: Iterable[tuple[str, str]], meta: dict[str, str] | None = None,
              purged: Callable[[], set[str] | None] | None = None) -> None:
        """Insert or replace ``upserts``, remove ``removals`` and set ``meta``, in one transaction.
        ``purged`` (asked inside the write transaction) names the namespaces
        purged since ``upserts`` were read (None: all): those are left out,
        so an update racing a purge never writes purged text back."""
        with self._locked("an index update"):
            if not upserts and not meta and self.path is None and (
                    self._db is None or self._db.execute("SELECT 1 FROM docs LIMIT 1").fetchone() is None):
                return  # removals from an empty index (the in-memory one, most of the time)
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            removed = list(removals)
            # A small write moves the counts remembered (when there are any)
            # by what it changes; any other forgets them.
            small = len(upserts) + len(removed) <= KEEP_COUNTS_UP_TO
            moved = self._moved = _Moved(self._stem_cache) if self._df_cache and small else None
            try:
                if purged is not None and upserts:
                    gone = purged()
                    if gone is None or gone:
                        upserts = [d for d in upserts if gone is not None and d.ns not in gone]
                for ns, key in removed:
                    self._remove(db, ns, key)
                # oldest first, so a record's predecessor is in the index before it
                for doc in sorted(upserts, key=lambda d: (d.ns, d.created_us, d.key)):
                    row = db.execute("SELECT id, hits, version FROM docs WHERE ns=? AND key=?", (doc.ns, doc.key)).fetchone()
                    hits = 0
                    if row is not None:
                        if row[2] > doc.version:
                            continue  # another process indexed a newer version meanwhile
                        hits = row[1]
                        self._remove(db, doc.ns, doc.key)
                    cur = db.execute(
                        "INSERT INTO docs(ns, key, version, created_us, updated_us, tier, kind, importance, hits)"
                        " VALUES (?,?,?,?,?,?,?,?,?)",
                        (doc.ns, doc.key, doc.version, doc.created_us, doc.updated_us, doc.tier, doc.kind,
                         doc.importance, hits),
                    )
                    rowid = cur.lastrowid
                    assert rowid is not None
                    parts = (list(doc.parts) or [doc.body])[:PARTS]
                    before = self._before(db, doc.ns, doc.created_us, doc.key, rowid)
                    rows = [((rowid << PART_BITS) | i, part, doc.ctx, _near(before, parts, i))
                            for i, part in enumerate(parts)]
                    db.executemany("INSERT INTO fts(rowid, body, ctx, near) VALUES (?,?,?,?)", rows)
                    if moved is not None:
                        moved.docs += 1
                        for _, body, ctx, near in rows:
                            moved.passage(1, body, ctx, near)
                    self._unmerged += 1
                    if doc.vec is not None:
                        db.execute("INSERT INTO vecs(id, vec) VALUES (?,?)", (rowid, doc.vec))
                    # the next record's near column holds what was before it: this
                    # record's old text, or (indexed before this one) its predecessor's
                    self._refresh_next(db, doc.ns, doc.created_us, doc.key)
                for name, value in (meta or {}).items():
                    db.execute("INSERT OR REPLACE INTO meta(name, value) VALUES (?,?)", (name, value))
                db.execute("COMMIT")
            except BaseException:
                self._moved = None
                self._commits += 1  # rolled back, or not: the counts are read again
                db.execute("ROLLBACK")
                raise
            self._moved = None
            self._counted(moved)
            if meta and self._unmerged >= MERGE_AFTER:  # the end of a catch-up (its cursor written)
                self._merge(db)

    def _merge(self, db: sqlite3.Connection) -> None:
        """Merge the full-text segments into one when this connection indexed
        at least half the index's records since it last did (see
        :data:`MERGE_AFTER`), then truncate the WAL the merge filled. (The
        old segments' pages stay in the file, free, for the next writes: a
        VACUUM would copy the index's text to a temporary file outside the
        store.)"""
        if 2 * self._unmerged < int(db.execute("SELECT count(*) FROM docs").fetchone()[0]):
            return
        self._unmerged = 0
        db.execute("INSERT INTO fts(fts) VALUES ('optimize')")
        if self.path is not None:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @staticmethod
    def _before(db: sqlite3.Connection, ns: str, created_us: int, key: str, rowid: int) -> list[str]:
        """The last passages of the record created just before ``(created_us,
        key)`` in ``ns`` (the record ``rowid`` itself left out)."""
        prev = db.execute("SELECT id FROM docs WHERE ns=? AND (created_us, key) < (?, ?) AND id != ?"
                          " ORDER BY created_us DESC, key DESC LIMIT 1", (ns, created_us, key, rowid)).fetchone()
        if prev is None:
            return []
        got = db.execute("SELECT body FROM fts WHERE rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT ?",
                         (prev[0] << PART_BITS, (prev[0] << PART_BITS) | (PARTS - 1), NEAR_PASSAGES)).fetchall()
        return [str(b) for (b,) in reversed(got)]

    def _refresh_next(self, db: sqlite3.Connection, ns: str, created_us: int, key: str) -> None:
        """Write again the near column of the record created just after
        ``(created_us, key)`` in ``ns``: its first passages hold text of the
        record before it, which has just been removed or replaced (so a
        forgotten or superseded text stays in no other row)."""
        nxt = db.execute("SELECT id, created_us, key FROM docs WHERE ns=? AND (created_us, key) > (?, ?)"
                         " ORDER BY created_us, key LIMIT 1", (ns, created_us, key)).fetchone()
        if nxt is None:
            return
        rowid, nxt_created, nxt_key = nxt
        first = db.execute("SELECT rowid, body, near, ctx FROM fts WHERE rowid BETWEEN ? AND ? ORDER BY rowid LIMIT ?",
                           (rowid << PART_BITS, (rowid << PART_BITS) | (PARTS - 1), NEAR_PASSAGES)).fetchall()
        before = self._before(db, ns, nxt_created, nxt_key, rowid)
        parts = [str(body) for _, body, _, _ in first]
        moved = self._moved
        for i, (passage, body, near, ctx) in enumerate(first):
            fresh = _near(before, parts, i)
            if fresh != near:
                db.execute("UPDATE fts SET near=? WHERE rowid=?", (fresh, passage))
                if moved is not None:
                    moved.rewritten((body, ctx, near), (body, ctx, fresh))

    def _remove(self, db: sqlite3.Connection, ns: str, key: str) -> None:
        """Delete ``key``'s rows, and its text from the next record's near column."""
        row = db.execute("SELECT id, created_us FROM docs WHERE ns=? AND key=?", (ns, key)).fetchone()
        if row is not None:
            moved = self._moved
            if moved is not None:
                moved.docs -= 1
                for body, ctx, near in db.execute("SELECT body, ctx, near FROM fts WHERE rowid BETWEEN ? AND ?",
                                                  (row[0] << PART_BITS, (row[0] << PART_BITS) | (PARTS - 1))):
                    moved.passage(-1, body, ctx, near)
            db.execute("DELETE FROM fts WHERE rowid BETWEEN ? AND ?",
                       (row[0] << PART_BITS, (row[0] << PART_BITS) | (PARTS - 1)))
            db.execute("DELETE FROM vecs WHERE id=?", (row[0],))
            db.execute("DELETE FROM docs WHERE id=?", (row[0],))
            self._refresh_next(db, ns, row[1], key)

    def purge(self, namespace: str) -> int:
        """Remove every row of ``namespace`` and leave none of its text in the
        file: merged segments, zeroed free pages, an empty WAL."""
        with self._locked():
            if self._absent():
                return 0
            db = self._conn()
            keys = [k for (k,) in db.execute("SELECT key FROM docs WHERE ns=?", (namespace,))]
            self._forget_counts()  # (before: the purged texts are not read to move them)
            self.apply([], [(namespace, k) for k in keys])
            db.execute("INSERT INTO fts(fts) VALUES ('optimize')")
            if self.path is not None:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return len(keys)

    def erase(self, namespace: str, key: str) -> int:
        """Remove ``key``'s row and leave none of its text in the file
        (``MemoryManager.forget``): the row deleted with secure_delete on
        (freed content is zeroed, so no VACUUM is needed: tests/history/test_forget.py
        finds no copy without one), the full-text segments merged (the old
        ones held its terms), the WAL checkpointed and truncated."""
        with self._locked():
            if self._absent():
                return 0
            db = self._conn()
            found = db.execute("SELECT count(*) FROM docs WHERE ns=? AND key=?", (namespace, key)).fetchone()[0]
            self._forget_counts()  # (before: the erased text is not read to move them)
            self.apply([], [(namespace, key)])
            db.execute("INSERT INTO fts(fts) VALUES ('optimize')")
            if self.path is not None:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return int(found)

    def touch(self, ids: Iterable[int]) -> None:
        """Count one access of each row (ranking uses access counts)."""
        ids = list(ids)
        if not ids:
            return
        try:
            with self._locked("counting accesses"):
                db = self._conn()
                db.execute("BEGIN IMMEDIATE")
                db.executemany("UPDATE docs SET hits = hits + 1 WHERE id=?", [(i,) for i in ids])
                db.execute("COMMIT")
        except (health.IndexBusy, StorageError, health.IndexRebuilt):
            pass  # busy, full or damaged (then set aside): a count is a hint, never worth failing a recall

    # -- reading ----------------------------------------------------------------

    def meta(self, name: str) -> str | None:
        with self._locked():
            row = self._conn().execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()
            return None if row is None else str(row[0])

    def versions(self, namespace: str) -> dict[str, tuple[int, int, str]]:
        """``key -> (version, updated_us, tier)`` of every row of ``namespace``."""
        with self._locked():
            rows = self._conn().execute("SELECT key, version, updated_us, tier FROM docs WHERE ns=?", (namespace,))
            return {k: (v, u, t) for k, v, u, t in rows}

    def newest(self, namespace: str, n: int) -> list[tuple[str, int]]:
        """``(key, version)`` of the ``n`` most recently updated live rows of ``namespace``."""
        with self._locked():
            if self._absent():
                return []
            rows = self._conn().execute(
                "SELECT key, version FROM docs WHERE ns=? AND tier != 'cold' ORDER BY updated_us DESC, key LIMIT ?",
                (namespace, n),
            )
            return [(str(k), int(v)) for k, v in rows]

    def namespaces(self) -> set[str]:
        with self._locked():
            return {ns for (ns,) in self._conn().execute("SELECT DISTINCT ns FROM docs")}

    def search(
        self,
        match: str,
        namespaces: Sequence[str],
        *,
        cold: bool,
        limit: int,
        kinds: Sequence[str] | None = None,
        since_us: int | None = None,
        prefix: str | None = None,
        text: bool = True,
        newest: int | None = None,
    ) -> list[Row]:
        """The best ``limit`` rows matching the FTS5 expression ``match``
        (with their indexed text unless ``text`` is false); with ``newest``,
        ranked among the newest ``newest`` passages it matches (see
        :meth:`window`), unless the filter passes too few of them: then among
        all, as when the filter keeps few.

        Most searches filter little (every namespace a caller may read, the
        live tiers), so the best matches are ranked by FTS5 alone and only
        they are looked up and filtered; joining every match to its row
        first cost more than the ranking (BENCHMARKS.md, "Figures the code's
        comments rely on"). When too few of them pass the filter, more are ranked,
        and then the filter is joined in.
        """
        if not namespaces:
            return []
        with self._locked():
            if self._absent():
                return []  # nothing indexed yet: not worth creating the database for
            db = self._conn()
            db.execute("BEGIN")  # one snapshot for every statement
            try:
                start = 0
                if newest:
                    nth = db.execute(_NTH_NEWEST, (match, newest - 1)).fetchone()
                    start = nth[0] if nth else 0
                for probe in (first_probe(limit), PROBE * limit, 0):
                    if not probe:  # the filter keeps few: join it in
                        # (over every match: a window of the newest could hold none that passes)
                        rows = self._filtered(db, match, namespaces, cold, limit, kinds, since_us, prefix)
                        break
                    if start:
                        best = db.execute(_RANKED_FROM, (match, start, probe)).fetchall()
                    else:
                        best = db.execute(RANKED, (match, probe)).fetchall()
                    rows = self._passing(db, best, set(namespaces), cold, kinds, since_us, prefix)
                    if len(rows) >= limit or (len(best) < probe and not start):  # (a window ran out: all, below)
                        break
                rows.sort(key=lambda r: (r.score, r.id))
                del rows[limit:]
                if not text or not rows:
                    return rows
                marks, ids = _in([(r.id << PART_BITS) | r.part for r in rows])
                bodies = dict(db.execute(f"SELECT rowid, body FROM fts WHERE rowid IN ({marks})", ids).fetchall())
            finally:
                db.execute("ROLLBACK")
            return [r._replace(body=bodies.get((r.id << PART_BITS) | r.part, "")) for r in rows]

    @staticmethod
    def _passing(db: sqlite3.Connection, best: list[tuple[int, float]], namespaces: set[str], cold: bool,
                 kinds: Sequence[str] | None, since_us: int | None, prefix: str | None) -> list[Row]:
        """The records of ``best`` (``(passage row id, score)``, best first)
        that pass the filter, each with its best passage."""
        if not best:
            return []
        scores: dict[int, float] = {}
        parts: dict[int, int] = {}
        for rowid, score in best:
            doc = rowid >> PART_BITS
            if doc not in scores:
                scores[doc], parts[doc] = score, rowid & (PARTS - 1)
        marks, ids = _in(list(scores))
        sql = f"SELECT id, ns, key, version, updated_us, tier, kind, importance, hits FROM docs WHERE id IN ({marks})"
        kind_set = None if kinds is None else set(kinds)
        return [
            Row(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], "", scores[r[0]], parts[r[0]])
            for r in db.execute(sql, ids)
            if r[1] in namespaces and (cold or r[5] != "cold") and (kind_set is None or r[6] in kind_set)
            and (since_us is None or r[4] >= since_us) and (not prefix or r[2].startswith(prefix))
        ]

    @staticmethod
    def _filtered(db: sqlite3.Connection, match: str, namespaces: Sequence[str], cold: bool, limit: int,
                  kinds: Sequence[str] | None, since_us: int | None, prefix: str | None) -> list[Row]:
        """The best ``limit`` matches that pass the filter, joined in SQL."""
        where = [f"d.ns IN ({','.join('?' * len(namespaces))})"]
        args: list[Any] = [match, *namespaces]
        if not cold:
            where.append("d.tier != 'cold'")
        if kinds is not None:
            where.append(f"d.kind IN ({','.join('?' * len(kinds))})")
            args.extend(kinds)
        if since_us is not None:
            where.append("d.updated_us >= ?")
            args.append(since_us)
        if prefix:
            where.append("substr(d.key, 1, ?) = ?")
            args.extend([len(prefix), prefix])
        sql = (
            f"SELECT d.id, d.ns, d.key, d.version, d.updated_us, d.tier, d.kind, d.importance, d.hits, '',"
            f" {_BM25} AS s, fts.rowid & {PARTS - 1}"
            f" FROM fts JOIN docs d ON d.id = (fts.rowid >> {PART_BITS}) WHERE fts MATCH ? AND {' AND '.join(where)}"
            f" ORDER BY s LIMIT ?"
        )
        args.append(limit * PROBE)  # several passages of one record may match: the best of each is kept
        out: dict[int, Row] = {}
        for r in db.execute(sql, args):
            if r[0] not in out:
                out[r[0]] = Row(*r)
                if len(out) >= limit:
                    break
        return list(out.values())

    def selective(self, terms: Sequence[str], budget: int | None = None) -> list[str]:
        """``terms`` without those too common to be worth scoring (see
        :data:`DF_SHARE`), within ``budget`` postings (None: :data:`POSTINGS`);
        when all are common, the rarest, unless even it is in half the
        documents of an index over :data:`DF_CAP` passages (then none: such a
        query ranks nothing)."""
        with self._locked():
            if self._absent():
                return list(terms)
            db = self._conn()
            self._fresh(db)
            top = self._top(db)
            limit = min(DF_CAP, max(DF_FLOOR, DF_SHARE * top))
            if top <= limit:
                return list(terms)
            stems = self._stems(db, terms)
            df = self._frequencies(db, set(stems.values()), fresh=True)
            freq = {t: df.get(stems.get(t, ""), 0) for t in terms}
            kept = [t for t in terms if freq[t] <= limit]
            if kept:
                return _within_postings(kept, freq, budget)
            rarest = min(terms, key=lambda t: (freq[t], t))
            # Every word is common; one in most documents ranks nothing, unless
            # the index is small enough to rank them all cheaply (a store of
            # notes that all say "apples" still answers "apples").
            return [rarest] if freq[rarest] <= 0.5 * top or top <= DF_CAP else []

    def exact(self, words: Sequence[str], namespaces: Sequence[str], *, cold: bool, limit: int,
              kinds: Sequence[str] | None = None, since_us: int | None = None,
              prefix: str | None = None) -> list[Row]:
        """The best ``limit`` rows whose passage (its text or its record's
        context) holds every one of ``words``.

        The cost is bounded by the rarest word's postings, never the
        commonest's: FTS5 walks an AND from its rarest word, skipping through
        the others' lists, and stops after :data:`EXACT_CAP` passages (when
        more match, the newest EXACT_CAP are ranked); nothing is ranked by FTS5 (its bm25 first counts every
        posting of every word). A word no passage holds costs
        one cached look-up. A row's score is bm25 over its text and context
        (each word's idf and count there, the passage's length against the
        others found), negative like FTS5's.
        """
        if not namespaces or not words:
            return []
        with self._locked():
            if self._absent():
                return []
            db = self._conn()
            stems = self._stems(db, words)
            words = list(dict.fromkeys(w for w in words if w in stems))
            df = self._frequencies(db, {stems[w] for w in words})
            if not words or any(df.get(stems[w], 0) == 0 for w in words):
                return []
            n = max(1, self._count(db))
            match = "{body ctx} : (" + " AND ".join(f'"{w}"' for w in words) + ")"
            db.execute("BEGIN")  # one snapshot for every statement
            try:
                ids = [r for (r,) in db.execute(_OLDEST_MATCHES, (match, EXACT_CAP + 1))]
                if len(ids) > EXACT_CAP:
                    ids = [r for (r,) in db.execute(_NEWEST_MATCHES, (match, EXACT_CAP))]
                if not ids:
                    return []
                marks, args = _in(ids)
                # (read from FTS5's content table, its columns c0.. in the fts
                # table's order: through the fts table, every row id of the list
                # costs a full-text cursor of its own, twice the time)
                texts = db.execute(f"SELECT id, c0, c1 FROM fts_content WHERE id IN ({marks})", args).fetchall()
                weight = {rt_stem(w): _idf(n, df[stems[w]]) for w in words}
                # A word's light stem starts with its first three letters (a
                # suffix goes only when three remain): the other words of a
                # text (most of them, and its key's) are never stemmed.
                heads = {st[:3] for st in weight}
                counts: dict[int, tuple[int, dict[str, int]]] = {}
                for rowid, body, ctx in texts:
                    tokens = _TOKEN.findall(f"{body}\n{ctx}".lower())
                    tf: dict[str, int] = {}
                    for t in tokens:
                        if t[:3] in heads and (st := rt_stem(t)) in weight:
                            tf[st] = tf.get(st, 0) + 1
                    counts[rowid] = (len(tokens), tf)
                avg = max(1.0, sum(c[0] for c in counts.values()) / max(1, len(counts)))

                def bm25(rowid: int) -> float:
                    length, tf = counts.get(rowid, (avg, {}))
                    norm = _K1 * (1 - _B + _B * length / avg)
                    return -sum(w * (f := max(1, tf.get(st, 0))) * (1 + _K1) / (f + norm) for st, w in weight.items())

                scored = sorted(((rowid, bm25(rowid)) for rowid in ids), key=lambda x: (x[1], -x[0]))
                wanted = set(namespaces)
                rows = self._passing(db, scored[:2 * limit], wanted, cold, kinds, since_us, prefix)
                if len(rows) < limit and len(scored) > 2 * limit:  # the filter keeps few: look at all
                    rows = self._passing(db, scored, wanted, cold, kinds, since_us, prefix)
            finally:
                db.execute("ROLLBACK")
            return sorted(rows, key=lambda r: (r.score, -r.id))[:limit]

    def fill(self, terms: Sequence[str], namespaces: Sequence[str], *, cold: bool, limit: int, budget: int,
             kinds: Sequence[str] | None = None, since_us: int | None = None,
             prefix: str | None = None) -> list[Row] | None:
        """The ``limit`` rows, among the newest ``budget`` passages holding
        each of ``terms`` in their text or context (as :meth:`selective` left
        them within ``budget``), that hold the most specific of them: scored
        by the idf of the words each holds (bm25 of a word held once, at the
        average length), the newest first among equals. This is what fills the
        hits after the passages holding every word, so it is not ranked by
        FTS5's bm25, which counts every posting of the word again, the
        document frequency already counted, each time it ranks. None when the
        filter passes fewer than ``limit`` while more passages hold a word
        than were looked at: then :meth:`search` ranks them all."""
        if not namespaces or not terms:
            return []
        with self._locked():
            if self._absent():
                return []
            db = self._conn()
            stems = self._stems(db, terms)
            df = self._frequencies(db, set(stems.values()))
            n = max(1, self._count(db))
            held: dict[int, float] = {}
            more = False
            db.execute("BEGIN")  # one snapshot for every statement
            try:
                for w in dict.fromkeys(t for t in terms if df.get(stems.get(t, ""), 0)):
                    idf = _idf(n, df[stems[w]])
                    found = db.execute(_NEWEST_MATCHES, (f'{{body ctx}} : "{w}"', budget)).fetchall()
                    more = more or len(found) >= budget
                    for (rowid,) in found:
                        held[rowid] = held.get(rowid, 0.0) - idf
                # (one word: every score is its idf, and the walk went newest first)
                scored = list(held.items()) if len(terms) == 1 else sorted(held.items(), key=lambda x: (x[1], -x[0]))
                wanted = set(namespaces)
                rows = self._passing(db, scored[:limit], wanted, cold, kinds, since_us, prefix)
                if len(rows) < limit and len(scored) > limit:  # the filter keeps fewer: look at all
                    rows = self._passing(db, scored, wanted, cold, kinds, since_us, prefix)
            finally:
                db.execute("ROLLBACK")
            if len(rows) < limit and more:
                return None
            return sorted(rows, key=lambda r: (r.score, -r.id))[:limit]

    def window(self, terms: Sequence[str], budget: int | None = None) -> int | None:
        """How many of the newest passages a search for ``terms`` (as
        :meth:`selective` left them, within the same ``budget``) ranks: all
        (None) unless their passage counts sum past ``budget`` (only when a
        single common word is left), then ``budget``."""
        if len(terms) != 1:
            return None  # selective() kept them within the budget
        budget = POSTINGS if budget is None else budget
        with self._locked():
            if self._absent():
                return None
            db = self._conn()
            stems = self._stems(db, terms)
            df = self._frequencies(db, set(stems.values()))
            return budget if df.get(stems.get(terms[0], ""), 0) > budget else None

    def weights(self, terms: Sequence[str]) -> dict[str, float]:
        """How specific each of ``terms`` is here: its inverse document
        frequency over the passages (bm25's, floored at a small positive
        value); a word the index lacks weighs as a word in one passage."""
        with self._locked():
            if self._absent():
                return {t: 1.0 for t in terms}
            db = self._conn()
            stems = self._stems(db, terms)
            df = self._frequencies(db, set(stems.values()))
            n = max(1, self._count(db))
            out = {}
            for t in terms:
                f = max(1, df.get(stems.get(t, ""), 0))
                out[t] = max(0.05, _idf(n, f))
            return out

    def _count(self, db: sqlite3.Connection) -> int:
        """How many records the index holds (counted once per change, as
        :meth:`_frequencies`, called just before, saw it)."""
        version = self._df_version  # as _frequencies, just called, read it
        if version is None or self._count_version != version:
            self._passages = int(db.execute("SELECT count(*) FROM docs").fetchone()[0])
            self._count_version = version
        return self._passages

    def _top(self, db: sqlite3.Connection) -> int:
        """The highest record id (how many records the index has held, near
        enough for a share of them), read once per change, as :meth:`_fresh`,
        called just before, saw it."""
        version = self._df_version
        if version is None or self._top_version != version:
            self._top_id = int(db.execute("SELECT max(id) FROM docs").fetchone()[0] or 0)
            self._top_version = version
        return self._top_id

    def _counted(self, moved: _Moved | None) -> None:
        """After this connection's write: move the counts remembered by what
        it changed (``moved``), or forget them (None, or not exact)."""
        if moved is None or not moved.exact:
            self._commits += 1
            return
        cache = self._df_cache
        for st, n in moved.stems.items():
            if n and st in cache:
                cache[st] += n
        if moved.docs and self._count_version is not None and self._count_version == self._df_version:
            self._passages += moved.docs
        self._top_version = None  # (the highest id: one cheap statement to read again)

    def _forget_counts(self) -> None:
        """Forget every count remembered, at once (an erase or a purge: no
        count of a removed word outlives it, and the removed text is not read
        to move them: the write that follows finds none to move; a close)."""
        self._df_cache.clear()
        self._commits += 1

    def _fresh(self, db: sqlite3.Connection) -> None:
        """Forget the document frequencies (and counts) remembered when the
        index changed since they were read: a commit here (counted in
        ``_commits``) or by another process (SQLite's ``data_version``)."""
        version = (db.execute("PRAGMA data_version").fetchone()[0], self._commits)
        if version != self._df_version or len(self._df_cache) > STEM_CACHE:
            self._df_cache.clear()
            self._df_version = version

    def _frequencies(self, db: sqlite3.Connection, stems: set[str], *, fresh: bool = False) -> dict[str, int]:
        """Document frequency of each of ``stems``. FTS5 counts them by reading
        each term's whole list of documents, a cost that grows with the store,
        so they are remembered until the index changes (:meth:`_fresh`, run
        here unless ``fresh``: the caller just did)."""
        if not fresh:
            self._fresh(db)
        cache = self._df_cache
        new = sorted(stems - cache.keys())
        if new:
            marks, args = _in(new)
            got = dict(db.execute(f"SELECT term, doc FROM temp.vocab WHERE term IN ({marks})", args).fetchall())
            for t in new:
                cache[t] = int(got.get(t, 0))
        return {t: cache[t] for t in stems}

    def _stems(self, db: sqlite3.Connection, words: Sequence[str]) -> dict[str, str]:
        """``word -> stem`` as the index's tokenizer stems it (a word that is
        no token has none), remembered across queries."""
        cache = self._stem_cache
        new = [w for w in words if w not in cache]
        if new:
            if len(cache) > STEM_CACHE:
                cache.clear()
            # A word of ASCII letters and digits is stemmed here, as FTS5 would
            # (hrm_memory.recall.porter); only the others cost statements.
            rest = []
            for w in new:
                got_stem = porter_stem(w)
                if got_stem is None:
                    rest.append(w)
                else:
                    cache[w] = got_stem
            new = rest
        if new:
            db.execute("BEGIN")
            try:
                db.executemany("INSERT INTO temp.qwords(rowid, w) VALUES (?, ?)", list(enumerate(new)))
                got = dict(db.execute("SELECT doc, term FROM temp.qstems").fetchall())
                db.execute("DELETE FROM temp.qwords")
            finally:
                db.execute("COMMIT")
            for i, w in enumerate(new):
                cache[w] = got.get(i, "")
        return {w: cache[w] for w in words if cache[w]}

    def vectors(self, namespaces: Sequence[str], *, cold: bool) -> list[tuple[int, str, str, bytes]]:
        """``(id, ns, key, vector)`` of every row with a vector in ``namespaces``."""
        if not namespaces:
            return []
        sql = (
            f"SELECT d.id, d.ns, d.key, v.vec FROM vecs v JOIN docs d ON d.id = v.id"
            f" WHERE d.ns IN ({','.join('?' * len(namespaces))})" + ("" if cold else " AND d.tier != 'cold'")
        )
        with self._locked():
            return [(int(r[0]), str(r[1]), str(r[2]), bytes(r[3])) for r in self._conn().execute(sql, list(namespaces))]

    def rows(self, ids: Sequence[int]) -> dict[int, Row]:
        """Rows by id (score 0), for candidates found by the dense retriever."""
        if not ids:
            return {}
        marks, args = _in(ids)
        sql = (
            "SELECT d.id, d.ns, d.key, d.version, d.updated_us, d.tier, d.kind, d.importance, d.hits, fts.body, 0.0"
            f" FROM docs d JOIN fts ON fts.rowid = (d.id << {PART_BITS}) WHERE d.id IN ({marks})"
        )
        with self._locked():
            return {r[0]: Row(*r) for r in self._conn().execute(sql, args)}

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
            self._forget_counts()  # a connection opened later counts afresh (its data_version is its own)


__all__ = ["RANKED", "Row", "TextIndex", "first_probe"]
