"""Log set-up: text or JSON lines on stderr, each carrying the request id it was logged under.

The request id lives in a context variable set by the HTTP middleware; tasks started while a
request is handled (a job's supervisor, an approval's expiry) inherit it, so an execution's
`finished` line carries the id of the request that submitted it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Literal

from app.core.visible_text import visible

LogFormat = Literal["text", "json"]

request_id_var: ContextVar[str | None] = ContextVar("shellgate_request_id", default=None)
# Set only while tracing is on: the request's trace, so a log line leads to its trace.
trace_id_var: ContextVar[str | None] = ContextVar("shellgate_trace_id", default=None)

# Attributes every LogRecord has; anything else on a record came from `extra=` and is a field.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "request_id",
    "trace_id",
    "taskName",
}


def current_request_id() -> str | None:
    return request_id_var.get()


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        record.trace_id = trace_id_var.get()
        return True


# Query parameters that carry a credential: `ticket`, and any name holding token, key,
# secret, password, auth, signature or credential (`?token=`, `?access_token=`,
# `?api_key=`, `?X-Amz-Signature=`), case-insensitively.
_CREDENTIAL_NAME = (
    r"[A-Za-z0-9_.\-]*(?:ticket|token|key|secret|passw(?:or)?d|auth|signature|credential)"
    r"[A-Za-z0-9_.\-]*"
)
_TICKET_IN_QUERY = re.compile(r"([?&]" + _CREDENTIAL_NAME + r"=)[^&\s\"']+", re.IGNORECASE)
_CREDENTIAL_HINTS = (
    "ticket",
    "token",
    "key",
    "secret",
    "passw",
    "auth",
    "signature",
    "credential",
)


class RedactTicketsFilter(logging.Filter):
    """WebSocket tickets travel in query strings, and uvicorn logs a path with its query: a
    ticket, a token or any other credential-like parameter is replaced before any handler sees
    the line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "=" in message and any(hint in message.casefold() for hint in _CREDENTIAL_HINTS):
            record.msg = _TICKET_IN_QUERY.sub(r"\1[redacted]", message)
            record.args = None
        return True


class ClientFrameErrorFilter(logging.Filter):
    """A text frame that is not UTF-8 is the client's error: uvicorn closes the connection
    with 1007 as it should, but logs it as an ERROR with a traceback, so one client could fill
    the log with them. It is one INFO line here."""

    MESSAGE = "Invalid UTF-8 sequence received from client."

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == self.MESSAGE:
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "a WebSocket text frame was not UTF-8: closed with 1007"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, then the fields a
    caller passed with `extra=` (an execution's id, owner, state, …)."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            payload["trace_id"] = trace_id
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """One line per record: a message carries text a command or a request chose (a cwd, a
    path, an error's text), so its line breaks and other control characters are written as
    escapes (`\\n`, `\\x1b`): no message forges the next line or drives the reader's terminal.
    A traceback, appended after the message, keeps its lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "request_id", None) is None:
            record.request_id = "-"
        return super().format(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = visible(record.message)
        return super().formatMessage(record)


def configure_logging(level: str, log_format: LogFormat) -> None:
    """Route every logger, uvicorn's included, through one stderr handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    handler.addFilter(RedactTicketsFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
    client_errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, ClientFrameErrorFilter) for f in client_errors.filters):
        client_errors.addFilter(ClientFrameErrorFilter())
