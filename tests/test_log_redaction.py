"""Access-log lines never carry a credential passed in a query string (app/observability/logs)."""

from __future__ import annotations

import logging

import pytest

from app.observability.logs import RedactTicketsFilter


def _filtered(message: str) -> str:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, message, None, None)
    RedactTicketsFilter().filter(record)
    return record.getMessage()


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        ('"WebSocket /v1/executions/x/stream?ticket=abc123" [accepted]', "abc123"),
        ('"WebSocket /v1/x?token=s3cr3t" [accepted]', "s3cr3t"),
        ('"GET /v1/x?offset=0&access_token=s3cr3t HTTP/1.1" 200', "s3cr3t"),
        ('"GET /v1/x?API_KEY=s3cr3t&b=1 HTTP/1.1" 200', "s3cr3t"),
        ('"GET /f?X-Amz-Signature=s3cr3t HTTP/1.1" 200', "s3cr3t"),
        ('"GET /f?client_secret=s3cr3t HTTP/1.1" 200', "s3cr3t"),
    ],
)
def test_a_credential_in_a_query_is_redacted(line: str, secret: str) -> None:
    out = _filtered(line)
    assert secret not in out
    assert "[redacted]" in out


def test_other_parameters_are_kept() -> None:
    line = '"GET /v1/executions?limit=5&state=running HTTP/1.1" 200'
    assert _filtered(line) == line
