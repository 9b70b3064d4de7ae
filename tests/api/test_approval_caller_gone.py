"""A caller that holds a prompted call open and then disconnects, over real HTTP on loopback
(a raw socket, closed for real: uvicorn answers the request's receive channel with
`http.disconnect` and does not cancel the request's task). The decision after it must treat
the command as a job, like one whose `approval_wait` ran out: counted under the job cap, and
failing with the job-limit message at the cap rather than run past it (docs/policy.md,
"Approvals"; RELIABILITY.md, "A held caller that goes away")."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_approvals import in_background, write_policy
from tests.api.test_runner import new_session
from tests.conftest import AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import ServerDatabase
from tests.waiting import eventually, pending_approval_for

JOB_LIMIT = "Background job limit reached ({}). Wait for running jobs to finish or cancel one."
# The two forms of a JSON body's type clients send: the call must hear the disconnect with
# either (a lean path once took the first form alone).
CONTENT_TYPES = {"plain": "application/json", "charset": "application/json;charset=UTF-8"}


def open_held_call(
    live: LiveServer, path: str, body: dict[str, Any], content_type: str
) -> socket.socket:
    """A request sent whole on a connection of its own, its answer never read."""
    port = int(live.base_url.rsplit(":", 1)[1])
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {AGENT}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(head.encode() + payload)
    return connection


def hang_up(connection: socket.socket, caplog: pytest.LogCaptureFixture) -> None:
    """Close the caller's connection, and return once the server has seen it go (its
    `connection_lost`, which is what wakes the request's receive channel)."""
    connection.close()
    eventually(
        lambda: any(
            "lost before its response was complete" in record.getMessage()
            for record in caplog.records
            if record.name == "shellgate.http"
        ),
        what="the server noticing the caller's disconnect",
    )


@pytest.fixture
def capped(tmp_path: Path, database: ServerDatabase) -> Iterator[LiveServer]:
    settings = make_settings(tmp_path, database, max_jobs=2, policy_file=write_policy(tmp_path))
    with serve(settings) as live:
        yield live


def fill_the_cap(client: httpx.Client, jobs: int) -> list[str]:
    ids = []
    for _ in range(jobs):
        response = client.post("/v1/executions", json={"command": "sleep 60", "async": True})
        assert response.status_code == 202, response.text
        ids.append(response.json()["id"])
    return ids


def approved_after_the_caller_left(
    server: LiveServer,
    alice: httpx.Client,
    carol: httpx.Client,
    command: str,
    path: str,
    caplog: pytest.LogCaptureFixture,
) -> dict[str, Any]:
    """Alice's foreground call held for an approval, her connection closed, then carol's
    approval: the execution's record once it has settled."""
    connection = open_held_call(
        server, "/v1/executions", {"command": command, "approval_wait": 120}, CONTENT_TYPES[path]
    )
    approval = pending_approval_for(carol, command)
    hang_up(connection, caplog)
    assert carol.post(f"/v1/approvals/{approval['id']}/approve").status_code == 200
    final: dict[str, Any] = alice.get(
        f"/v1/executions/{approval['execution_id']}", params={"wait": 20}
    ).json()
    return final


@pytest.mark.parametrize("path", list(CONTENT_TYPES))
def test_a_caller_gone_before_the_approval_does_not_run_past_the_job_cap(
    capped: LiveServer, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    caplog.set_level(logging.INFO, logger="shellgate.http")
    command = f"echo ask-gone-at-cap-{path}"
    with capped.client(AGENT) as alice, capped.client(APPROVER) as carol:
        blockers = fill_the_cap(alice, 2)
        try:
            assert alice.get("/v1/info").json()["running_jobs"] == 2
            final = approved_after_the_caller_left(capped, alice, carol, command, path, caplog)
            # Before: started in the foreground, beside the two jobs (`completed`, `foreground`).
            assert final["state"] == "failed", final
            assert final["started_at"] is None
            assert JOB_LIMIT.format(2) in final["notices"]
            assert alice.get("/v1/info").json()["running_jobs"] == 2
        finally:
            for blocker in blockers:
                alice.post(f"/v1/executions/{blocker}/cancel")


@pytest.mark.parametrize("path", list(CONTENT_TYPES))
def test_a_caller_gone_before_the_approval_gets_a_job_below_the_cap(
    capped: LiveServer, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    caplog.set_level(logging.INFO, logger="shellgate.http")
    command = f"echo ask-gone-{path}"
    with capped.client(AGENT) as alice, capped.client(APPROVER) as carol:
        blockers = fill_the_cap(alice, 1)
        try:
            final = approved_after_the_caller_left(capped, alice, carol, command, path, caplog)
            # Before: `foreground`, counted under no cap.
            assert final["mode"] == "job", final
            assert final["state"] == "completed"
            assert final["output"] == f"{command.removeprefix('echo ')}\n"
        finally:
            for blocker in blockers:
                alice.post(f"/v1/executions/{blocker}/cancel")


def test_a_caller_still_holding_on_keeps_its_foreground_answer(capped: LiveServer) -> None:
    """The disconnect watch must not mistake a caller that stays for one that left."""
    with capped.client(AGENT) as alice, capped.client(APPROVER) as carol:
        with httpx.Client(base_url=capped.base_url, timeout=30) as plain:
            held = plain.build_request(
                "POST",
                "/v1/executions",
                headers={"Authorization": f"Bearer {AGENT}"},
                json={"command": "echo ask-stays", "approval_wait": 30},
            )
            answer = in_background(lambda: plain.send(held))
            approval = pending_approval_for(carol, "echo ask-stays")
            assert carol.post(f"/v1/approvals/{approval['id']}/approve").status_code == 200
            response = answer.result(timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["mode"] == "foreground"
        assert response.json()["output"] == "ask-stays\n"
        assert alice.get(f"/v1/executions/{approval['execution_id']}").json()["mode"] == (
            "foreground"
        )


def test_a_runner_caller_gone_before_the_approval_withdraws_its_command(
    capped: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """`POST /v1/sessions/{id}/run` never becomes a job: its stream borrows the command, so a
    caller that leaves while the command awaits approval takes the command with it."""
    caplog.set_level(logging.INFO, logger="shellgate.http")
    command = "echo ask-runner-gone"
    with capped.client(AGENT) as alice, capped.client(APPROVER) as carol:
        session = new_session(alice)
        connection = open_held_call(
            capped, f"/v1/sessions/{session}/run", {"command": command}, CONTENT_TYPES["plain"]
        )
        approval = pending_approval_for(carol, command)
        hang_up(connection, caplog)
        execution_id = approval["execution_id"]

        def withdrawn() -> dict[str, Any] | None:
            record: dict[str, Any] = alice.get(f"/v1/executions/{execution_id}").json()
            return record if record["state"] != "awaiting_approval" else None

        # Before: still awaiting approval, and once approved it ran for nobody (`completed`).
        final = eventually(withdrawn, what="the runner's command being withdrawn")
        assert final["state"] == "cancelled", final
        assert final["started_at"] is None
        assert carol.get(f"/v1/approvals/{approval['id']}").json()["state"] == "expired"
        assert carol.post(f"/v1/approvals/{approval['id']}/approve").status_code == 409
