"""What a command inherits of the server's environment (docs/api.md#the-process): the operator's
credentials stay with the server unless passed by name, on every path a command takes (a
standby's foreground call, a background job, a session call, a PTY), in a real sandboxed
server started as a process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.config import DEFAULT_COMMAND_ENV_EXCLUDE
from tests.api.test_sandbox import _served
from tests.databases import SQLITE
from tests.test_serve_defaults import ServerProcess

# The server's variables: names an operator might well have exported where the server runs.
CREDENTIALS = {
    "OPENAI_API_KEY": "sk-inherited-1",
    "AWS_SECRET_ACCESS_KEY": "aws-inherited-2",
    "AWS_SESSION_TOKEN": "aws-inherited-3",
    "GITHUB_TOKEN": "ghp-inherited-4",
    "PGPASSWORD": "pg-inherited-5",
    "MYSQL_PWD": "my-inherited-6",
    "DATABASE_URL": "postgresql://u:inherited-7@db/app",
    "SSH_AUTH_SOCK": "/tmp/ssh-inherited-8/agent.1",
    "github_token": "lower-case-inherited-9",
    "CACHE_URL": "redis://:inherited-0@cache:6379/0",
}
ORDINARY = {"GIT_AUTHOR_NAME": "Ada", "INHERITED_ORDINARY": "kept"}
VALUE_OF_A_CREDENTIAL = re.compile(r"inherited-[0-9]")


@pytest.fixture
def server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**CREDENTIALS, **ORDINARY}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def served(tmp_path: Path, server_env: None) -> Iterator[ServerProcess]:
    (tmp_path / "work").mkdir()
    yield from _served(tmp_path / "work", SQLITE)


@pytest.fixture
def served_core(tmp_path: Path, server_env: None) -> Iterator[ServerProcess]:
    """`core` inheritance, and a credential and a glob of names passed."""
    (tmp_path / "core").mkdir()
    yield from _served(
        tmp_path / "core",
        SQLITE,
        command_env_inherit="core",
        command_env_pass="GITHUB_TOKEN, INHERITED_*",
    )


def environment_of(output: str) -> dict[str, str]:
    """`env -0`'s output as a mapping."""
    pairs = (entry.partition("=") for entry in output.split("\0") if entry)
    return {name: value for name, _, value in pairs}


def run(client: httpx.Client, **body: object) -> dict[str, object]:
    response = client.post("/v1/executions", json=body)
    assert response.status_code in (200, 202), response.text
    record: dict[str, object] = response.json()
    if record["state"] == "running":
        waited = client.get(f"/v1/executions/{record['id']}", params={"wait": 30})
        record = waited.json()
    assert record["state"] == "completed", record
    return record


def full_output(client: httpx.Client, record: dict[str, object]) -> str:
    response = client.get(f"/v1/executions/{record['id']}/output")
    assert response.status_code == 200, response.text
    return response.text


def test_no_command_inherits_a_credential_of_the_servers(served: ServerProcess) -> None:
    with served.client() as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        outputs = {
            "foreground": full_output(client, run(client, command="env -0")),
            "job": full_output(client, run(client, command="env -0", **{"async": True})),
            "session": full_output(client, run(client, command="env -0", session=session)),
            "pty": full_output(client, run(client, command="env", pty=True)),
        }
    for path, output in outputs.items():
        assert not VALUE_OF_A_CREDENTIAL.search(output), (path, output)
        assert "GIT_AUTHOR_NAME" in output and "INHERITED_ORDINARY" in output, (path, output)
    env = environment_of(outputs["foreground"])
    assert env["GIT_AUTHOR_NAME"] == "Ada" and env["PATH"] and env["HOME"]
    # The operator learns which names were kept back, never their values.
    start = "\n".join(served.log_lines())
    assert "commands do not inherit" in start
    for name in CREDENTIALS:
        assert name in start
    assert not VALUE_OF_A_CREDENTIAL.search(start)


def test_a_callers_own_variables_are_not_the_servers_and_pass(served: ServerProcess) -> None:
    with served.client() as client:
        record = run(client, command="env -0", env={"NPM_TOKEN": "the-agents-own"})
        env = environment_of(full_output(client, record))
    assert env["NPM_TOKEN"] == "the-agents-own"


def test_a_passed_name_reaches_commands_and_core_keeps_only_the_core(
    served_core: ServerProcess,
) -> None:
    with served_core.client() as client:
        env = environment_of(full_output(client, run(client, command="env -0")))
    assert env["GITHUB_TOKEN"] == CREDENTIALS["GITHUB_TOKEN"]
    assert env["INHERITED_ORDINARY"] == "kept"
    # `core`: a shell's own variables only; the other credentials stay excluded.
    assert env["PATH"] and env["HOME"]
    assert "GIT_AUTHOR_NAME" not in env and "OPENAI_API_KEY" not in env
    assert "SHELLGATE_TOKENS" not in env


def test_info_says_what_commands_inherit(served: ServerProcess, served_core: ServerProcess) -> None:
    with served.client() as client:
        default = client.get("/v1/info").json()["environment"]
    with served_core.client() as client:
        narrowed = client.get("/v1/info").json()["environment"]
    assert default == {"inherit": "all", "exclude": list(DEFAULT_COMMAND_ENV_EXCLUDE), "pass": []}
    assert narrowed["inherit"] == "core"
    assert narrowed["pass"] == ["GITHUB_TOKEN", "INHERITED_*"]
