"""A runner call (`POST /v1/sessions/{id}/run`) awaiting approval when the server stops: its
caller is told to retry (503) or loses its stream (kill -9), so the call must never run later
for nobody, nor twice once the caller retries. After the restart its approval is no longer
pending, an approval of it is refused, and its record says why it never ran
(docs/operations.md, "Crashes and restarts")."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from app.executions.approval_flow import RETRY_WITHDRAWN_NOTICE
from tests.conftest import APPROVER
from tests.databases import ServerDatabase
from tests.faults.server_process import ServerProcess, server_env, server_process
from tests.waiting import pending_approval_for

POLICY = {"default": "allow", "rules": [{"match": "touch *", "approval": "prompt"}]}


def _run_in_thread(server: ServerProcess, session_id: str, command: str) -> dict[str, Any]:
    """The runner call, streamed on a thread; the dict gets its status and body or error."""
    answer: dict[str, Any] = {}

    def call() -> None:
        try:
            with (
                server.client(timeout=60) as client,
                client.stream(
                    "POST", f"/v1/sessions/{session_id}/run", json={"command": command}
                ) as response,
            ):
                answer["status"] = response.status_code
                answer["body"] = response.read().decode()
        except Exception as error:  # a stream cut by kill -9
            answer["error"] = error

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    answer["thread"] = thread
    return answer


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_a_runner_call_awaiting_approval_never_runs_after_a_restart(
    tmp_path: Path, database: ServerDatabase, stop: signal.Signals
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    env = server_env(tmp_path, database, policy_file=str(policy))
    marker = tmp_path / "ran-for-nobody"
    command = f"touch {marker}"
    with server_process(env, tmp_path / "first.log") as first:
        with first.client() as agent:
            session_id = agent.post("/v1/sessions", json={}).json()["id"]
        answer = _run_in_thread(first, session_id, command)
        with first.client(APPROVER) as approver:
            approval = pending_approval_for(approver, command)
        first.process.send_signal(stop)  # this test's own server, by its pid
        first.process.wait(30)
        answer["thread"].join(30)
    if stop == signal.SIGTERM:
        assert answer.get("status") == 503, answer
        assert json.loads(answer["body"])["error"]["code"] == "shutting_down"

    with server_process(env, tmp_path / "second.log") as second:
        with second.client(APPROVER) as approver:
            pending = approver.get("/v1/approvals", params={"state": "pending"}).json()["data"]
            assert approval["id"] not in {item["id"] for item in pending}
            approved = approver.post(f"/v1/approvals/{approval['id']}/approve")
            assert approved.status_code == 409, approved.text
        with second.client() as agent:
            record = agent.get(f"/v1/executions/{approval['execution_id']}").json()
    assert record["state"] == "cancelled", record
    assert record["started_at"] is None
    assert RETRY_WITHDRAWN_NOTICE in record["notices"]
    assert not marker.exists()
