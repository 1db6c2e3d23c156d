"""the_assist.hrm: the storage parts (session history, intent). Planner,
Evaluator and the HRM loop call an LLM and are not adapted."""

from .history import SessionHistory, SessionRecord
from .intent import IntentStore

__all__ = ["IntentStore", "SessionHistory", "SessionRecord"]
