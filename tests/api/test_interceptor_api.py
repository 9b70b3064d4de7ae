"""The interceptor through `POST /v1/executions` (docs/policy.md#interceptor): enabled with
`PUT /v1/policy`, applied only for the tools the caller lists."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, AGENT, LiveServer, make_settings, serve
from tests.databases import Databases


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """This module's own server: its tests replace the policy."""
    with serve(
        make_settings(tmp_path_factory.mktemp("interceptor"), module_databases.new())
    ) as server:
        (server.settings.workspace / "test.txt").write_text("file content\n")
        (server.settings.workspace / "pkg").mkdir()
        (server.settings.workspace / "pkg" / "package.json").write_text("{}\n")
        yield server


@pytest.fixture(scope="module")
def admin(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client(ADMIN) as client:
        yield client


@pytest.fixture
def alice(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client(AGENT) as client:
        yield client


def intercept_with(admin: httpx.Client, rules: list[dict[str, Any]] | None) -> None:
    interceptor: dict[str, Any] = {"enabled": True}
    if rules is not None:
        interceptor["rules"] = rules
    response = admin.put("/v1/policy", json={"interceptor": interceptor})
    assert response.status_code == 200, response.text


def run(
    client: httpx.Client, command: str, tools: list[str] | None, **fields: Any
) -> httpx.Response:
    body: dict[str, Any] = {"command": command, **fields}
    if tools is not None:
        body["tools"] = tools
    return client.post("/v1/executions", json=body)


def assert_intercepted(response: httpx.Response, tool: str, message: str, command: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "intercepted"
    assert error["details"]["tool"] == tool
    assert error["message"] == f"Blocked: {message}\n\nOriginal command: {command}"


# 31
def test_a_rule_on_the_original_command_blocks_before_the_cd_rewrite(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    intercept_with(admin, [{"pattern": r"^\s*cd\s+", "tool": "bash", "message": "No cd."}])
    command = "cd packages/x && echo ok"
    assert_intercepted(run(alice, command, ["bash"]), "bash", "No cd.", command)


# 32
def test_a_rule_on_the_rewritten_command_blocks_and_quotes_the_original(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    intercept_with(
        admin, [{"pattern": r"^\s*cat\s+", "tool": "read", "message": "Use read instead."}]
    )
    command = "cd pkg && cat package.json"
    response = run(alice, command, ["read"])
    assert_intercepted(response, "read", "Use read instead.", command)
    assert response.json()["error"]["message"].endswith(
        "Use read instead.\n\nOriginal command: cd pkg && cat package.json"
    )


# 33
def test_the_default_rules_apply_when_rules_are_left_out(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    intercept_with(admin, None)
    response = run(alice, "cat test.txt", ["read"])
    assert response.status_code == 422
    assert "Use the `read` tool instead of cat/head/tail" in response.json()["error"]["message"]
    assert response.json()["error"]["details"]["tool"] == "read"


# 34
def test_an_empty_rule_list_lets_cat_run_and_a_custom_rule_blocks(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    intercept_with(admin, [])
    response = run(alice, "cat test.txt", ["read"])
    assert response.status_code == 200
    assert response.json()["output"] == "file content\n"

    intercept_with(
        admin, [{"pattern": r"^\s*customcmd\s+", "tool": "mytool", "message": "Use mytool."}]
    )
    assert_intercepted(
        run(alice, "customcmd --flag", ["mytool"]), "mytool", "Use mytool.", "customcmd --flag"
    )


# 41
@pytest.mark.parametrize("tools", [None, [], ["grep", "glob"]])
def test_a_rule_whose_tool_the_caller_lacks_does_not_block(
    admin: httpx.Client, alice: httpx.Client, tools: list[str] | None
) -> None:
    intercept_with(admin, None)
    response = run(alice, "cat test.txt", tools)
    assert response.status_code == 200
    assert response.json()["output"] == "file content\n"


def test_a_disabled_interceptor_blocks_nothing(admin: httpx.Client, alice: httpx.Client) -> None:
    response = admin.put("/v1/policy", json={"interceptor": {"enabled": False}})
    assert response.status_code == 200
    assert run(alice, "cat test.txt", ["read"]).status_code == 200


def test_an_intercepted_command_creates_no_execution(
    live: LiveServer, admin: httpx.Client, alice: httpx.Client
) -> None:
    intercept_with(admin, [{"pattern": r"^\s*touch\s+", "tool": "write", "message": "Write."}])
    marker = live.settings.workspace / "intercepted-marker"
    before = admin.get("/v1/executions", params={"limit": 500}).json()["data"]
    assert run(alice, f"touch {marker}", ["write"]).status_code == 422
    assert admin.get("/v1/executions", params={"limit": 500}).json()["data"] == before
    assert not marker.exists()


def test_the_dry_run_and_submit_apply_the_cd_rewrite_alike(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    # Only the rewritten command (`cat … | wc -l`) matches: the full text starts with `cd` and
    # the flat segments split the pipe apart.
    intercept_with(
        admin, [{"pattern": r"^\s*cat\s+\S+\s*\|", "tool": "read", "message": "Pipe read."}]
    )
    command = "cd pkg && cat package.json | wc -l"
    evaluated = alice.post("/v1/policy/evaluate", json={"command": command, "tools": ["read"]})
    assert evaluated.json()["cd_rewrite"] == {"cwd": "pkg", "command": "cat package.json | wc -l"}
    assert evaluated.json()["interception"] == {
        "tool": "read",
        "message": f"Blocked: Pipe read.\n\nOriginal command: {command}",
    }
    assert_intercepted(run(alice, command, ["read"]), "read", "Pipe read.", command)

    # With an explicit cwd there is no rewrite: neither blocks.
    with_cwd = alice.post(
        "/v1/policy/evaluate", json={"command": command, "tools": ["read"], "cwd": "."}
    ).json()
    assert with_cwd["cd_rewrite"] is None
    assert with_cwd["interception"] is None
    ran = run(alice, command, ["read"], cwd=".")
    assert ran.status_code == 200
    assert ran.json()["output"].strip() == "1"
