"""A JSON body is parsed and validated on the event loop, so its cost is bounded before any of
it is spent (RELIABILITY.md, "One request against all the others"): a body over the limit is a
413 `too_large` (before: 64 MiB was read whole, 0.4 s of parsing), a body of more arrays,
objects or members than any request has is a 422 before the parse, a 422 reports its first
errors only (before: 100,000 wrong env values took 2.2 s to report), and an `env` has at most
1,000 names. Nothing runs in any of these cases."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx

from app.api.errors import MAX_REPORTED_ERRORS
from app.api.strict_route import json_body_limit
from app.core.strict_json import MAX_CONTAINERS, MAX_MEMBERS
from app.policy.env_rules import MAX_ENV_NAMES
from tests.conftest import ADMIN, LiveServer

JSON = {"Content-Type": "application/json"}


def _executions(admin: httpx.Client) -> int:
    return len(admin.get("/v1/executions", params={"limit": 500}).json()["data"])


def _ran(server: LiveServer) -> list[str]:
    return [path.name for path in server.settings.workspace.glob("ran-*")]


def test_a_body_over_the_limit_is_a_413_too_large(server: LiveServer) -> None:
    limit = json_body_limit(server.settings.max_command_bytes)
    padding = "x" * limit
    body = json.dumps({"command": "echo ran > ran-413", "env": {"PAD": padding}}).encode()
    with server.client(ADMIN) as admin:
        before = _executions(admin)
        declared = admin.post("/v1/executions", content=body, headers=JSON)

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for start in range(0, len(body), 64 * 1024):
                yield body[start : start + 64 * 1024]

        streamed = admin.post("/v1/executions", content=chunks(), headers=JSON)
        evaluated = admin.post(
            "/v1/policy/evaluate", content=json.dumps({"command": padding}), headers=JSON
        )
        assert _executions(admin) == before
    for response in (declared, streamed, evaluated):
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["code"] == "too_large"
        assert error["message"] == f"The request body is larger than {limit} bytes."
    assert "chunked" in streamed.request.headers.get("transfer-encoding", "")
    assert not _ran(server)


def test_a_body_at_the_limit_is_read(server: LiveServer) -> None:
    # A command at its size limit, written all in escapes, still fits.
    command = "\x01" * server.settings.max_command_bytes
    body = json.dumps({"command": command}).encode()
    assert len(body) <= json_body_limit(server.settings.max_command_bytes)
    with server.client(ADMIN) as admin:
        response = admin.post("/v1/policy/evaluate", content=body, headers=JSON)
    assert response.status_code == 200, response.text


def test_more_arrays_objects_or_members_than_any_request_has_is_a_422(
    server: LiveServer,
) -> None:
    lists = ",".join(["[]"] * (MAX_CONTAINERS + 1))
    members = ",".join(f'"V{i}": "x"' for i in range(MAX_MEMBERS + 1))
    bodies = {
        f"more than {MAX_CONTAINERS} arrays and objects": (
            f'{{"command": "echo ran > ran-lists", "tools": [{lists}]}}'
        ),
        f"more than {MAX_MEMBERS} object members": (
            f'{{"command": "echo ran > ran-members", "env": {{{members}}}}}'
        ),
    }
    # Brackets and colons in strings are not counted: a command may hold any number.
    fine = json.dumps({"command": "echo '" + "[{:" * (MAX_CONTAINERS + 1) + "' >/dev/null"})
    with server.client(ADMIN) as admin:
        for reason, body in bodies.items():
            response = admin.post("/v1/executions", content=body, headers=JSON)
            assert response.status_code == 422, response.text
            detail = response.json()["detail"]
            assert detail[0]["type"] == "json_invalid"
            assert detail[0]["ctx"]["error"] == reason
        assert admin.post("/v1/policy/evaluate", content=fine, headers=JSON).status_code == 200
    assert not _ran(server)


def test_a_422_reports_the_first_errors_without_echoing_long_inputs(server: LiveServer) -> None:
    wrong = {f"V{i}": i for i in range(5000)}  # numbers where strings belong
    with server.client(ADMIN) as admin:
        many = admin.post("/v1/executions", json={"command": "echo ran > ran-x", "env": wrong})
        long = admin.post("/v1/executions", json={"command": "true", "tools": [0] * 5000})
    assert many.status_code == 422, many.text
    detail = many.json()["detail"]
    assert len(detail) == MAX_REPORTED_ERRORS
    assert detail[0]["type"] == "string_type"
    assert detail[0]["input"] == 0  # a short input is still echoed
    assert long.status_code == 422, long.text
    (error,) = long.json()["detail"]
    assert error["type"] == "too_long"
    assert "input" not in error  # 5,000 numbers are not sent back
    assert len(long.content) < 1024
    assert not _ran(server)


def test_an_env_of_more_than_1000_names_is_a_422(server: LiveServer) -> None:
    env = {f"V{i}": "x" for i in range(MAX_ENV_NAMES + 1)}
    with server.client(ADMIN) as admin:
        before = _executions(admin)
        run = admin.post("/v1/executions", json={"command": "echo ran > ran-env", "env": env})
        session = admin.post("/v1/sessions", json={"env": env})
        evaluated = admin.post("/v1/policy/evaluate", json={"command": "true", "env": env})
        assert _executions(admin) == before
        fits = admin.post(
            "/v1/policy/evaluate", json={"command": "true", "env": dict(list(env.items())[:-1])}
        )
    for response in (run, session, evaluated):
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["message"] == f"env has {MAX_ENV_NAMES + 1} names; the limit is 1000"
    assert fits.status_code == 200, fits.text
    assert not _ran(server)
