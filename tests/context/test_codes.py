"""Codecs: lossless for every JSON value, legacy compact data stays valid,
bad declarations are refused (DESIGN.md, "Codes")."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrm_memory.namespaces import seed
from hrm_memory.namespaces.codecs import CODECS, COACHING_CODES, NAMESPACE_CODECS, PATTERN_CODES, RELATIONSHIP_CODES, UNCODED
from hrm_memory.core.codes import ESCAPE, Codec, CodecRegistry
from hrm_memory.core.values import snapshot
from hrm_memory.namespaces import seed_codecs
from hrm_memory.core.errors import InvalidNamespace, MemoryStoreError
from tests.helpers.legacy import DATA

LEGACY_DATA = DATA
STATE = LEGACY_DATA / "the_assist" / "memory" / "store" / "compressed" / "state.json"


def exact(value: Any) -> bytes:
    """JSON bytes: tells 1, 1.0 and True apart and keeps key order."""
    return orjson.dumps(value)


def tricky_strings(codec: Codec) -> list[str]:
    """Every name, alias and code of ``codec``, bare and behind escapes."""
    words = {*codec.aliases, *codec.aliases.values(), *codec.values, *codec.values.values()}
    words |= {"", ESCAPE, ESCAPE * 2, "ordinary", "r", "wk", "relationship", "work_colleague"}
    return sorted(words | {ESCAPE + w for w in words} | {ESCAPE * 2 + w for w in words})


_JSON_VALUES: dict[str, tuple[Codec, st.SearchStrategy[Any]]] = {}


def json_values(codec: Codec) -> st.SearchStrategy[Any]:
    """Any JSON value, its strings often ``codec``'s names and codes. Built
    once per codec: the tests draw it inside each example, and Hypothesis
    validates a strategy built afresh every time it is drawn from."""
    built = _JSON_VALUES.get(codec.name)
    if built is None or built[0] is not codec:
        built = _JSON_VALUES[codec.name] = (codec, _json_values(codec))
    return built[1]


def _json_values(codec: Codec) -> st.SearchStrategy[Any]:
    strings = st.sampled_from(tricky_strings(codec)) | st.text(max_size=8)
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**64 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | strings
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(strings, inner, max_size=6),
        max_leaves=40,
    )


@pytest.mark.parametrize("name", sorted(CODECS))
class TestRoundTrip:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_expand_compact_is_identity(self, name: str, data: st.DataObject) -> None:
        codec = CODECS[name]
        value = data.draw(json_values(codec))
        before = exact(value)
        packed = codec.compact(value)
        assert exact(codec.expand(packed)) == before
        assert exact(value) == before  # the input is not mutated
        assert codec.is_compact(packed)
        # what is stored is plain JSON: it survives the encoder unchanged
        assert exact(codec.expand(orjson.loads(exact(packed)))) == before

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_keeps_and_expands_nothing_tell_exactly_when_the_walk_changes_nothing(
        self, name: str, data: st.DataObject
    ) -> None:
        """The write path stores a value as its own JSON when
        ``keeps`` says compact() would not change it, and a read skips
        expand() when ``expands_nothing`` says so: both decided on the bytes.
        A True must be right (else a value would be stored or read wrongly);
        a False is only a missed shortcut, allowed where the JSON holds a
        name or code in the other role (a value code as a key, an alias as a
        string) or an escaped quote before ``~``; any other value is kept."""
        codec = CODECS[name]
        value = data.draw(json_values(codec) | st.dictionaries(st.sampled_from(tricky_strings(codec)), st.integers(-(2**63), 2**63)))
        raw = exact(value)
        if codec.keeps(raw):
            assert exact(codec.compact(value)) == raw
        if codec.expands_nothing(raw):
            assert exact(codec.expand(value)) == raw
        names = {orjson.dumps(w)[1:-1] for w in tricky_strings(codec) if not w.startswith(ESCAPE)}
        strings = set(re.findall(rb'"((?:[^"\\]|\\.)*)"', raw))
        if b'"~' not in raw and not (strings & names):
            assert codec.keeps(raw) and codec.expands_nothing(raw)

    def test_collisions(self, name: str) -> None:
        codec = CODECS[name]
        words = tricky_strings(codec)
        value = {w: [w, {w: w}] for w in words}
        assert exact(codec.expand(codec.compact(value))) == exact(value)

    def test_ordinary_data_needs_no_escape(self, name: str) -> None:
        codec = CODECS[name]
        value = {"note": "free text", "n": [1, 2.5, True, None], "nested": {"topic": "q1 planning"}}
        assert codec.compact(value) == value


def test_aliases_and_codes_apply_at_any_depth() -> None:
    altitude = CODECS["altitude"]
    readable = {"people": {"gaurav": {"relationship": "work_colleague", "tags": ["q1"], "n": 2}}}
    assert altitude.compact(readable) == {"people": {"gaurav": {"r": "wk", "t": ["q1"], "n": 2}}}
    both = {"r": 1, "relationship": "wk", "~x": "~"}
    assert altitude.compact(both) == {"~r": 1, "r": "~wk", "~~x": "~~"}
    assert altitude.expand(altitude.compact(both)) == both


def test_expand_is_total() -> None:
    # a stray escape in hand-written compact data is dropped, never an error
    assert CODECS["altitude"].expand({"~plain": "~text"}) == {"plain": "text"}
    assert not CODECS["altitude"].is_compact({"~plain": "x"})
    assert not CODECS["altitude"].is_compact({"relationship": "x"})


# -- legacy data ---------------------------------------------------------------------


def test_legacy_tables_are_copied_exactly() -> None:
    assert len(PATTERN_CODES) == 15 and len(COACHING_CODES) == 13
    assert RELATIONSHIP_CODES == {"work_colleague": "wk", "family": "fam", "friend": "fr", "service": "svc"}
    altitude = CODECS["altitude"]
    assert altitude.describe("patterns", "timeboxing") == "Uses timeboxing to prevent analysis paralysis"
    assert altitude.describe("coaching", "ask_impact") == "Ask how tasks connect to strategies and north stars"
    assert altitude.describe("relationships", "wk") == "work_colleague"
    assert altitude.describe("patterns", "nope") is None
    assert altitude.describe("nope", "timeboxing") is None
    focus = CODECS["focus"]
    assert focus.describe("stances", "sm") == focus.describe("stances", "sensemaking") is not None
    assert focus.describe("gates", "ev") == focus.describe("gates", "evaluation") is not None


@pytest.mark.skipif(not STATE.is_file(), reason=f"legacy data not found at {STATE}")
def test_legacy_compressed_state_is_already_compact() -> None:
    state = orjson.loads(STATE.read_bytes())
    altitude = CODECS["altitude"]
    for part in ("people", "patterns", "coaching"):
        assert altitude.is_compact(state[part]), part
        assert exact(altitude.compact(altitude.expand(state[part]))) == exact(state[part])
    # patterns and coaching are keyed by codes: nothing to translate either way
    for part in ("patterns", "coaching"):
        assert exact(altitude.expand(state[part])) == exact(state[part])
        assert exact(altitude.compact(state[part])) == exact(state[part])
        assert all(altitude.describe(part, code) for code in state[part])
    people = altitude.expand(state["people"])
    assert people["gaurav"] == {"relationship": "work_colleague", "tags": ["q1_planning"], "n": 2}
    # off-table codes the legacy writer truncated to 3 characters pass through
    assert {p["relationship"] for p in people.values()} >= {"ai_", "ass", "ent", "family"}
    assert altitude.is_compact(state)
    assert exact(altitude.expand(altitude.compact(state))) == exact(state)


# -- declarations --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"aliases": {"relationship": "r", "role": "r"}}, "codes must be unique"),
        ({"aliases": {"relationship": "r", "r": "x"}}, "is itself a name"),
        ({"aliases": {"tags": "tags"}}, "not shorter"),
        ({"aliases": {"ab": "abc"}}, "not shorter"),
        ({"aliases": {"relationship": ""}}, "is empty"),
        ({"aliases": {"relationship": "~r"}}, "escape character"),
        ({"values": {"~family": "f"}}, "escape character"),
        ({"values": {"family": "fam", "famous": "fam"}}, "codes must be unique"),
        ({"values": {"family": 3}}, "must map str to str"),
        ({"values": ["family"]}, "must map str to str"),
        ({"tables": {"t": {"a": 1}}}, "must map str to str"),
        ({"tables": {"": {"a": "b"}}}, "table name"),
        ({"tables": {"t": {"": "b"}}}, "empty code"),
    ],
)
def test_invalid_codec_is_refused(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidNamespace, match=words) as info:
        Codec("bad", **kwargs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, MemoryStoreError)
    assert getattr(info.value, "codec") == "bad"


@pytest.mark.parametrize("name", ["", "Bad", "has space", "x" * 40, 3])
def test_codec_name_must_be_an_identifier(name: Any) -> None:
    with pytest.raises(InvalidNamespace):
        Codec(name)


def test_codec_pickles() -> None:
    for codec in CODECS.values():
        back = pickle.loads(pickle.dumps(codec))
        assert back == codec
        assert back.compact({"relationship": "work_colleague"}) == codec.compact({"relationship": "work_colleague"})


def test_codec_is_immutable() -> None:
    codec = Codec("c", aliases={"relationship": "r"})
    source = {"relationship": "r"}
    copied = Codec("c", aliases=source)
    source["tags"] = "t"  # changing the input after construction changes nothing
    assert copied == codec and "tags" not in copied.aliases
    with pytest.raises(TypeError):
        codec.aliases["tags"] = "t"  # type: ignore[index]
    with pytest.raises(AttributeError):
        codec.name = "d"  # type: ignore[misc]


def test_registry() -> None:
    registry = CodecRegistry(seed_codecs())
    assert registry.names() == sorted(CODECS)
    assert registry.get("altitude") is CODECS["altitude"]
    assert registry.for_spec(None) is None
    with pytest.raises(InvalidNamespace, match="unknown codec"):
        registry.get("nope")
    registry.register(pickle.loads(pickle.dumps(CODECS["focus"])))  # an equal codec: no-op
    with pytest.raises(InvalidNamespace, match="registered differently"):
        registry.register(Codec("focus"))
    assert "focus" in CodecRegistry([Codec("focus")])


def test_every_seed_namespace_has_a_known_codec() -> None:
    names = {spec.name for spec in seed()}
    assert set(NAMESPACE_CODECS) <= names
    memories = {f"{hrm}.memories" for hrm in ("altitude", "focus", "reasoning", "learning", "shared")}
    assert names - set(NAMESPACE_CODECS) == UNCODED == {"focus.consent", "altitude.compressed"} | memories  # on purpose
    assert set(NAMESPACE_CODECS.values()) <= set(CODECS)


# -- the write path's shortcuts, exact against the walk ----------------------------


@pytest.mark.parametrize("name", sorted(CODECS))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compact_encoded_is_compact_for_every_shape_seen_again(name: str, data: st.DataObject) -> None:
    """``compact_encoded`` (a plan per dict shape: its keys' codes, its values
    mapped in C) gives exactly ``compact``'s result, types and key order
    included: for flat records, for the same keys holding a container the
    next time (the plan then walks that shape), and for strings that need an
    escape; the input is not changed and never returned as the result. Its
    read twin ``expand_encoded`` gives exactly ``expand``'s, and reads the
    stored form back as written."""
    codec = CODECS[name]
    words = st.sampled_from(tricky_strings(codec))
    scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False) | words
    keys = data.draw(st.lists(words | st.text(max_size=6), max_size=6, unique=True))
    for _ in range(3):  # the same shape again: its plan is reused, or dropped for a container
        value = {k: data.draw(scalars | json_values(codec) if data.draw(st.booleans()) else scalars) for k in keys}
        raw = exact(value)
        got = codec.compact_encoded(value, raw)
        assert exact(got) == exact(codec.compact(value))
        assert exact(value) == raw and got is not value
        # renames_of lists a record's renames without the walk: none exactly
        # when the codec keeps it, and the same for a hot record's copy
        # (its arrays tuples) as for the value
        pairs = codec.renames_of(value, raw)
        if pairs is not None:
            assert (pairs == ()) == (exact(got) == raw)
            assert pairs == () or not codec.keeps(raw)  # (keeps may say False of a kept record: a name in another role)
        assert codec.renames_of(snapshot(value)[0], raw) == pairs
        if pairs is not None:  # coded on the bytes where only keys are renamed: exactly the same JSON
            on_bytes = codec.compact_json(raw, pairs)
            assert on_bytes is None or on_bytes == exact(got)
        stored = exact(got)  # read back: decoded from the stored bytes, expanded by a plan of its own
        assert exact(codec.expand_encoded(orjson.loads(stored), stored)) == raw
        on_bytes = codec.expand_json(stored)  # or expanded on the bytes
        assert on_bytes is None or exact(orjson.loads(on_bytes)) == raw
        assert exact(codec.expand_encoded(value, raw)) == exact(codec.expand(value))
    other = data.draw(json_values(codec))
    assert exact(codec.compact_encoded(other, exact(other))) == exact(codec.compact(other))
    assert exact(codec.expand_encoded(other, exact(other))) == exact(codec.expand(other))
    for value in (other, codec.compact(other)):  # any JSON, coded or not: expand_json is expand, or declines
        on_bytes = codec.expand_json(exact(value))
        assert on_bytes is None or exact(orjson.loads(on_bytes)) == exact(codec.expand(value))


@pytest.mark.parametrize("codec", [CODECS["altitude"], CODECS["focus"]], ids=["altitude", "focus"])
def test_compact_json_edits_only_the_keys_it_renames(codec: Codec) -> None:
    """``compact_json`` codes a record whose only renames are keys on its
    JSON bytes: exact beside strings and keys that spell ``"name":`` inside
    them, and it declines (None) where a backslash could hide a quote."""
    name = next(iter(codec.aliases))
    cases = [
        ({name: 1, "note": f'say "{name}": no'}, "declined"),  # the pattern inside a string (escaped quotes)
        ({f'x "{name}': 1, name: 2}, "declined"),  # a key that ends with it
        ({name: [name, f"{name}:"], "k": f"{name}:"}, "coded"),  # the name as strings, a colon after
        ({name: 1, "other": {"deep": 1}}, "walked"),  # a nested dict: renames_of does not answer
        ({name: 1, "plain": "words", "n": [1, 2.5, None, True]}, "coded"),
    ]
    for value, expected in cases:
        raw = exact(value)
        pairs = codec.renames_of(value, raw)
        on_bytes = None if pairs is None else codec.compact_json(raw, pairs)
        got = "walked" if pairs is None else "declined" if on_bytes is None else "coded"
        assert got == expected, value
        if on_bytes is not None:
            assert on_bytes == exact(codec.compact(value)), value


@pytest.mark.parametrize("name", sorted(CODECS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_expand_json_is_expand_or_declines_for_any_value(name: str, data: st.DataObject) -> None:
    """For any JSON value, coded or not (bare strings, lists, nested dicts,
    names in every role, escapes): ``expand_json`` of its JSON decodes to
    exactly ``expand`` of it, or declines."""
    codec = CODECS[name]
    names = st.sampled_from(tricky_strings(codec))
    value = data.draw(json_values(codec) | names | st.lists(names, max_size=3) | st.dictionaries(names, names, max_size=3))
    for form in (value, codec.compact(value)):
        raw = exact(form)
        on_bytes = codec.expand_json(raw)
        assert on_bytes is None or exact(orjson.loads(on_bytes)) == exact(codec.expand(form))


@pytest.mark.parametrize("codec", [CODECS["altitude"], CODECS["focus"]], ids=["altitude", "focus"])
def test_expand_json_edits_only_the_names_it_should(codec: Codec) -> None:
    """``expand_json`` expands a stored record on its JSON bytes: exact for
    an alias as a key and a code as a string at any depth, an alias as a
    string and a code as a key left alone; it declines (None) where a
    backslash could hide a quote and where an escape is to undo."""
    alias = next(iter(codec.aliases.values()))
    code = next(iter(codec.values.values()))
    cases = [
        ({alias: code, "n": [code, alias], "d": {alias: [1, code]}, code: alias}, "expanded"),
        ({"plain": "words", "n": [1, 2.5, None, True]}, "as it is"),
        ({f'say "{alias}': 1}, "declined"),  # a key that ends with it, behind an escaped quote
        ({"s": f'x"{code}'}, "declined"),
        ({"~x": 1, alias: 2}, "declined"),  # an escape to undo
        (code, "declined"),  # a bare string (hypothesis found it: nothing follows its closing quote)
        ([code], "expanded"),
    ]
    for stored, expected in cases:
        raw = exact(stored)
        on_bytes = codec.expand_json(raw)
        got = "declined" if on_bytes is None else "as it is" if on_bytes is raw else "expanded"
        assert got == expected, stored
        if on_bytes is not None:
            assert exact(orjson.loads(on_bytes)) == exact(codec.expand(stored)), stored


def test_keeps_splits_at_quotes_only_when_no_name_holds_one() -> None:
    """``keeps`` finds a value's strings by splitting its JSON at quotes (in
    C): exact only while no name of the codec holds a quote, so a codec with
    such a name matches whole JSON strings instead. A True is always right;
    a False only where a name appears (here or in the other role)."""
    quoted = Codec("quoted", aliases={'say "hi"': "hi", "relationship": "r"})
    plain = Codec("plainer", aliases={"relationship": "r"})
    assert quoted._split is False and plain._split is True
    for value in ({'say "hi"': 1}, {"x": 'say "hi"'}, {"relationship": 1}, {"a": "b", "c": [1, "d"]}, {"q": 'a"b'}):
        for codec in (quoted, plain):
            raw = exact(value)
            if codec.keeps(raw):
                assert exact(codec.compact(value)) == raw, (codec.name, value)
            elif "relationship" not in raw.decode() and "say" not in raw.decode():
                raise AssertionError(f"{codec.name}: {value} holds no name, yet is not kept")
    assert not quoted.keeps(exact({'say "hi"': 1})) and not plain.keeps(exact({"relationship": 1}))


#: Names a tokenizer reads differently beside a quote (a leading ``_`` or
#: space, a trailing ``-`` or ``.``, a digit at either end, non-ASCII,
#: capitals) beside plain ones: ``tokens.renamed`` must count the first kind
#: from the texts and the second from the names alone, exactly either way.
_AWKWARD = Codec(
    "awkward",
    aliases={"tags": "t", "_private": "p", "last_updated": "lu", "a-": "b", " lead": "l", "v2": "v", "2x": "x",
             "Stance": "S", "naïve": "nv", "end.": "e"},
    values={"sensemaking": "sm", "naïve thing": "nt", "Work Colleague": "WC", "x y": "z", "-dash": "d", "q'": "q",
            "it's here": "ih", "12ab": "ab"},
)


@pytest.mark.parametrize("name", [*sorted(CODECS), "awkward"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_tokens_saved_from_renames_is_the_count_of_the_two_texts(name: str, data: st.DataObject) -> None:
    """A coded write's ``tokens_saved`` counted from the renames the
    compaction reports (``tokens.renamed``, each name counted alone) equals
    count(JSON) - count(coded JSON) with the exact o200k counter, for flat
    records, lists of strings, nested values and names that read differently
    beside a quote."""
    from hrm_memory.core import tokens
    from hrm_memory.tracing.sdk import TokensSaved

    counter = tokens.get_counter()
    if not counter.exact:
        pytest.skip("needs the exact counter (tiktoken and the o200k vocabulary)")
    codec = _AWKWARD if name == "awkward" else CODECS[name]
    names = st.sampled_from(sorted({*codec.aliases, *codec.values, *_AWKWARD.aliases, *_AWKWARD.values}))
    words = names | names | names | st.sampled_from(tricky_strings(codec))
    scalars = names | st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False) | words | st.text(max_size=8)
    flat = scalars | st.lists(scalars, max_size=4)
    keys = data.draw(st.lists(words | st.text(max_size=6), max_size=7, unique=True))
    for _ in range(3):  # the same shape again: its key renames are reused
        value = {k: data.draw(flat | flat | flat | json_values(codec)) for k in keys}
        raw = exact(value)
        stored = exact(codec.compact(value))
        want = counter.count(raw.decode()) - counter.count(stored.decode())
        pairs = codec.renames_of(value, raw)
        # a warm write (the coded form and the renames found at the write),
        # a hot one (the record's private copy) and one read back from JSON
        assert TokensSaved(raw, codec, stored=stored, pairs=pairs).value() == want
        copy = snapshot(value)  # (None for a value a write refuses: an infinity)
        assert copy is None or TokensSaved(raw, codec, copy[0]).value() == want
        assert copy is None or TokensSaved(raw, codec, copy[0], copy[1]).value() == want  # as a hot write has it
        # decided in C from the copy and its plan: the same renames as the loop
        assert copy is None or codec.renames_of_copy(copy[0], copy[1], raw) == codec.renames_of(copy[0], raw)
        assert TokensSaved(raw, codec).value() == want
        if pairs is not None:  # the renames are the places the texts differ, and no others
            for old, new in pairs:
                assert exact(old)[1:-1] in raw and exact(new)[1:-1] in stored
            assert (pairs == ()) == (raw == stored)


@pytest.mark.parametrize("name", [*sorted(CODECS), "awkward"])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_renames_of_a_hot_copy_is_the_loops_answer_for_any_record(name: str, data: st.DataObject) -> None:
    """``Codec.renames_of`` given a hot record's copy and its plan (set tests)
    answers exactly as without the plan (a loop over the values) for
    records that mix names, codes and escapes with scalars and containers of
    every kind in every order: dicts (empty or not), arrays of scalars with
    or without a code, arrays of containers."""
    codec = _AWKWARD if name == "awkward" else CODECS[name]
    names = st.sampled_from(sorted({*codec.aliases, *codec.values, *codec.values.values()}))
    words = names | names | st.sampled_from(tricky_strings(codec)) | st.text(max_size=6)
    scalars = words | words | st.none() | st.booleans() | st.integers(-9, 9) | st.floats(allow_nan=False, allow_infinity=False)
    containers = st.lists(scalars, max_size=3) | st.dictionaries(words, scalars, max_size=2) | st.lists(
        st.lists(scalars, max_size=2) | st.dictionaries(words, scalars, max_size=2), max_size=2)
    value = data.draw(st.dictionaries(words, scalars | containers, max_size=6))
    raw = exact(value)
    copy, plan = snapshot(value)  # type: ignore[misc]
    assert codec.renames_of(copy, raw, plan) == codec.renames_of(copy, raw) == codec.renames_of(value, raw)
    assert codec.renames_of_copy(copy, plan, raw) == codec.renames_of(copy, raw, plan)


@pytest.mark.parametrize("nested", [{}, {"k": 1}, {"k": "discovery"}, [], [{}], [["discovery"]], ["discovery"]],
                         ids=["empty dict", "dict", "dict of a code", "empty list", "list of a dict",
                              "list of a list", "list of a code"])
@pytest.mark.parametrize("where", ["after a code", "before a code", "alone"])
def test_renames_of_a_hot_copy_with_a_container_is_the_loops_answer(nested: Any, where: str) -> None:
    """``Codec.renames_of`` with a hot copy's plan (a hot write's count) gives
    the answer it gives without one for a record holding a container beside
    a coded string, in either order: a container other than an array of scalars without a
    code leaves the set tests to the loop (a dict among the values must
    never be hashed: ``TypeError: unhashable type: 'dict'``)."""
    codec = CODECS["focus"]
    value = {"a": "discovery", "b": nested} if where == "after a code" else (
        {"b": nested, "a": "discovery"} if where == "before a code" else {"b": nested})
    raw = exact(value)
    copy, plan = snapshot(value)  # type: ignore[misc]
    assert codec.renames_of(copy, raw, plan) == codec.renames_of(copy, raw)


@pytest.mark.parametrize("place", ["first", "after a string", "after a number", "after true", "after null",
                                   "after a list", "in a list", "a value", "after a nested dict"])
def test_tokens_saved_from_renames_for_names_that_read_differently_beside_a_quote(place: str) -> None:
    """Every name of a codec with awkward names (``_private`` reads as
    ``,"_`` + ``private`` in JSON but ``_private`` alone), in every place a
    JSON text can put it: ``tokens_saved`` from the renames is exactly
    count(JSON) - count(coded JSON)."""
    from hrm_memory.core import tokens
    from hrm_memory.tracing.sdk import TokensSaved

    counter = tokens.get_counter()
    if not counter.exact:
        pytest.skip("needs the exact counter (tiktoken and the o200k vocabulary)")
    before = {"first": {}, "after a string": {"w": "word"}, "after a number": {"n": 12}, "after true": {"b": True},
              "after null": {"z": None}, "after a list": {"l": ["x", 1]}, "after a nested dict": {"d": {"k": 1}},
              "in a list": {}, "a value": {}}[place]
    for name in [*_AWKWARD.aliases, *_AWKWARD.values]:
        if place == "in a list":
            value: dict[str, Any] = {"items": ["one", name, 2]}
        elif place == "a value":
            value = {"s": name, "n": 3}
        else:
            value = {**before, name: "v", "end": 1}
        raw = exact(value)
        stored = exact(_AWKWARD.compact(value))
        want = counter.count(raw.decode()) - counter.count(stored.decode())
        pairs = _AWKWARD.renames_of(value, raw)
        assert TokensSaved(raw, _AWKWARD, stored=stored, pairs=pairs).value() == want, (name, raw, stored, pairs)
        assert TokensSaved(raw, _AWKWARD, snapshot(value)[0]).value() == want, (name, raw, stored)
        assert TokensSaved(raw, _AWKWARD, *snapshot(value)).value() == want, (name, raw, stored)  # type: ignore[misc]
