"""`shellgate run --idle-timeout/--idle-action/--notify-url` against a real server."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import AGENT, LiveServer, make_settings, serve
from tests.databases import SQLITE
from tests.test_cli import shellgate
from tests.waiting import eventually
from tests.webhook_receiver import webhook_receiver

NOTICE = "No output for 1s; the command may be waiting for input or stuck."


def test_run_idle_timeout_stops_waiting_and_names_the_job(server: LiveServer) -> None:
    result = shellgate(
        server.base_url, AGENT, "run", "--idle-timeout", "1", "echo prompt-here; sleep 60"
    )
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith("prompt-here\n")
    assert NOTICE in result.stdout
    job = result.stdout.split("Backgrounded as job ", 1)[1].split(";", 1)[0]
    with server.client() as client:
        assert client.get(f"/v1/executions/{job}").json()["state"] == "running"
        assert client.post(f"/v1/executions/{job}/cancel").status_code == 200


def test_run_idle_action_cancel(server: LiveServer) -> None:
    result = shellgate(
        server.base_url,
        AGENT,
        "run",
        "--idle-timeout",
        "1",
        "--idle-action",
        "cancel",
        "echo stuck; sleep 60",
    )
    assert result.exit_code == 1
    assert NOTICE in result.stdout
    assert "was cancelled" in result.output


def test_run_refuses_an_unknown_idle_action() -> None:
    result = shellgate("http://127.0.0.1:9", AGENT, "run", "--idle-action", "kill", "true")
    assert result.exit_code == 2


def test_run_notify_url_delivers_the_record(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        SQLITE,
        notify_allow="http://127.0.0.1:*",
        notify_secret="notify-secret-0123456789",
    )
    with webhook_receiver() as receiver, serve(settings) as server:
        result = shellgate(
            server.base_url, AGENT, "run", "--notify-url", receiver.url(), "echo via-cli"
        )
        assert result.exit_code == 0, result.output
        eventually(receiver.posts, what="the delivery", within=30)
        refused = shellgate(
            server.base_url, AGENT, "run", "--notify-url", "http://10.0.0.1/x", "true"
        )
    assert json.loads(receiver.posts()[0].body)["output"] == "via-cli\n"
    assert refused.exit_code != 0
    assert "notify_url" in refused.output
