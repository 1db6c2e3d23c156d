"""The one error of the adapters' LLM methods (storage only is adapted)."""

from __future__ import annotations


def llm_only(name: str, instead: str = "") -> NotImplementedError:
    """NotImplementedError for a legacy method that calls an LLM."""
    hint = f"; {instead}" if instead else ""
    return NotImplementedError(f"{name} calls an LLM; the adapter covers storage only{hint}")


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


__all__ = ["llm_only", "mean"]
