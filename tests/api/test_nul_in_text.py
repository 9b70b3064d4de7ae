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


CWD_REQUESTS = {
    "execution-cwd": ("/v1/executions", {"command": "touch ran", "cwd": "~\0"}),
    "execution-cwd-middle": ("/v1/executions", {"command": "touch ran", "cwd": "a\0b"}),
    "dry-run-cwd": ("/v1/policy/evaluate", {"command": "touch ran", "cwd": "~\0"}),
    "session-cwd": ("/v1/sessions", {"cwd": "~\0"}),
}


@pytest.mark.parametrize("name", sorted(CWD_REQUESTS))
def test_a_nul_in_a_cwd_is_a_422_that_runs_and_stores_nothing(
    server: LiveServer, name: str
) -> None:
    # `~` + NUL made the home-directory lookup raise: a 500 with a traceback.
    path, body = CWD_REQUESTS[name]
    with server.client(ADMIN) as admin:
        before = (admin.get("/v1/executions").json(), admin.get("/v1/sessions").json())
    with server.client(AGENT) as client:
        response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == "cwd must not contain a NUL byte"
    with server.client(ADMIN) as admin:
        after = (admin.get("/v1/executions").json(), admin.get("/v1/sessions").json())
    assert after == before
    assert not (server.settings.workspace / "ran").exists()
