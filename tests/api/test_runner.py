"""The streaming runner `POST /v1/sessions/{id}/run` over real HTTP: items, status, timeouts,
PTY, env, plus its guards and the policy (docs/streaming.md#the-ndjson-runner)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.waiting import pending_approval_for

ItemList = list[dict[str, Any]]
RAISE_ONLY = (
    "timeout_ms must be strictly greater than the configured timeout ({n} ms); "
    "the per-call argument can only raise the timeout, never lower it"
)
LARGE = 2 * 4096 + 100


@dataclass
class Run:
    status_code: int
    execution_id: str | None = None
    items: ItemList = field(default_factory=list)
    error: dict[str, Any] | None = None

    def text(self, stream: str) -> str:
        data = b""
        for item in self.items:
            chunk = item[stream]
            data += base64.b64decode(chunk) if item.get("encoding") else chunk.encode()
        return data.decode("utf-8", "replace")

    @property
    def stdout(self) -> str:
        return self.text("stdout")

    @property
    def stderr(self) -> str:
        return self.text("stderr")

    @property
    def status(self) -> dict[str, Any]:
        return self.items[-1]


def assert_item_contract(items: ItemList) -> None:
    """Data items carry one non-empty chunk and no status; exactly one status item, last, with
    no data; signal -1 (timeout) or any signal means no exit code."""
    assert items, "a run always ends with a status item"
    *data, status = items
    for item in data:
        assert item["exit_code"] is None and item["signal"] is None, item
        assert (item["stdout"] == "") != (item["stderr"] == ""), item
    assert status["stdout"] == "" and status["stderr"] == "", status
    assert status["truncated"] is False
    assert (status["exit_code"] is None) != (status["signal"] is None), status
    if status["signal"] == -1:
        assert status["exit_code"] is None


def run(client: httpx.Client, session_id: str, command: str, **fields: Any) -> Run:
    body = {"command": command, **fields}
    with client.stream("POST", f"/v1/sessions/{session_id}/run", json=body) as response:
        if response.status_code != 200:
            response.read()
            return Run(response.status_code, error=response.json()["error"])
        assert response.headers["content-type"].startswith("application/x-ndjson")
        items = [json.loads(line) for line in response.iter_lines() if line]
        result = Run(200, response.headers["x-execution-id"], items)
    assert_item_contract(result.items)
    return result


def new_session(client: httpx.Client, **fields: Any) -> str:
    response = client.post("/v1/sessions", json=fields)
    assert response.status_code == 201, response.text
    session_id: str = response.json()["id"]
    return session_id


@pytest.fixture
def session(agent: httpx.Client) -> str:
    return new_session(agent)


@pytest.fixture
def pty_session(agent: httpx.Client) -> str:
    return new_session(agent, pty=True, env={"GREETING": "hello-pty"})


# --- the tool object and the raise-only timeout (mod.rs::timeout_default_tests) ---------------


def test_default_timeout_is_600000_and_the_description_states_it(agent: httpx.Client) -> None:
    created = agent.post("/v1/sessions", json={}).json()
    assert created["timeout_ms"] == 600000
    tool = agent.get(f"/v1/sessions/{created['id']}/tool").json()
    assert tool == created["tool"]
    assert tool["name"] == "bash_run"
    assert "default timeout is 600000 milliseconds (10 minutes)" in tool["description"]
    assert "strictly greater than 600000" in tool["description"]
    schema = tool["inputSchema"]
    assert schema["properties"]["command"]["type"] == "string"
    assert schema["properties"]["timeout_ms"]["type"] == "integer"
    assert schema["required"] == ["command"]


def test_a_new_timeout_rebuilds_the_description_with_no_stale_value(
    agent: httpx.Client, session: str
) -> None:
    patched = agent.patch(f"/v1/sessions/{session}", json={"timeout_ms": 1_800_000})
    assert patched.status_code == 200
    tool = agent.get(f"/v1/sessions/{session}/tool").json()
    assert "600000" not in json.dumps(tool)
    assert "default timeout is 1800000 milliseconds (30 minutes)" in tool["description"]
    assert "strictly greater than 1800000" in tool["description"]
    assert patched.json()["tool"] == tool


def test_the_description_says_how_the_session_delivers_stderr(
    agent: httpx.Client, session: str, pty_session: str
) -> None:
    piped = agent.get(f"/v1/sessions/{session}/tool").json()["description"]
    assert "stdout and stderr arrive apart" in piped
    tool = agent.get(f"/v1/sessions/{pty_session}/tool").json()
    assert "stdout and stderr arrive apart" not in tool["description"]
    assert "terminal" in tool["description"] and "`stderr` stays empty" in tool["description"]
    # PATCHing the mode regenerates it.
    patched = agent.patch(f"/v1/sessions/{pty_session}", json={"pty": False}).json()
    assert "stdout and stderr arrive apart" in patched["tool"]["description"]


@pytest.mark.parametrize("timeout_ms", [0, 600000, 599999])
def test_raise_only_check_rejects_zero_default_and_below(
    agent: httpx.Client, session: str, timeout_ms: int
) -> None:
    result = run(agent, session, "echo never", timeout_ms=timeout_ms)
    assert result.status_code == 422
    assert result.error is not None
    assert result.error.pop("request_id")
    assert result.error == {
        "code": "invalid_request",
        "message": RAISE_ONLY.format(n=600000),
        "details": {},
    }


def test_raise_only_check_accepts_default_plus_one_and_absent(
    agent: httpx.Client, session: str
) -> None:
    assert run(agent, session, "echo raised", timeout_ms=600001).stdout == "raised\n"
    assert run(agent, session, "echo default").stdout == "default\n"


def test_refusals_happen_before_anything_runs(
    server: LiveServer, agent: httpx.Client, session: str
) -> None:
    marker = server.settings.workspace / "ran-anyway"
    assert run(agent, session, f"touch {marker}", timeout_ms=1).status_code == 422
    assert run(agent, session, f"/usr/bin/touch {marker}").status_code == 422
    assert run(agent, session, f"touch {marker}; rm -rf /nonexistent-x").status_code == 403
    assert not marker.exists()


# --- the guards -------------------------------------------------------------------------------


def test_an_absolute_command_is_refused(agent: httpx.Client, session: str) -> None:
    result = run(agent, session, "/bin/echo hi")
    assert result.status_code == 422
    assert result.error is not None
    assert result.error["code"] == "invalid_request"
    assert result.error["message"] == "absolute command not allowed, use relative path"


def test_a_critical_pattern_is_refused_with_its_exact_source(
    agent: httpx.Client, session: str
) -> None:
    result = run(agent, session, "rm -rf /nonexistent-x")
    assert result.status_code == 403
    assert result.error is not None
    assert result.error["message"] == r"Pattern match found: (?i)\brm\s+-[a-z]*[rRfF][a-z]*\s+\/"


# --- pipes (test.rs) --------------------------------------------------------------------------


def test_echo(agent: httpx.Client, session: str) -> None:
    result = run(agent, session, "echo hello")
    assert result.items == [
        {"stdout": "hello\n", "stderr": "", "exit_code": None, "signal": None, "truncated": False},
        {"stdout": "", "stderr": "", "exit_code": 0, "signal": None, "truncated": False},
    ]


def test_the_command_text_reaches_bash_unchanged(agent: httpx.Client, session: str) -> None:
    command = """printf '%s|' "a'b\\"c" '$(id)' `echo tick` "$((1+2))"; echo"""
    assert run(agent, session, command).stdout == "a'b\"c|$(id)|tick|3|\n"


def test_stderr_is_kept_apart(agent: httpx.Client, session: str) -> None:
    result = run(agent, session, "echo oops >&2")
    assert result.stderr == "oops\n"
    assert result.stdout == ""


def test_stdout_and_stderr_together(agent: httpx.Client, session: str) -> None:
    result = run(agent, session, "echo out; echo err >&2; echo out2")
    assert result.stdout == "out\nout2\n"
    assert result.stderr == "err\n"


def test_session_env_reaches_the_command(agent: httpx.Client) -> None:
    session_id = new_session(agent, env={"MY_VAR": "from-session"})
    assert run(agent, session_id, 'echo "$MY_VAR"').stdout == "from-session\n"


def test_an_invalid_env_name_is_refused(agent: httpx.Client) -> None:
    response = agent.post("/v1/sessions", json={"env": {"1BAD": "x"}})
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "Invalid bash env name: 1BAD"


def test_a_nonexistent_cwd_is_refused(
    server: LiveServer, agent: httpx.Client, tmp_path: Path
) -> None:
    missing = tmp_path / "nope"
    response = agent.post("/v1/sessions", json={"cwd": str(missing)})
    assert response.status_code == 422
    assert response.json()["error"]["message"] == f"Working directory does not exist: {missing}"
    # A cwd that disappears later is refused at the call, before anything runs.
    vanishing = tmp_path / "vanishing"
    vanishing.mkdir()
    session_id = new_session(agent, cwd=str(vanishing))
    vanishing.rmdir()
    result = run(agent, session_id, "echo never")
    assert result.status_code == 422
    assert result.error is not None
    assert result.error["message"] == f"Working directory does not exist: {vanishing}"


def test_large_output_is_all_delivered_in_items_of_at_most_4096_bytes(
    agent: httpx.Client, session: str
) -> None:
    result = run(agent, session, f"head -c {LARGE} /dev/zero | tr '\\0' a")
    assert result.stdout == "a" * LARGE
    data = result.items[:-1]
    assert all(0 < len(item["stdout"].encode()) <= 4096 for item in data)
    assert all(item["truncated"] == (len(item["stdout"]) == 4096) for item in data)


@pytest.mark.parametrize("code", [42, 0])
def test_exit_code(agent: httpx.Client, session: str, code: int) -> None:
    result = run(agent, session, f"exit {code}")
    assert result.status["exit_code"] == code
    assert result.status["signal"] is None


def test_sigkill_reports_signal_9_and_no_exit_code(agent: httpx.Client, session: str) -> None:
    result = run(agent, session, "echo dying; kill -KILL $$")
    assert result.stdout == "dying\n"
    assert result.status["signal"] == 9
    assert result.status["exit_code"] is None


def test_data_items_carry_no_status_and_the_status_item_no_data(
    agent: httpx.Client, session: str
) -> None:
    result = run(agent, session, "for i in 1 2 3; do echo o$i; echo e$i >&2; done; exit 7")
    *data, status = result.items
    assert len(data) >= 2
    assert all(item["exit_code"] is None and item["signal"] is None for item in data)
    assert status == {
        "stdout": "",
        "stderr": "",
        "exit_code": 7,
        "signal": None,
        "truncated": False,
    }


def test_bytes_that_are_not_utf8_arrive_as_base64(agent: httpx.Client, session: str) -> None:
    result = run(agent, session, r"printf '\377\376bin'")
    encoded = [item for item in result.items if item.get("encoding") == "base64"]
    assert encoded
    assert b"".join(base64.b64decode(item["stdout"]) for item in encoded) == b"\xff\xfebin"


def test_a_character_split_between_writes_arrives_whole(agent: httpx.Client, session: str) -> None:
    result = run(agent, session, r"printf '\342\202'; sleep 0.3; printf '\254 done'")
    assert result.stdout == "€ done"
    assert not any(item.get("encoding") for item in result.items)


# --- PTY (test.rs, spawn_bash_pty) ------------------------------------------------------------


def test_pty_echo_merges_into_stdout_with_crlf(agent: httpx.Client, pty_session: str) -> None:
    result = run(agent, pty_session, "echo hello; echo err >&2")
    assert result.stdout == "hello\r\nerr\r\n"
    assert all(item["stderr"] == "" for item in result.items)
    assert result.status["exit_code"] == 0


def test_pty_exit_code(agent: httpx.Client, pty_session: str) -> None:
    assert run(agent, pty_session, "exit 3").status["exit_code"] == 3


def test_pty_env(agent: httpx.Client, pty_session: str) -> None:
    result = run(agent, pty_session, 'echo "$GREETING $TERM"')
    assert result.stdout == "hello-pty xterm-256color\r\n"


def test_pty_signal(agent: httpx.Client, pty_session: str) -> None:
    result = run(agent, pty_session, "kill -KILL $$")
    assert (result.status["exit_code"], result.status["signal"]) == (None, 9)


def test_pty_large_output(agent: httpx.Client, pty_session: str) -> None:
    result = run(agent, pty_session, f"head -c {LARGE} /dev/zero | tr '\\0' a")
    assert result.stdout == "a" * LARGE
    assert all(len(item["stdout"].encode()) <= 4096 for item in result.items)


# --- timeouts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pty", [False, True])
def test_timeout_ends_with_signal_minus_one_after_the_output_so_far(
    agent: httpx.Client, pty: bool
) -> None:
    session_id = new_session(agent, timeout_ms=500, pty=pty)
    started = time.monotonic()
    result = run(agent, session_id, "echo before; sleep 10; echo after")
    assert time.monotonic() - started < 5
    assert result.stdout.replace("\r\n", "\n") == "before\n"
    assert result.status == {
        "stdout": "",
        "stderr": "",
        "exit_code": None,
        "signal": -1,
        "truncated": False,
    }
    record = agent.get(f"/v1/executions/{result.execution_id}").json()
    assert record["state"] == "timed_out"


def test_a_raised_timeout_applies_to_that_call_only(agent: httpx.Client) -> None:
    session_id = new_session(agent, timeout_ms=300)
    assert run(agent, session_id, "sleep 0.6; echo slow", timeout_ms=5000).stdout == "slow\n"
    assert run(agent, session_id, "sleep 5").status["signal"] == -1


def test_a_ten_second_timeout_on_echo_ends_normally(agent: httpx.Client) -> None:
    session_id = new_session(agent, timeout_ms=10_000)
    result = run(agent, session_id, "echo hi")
    assert result.stdout == "hi\n"
    assert (result.status["exit_code"], result.status["signal"]) == (0, None)


# --- the registry -----------------------------------------------------------------------------


def test_each_run_is_an_execution_with_the_users_command(agent: httpx.Client, session: str) -> None:
    result = run(agent, session, "echo recorded; exit 4")
    record = agent.get(f"/v1/executions/{result.execution_id}").json()
    assert record["state"] == "failed"
    assert record["exit_code"] == 4
    assert record["command"] == "echo recorded; exit 4"
    assert record["session"] == session
    assert record["mode"] == "foreground"
    assert record["output"] == "recorded\n"
    listed = agent.get("/v1/executions", params={"limit": 20}).json()["data"]
    assert result.execution_id in [item["id"] for item in listed]
    output = agent.get(f"/v1/executions/{result.execution_id}/output")
    assert output.content == b"recorded\n"


def test_a_client_that_goes_away_cancels_its_call(agent: httpx.Client, session: str) -> None:
    body = {"command": "echo started; sleep 30"}
    with agent.stream("POST", f"/v1/sessions/{session}/run", json=body) as response:
        execution_id = response.headers["x-execution-id"]
        first = json.loads(next(response.iter_lines()))
        assert first["stdout"] == "started\n"
    record = agent.get(f"/v1/executions/{execution_id}", params={"wait": 15}).json()
    assert record["state"] == "cancelled"


def test_another_agent_cannot_run_in_my_session(server: LiveServer, session: str) -> None:
    with server.client("agent2-secret-0123456789") as bob:
        result = run(bob, session, "echo intruder")
    assert result.status_code == 404
    assert result.error is not None
    assert result.error["code"] == "not_found"


def test_unknown_fields_are_refused(agent: httpx.Client, session: str) -> None:
    response = agent.post(f"/v1/sessions/{session}/run", json={"command": "true", "cwd": "/"})
    assert response.status_code == 422


# --- the policy (docs/policy.md) applies after the runner's checks ----------------------------

POLICY = {
    "default": "allow",
    "rules": [
        {"match": "echo forbidden*", "approval": "deny"},
        {"match": "echo ask-*", "approval": "prompt"},
    ],
}


@pytest.fixture(scope="module")
def gated(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("runner-policy")
    policy_file = tmp / "policy.json"
    policy_file.write_text(json.dumps(POLICY))
    with serve(make_settings(tmp, module_databases.new(), policy_file=policy_file)) as live:
        yield live


def test_policy_deny_on_run_is_403(gated: LiveServer) -> None:
    with gated.client(AGENT) as client:
        session_id = new_session(client)
        result = run(client, session_id, "echo forbidden stuff")
    assert result.status_code == 403
    assert result.error is not None
    assert result.error["code"] == "policy_denied"
    assert "Blocked by bash pattern: echo forbidden*" in result.error["message"]


def test_a_prompt_waits_for_the_decision_before_the_first_item(gated: LiveServer) -> None:
    with (
        gated.client(AGENT) as client,
        gated.client(APPROVER) as approver,
        ThreadPoolExecutor(1) as pool,
    ):
        session_id = new_session(client)
        pending = pool.submit(run, client, session_id, "echo ask-me")
        approval = pending_approval_for(approver, "echo ask-me")
        assert not pending.done()
        assert approver.post(f"/v1/approvals/{approval['id']}/approve", json={}).status_code == 200
        result = pending.result(timeout=20)
    assert result.status_code == 200
    assert result.stdout == "ask-me\n"
    assert result.execution_id == approval["execution_id"]


def test_a_denied_approval_is_403_approval_rejected(gated: LiveServer) -> None:
    with (
        gated.client(AGENT) as client,
        gated.client(APPROVER) as approver,
        ThreadPoolExecutor(1) as pool,
    ):
        session_id = new_session(client)
        pending = pool.submit(run, client, session_id, "echo ask-no")
        approval = pending_approval_for(approver, "echo ask-no")
        approver.post(f"/v1/approvals/{approval['id']}/deny", json={"reason": "not today"})
        result = pending.result(timeout=20)
    assert result.status_code == 403
    assert result.error is not None
    assert result.error["code"] == "approval_rejected"
    assert "not today" in result.error["message"]


def test_the_runners_pattern_check_comes_before_the_policy(gated: LiveServer) -> None:
    with gated.client(AGENT) as client:
        session_id = new_session(client)
        result = run(client, session_id, "echo ask-x; rm -rf /nonexistent-x")
        assert result.status_code == 403
        assert result.error is not None
        assert result.error["message"].startswith("Pattern match found: ")
        pending = client.get("/v1/approvals", params={"state": "pending"}).json()["data"]
    assert not [item for item in pending if "nonexistent-x" in item["command"]]
