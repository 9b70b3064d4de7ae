"""Bodies that strict JSON refuses are a 422 that runs nothing, on every route with a body:
a lone surrogate, NaN, ±Infinity, a number out of float range, bytes that are not UTF-8."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app.core.strict_json import json_body_limit
from tests.conftest import ADMIN, LiveServer

MiB = 1024 * 1024

BAD_VALUES = {
    "lone_surrogate": '"echo \\udcff"',
    "lone_low_surrogate_key": '"x", "\\udc80": 1',
    "nan": "NaN",
    "infinity": "Infinity",
    "minus_infinity": "-Infinity",
    "overflow": "1e999",
    "minus_overflow": "-1e999",
}

# Every route that reads a JSON body, with a template where the bad value goes.
ROUTES = [
    ("POST", "/v1/executions", '{"command": "echo ran > ran-%s", "timeout": %s}'),
    ("POST", "/v1/executions", '{"command": %s}'),
    ("POST", "/v1/executions/ex_missing0000/input", '{"data": %s}'),
    ("POST", "/v1/executions/ex_missing0000/resize", '{"rows": %s, "cols": 80}'),
    ("POST", "/v1/sessions", '{"timeout_ms": %s}'),
    ("PATCH", "/v1/sessions/ss_missing0000", '{"timeout_ms": %s}'),
    ("POST", "/v1/sessions/ss_missing0000/run", '{"command": "true", "timeout_ms": %s}'),
    ("POST", "/v1/approvals/ap_missing0000/approve", '{"reason": %s}'),
    ("POST", "/v1/approvals/ap_missing0000/deny", '{"reason": %s}'),
    ("PUT", "/v1/policy", '{"default": "allow", "rules": [{"match": %s, "approval": "deny"}]}'),
    ("POST", "/v1/policy/evaluate", '{"command": %s}'),
]


def _body(template: str, value: str) -> bytes:
    if template.count("%s") == 2:
        return (template % ("x", value)).encode()
    return (template % value).encode()


@pytest.mark.parametrize("value_name", sorted(BAD_VALUES))
@pytest.mark.parametrize(("method", "path", "template"), ROUTES)
def test_a_body_strict_json_refuses_is_a_422_that_runs_nothing(
    server: LiveServer, method: str, path: str, template: str, value_name: str
) -> None:
    value = BAD_VALUES[value_name]
    with server.client(ADMIN) as admin:
        before = admin.get("/v1/executions", params={"limit": 500}).json()["data"]
        response = admin.request(
            method,
            path,
            content=_body(template, value),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert detail[0]["type"] == "json_invalid"
        after = admin.get("/v1/executions", params={"limit": 500}).json()["data"]
    assert len(after) == len(before)
    assert not list(server.settings.workspace.glob("ran-*"))


def test_a_body_that_is_not_utf8_is_a_422(server: LiveServer) -> None:
    with server.client(ADMIN) as admin:
        response = admin.post(
            "/v1/executions",
            content=b'{"command": "echo \xff"}',
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 422
    assert "UTF-8" in response.json()["detail"][0]["ctx"]["error"]


def test_nesting_deeper_than_any_request_is_a_422_not_a_crash(server: LiveServer) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with server.client(ADMIN) as admin:
        response = admin.post(
            "/v1/policy/evaluate", content=deep, headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 422


def test_a_validation_error_echoing_an_unencodable_input_is_still_a_422(
    server: LiveServer,
) -> None:
    # Bytes that are not UTF-8 in a query value reach validation (not JSON) and are echoed in
    # the 422's `input`: the answer must still encode.
    with server.client(ADMIN) as admin:
        response = admin.get(httpx.URL(server.base_url + "/v1/executions?limit=%ff%ed%b3%bf"))
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], list)


def test_huge_but_finite_numbers_are_clamped_not_refused(server: LiveServer) -> None:
    with server.client(ADMIN) as admin:
        response = admin.post(
            "/v1/executions",
            content=b'{"command": "echo ok", "timeout": 1e308}',
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 200, response.text
    assert response.json()["timeout_seconds"] == 3600


def _chunked(prefix: bytes, size: int, suffix: bytes) -> Iterator[bytes]:
    yield prefix
    for _ in range(size // (1024 * 1024)):
        yield b"a" * (1024 * 1024)
    yield suffix


@pytest.mark.parametrize("token", [None, ADMIN])
def test_a_body_over_the_cap_is_a_413_before_anything_reads_it(
    server: LiveServer, token: str | None
) -> None:
    # FastAPI parses a body before the token's check: without a cap anyone reaching the port
    # made the server hold and parse any size (200 MB: ~800 MB of memory, then a 401).
    command = b'{"command": "echo ran > ran-big; true '
    limit = json_body_limit(server.settings.max_command_bytes)
    with server.client(token) as client:
        for route in ("/v1/executions", "/v1/policy/evaluate", "/v1/sessions"):
            declared = client.post(
                route,
                content=command + b"a" * (limit + MiB) + b'"}',
                headers={"Content-Type": "application/json"},
            )
            streamed = client.post(
                route,
                content=_chunked(command, limit + MiB, b'"}'),
                headers={"Content-Type": "application/json"},
            )
            for response in (declared, streamed):
                assert response.status_code == 413, response.text
                error = response.json()["error"]
                assert error["code"] == "too_large"
                assert error["message"] == f"The request body is larger than {limit} bytes."
                assert response.headers["X-Request-ID"] == error["request_id"]
    assert not (server.settings.workspace / "ran-big").exists()


def test_an_upload_is_not_held_to_the_body_cap(server: LiveServer) -> None:
    data = b"x" * (json_body_limit(server.settings.max_command_bytes) + MiB)
    with server.client() as agent:
        response = agent.put("/v1/files", params={"path": "big-upload.bin"}, content=data)
        assert response.status_code == 201, response.text
        assert agent.get("/v1/files", params={"path": "big-upload.bin"}).content == data
