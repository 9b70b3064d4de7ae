"""The execution use-case, one module per phase; `service.py` is the way in."""

from app.executions.answer import Outcome
from app.executions.ports import SessionBinding, SessionCall, SessionContext
from app.executions.service import ExecutionService
from app.executions.views import OutputPage

__all__ = [
    "ExecutionService",
    "Outcome",
    "OutputPage",
    "SessionBinding",
    "SessionCall",
    "SessionContext",
]
