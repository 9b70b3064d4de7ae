"""A NUL character in an id or a name is a 4xx on every database, never a 500: PostgreSQL
refuses NUL in text (it raised out of the lookup as a 500 when schemathesis sent a session id
with one); SQLite stores and compares it. Nothing runs."""

from __future__ import annotations

import pytest

from tests.conftest import ADMIN, AGENT, LiveServer

REQUESTS = {
    "session-in-body": ("POST", "/v1/executions", {"command": "touch ran", "session": "ss\0x"}),
    "execution-id": ("GET", "/v1/executions/ex_%00abc", None),
    "execution-output": ("GET", "/v1/executions/ex_%00abc/output", None),
    "execution-cancel": ("POST", "/v1/executions/ex_%00abc/cancel", None),
    "session-id": ("GET", "/v1/sessions/ss_%00abc", None),
    "session-run": ("POST", "/v1/sessions/ss_%00abc/run", {"command": "touch ran"}),
    "approval-id": ("GET", "/v1/approvals/ap_%00abc", None),
    "approval-deny": ("POST", "/v1/approvals/ap_%00abc/deny", None),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_a_nul_in_an_id_is_a_4xx_that_runs_nothing(server: LiveServer, name: str) -> None:
    method, path, body = REQUESTS[name]
    token = ADMIN if "approval" in name else AGENT
    with server.client(token) as client:
        response = client.request(method, path, json=body)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]["message"], response.text
    assert not (server.settings.workspace / "ran").exists()
