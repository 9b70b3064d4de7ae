"""Tokens, roles and owners (docs/api.md#access-and-roles), error envelopes, and bad input that
never yields a 500."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import ADMIN, AGENT, AGENT2, APPROVER, LiveServer


def test_no_token_is_401_on_every_route_but_health(server: LiveServer) -> None:
    with server.client(token=None) as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/readyz").status_code == 200
        for method, path in [
            ("GET", "/v1/executions"),
            ("POST", "/v1/executions"),
            ("GET", "/v1/info"),
            ("GET", "/metrics"),
            ("GET", "/v1/tool"),
            ("GET", "/v1/policy"),
            ("GET", "/v1/approvals"),
        ]:
            response = anonymous.request(method, path, json={"command": "true"})
            assert response.status_code == 401, path
            assert response.json()["error"]["code"] == "unauthenticated"


def test_a_wrong_token_is_401(server: LiveServer) -> None:
    with server.client(token="not-a-real-token-at-all") as client:
        assert client.get("/v1/executions").status_code == 401


def test_agents_see_only_their_own_executions(server: LiveServer) -> None:
    with server.client(AGENT) as alice, server.client(AGENT2) as bob:
        mine = alice.post("/v1/executions", json={"command": "echo alice"}).json()
        assert bob.get(f"/v1/executions/{mine['id']}").status_code == 404
        assert bob.get(f"/v1/executions/{mine['id']}/output").status_code == 404
        assert bob.post(f"/v1/executions/{mine['id']}/cancel").status_code == 404
        listed = {item["id"] for item in bob.get("/v1/executions").json()["data"]}
        assert mine["id"] not in listed


def test_approvers_read_everything_but_cannot_run(server: LiveServer) -> None:
    with server.client(AGENT) as alice, server.client(APPROVER) as carol:
        mine = alice.post("/v1/executions", json={"command": "echo visible"}).json()
        assert carol.get(f"/v1/executions/{mine['id']}").json()["output"] == "visible\n"
        response = carol.post("/v1/executions", json={"command": "true"})
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"


def test_admin_can_run_and_cancel_anything(server: LiveServer) -> None:
    with server.client(AGENT) as alice, server.client(ADMIN) as root:
        job = alice.post("/v1/executions", json={"command": "sleep 5", "async": True}).json()
        assert root.post(f"/v1/executions/{job['id']}/cancel").json()["state"] == "cancelled"
        assert root.post("/v1/executions", json={"command": "true"}).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"command": ""},
        {"command": 5},
        {"command": "true", "unknown": 1},
        {"command": "true", "timeout": "soon"},
        {"command": "true", "env": {"A": 1}},
        {"command": "true", "env": ["A"]},
        {"command": "true", "async": "maybe"},
        {"command": "true", "approval_wait": -1},
        {"command": "a\u0000b"},
        {"command": "true", "env": {"A B": "x"}},
        {"command": "true", "cwd": "\u0000"},
        {"command": "x" * (64 * 1024 + 1)},
    ],
)
def test_bad_input_is_a_4xx_with_a_message_and_never_a_500(
    agent: httpx.Client, body: object
) -> None:
    before = len(agent.get("/v1/executions", params={"limit": 500}).json()["data"])
    response = agent.post("/v1/executions", json=body)
    assert 400 <= response.status_code < 500, response.text
    payload = response.json()
    assert "error" in payload or "detail" in payload
    assert "Traceback" not in response.text
    after = len(agent.get("/v1/executions", params={"limit": 500}).json()["data"])
    assert after == before


def test_malformed_json_is_a_422_not_a_500(agent: httpx.Client) -> None:
    response = agent.post(
        "/v1/executions", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422


def test_unknown_route_uses_the_error_envelope(agent: httpx.Client) -> None:
    response = agent.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_info_names_the_caller_of_each_token(server: LiveServer) -> None:
    for token, name, role in [
        (AGENT, "alice", "agent"),
        (APPROVER, "carol", "approver"),
        (ADMIN, "root", "admin"),
    ]:
        with server.client(token) as client:
            assert client.get("/v1/info").json()["caller"] == {"name": name, "role": role}


def test_info_reports_limits_and_the_tool_object_describes_the_api(agent: httpx.Client) -> None:
    info = agent.get("/v1/info").json()
    assert info["max_jobs"] == 32
    assert info["limits"]["max_command_bytes"] == 64 * 1024
    tool = agent.get("/v1/tool").json()
    assert tool["name"] == "bash"
    assert "300 seconds" in tool["description"]
    assert tool["inputSchema"]["required"] == ["command"]
    assert "async" in tool["inputSchema"]["properties"]


def test_metrics_count_executions(agent: httpx.Client) -> None:
    agent.post("/v1/executions", json={"command": "true"})
    text = agent.get("/metrics").text
    assert 'shellgate_executions_finished_total{state="completed"}' in text
