"""Approvals end to end over real HTTP and WebSocket (docs/policy.md#approvals): an agent's call
waits, an approver decides, the command runs or is rejected; expiry, restart, the stream."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from app.approvals.service import LISTENER_QUEUE_SIZE, ApprovalService
from app.store.db import Database, make_engine
from app.store.models import Approval, Execution
from tests.api.test_restart import ServerProcess
from tests.conftest import ADMIN, AGENT, AGENT2, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases, ServerDatabase
from tests.waiting import pending_approval_for

APPROVAL_FIELDS = {
    "id",
    "subject",
    "execution_id",
    "file_operation_id",
    "command",
    "cwd",
    "env",
    "session",
    "pty",
    "reason",
    "kind",
    "sandbox_request",
    "state",
    "requested_by",
    "decided_by",
    "decision_reason",
    "created_at",
    "decided_at",
    "expires_at",
    "suggested_pattern",
    "remembered_rule",
}
# `ask-*` needs a human; `cat` is also routed to the `read` tool once approved.
GATED_POLICY = {
    "default": "allow",
    "critical": "prompt",
    "rules": [
        {"match": "cat secret*", "approval": "deny"},
        {"match": "*ask-*", "approval": "prompt"},
        {"match": "cat *", "approval": "prompt"},
    ],
    "interceptor": {
        "enabled": True,
        "rules": [{"pattern": r"^\s*cat\s+", "tool": "read", "message": "Use read instead."}],
    },
}


def write_policy(directory: Path, policy: dict[str, Any] = GATED_POLICY) -> Path:
    path = directory / "policy.json"
    path.write_text(json.dumps(policy))
    return path


@pytest.fixture(scope="module")
def gated(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("gated")
    settings = make_settings(
        tmp, module_databases.new(), policy_file=write_policy(tmp), ws_ping_seconds=0.5
    )
    with serve(settings) as live:
        yield live


@pytest.fixture
def approver(gated: LiveServer) -> Iterator[httpx.Client]:
    with gated.client(APPROVER) as client:
        yield client


def in_background(call: Callable[[], httpx.Response]) -> Future[httpx.Response]:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def post_as(live: LiveServer, token: str, body: dict[str, Any]) -> Callable[[], httpx.Response]:
    def call() -> httpx.Response:
        with live.client(token) as client:
            return client.post("/v1/executions", json=body)

    return call


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


# --- the approval flow ------------------------------------------------------------------------


def test_foreground_call_waits_for_the_approval_then_gets_the_output(
    gated: LiveServer, approver: httpx.Client
) -> None:
    command = "echo ask-fg-ok"
    waiting = in_background(post_as(gated, AGENT, {"command": command}))
    approval = pending_approval_for(approver, command)
    assert set(approval) == APPROVAL_FIELDS
    assert approval["kind"] == "command" and approval["sandbox_request"] is None
    assert approval["subject"] == "execution"
    assert approval["state"] == "pending"
    assert approval["requested_by"] == "alice"
    assert approval["reason"] == "Prompt required by bash pattern: *ask-*"
    assert approval["cwd"] == str(gated.settings.workspace)
    assert approval["decided_by"] is None and approval["decided_at"] is None
    assert not waiting.done()  # held open while nobody decided

    decided = approver.post(
        f"/v1/approvals/{approval['id']}/approve", json={"reason": "looks harmless"}
    )
    assert decided.status_code == 200
    assert decided.json()["state"] == "approved"

    response = waiting.result(timeout=20)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "completed"
    assert body["output"] == "ask-fg-ok\n"
    assert body["id"] == approval["execution_id"]

    record = approver.get(f"/v1/approvals/{approval['id']}").json()
    assert set(record) == APPROVAL_FIELDS
    assert record["state"] == "approved"
    assert record["decided_by"] == "carol"
    assert record["decision_reason"] == "looks harmless"
    assert record["decided_at"] is not None
    assert datetime.fromisoformat(record["decided_at"]).tzinfo is not None


def test_denied_call_gets_403_approval_rejected_and_the_decision_is_recorded(
    gated: LiveServer, approver: httpx.Client
) -> None:
    command = "touch ask-deny-marker"
    waiting = in_background(post_as(gated, AGENT, {"command": command}))
    approval = pending_approval_for(approver, command)
    response = approver.post(f"/v1/approvals/{approval['id']}/deny", json={"reason": "no"})
    assert response.status_code == 200
    assert response.json()["state"] == "denied"

    answer = waiting.result(timeout=20)
    assert answer.status_code == 403
    error = error_of(answer)
    assert error["code"] == "approval_rejected"
    assert error["message"] == "Approval denied by carol: no"
    assert error["details"]["execution_id"] == approval["execution_id"]

    execution = approver.get(f"/v1/executions/{approval['execution_id']}").json()
    assert execution["state"] == "rejected"
    assert execution["is_error"] is True
    assert execution["started_at"] is None
    assert "Approval denied by carol: no" in execution["notices"]
    record = approver.get(f"/v1/approvals/{approval['id']}").json()
    assert (record["state"], record["decided_by"], record["decision_reason"]) == (
        "denied",
        "carol",
        "no",
    )
    assert not (gated.settings.workspace / "ask-deny-marker").exists()


def test_async_prompt_answers_202_at_once_with_the_approval(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with gated.client(AGENT) as alice:
        started = time.monotonic()
        response = alice.post("/v1/executions", json={"command": "echo ask-async", "async": True})
        assert time.monotonic() - started < 5
    assert response.status_code == 202
    body = response.json()
    assert body["state"] == "awaiting_approval"
    assert set(body["approval"]) == {"id", "state", "reason", "expires_at"}
    assert body["approval"]["state"] == "pending"
    assert body["approval"]["reason"] == "Prompt required by bash pattern: *ask-*"
    approver.post(f"/v1/approvals/{body['approval']['id']}/deny")


def test_approval_wait_expiry_answers_202_and_the_approved_command_runs_as_a_job(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with gated.client(AGENT) as alice:
        response = alice.post(
            "/v1/executions", json={"command": "echo ask-later", "approval_wait": 0.3}
        )
        assert response.status_code == 202
        body = response.json()
        assert body["state"] == "awaiting_approval"
        assert body["approval"]["state"] == "pending"
        assert datetime.fromisoformat(body["approval"]["expires_at"]).tzinfo is not None
        again = alice.get(f"/v1/executions/{body['id']}").json()
        assert again["state"] == "awaiting_approval"
        assert again["approval"]["id"] == body["approval"]["id"]

        decided = approver.post(f"/v1/approvals/{body['approval']['id']}/approve")
        assert decided.status_code == 200
        final = alice.get(f"/v1/executions/{body['id']}", params={"wait": 20}).json()
    assert final["state"] == "completed"
    assert final["mode"] == "job"
    assert final["output"] == "ask-later\n"


def test_an_unanswered_approval_expires_and_the_waiting_caller_is_rejected(
    tmp_path: Path,
    database: ServerDatabase,
) -> None:
    settings = make_settings(
        tmp_path, database, approval_timeout=1, policy_file=write_policy(tmp_path)
    )
    with serve(settings) as live, live.client(AGENT) as alice, live.client(APPROVER) as carol:
        started = time.monotonic()
        response = alice.post("/v1/executions", json={"command": "echo ask-expire"})
        assert 0.9 < time.monotonic() - started < 10
        assert response.status_code == 403
        error = error_of(response)
        assert error["code"] == "approval_rejected"
        assert error["message"] == "Approval expired: no decision within 1 seconds"
        execution_id = error["details"]["execution_id"]
        assert carol.get(f"/v1/executions/{execution_id}").json()["state"] == "rejected"
        approval = carol.get(f"/v1/approvals/{error['details']['approval_id']}").json()
        assert approval["state"] == "expired"
        assert approval["decided_by"] == "system"
        assert approval["decided_at"] is not None
        late = carol.post(f"/v1/approvals/{approval['id']}/approve")
        assert late.status_code == 409


def test_an_agent_can_never_decide_not_even_its_own(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with gated.client(AGENT) as alice:
        body = alice.post("/v1/executions", json={"command": "echo ask-own", "async": True}).json()
        approval_id = body["approval"]["id"]
        for action in ("approve", "deny"):
            response = alice.post(f"/v1/approvals/{approval_id}/{action}")
            assert response.status_code == 403
            assert error_of(response)["code"] == "forbidden"
        assert alice.get(f"/v1/approvals/{approval_id}").json()["state"] == "pending"
    approver.post(f"/v1/approvals/{approval_id}/deny")


def test_deciding_an_approval_that_is_no_longer_pending_is_409(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with gated.client(AGENT) as alice:
        body = alice.post("/v1/executions", json={"command": "echo ask-twice", "async": True})
    approval_id = body.json()["approval"]["id"]
    assert approver.post(f"/v1/approvals/{approval_id}/approve").status_code == 200
    for action in ("approve", "deny"):
        again = approver.post(f"/v1/approvals/{approval_id}/{action}")
        assert again.status_code == 409
        assert error_of(again)["code"] == "conflict"
    with gated.client(ADMIN) as root:
        assert root.post(f"/v1/approvals/{approval_id}/deny").status_code == 409
    assert approver.post("/v1/approvals/ap_unknown000000000000/approve").status_code == 404


def test_agents_see_only_the_approvals_of_their_own_executions(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with gated.client(AGENT) as alice, gated.client(AGENT2) as bob:
        mine = alice.post("/v1/executions", json={"command": "echo ask-alice", "async": True})
        approval_id = mine.json()["approval"]["id"]
        assert alice.get(f"/v1/approvals/{approval_id}").status_code == 200
        assert bob.get(f"/v1/approvals/{approval_id}").status_code == 404
        bobs = {item["id"] for item in bob.get("/v1/approvals").json()["data"]}
        assert approval_id not in bobs
        alices = alice.get("/v1/approvals", params={"state": "pending"}).json()["data"]
        assert approval_id in {item["id"] for item in alices}
        assert all(item["requested_by"] == "alice" for item in alices)
    everyone = approver.get("/v1/approvals", params={"state": "pending"}).json()["data"]
    assert approval_id in {item["id"] for item in everyone}
    approver.post(f"/v1/approvals/{approval_id}/deny")


def test_cancelling_an_awaiting_execution_withdraws_its_approval(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with gated.client(AGENT) as alice:
        body = alice.post(
            "/v1/executions", json={"command": "touch ask-cancel-marker", "async": True}
        ).json()
        cancelled = alice.post(f"/v1/executions/{body['id']}/cancel")
        assert cancelled.status_code == 200
        assert cancelled.json()["state"] == "cancelled"
        assert alice.post(f"/v1/executions/{body['id']}/cancel").status_code == 409
    approval = approver.get(f"/v1/approvals/{body['approval']['id']}").json()
    assert approval["state"] == "expired"
    assert approval["decided_by"] == "alice"
    assert approval["decision_reason"] == "execution cancelled by its requester"
    assert approver.post(f"/v1/approvals/{approval['id']}/approve").status_code == 409
    assert not (gated.settings.workspace / "ask-cancel-marker").exists()


def test_a_caller_waiting_on_a_cancelled_execution_gets_the_cancelled_record(
    gated: LiveServer, approver: httpx.Client
) -> None:
    command = "echo ask-cancel-waiting"
    waiting = in_background(post_as(gated, AGENT, {"command": command}))
    approval = pending_approval_for(approver, command)
    with gated.client(ADMIN) as root:
        assert root.post(f"/v1/executions/{approval['execution_id']}/cancel").status_code == 200
    answer = waiting.result(timeout=20)
    assert answer.status_code == 200
    assert answer.json()["state"] == "cancelled"
    assert answer.json()["is_error"] is True


def test_an_approved_command_still_meets_the_interceptor(
    gated: LiveServer, approver: httpx.Client
) -> None:
    command = "cat notes.txt"
    waiting = in_background(post_as(gated, AGENT, {"command": command, "tools": ["read"]}))
    approval = pending_approval_for(approver, command)
    approver.post(f"/v1/approvals/{approval['id']}/approve")
    answer = waiting.result(timeout=20)
    assert answer.status_code == 422
    error = error_of(answer)
    assert error["code"] == "intercepted"
    assert error["details"]["tool"] == "read"
    assert error["message"] == "Blocked: Use read instead.\n\nOriginal command: cat notes.txt"
    execution = approver.get(f"/v1/executions/{approval['execution_id']}").json()
    assert execution["state"] == "rejected"
    assert execution["started_at"] is None


def test_a_denied_command_never_reaches_the_interceptor(gated: LiveServer) -> None:
    with gated.client(AGENT) as alice:
        response = alice.post(
            "/v1/executions", json={"command": "cat secret.txt", "tools": ["read"]}
        )
    assert response.status_code == 403
    assert error_of(response)["code"] == "policy_denied"
    assert "Blocked by bash pattern: cat secret*" in error_of(response)["message"]


def test_approved_command_of_a_departed_caller_fails_with_the_job_limit_at_the_cap(
    tmp_path: Path,
    database: ServerDatabase,
) -> None:
    settings = make_settings(tmp_path, database, max_jobs=1, policy_file=write_policy(tmp_path))
    with serve(settings) as live, live.client(AGENT) as alice, live.client(APPROVER) as carol:
        blocker = alice.post("/v1/executions", json={"command": "sleep 30", "async": True})
        assert blocker.status_code == 202
        held = alice.post("/v1/executions", json={"command": "echo ask-cap", "async": True})
        approval_id = held.json()["approval"]["id"]
        assert carol.post(f"/v1/approvals/{approval_id}/approve").status_code == 200
        final = alice.get(f"/v1/executions/{held.json()['id']}", params={"wait": 10}).json()
        assert final["state"] == "failed"
        assert final["started_at"] is None
        assert (
            "Background job limit reached (1). Wait for running jobs to finish or cancel one."
            in final["notices"]
        )
        alice.post(f"/v1/executions/{blocker.json()['id']}/cancel")


def test_a_pending_approval_survives_a_restart_and_then_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: ServerDatabase
) -> None:
    data_dir, workspace = tmp_path / "data", tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("SHELLGATE_POLICY_FILE", str(write_policy(tmp_path)))
    first = ServerProcess(data_dir, workspace, database)
    try:
        with first.client() as alice:
            pending, decided = (
                alice.post(
                    "/v1/executions", json={"command": f"echo ask-restart-{name}", "async": True}
                ).json()
                for name in ("pending", "decided")
            )
        assert pending["state"] == decided["state"] == "awaiting_approval"
    finally:
        first.stop(signal.SIGTERM)
    # A decision recorded just before the server stopped, with the command not yet started.
    engine = database.engine(data_dir)
    with engine.begin() as connection:
        connection.execute(
            update(Approval)
            .where(Approval.id == decided["approval"]["id"])  # type: ignore[arg-type]
            .values(state="approved", decided_by="carol", decided_at=datetime.now(UTC))
        )
    engine.dispose()

    second = ServerProcess(data_dir, workspace, database)
    try:
        headers = {"Authorization": f"Bearer {APPROVER}"}
        with (
            second.client() as alice,
            httpx.Client(base_url=second.base_url, headers=headers, timeout=30) as carol,
        ):
            settled = alice.get(f"/v1/executions/{decided['id']}", params={"wait": 20}).json()
            assert settled["state"] == "completed"
            assert settled["output"] == "ask-restart-decided\n"

            approval = carol.get(f"/v1/approvals/{pending['approval']['id']}").json()
            assert approval["state"] == "pending"
            assert alice.get(f"/v1/executions/{pending['id']}").json()["state"] == (
                "awaiting_approval"
            )
            assert carol.post(f"/v1/approvals/{approval['id']}/approve").status_code == 200
            final = alice.get(f"/v1/executions/{pending['id']}", params={"wait": 20}).json()
            assert final["state"] == "completed"
            assert final["mode"] == "job"
            assert final["output"] == "ask-restart-pending\n"
    finally:
        second.stop()


def test_a_draft_stored_without_a_version_still_starts_after_approval(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with gated.client(AGENT) as alice:
        pending = alice.post(
            "/v1/executions", json={"command": "echo ask-old-draft", "async": True}
        ).json()
        assert pending["state"] == "awaiting_approval"
        # The row as a server from before drafts were versioned wrote it.
        old_draft = {
            "original_command": "echo ask-old-draft",
            "command": "echo ask-old-draft",
            "cwd_request": None,
            "env": None,
            "timeout": 300,
            "pty": False,
            "async_": True,
            "session": None,
            "tools": None,
            "rows": 40,
            "cols": 120,
            "streamed": False,
        }
        stored = json.dumps({"owner_role": "agent", "draft": json.dumps(old_draft)})
        engine = gated.database_engine()
        with engine.begin() as connection:
            connection.execute(
                update(Execution)
                .where(Execution.id == pending["id"])  # type: ignore[arg-type]
                .values(pending_request=stored)
            )
        engine.dispose()
        assert (
            approver.post(f"/v1/approvals/{pending['approval']['id']}/approve").status_code == 200
        )
        final = alice.get(f"/v1/executions/{pending['id']}", params={"wait": 20}).json()
    assert final["state"] == "completed"
    assert final["output"] == "ask-old-draft\n"


# --- the approvals stream ---------------------------------------------------------------------


def open_stream(live: LiveServer, token: str | None) -> ClientConnection:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return connect(f"{live.ws_url}/v1/approvals/stream", additional_headers=headers)


def next_event(socket: ClientConnection, *, skip_pings: bool = True) -> dict[str, Any]:
    while True:
        event: dict[str, Any] = json.loads(socket.recv(timeout=10))
        if not (skip_pings and event["type"] == "ping"):
            return event


def test_stream_sends_a_snapshot_then_requested_and_decided_events(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with gated.client(AGENT) as alice:
        earlier = alice.post(
            "/v1/executions", json={"command": "echo ask-before-stream", "async": True}
        ).json()
        with open_stream(gated, APPROVER) as socket:
            snapshot = next_event(socket)
            assert snapshot["type"] == "snapshot"
            assert earlier["approval"]["id"] in {item["id"] for item in snapshot["approvals"]}
            assert all(item["state"] == "pending" for item in snapshot["approvals"])

            body = alice.post(
                "/v1/executions", json={"command": "echo ask-streamed", "async": True}
            ).json()
            requested = next_event(socket)
            assert requested["type"] == "approval.requested"
            assert requested["approval"]["id"] == body["approval"]["id"]
            assert set(requested["approval"]) == APPROVAL_FIELDS
            assert requested["approval"]["command"] == "echo ask-streamed"

            approver.post(f"/v1/approvals/{body['approval']['id']}/approve", json={"reason": "ok"})
            decided = next_event(socket)
            assert decided["type"] == "approval.decided"
            assert decided["approval"]["state"] == "approved"
            assert decided["approval"]["decided_by"] == "carol"
            assert decided["approval"]["decision_reason"] == "ok"
    approver.post(f"/v1/approvals/{earlier['approval']['id']}/deny")


def test_an_agent_listener_sees_only_its_own_approvals(
    gated: LiveServer, approver: httpx.Client
) -> None:
    with (
        gated.client(AGENT) as alice,
        gated.client(AGENT2) as bob,
        open_stream(gated, AGENT2) as socket,
    ):
        snapshot = next_event(socket)
        assert all(item["requested_by"] == "bob" for item in snapshot["approvals"])
        others = alice.post(
            "/v1/executions", json={"command": "echo ask-not-bobs", "async": True}
        ).json()
        approver.post(f"/v1/approvals/{others['approval']['id']}/deny")
        own = bob.post("/v1/executions", json={"command": "echo ask-bobs", "async": True})
        event = next_event(socket)
        # Alice's requested and decided events were skipped: Bob's own comes first.
        assert event["type"] == "approval.requested"
        assert event["approval"]["id"] == own.json()["approval"]["id"]
        assert event["approval"]["requested_by"] == "bob"
    approver.post(f"/v1/approvals/{own.json()['approval']['id']}/deny")


def test_stream_pings_when_idle(gated: LiveServer) -> None:
    with open_stream(gated, APPROVER) as socket:
        assert next_event(socket)["type"] == "snapshot"
        started = time.monotonic()
        assert next_event(socket, skip_pings=False) == {"type": "ping"}
        assert time.monotonic() - started < 5


@pytest.mark.parametrize("token", [None, "not-a-real-token-at-all"])
def test_stream_without_valid_credentials_closes_4401(gated: LiveServer, token: str | None) -> None:
    with open_stream(gated, token) as socket, pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401
    assert closed.value.rcvd.reason in ("missing bearer token or ticket", "invalid bearer token")


def test_stream_accepts_a_single_use_ticket(gated: LiveServer, approver: httpx.Client) -> None:
    issued = approver.post("/v1/ws-tickets")
    assert issued.status_code == 201
    url = f"{gated.ws_url}/v1/approvals/stream?ticket={issued.json()['ticket']}"
    with connect(url) as socket:
        assert next_event(socket)["type"] == "snapshot"
    with connect(url) as socket, pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401


def test_a_listener_that_falls_behind_is_dropped_with_overflow(tmp_path: Path) -> None:
    async def scenario() -> list[dict[str, Any]]:
        service = ApprovalService(
            Database(make_engine(f"sqlite:///{tmp_path / 'x.db'}")), timeout_seconds=60
        )
        queue = service.subscribe()
        for index in range(LISTENER_QUEUE_SIZE + 5):
            service._publish({"type": "approval.requested", "n": index})
        return [queue.get_nowait() for _ in range(queue.qsize())]

    received = asyncio.run(scenario())
    assert len(received) == LISTENER_QUEUE_SIZE + 1
    assert received[-1] == {"type": "overflow"}
    assert [event["n"] for event in received[:-1]] == list(range(LISTENER_QUEUE_SIZE))
