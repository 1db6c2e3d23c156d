"""the_assist.hrm: only the session history is storage (Planner, Evaluator and
the HRM loop call an LLM and are not adapted)."""

from .history import SessionHistory, SessionRecord

__all__ = ["SessionHistory", "SessionRecord"]
