"""Retention pruning, readiness, and a round trip through the API on a fresh database."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.output.artifact_log import artifact_log_path
from tests.conftest import ADMIN, APPROVER, LiveServer
from tests.waiting import eventually


@pytest.mark.settings(retention_days=0.00001, prune_interval_seconds=0.2)  # 0.86 s
def test_finished_executions_and_their_logs_are_pruned(fresh_server: LiveServer) -> None:
    with fresh_server.client() as client:
        done = client.post("/v1/executions", json={"command": "echo old"}).json()
        running = client.post("/v1/executions", json={"command": "sleep 5", "async": True}).json()
        log = artifact_log_path(fresh_server.data_dir / "artifacts", done["id"])
        assert log.exists()
        eventually(
            lambda: client.get(f"/v1/executions/{done['id']}").status_code == 404,
            what="pruning the finished execution",
        )
        # The row goes first (nothing may point at a missing log), the log right after it.
        eventually(lambda: not log.exists(), what="removing the pruned execution's log")
        # A running execution is never pruned, however old.
        assert client.get(f"/v1/executions/{running['id']}").json()["state"] == "running"
        client.post(f"/v1/executions/{running['id']}/cancel")


def test_a_round_trip_through_the_api_on_a_fresh_database(fresh_server: LiveServer) -> None:
    """Runs on each database (conftest); on a fresh one the listing holds exactly this test's."""
    with (
        fresh_server.client() as agent,
        fresh_server.client(APPROVER) as approver,
        fresh_server.client(ADMIN) as admin,
    ):
        result = agent.post("/v1/executions", json={"command": "echo on-postgres"}).json()
        assert result["output"] == "on-postgres\n"
        job = agent.post("/v1/executions", json={"command": "exit 4", "async": True}).json()
        final = agent.get(f"/v1/executions/{job['id']}", params={"wait": 20}).json()
        assert final["state"] == "failed" and final["exit_code"] == 4
        page = agent.get("/v1/executions", params={"limit": 1}).json()
        assert [item["id"] for item in page["data"]] == [job["id"]]
        rest = agent.get(
            "/v1/executions", params={"limit": 5, "cursor": page["next_cursor"]}
        ).json()
        assert [item["id"] for item in rest["data"]] == [result["id"]]
        policy = {"rules": [{"match": "echo needs-approval", "approval": "prompt"}]}
        assert admin.put("/v1/policy", json=policy).status_code == 200
        pending = agent.post(
            "/v1/executions", json={"command": "echo needs-approval", "async": True}
        ).json()
        assert pending["state"] == "awaiting_approval"
        decided = approver.post(
            f"/v1/approvals/{pending['approval']['id']}/approve", json={"reason": "fine"}
        )
        assert decided.status_code == 200
        approved = agent.get(f"/v1/executions/{pending['id']}", params={"wait": 20}).json()
        assert approved["state"] == "completed"
        assert approved["output"] == "needs-approval\n"
        assert admin.get("/v1/policy/versions").json()["data"][0]["author"] == "root"


def test_files_and_their_approvals_work_on_a_fresh_database(
    fresh_server: LiveServer, tmp_path: Path
) -> None:
    outside = tmp_path / "pg-outside.txt"
    with fresh_server.client() as agent, fresh_server.client(APPROVER) as approver:
        put = agent.put("/v1/files", params={"path": "on-pg.bin"}, content=b"\x00pg\xff")
        assert put.status_code == 201, put.text
        assert agent.get("/v1/files", params={"path": "on-pg.bin"}).content == b"\x00pg\xff"
        asked = agent.put(
            "/v1/files", params={"path": str(outside), "approval_wait": 0}, content=b"pg"
        )
        assert asked.status_code == 202
        approval_id = asked.json()["approval_id"]
        assert approver.post(f"/v1/approvals/{approval_id}/approve").status_code == 200
        done = agent.put(
            "/v1/files", params={"path": str(outside), "approval_id": approval_id}, content=b"pg"
        )
        assert done.status_code == 201, done.text
        states = [op["state"] for op in agent.get("/v1/files/operations").json()["data"]]
        assert states == ["completed", "completed", "completed"]
    assert outside.read_bytes() == b"pg"
