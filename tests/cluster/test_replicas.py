"""Two real replicas on loopback sharing a real PostgreSQL database (docs/operations.md,
"Several replicas"): nodes, forwarding, the shared job cap, approvals across replicas,
sessions pinned to their node, and a replica killed with SIGKILL."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import CallToolResult
from sqlalchemy import create_engine, text
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.api.test_mcp import mcp_client, structured, text_of
from tests.cluster.replicas import CLUSTER_SECRET, Replica, fresh_database, replica
from tests.conftest import ADMIN, AGENT, APPROVER
from tests.waiting import eventually, pending_approval_for

pytestmark = pytest.mark.postgres

GATED_POLICY = {"rules": [{"match": "echo gated*", "approval": "prompt"}]}


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture
def pair(tmp_path: Path, database: str) -> Iterator[tuple[Replica, Replica]]:
    with (
        replica(tmp_path, "node-a", database) as a,
        replica(tmp_path, "node-b", database) as b,
    ):
        yield a, b


def auth(token: str = AGENT) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def payload(frame: dict[str, Any]) -> bytes:
    data: str = frame["data"]
    if frame.get("encoding") == "base64":
        return base64.b64decode(data)
    return data.encode()


async def output_until(ws: ClientConnection, needle: bytes) -> bytes:
    seen = b""
    while needle not in seen:
        frame = json.loads(await ws.recv())
        assert frame["type"] != "exit", f"exited before {needle!r}: {seen!r}"
        if frame["type"] == "output":
            seen += payload(frame)
    return seen


async def output_to_exit(
    url: str, headers: dict[str, str] | None = None
) -> tuple[bytes, dict[str, Any]]:
    """Output and exit frame of a stream; the agent's token unless `headers` (empty: the URL
    carries its own credentials, a ticket)."""
    async with connect(url, additional_headers=auth() if headers is None else headers) as ws:
        seen = b""
        async for message in ws:
            frame = json.loads(message)
            if frame["type"] == "output":
                seen += payload(frame)
            if frame["type"] == "exit":
                return seen, frame
    raise AssertionError(f"closed without an exit frame: {ws.close_code} {ws.close_reason}")


# --- nodes ---------------------------------------------------------------------------------------


def test_each_replica_registers_and_names_itself(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    with a.client(ADMIN) as admin_a, b.client(AGENT) as agent_b:
        assert admin_a.get("/v1/info").json()["node"] == "node-a"
        assert agent_b.get("/v1/info").json()["node"] == "node-b"
        listed = admin_a.get("/v1/nodes").json()["data"]
        by_id = {node["id"]: node for node in listed}
        assert set(by_id) == {"node-a", "node-b"}
        assert all(node["alive"] for node in listed)
        assert by_id["node-a"]["current"] and not by_id["node-b"]["current"]
        assert by_id["node-b"]["url"] == b.base_url
        assert agent_b.get("/v1/nodes").status_code == 403


def test_a_forged_forwarding_header_is_refused(pair: tuple[Replica, Replica]) -> None:
    a, _ = pair
    with a.client(AGENT) as agent:
        forged = agent.get("/v1/info", headers={"X-Shellgate-Cluster-Secret": "guess-0123456789"})
        assert forged.status_code == 403
        assert "forwarding" in forged.json()["error"]["message"]
        genuine = agent.get("/v1/info", headers={"X-Shellgate-Cluster-Secret": CLUSTER_SECRET})
        assert genuine.status_code == 200


# --- the process's requests go to its replica ----------------------------------------------------


def test_stream_input_and_cancel_through_the_other_replica(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    command = 'echo start; read line; echo "got:$line"; sleep 60'
    with a.client() as agent_a, b.client() as agent_b:
        submitted = agent_a.post(
            "/v1/executions", json={"command": command, "pty": True, "async": True}
        )
        assert submitted.status_code == 202, submitted.text
        execution_id = submitted.json()["id"]
        assert submitted.json()["node"] == "node-a"

        async def drive_through_b() -> bytes:
            url = f"{b.ws_url}/v1/executions/{execution_id}/stream"
            async with connect(url, additional_headers=auth()) as ws:
                await output_until(ws, b"start")
                typed = await asyncio.to_thread(
                    agent_b.post, f"/v1/executions/{execution_id}/input", json={"data": "hi\r"}
                )
                assert typed.status_code == 204, typed.text
                return await output_until(ws, b"got:hi")

        seen = asyncio.run(drive_through_b())
        assert b"got:hi" in seen
        # Reading the output of the running execution through B comes from A's live log.
        live = agent_b.get(f"/v1/executions/{execution_id}/output")
        assert live.status_code == 200 and b"got:hi" in live.content
        assert live.headers["X-Complete"] == "false"

        cancelled = agent_b.post(f"/v1/executions/{execution_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        final = agent_b.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
        assert final["state"] == "cancelled"

        whole = agent_a.get(f"/v1/executions/{execution_id}/output").content
        offset = whole.index(b"got:hi")
        # Reconnect at an offset on each replica: exactly the bytes from there on, whichever
        # replica holds the log (B has its own data dir: it forwards to A).
        for server in (a, b):
            url = f"{server.ws_url}/v1/executions/{execution_id}/stream?offset={offset}"
            rest, exit_frame = asyncio.run(output_to_exit(url))
            assert rest == whole[offset:]
            assert exit_frame["state"] == "cancelled"


def test_a_long_poll_on_the_other_replica_sees_the_end(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    with a.client() as agent_a, b.client() as agent_b:
        job = agent_a.post("/v1/executions", json={"command": "sleep 1; echo done", "async": True})
        assert job.status_code == 202, job.text
        started = time.monotonic()
        final = agent_b.get(f"/v1/executions/{job.json()['id']}", params={"wait": 30}).json()
        assert final["state"] == "completed" and final["output"] == "done\n"
        assert time.monotonic() - started < 20


# --- the job cap across replicas -----------------------------------------------------------------


@pytest.fixture
def capped_pair(tmp_path: Path, database: str) -> Iterator[tuple[Replica, Replica]]:
    with (
        replica(tmp_path, "node-a", database, max_jobs=4) as a,
        replica(tmp_path, "node-b", database, max_jobs=4) as b,
    ):
        yield a, b


def test_the_job_cap_holds_across_replicas(capped_pair: tuple[Replica, Replica]) -> None:
    a, b = capped_pair

    async def submit_twenty() -> list[httpx.Response]:
        async with (
            httpx.AsyncClient(base_url=a.base_url, headers=auth(), timeout=60) as on_a,
            httpx.AsyncClient(base_url=b.base_url, headers=auth(), timeout=60) as on_b,
        ):
            body = {"command": "sleep 60", "async": True}
            calls = [(on_a if i % 2 else on_b).post("/v1/executions", json=body) for i in range(20)]
            return list(await asyncio.gather(*calls))

    responses = asyncio.run(submit_twenty())
    accepted = [response for response in responses if response.status_code == 202]
    refused = [response for response in responses if response.status_code == 429]
    try:
        assert len(accepted) == 4, [response.status_code for response in responses]
        assert len(refused) == 16
        assert all(int(response.headers["Retry-After"]) >= 1 for response in refused)
        assert {r.json()["error"]["code"] for r in refused} == {"job_limit_reached"}
        with a.client() as agent:
            assert agent.get("/v1/info").json()["cluster_running_jobs"] == 4
            running = agent.get("/v1/executions", params={"state": "running"}).json()["data"]
            assert len(running) == 4
    finally:
        with b.client() as agent_b:
            for response in accepted:  # through B, whichever replica runs it
                agent_b.post(f"/v1/executions/{response.json()['id']}/cancel")
    with a.client() as agent:
        eventually(
            lambda: agent.get("/v1/info").json()["cluster_running_jobs"] == 0,
            what="the slots' release",
            within=30,
        )
        # A slot freed on one replica is usable on the other.
        again = agent.post("/v1/executions", json={"command": "true", "async": True})
        assert again.status_code == 202, again.text


# --- approvals across replicas -------------------------------------------------------------------


@pytest.fixture
def gated_pair(tmp_path: Path, database: str) -> Iterator[tuple[Replica, Replica]]:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(GATED_POLICY))
    with (
        replica(tmp_path, "node-a", database, policy_file=str(policy)) as a,
        replica(tmp_path, "node-b", database, policy_file=str(policy)) as b,
    ):
        yield a, b


def test_an_approval_on_b_releases_the_call_waiting_on_a(
    gated_pair: tuple[Replica, Replica],
) -> None:
    a, b = gated_pair
    answered: dict[str, Any] = {}

    def call_on_a() -> None:
        with a.client(timeout=120) as agent:
            response = agent.post(
                "/v1/executions", json={"command": "echo gated-1", "approval_wait": 90}
            )
            answered["at"] = time.monotonic()
            answered["response"] = response

    waiting = threading.Thread(target=call_on_a)
    waiting.start()
    try:
        with b.client(APPROVER) as approver_b:
            approval = pending_approval_for(approver_b, "echo gated-1", within=30)

            async def decide_while_watching() -> tuple[float, dict[str, Any]]:
                # A's approvals stream sees the decision made on B.
                url = f"{a.ws_url}/v1/approvals/stream"
                async with connect(url, additional_headers=auth(APPROVER)) as ws:
                    # Sent once subscribed: from here on no decision is missed.
                    first = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    assert first["type"] == "snapshot", first
                    decided = await asyncio.to_thread(
                        approver_b.post, f"/v1/approvals/{approval['id']}/approve", json={}
                    )
                    at = time.monotonic()
                    assert decided.status_code == 200, decided.text
                    while True:
                        event = json.loads(await asyncio.wait_for(ws.recv(), 10))
                        if event.get("type") == "approval.decided":
                            return at, event

            decided_at, event = asyncio.run(decide_while_watching())
            assert event["approval"]["id"] == approval["id"]
            assert event["approval"]["state"] == "approved"
        waiting.join(30)
        response = answered["response"]
        assert response.status_code == 200, response.text
        assert response.json()["output"] == "gated-1\n"
        assert response.json()["node"] == "node-a"
        assert answered["at"] - decided_at < 0.2, answered["at"] - decided_at
    finally:
        waiting.join(30)


# --- browser tickets ---------------------------------------------------------------------------


async def close_of(url: str, headers: dict[str, str] | None = None) -> tuple[int | None, str]:
    """How the server ended a WebSocket opened without reading it: (close code, reason)."""
    async with connect(url, additional_headers=headers) as ws:
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
    return ws.close_code, ws.close_reason


def test_a_ticket_issued_by_one_replica_opens_a_stream_on_the_other_once(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    with a.client() as agent_a, b.client() as agent_b, a.client(APPROVER) as approver_a:
        done = agent_a.post("/v1/executions", json={"command": "echo via-ticket"}).json()
        assert done["node"] == "node-a"
        # B issues, A (the execution's owner, which B forwards to) redeems.
        ticket = agent_b.post("/v1/ws-tickets").json()["ticket"]
        url = f"{b.ws_url}/v1/executions/{done['id']}/stream?ticket={ticket}"
        seen, exit_frame = asyncio.run(output_to_exit(url, headers={}))
        assert seen == b"via-ticket\n" and exit_frame["state"] == "completed"
        # Used: refused on either replica.
        for server in (a, b):
            again = f"{server.ws_url}/v1/executions/{done['id']}/stream?ticket={ticket}"
            code, reason = asyncio.run(close_of(again))
            assert (code, reason) == (4401, "invalid or expired ticket")

        # A issues, B redeems: the approvals stream is served by whichever replica it reaches.
        ticket = approver_a.post("/v1/ws-tickets").json()["ticket"]

        async def first_event_on_b() -> dict[str, Any]:
            async with connect(f"{b.ws_url}/v1/approvals/stream?ticket={ticket}") as ws:
                event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
                return event

        assert asyncio.run(first_event_on_b())["type"] == "snapshot"
        code, _ = asyncio.run(close_of(f"{a.ws_url}/v1/approvals/stream?ticket={ticket}"))
        assert code == 4401


# --- sessions ----------------------------------------------------------------------------------


def test_a_session_made_on_a_keeps_its_state_through_b(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    with a.client() as agent_a, b.client() as agent_b:
        made = agent_a.post("/v1/sessions", json={})
        assert made.status_code in (200, 201), made.text
        session_id = made.json()["id"]
        first = agent_b.post(
            "/v1/executions",
            json={
                "command": "export CLUSTER_VAR=kept; greet() { echo hello-from-fn; }",
                "session": session_id,
            },
        )
        assert first.status_code == 200, first.text
        assert first.json()["node"] == "node-a"
        second = agent_b.post(
            "/v1/executions",
            json={"command": "echo $CLUSTER_VAR; greet", "session": session_id},
        )
        assert second.status_code == 200, second.text
        assert second.json()["output"] == "kept\nhello-from-fn\n"
        assert second.json()["node"] == "node-a"
        # The session's own calls, not only its executions, go to A.
        ran = agent_b.post(f"/v1/sessions/{session_id}/run", json={"command": "echo $CLUSTER_VAR"})
        assert ran.status_code == 200, ran.text
        assert "kept" in ran.text
        assert agent_b.delete(f"/v1/sessions/{session_id}").status_code in (200, 204)
        assert agent_a.get(f"/v1/sessions/{session_id}").status_code == 404


def test_mcp_session_calls_on_b_run_in_the_shell_on_a(pair: tuple[Replica, Replica]) -> None:
    """An MCP call reaches whichever replica the gateway picked: the session tools run it
    where the session's shell lives, as the REST forward does."""
    a, b = pair
    with a.client() as agent_a:
        made = agent_a.post("/v1/sessions", json={})
        assert made.status_code in (200, 201), made.text
        session_id = made.json()["id"]

    async def through_b() -> list[CallToolResult]:
        with anyio.fail_after(60):
            async with mcp_client(b, AGENT) as client:  # type: ignore[arg-type]
                return [
                    await client.call_tool("session_run", {"session": session_id, **arguments})
                    for arguments in (
                        {"command": "export MCP_VAR=kept"},
                        {"command": "echo $MCP_VAR"},
                        {"command": "exit 3"},
                    )
                ] + [await client.call_tool("session_close", {"session": session_id})]

    exported, echoed, failed, closed = anyio.run(through_b)
    assert not exported.is_error, text_of(exported)
    assert "kept" in text_of(echoed), text_of(echoed)
    assert failed.is_error and structured(failed)["exit_code"] == 3
    assert not closed.is_error, text_of(closed)
    with a.client() as agent_a:
        ran_on = agent_a.get(f"/v1/executions/{structured(echoed)['id']}").json()["node"]
        assert ran_on == "node-a"
        # The owner itself closed it: its shell and its memory of the session are gone.
        assert agent_a.get(f"/v1/sessions/{session_id}").status_code == 404


def test_mcp_job_tools_on_b_reach_the_job_on_a(
    pair: tuple[Replica, Replica],
) -> None:
    """The job's state changes on A: a wait held on B would hear nothing until its deadline,
    and a cancel on B would find no process to stop."""
    a, b = pair
    with a.client() as agent_a:
        short = agent_a.post(
            "/v1/executions", json={"command": "sleep 1; echo done", "async": True}
        ).json()["id"]
        long = agent_a.post("/v1/executions", json={"command": "sleep 600", "async": True}).json()[
            "id"
        ]

    async def through_b() -> tuple[CallToolResult, float, CallToolResult, CallToolResult]:
        with anyio.fail_after(60):
            async with mcp_client(b, AGENT) as client:  # type: ignore[arg-type]
                started = time.monotonic()
                waited = await client.call_tool("job_wait", {"id": short, "seconds": 45})
                elapsed = time.monotonic() - started
                # Its log is in A's data dir (the replicas share none here).
                page = await client.call_tool("read_output", {"id": short})
                cancelled = await client.call_tool("job_cancel", {"id": long})
                return waited, elapsed, page, cancelled

    waited, elapsed, page, cancelled = anyio.run(through_b)
    assert not page.is_error, text_of(page)
    assert text_of(page) == "done\n"
    assert structured(page)["complete"] is True
    assert structured(waited)["state"] == "completed", text_of(waited)
    assert "done" in text_of(waited)
    assert elapsed < 30, f"the wait ended at {elapsed:.1f}s: it did not hear the end on A"
    assert structured(cancelled)["state"] == "cancelled", text_of(cancelled)
    with a.client() as agent_a:
        assert agent_a.get(f"/v1/executions/{long}").json()["state"] == "cancelled"


# --- a replica that dies -------------------------------------------------------------------------


def test_a_killed_replicas_work_is_lost_or_taken_over(tmp_path: Path, database: str) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(GATED_POLICY))
    timeout = 3
    with replica(tmp_path, "node-b", database, node_timeout=timeout, policy_file=str(policy)) as b:
        with replica(
            tmp_path, "node-a", database, node_timeout=timeout, policy_file=str(policy)
        ) as a:
            with a.client() as agent_a:
                job = agent_a.post("/v1/executions", json={"command": "sleep 15", "async": True})
                assert job.status_code == 202, job.text
                held = agent_a.post(
                    "/v1/executions", json={"command": "echo gated-late", "async": True}
                )
                assert held.status_code == 202, held.text
                assert held.json()["state"] == "awaiting_approval"
            a.process.send_signal(signal.SIGKILL)  # this test's own replica, by its pid
            a.process.wait(30)
            killed_at = time.monotonic()
        try:
            with b.client() as agent_b, b.client(APPROVER) as approver_b:

                def lost() -> bool:
                    record = agent_b.get(f"/v1/executions/{job.json()['id']}").json()
                    return record["state"] == "lost"

                eventually(lost, what="B marking A's job lost", within=timeout + 10)
                # Within the timeout plus a heartbeat or two (a loaded machine adds the rest).
                assert time.monotonic() - killed_at < timeout * 3
                approval_id = held.json()["approval"]["id"]
                decided = approver_b.post(f"/v1/approvals/{approval_id}/approve", json={})
                assert decided.status_code == 200, decided.text
                final = agent_b.get(
                    f"/v1/executions/{held.json()['id']}", params={"wait": 30}
                ).json()
                assert final["state"] == "completed", final
                assert final["output"] == "gated-late\n"
                assert final["node"] == "node-b"
        finally:
            _kill_orphan_group(database, job.json()["id"])


def _kill_orphan_group(database: str, execution_id: str) -> None:
    """The killed replica's `sleep` outlives it (no server left to end it): end it here, by
    the group the replica recorded, only while its leader is still that test command."""
    engine = create_engine(database)
    with engine.connect() as connection:
        pgid = connection.execute(
            text("SELECT pgid FROM executions WHERE id = :id"), {"id": execution_id}
        ).scalar()
    engine.dispose()
    if not pgid:
        return
    try:
        with open(f"/proc/{pgid}/cmdline", "rb") as cmdline:
            if b"sleep" not in cmdline.read():
                return
        os.killpg(pgid, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass


def test_the_pending_approvals_cap_holds_across_replicas(tmp_path: Path, database: str) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(GATED_POLICY))
    with (
        replica(
            tmp_path, "node-a", database, policy_file=str(policy), max_pending_approvals=3
        ) as a,
        replica(
            tmp_path, "node-b", database, policy_file=str(policy), max_pending_approvals=3
        ) as b,
    ):

        async def ask_ten() -> list[httpx.Response]:
            async with (
                httpx.AsyncClient(base_url=a.base_url, headers=auth(), timeout=60) as on_a,
                httpx.AsyncClient(base_url=b.base_url, headers=auth(), timeout=60) as on_b,
            ):
                calls = [
                    (on_a if i % 2 else on_b).post(
                        "/v1/executions", json={"command": f"echo gated-{i}", "async": True}
                    )
                    for i in range(10)
                ]
                return list(await asyncio.gather(*calls))

        responses = asyncio.run(ask_ten())
        codes = sorted(response.status_code for response in responses)
        assert codes == [202] * 3 + [429] * 7, codes
        refused = [response for response in responses if response.status_code == 429]
        assert {r.json()["error"]["code"] for r in refused} == {"pending_approval_limit"}
        with b.client(APPROVER) as approver:
            pending = approver.get("/v1/approvals", params={"state": "pending"}).json()["data"]
            assert len(pending) == 3


def test_a_shared_data_dir_serves_finished_logs_from_any_replica(
    tmp_path: Path, database: str
) -> None:
    with replica(tmp_path, "node-b", database, shared_data=True) as b:
        with replica(tmp_path, "node-a", database, shared_data=True) as a, a.client() as agent_a:
            done = agent_a.post("/v1/executions", json={"command": "seq 1 2000"}).json()
            assert done["state"] == "completed"
        # A is stopped: B reads the log from the shared directory itself.
        with b.client() as agent_b:
            whole = agent_b.get(f"/v1/executions/{done['id']}/output")
            assert whole.status_code == 200, whole.text
            expected = "".join(f"{n}\n" for n in range(1, 2001)).encode()
            assert whole.content == expected
            assert whole.headers["X-Complete"] == "true"
        offset = expected.index(b"1000\n")
        url = f"{b.ws_url}/v1/executions/{done['id']}/stream?offset={offset}"
        rest, exit_frame = asyncio.run(output_to_exit(url))
        assert rest == expected[offset:]
        assert exit_frame["state"] == "completed"


def test_a_stopped_replicas_own_log_is_unreachable_not_empty(tmp_path: Path, database: str) -> None:
    """Data directories not shared: A's finished log is on A's disk only. Once A is gone
    (silent past the node timeout, so B no longer tries to forward), B must say the log is out
    of reach (503 `node_unreachable`, retry later), not answer an empty, complete log."""
    timeout = 2
    with replica(tmp_path, "node-b", database, node_timeout=timeout) as b:
        with (
            replica(tmp_path, "node-a", database, node_timeout=timeout) as a,
            a.client() as agent_a,
        ):
            done = agent_a.post("/v1/executions", json={"command": "seq 1 2000"}).json()
            assert done["state"] == "completed"
        with b.client(ADMIN) as admin_b:

            def a_is_gone() -> bool:
                nodes = admin_b.get("/v1/nodes").json()["data"]
                return not next(node for node in nodes if node["id"] == "node-a")["alive"]

            eventually(a_is_gone, what="B seeing A silent", within=timeout + 15)
        with b.client() as agent_b:
            page = agent_b.get(f"/v1/executions/{done['id']}/output")
        assert page.status_code == 503, page.text
        error = page.json()["error"]
        assert error["code"] == "node_unreachable"
        assert "log" in error["message"] and "node-a" in error["message"]
        assert int(page.headers["Retry-After"]) > 0
        url = f"{b.ws_url}/v1/executions/{done['id']}/stream"
        code, reason = asyncio.run(close_of(url, auth()))
        assert (code, "log" in reason and "node-a" in reason) == (1013, True), (code, reason)
        result = anyio.run(_read_output_over_mcp, b, done["id"])
        assert result.is_error and "node-a" in text_of(result), text_of(result)


async def _read_output_over_mcp(server: Replica, execution_id: str) -> CallToolResult:
    with anyio.fail_after(30):
        async with mcp_client(server, AGENT) as client:  # type: ignore[arg-type]
            return await client.call_tool("read_output", {"id": execution_id})


def test_a_missed_notification_is_caught_by_the_poll(
    gated_pair: tuple[Replica, Replica], database: str
) -> None:
    """Every replica's listening connection is cut again and again while B decides: A learns
    of the decision from its poll (every 0.5 s) instead, and its waiting call is released."""
    a, b = gated_pair
    engine = create_engine(database, isolation_level="AUTOCOMMIT")
    stop_cutting = threading.Event()

    def cut_listeners() -> None:
        with engine.connect() as connection:
            while not stop_cutting.is_set():
                connection.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND query LIKE 'LISTEN %' "
                        "AND pid <> pg_backend_pid()"
                    )
                )
                time.sleep(0.02)

    answered: dict[str, Any] = {}

    def call_on_a() -> None:
        with a.client(timeout=120) as agent:
            answered["response"] = agent.post(
                "/v1/executions", json={"command": "echo gated-polled", "approval_wait": 90}
            )
            answered["at"] = time.monotonic()

    waiting = threading.Thread(target=call_on_a)
    cutter = threading.Thread(target=cut_listeners)
    waiting.start()
    try:
        with b.client(APPROVER) as approver_b:
            approval = pending_approval_for(approver_b, "echo gated-polled", within=30)
            cutter.start()
            eventually(
                lambda: "approval notifications interrupted" in a.log(),
                what="A's listener cut (and kept down)",
            )
            decided = approver_b.post(f"/v1/approvals/{approval['id']}/approve", json={})
            decided_at = time.monotonic()
            assert decided.status_code == 200, decided.text
        waiting.join(30)
        response = answered["response"]
        assert response.status_code == 200, response.text
        assert response.json()["output"] == "gated-polled\n"
        # The poll's half second, plus a loaded machine's margin.
        assert answered["at"] - decided_at < 3, answered["at"] - decided_at
        assert "approval notifications interrupted" in a.log()  # the cut did happen
    finally:
        stop_cutting.set()
        if cutter.is_alive():
            cutter.join(10)
        waiting.join(30)
        engine.dispose()
