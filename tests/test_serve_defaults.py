"""`python -m app serve` as an operator starts it: a real process, the default relative data
dir, started from a directory that is neither the repository nor the session's cwd, JSON logs
on stderr. Sessions keep their state there; log lines parse and carry request ids; a bad
setting is refused without echoing its value."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.conftest import AGENT, APPROVER, TOKENS, free_port, listens_on

START_SECONDS = 60


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    base_url: str
    cwd: Path
    stderr_path: Path

    def client(self, token: str = AGENT) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def log_lines(self) -> list[str]:
        return self.stderr_path.read_text(encoding="utf-8").splitlines()

    def json_log(self) -> list[dict[str, Any]]:
        """Every line parsed: a line that is not JSON raises."""
        return [json.loads(line) for line in self.log_lines() if line.strip()]

    def wait_for_log(
        self, complete: Callable[[list[dict[str, Any]]], bool]
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 10
        while True:
            lines = self.json_log()
            if complete(lines) or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)  # the server's stderr file: nothing to await


def server_environment(**settings: str) -> dict[str, str]:
    """The test's environment without any SHELLGATE_* setting, plus these."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SHELLGATE_")}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.update({f"SHELLGATE_{key.upper()}": value for key, value in settings.items()})
    return env


def run_serve(
    cwd: Path, env: dict[str, str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "app", "serve"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The server started from a scratch directory with the default data dir (`data`,
    relative) and JSON logs."""
    cwd = tmp_path_factory.mktemp("operator")
    port = free_port()
    env = server_environment(tokens=TOKENS, port=str(port), log_format="json")
    stderr_path = cwd / "server.log"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "app", "serve"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its signals never reach the test runner's group
        )
    live = ServerProcess(process, f"http://127.0.0.1:{port}", cwd, stderr_path)
    try:
        wait_until_ready(live)
        yield live
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def wait_until_ready(live: ServerProcess) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if live.process.poll() is not None:
            pytest.fail(f"server exited {live.process.returncode}: {live.log_lines()[-20:]}")
        try:
            answered = httpx.get(f"{live.base_url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            answered = False
        if answered:
            port = int(live.base_url.rsplit(":", 1)[1])
            if listens_on(live.process.pid, port):
                return
            # Another test's server took the port first: this one will say so and exit.
        time.sleep(0.1)  # polling a port that has no event to await
    pytest.fail("server did not become ready")


def test_the_default_data_dir_is_made_absolute_where_the_server_starts(
    served: ServerProcess,
) -> None:
    assert (served.cwd / "data" / "shellgate.db").is_file()


def test_a_session_elsewhere_keeps_its_state_through_cd(
    served: ServerProcess, tmp_path: Path
) -> None:
    """The session's cwd is not the server's: its state file is still found after a `cd`."""
    elsewhere = tmp_path / "project"
    (elsewhere / "sub").mkdir(parents=True)
    with served.client() as client:
        session = client.post("/v1/sessions", json={"cwd": str(elsewhere)}).json()

        def call(command: str) -> dict[str, Any]:
            response = client.post(
                "/v1/executions", json={"command": command, "session": session["id"]}
            )
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        first = call('cd sub && export GREETING=hello && greet() { echo "$GREETING from $1"; }')
        assert first["exit_code"] == 0, first["output"]
        assert "No such file" not in first["output"]
        second = call("greet $(basename $PWD)")
    assert second["exit_code"] == 0
    # The state came back; the cwd is the session's again (it is set afresh on every call).
    assert second["output"] == "hello from project\n"


def test_json_log_lines_parse_and_carry_the_request_id(served: ServerProcess) -> None:
    with served.client() as client:
        response = client.post(
            "/v1/executions",
            json={"command": "echo logged"},
            headers={"X-Request-ID": "gateway-id-123"},
        )
        generated = client.get("/v1/executions/ex_absent000000000000")
    assert response.status_code == 200
    assert response.headers["X-Request-ID"] == "gateway-id-123"
    execution_id = response.json()["id"]
    # An id the server made up is returned and named in the error body.
    assert generated.status_code == 404
    made_up = generated.headers["X-Request-ID"]
    assert len(made_up) == 32
    assert generated.json()["error"]["request_id"] == made_up

    # Access lines are written once a response has gone out: wait for both, bounded.
    lines = served.wait_for_log(
        lambda lines: (
            {"gateway-id-123", made_up}
            <= {line["request_id"] for line in lines if line["logger"] == "shellgate.access"}
        )
    )
    assert all({"time", "level", "logger", "message", "request_id"} <= set(line) for line in lines)
    mine = [line for line in lines if line["request_id"] == "gateway-id-123"]
    events = {line["event"]: line for line in mine if line.get("execution_id") == execution_id}
    assert set(events) >= {"submitted", "verdict", "started", "finished"}
    assert all(event["owner"] == "alice" for event in events.values())
    finished = events["finished"]
    assert (finished["state"], finished["exit_code"], finished["output_bytes"]) == (
        "completed",
        0,
        len(b"logged\n"),
    )
    assert isinstance(finished["duration_ms"], int)
    access = [line for line in mine if line["logger"] == "shellgate.access"]
    assert access and access[0]["route"] == "/v1/executions" and access[0]["status"] == 200
    assert any(line["request_id"] == made_up for line in lines)


def test_no_token_ticket_or_env_value_reaches_the_log(served: ServerProcess) -> None:
    with served.client() as client:
        job = client.post(
            "/v1/executions",
            json={"command": "echo ${#API_KEY}", "env": {"API_KEY": "env-s3cret-value"}},
        ).json()
        assert job["output"] == "16\n"
        ticket = client.post("/v1/ws-tickets").json()["ticket"]
        client.get("/v1/executions", params={"ticket": ticket})
        stream_ticket = client.post("/v1/ws-tickets").json()["ticket"]
    url = f"{served.base_url.replace('http', 'ws')}/v1/executions/{job['id']}/stream"
    with connect(f"{url}?ticket={stream_ticket}") as ws:
        while json.loads(ws.recv(10))["type"] != "exit":
            pass
    # uvicorn logs a WebSocket's path with its query string: the ticket must be redacted.
    deadline = time.monotonic() + 10
    while "[redacted]" not in served.stderr_path.read_text(encoding="utf-8"):
        assert time.monotonic() < deadline, "the WebSocket's accept line was not logged"
        time.sleep(0.05)  # the server's stderr file: nothing to await
    text = served.stderr_path.read_text(encoding="utf-8")
    assert AGENT not in text and APPROVER not in text
    assert ticket not in text and stream_ticket not in text
    assert "env-s3cret-value" not in text


def test_a_short_token_secret_is_refused_without_printing_it(tmp_path: Path) -> None:
    secret = "short-s3cret"
    env = server_environment(tokens=f"alice:agent:{secret}", port=str(free_port()))
    result = run_serve(tmp_path, env)
    assert result.returncode == 2
    assert "SHELLGATE_TOKENS" in result.stderr and "shorter than 16" in result.stderr
    assert secret not in result.stderr + result.stdout


def test_a_bad_setting_is_named_without_echoing_its_value(tmp_path: Path) -> None:
    env = server_environment(port="not-a-port-s3cret")
    result = run_serve(tmp_path, env)
    assert result.returncode == 2
    assert "SHELLGATE_PORT" in result.stderr
    assert "s3cret" not in result.stderr


def test_an_sse_heartbeat_rarer_than_clients_tolerate_is_refused(tmp_path: Path) -> None:
    """Clients (the SDK) and gateways take 60 s without a byte for a dead stream; the cap, 30 s,
    keeps a heartbeat (and its delay on a busy server) well inside that."""
    env = server_environment(port=str(free_port()), sse_heartbeat_seconds="31")
    result = run_serve(tmp_path, env)
    assert result.returncode == 2
    assert "SHELLGATE_SSE_HEARTBEAT_SECONDS" in result.stderr


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("log_level", "LOUD", "SHELLGATE_LOG_LEVEL"),
        ("database_url", "mysql://root@127.0.0.1/shellgate", "SHELLGATE_DATABASE_URL"),
        ("data_dir", "/proc/shellgate-cannot-be-here", "SHELLGATE_DATA_DIR"),
    ],
)
def test_a_setting_the_server_cannot_use_is_one_line_not_a_traceback(
    tmp_path: Path, setting: str, value: str, named: str
) -> None:
    env = server_environment(port=str(free_port()), **{setting: value})
    result = run_serve(tmp_path, env)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("retention_days", "inf"),  # the pruner's timedelta(days=inf) raised every interval
        ("retention_days", "1e300"),
        ("approval_timeout", "inf"),
        ("prune_interval_seconds", "Infinity"),
        ("max_timeout", "inf"),
        ("kill_grace_seconds", "nan"),
        ("auto_background_ms", "99999999999999999999"),
    ],
)
def test_an_endless_or_huge_duration_is_refused_at_start(
    tmp_path: Path, setting: str, value: str
) -> None:
    from pydantic import ValidationError

    from app.core.config import Settings, describe_settings_error

    with pytest.raises(ValidationError) as refused:
        Settings(data_dir=tmp_path, **{setting: value})
    assert f"SHELLGATE_{setting.upper()}" in describe_settings_error(refused.value)


def test_a_log_level_is_read_in_any_case(tmp_path: Path) -> None:
    from app.core.config import Settings

    assert Settings(log_level="WARNING", data_dir=tmp_path).log_level == "warning"


@pytest.mark.parametrize(
    "url",
    ["sqlite:///x.db", "sqlite+pysqlite:///x.db", "postgresql://h/db", "postgresql+psycopg://h/db"],
)
def test_every_database_url_the_server_can_use_is_accepted(tmp_path: Path, url: str) -> None:
    from app.core.config import Settings

    assert Settings(database_url=url, data_dir=tmp_path).database_url == url


def test_an_unreachable_database_at_start_says_so_in_one_line(tmp_path: Path) -> None:
    """Port 1 on loopback: nothing listens there, the connection is refused at once."""
    env = server_environment(
        port=str(free_port()), database_url="postgresql://postgres:pw-s3cret@127.0.0.1:1/test"
    )
    result = run_serve(tmp_path, env)
    assert result.returncode == 3, result.stderr
    assert "cannot reach the database" in result.stderr
    assert "Traceback" not in result.stderr
    assert "pw-s3cret" not in result.stderr
