"""`shellgate run --sandbox-write/--sandbox-network/--justification`: the request's `sandbox`
(docs/policy.md#asking-for-more), against a real uvicorn on loopback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from app.cli.arguments import sandbox_request
from app.cli.main import cli
from tests.conftest import AGENT, APPROVER, LiveServer

runner = CliRunner()


def test_the_options_become_the_requests_sandbox() -> None:
    assert sandbox_request([], None, None) is None
    assert sandbox_request(["/srv/x"], "ON", "why") == {
        "write": ["/srv/x"],
        "network": "on",
        "justification": "why",
    }
    assert sandbox_request([], "pypi.org:443, *.github.com", None) == {
        "write": [],
        "network": ["pypi.org:443", "*.github.com"],
    }


def test_run_asks_for_more_and_the_approver_sees_it(server: LiveServer, tmp_path: Path) -> None:
    outside = tmp_path / "cli-out"
    outside.mkdir()
    result = runner.invoke(
        cli,
        [
            "--url",
            server.base_url,
            "--token",
            AGENT,
            "run",
            "--async",
            "--sandbox-write",
            str(outside),
            "--justification",
            "the CLI asked",
            f"touch {outside}/x",
        ],
        env={"SHELLGATE_TOKEN": None},
    )
    assert result.exit_code == 0, result.output
    execution_id = result.stdout.strip()
    with server.client(APPROVER) as approver:
        record = approver.get(f"/v1/executions/{execution_id}").json()
        assert record["state"] == "awaiting_approval"
        approval = approver.get(f"/v1/approvals/{record['approval']['id']}").json()
        assert approval["kind"] == "sandbox"
        assert approval["sandbox_request"]["write"] == [str(outside)]
        assert approval["sandbox_request"]["justification"] == "the CLI asked"
        approver.post(f"/v1/approvals/{approval['id']}/deny", json={"reason": "test"})
    assert not (outside / "x").exists()


def test_deciding_a_new_sessions_sandbox_names_its_subject(
    server: LiveServer, tmp_path: Path
) -> None:
    outside = tmp_path / "cli-session"
    outside.mkdir()
    with server.client(AGENT) as agent:
        asked = agent.post(
            "/v1/sessions", json={"sandbox": {"write": [str(outside)]}, "approval_wait": 0}
        )
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["approval"]["id"]
    result = runner.invoke(
        cli,
        ["--url", server.base_url, "--token", APPROVER, "deny", approval_id, "--reason", "no"],
        env={"SHELLGATE_TOKEN": None},
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{approval_id} denied (a new session's sandbox)"
