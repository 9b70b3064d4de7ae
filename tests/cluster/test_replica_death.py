"""A replica dies (SIGKILL of this test's own replica process, by its pid): the cluster tells
the truth about what it held (docs/operations.md, "When a replica dies"). Replicas are real
`python -m app serve` processes on loopback sharing a PostgreSQL database made for the test;
the node timeout is short so that each case stays within seconds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import CallToolResult
from sqlalchemy import create_engine, text
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.api.test_mcp import mcp_client, structured, text_of
from tests.cluster.replicas import Replica, fresh_database, replica
from tests.conftest import ADMIN, AGENT, APPROVER
from tests.waiting import eventually

pytestmark = pytest.mark.postgres

NODE_TIMEOUT = 3
GATED_POLICY = {"rules": [{"match": "echo gated*", "approval": "prompt"}]}


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_database() as url:
        yield url


def kill(node: Replica) -> None:
    node.process.send_signal(signal.SIGKILL)  # this test's own replica, by its pid
    node.process.wait(30)


def test_a_session_on_a_dead_replica_is_lost_for_good(tmp_path: Path, database: str) -> None:
    """Never a 200 from another shell: 503 while the owner may still come back, then 410
    `session_lost` naming it; its return does not bring the session back."""
    with replica(tmp_path, "node-b", database, node_timeout=NODE_TIMEOUT) as b:
        with replica(tmp_path, "node-a", database, node_timeout=NODE_TIMEOUT) as a:
            with a.client() as agent_a:
                made = agent_a.post("/v1/sessions", json={})
                assert made.status_code == 201, made.text
                session_id = made.json()["id"]
                kept = agent_a.post(
                    "/v1/executions",
                    json={"command": "export K=kept; echo set", "session": session_id},
                )
                assert kept.status_code == 200, kept.text
            kill(a)

        call = {"command": "echo K=$K", "session": session_id}
        with b.client() as agent_b:

            def answered_lost() -> httpx.Response | None:
                answer = agent_b.post("/v1/executions", json=call)
                assert answer.status_code in (503, 410), answer.text  # never another shell
                return answer if answer.status_code == 410 else None

            lost = eventually(answered_lost, what="B answering 410", within=NODE_TIMEOUT + 10)
            assert lost is not None
            error = lost.json()["error"]
            assert error["code"] == "session_lost"
            assert "node-a" in error["message"]
            assert error["details"] == {"node": "node-a"}
            for method, path in (
                ("GET", f"/v1/sessions/{session_id}"),
                ("POST", f"/v1/sessions/{session_id}/run"),
                ("DELETE", f"/v1/sessions/{session_id}"),
            ):
                body = {"command": "echo K=$K"} if method == "POST" else None
                refused = agent_b.request(method, path, json=body)
                assert refused.status_code == 410, (path, refused.text)
            listed = agent_b.get("/v1/sessions").json()["data"]
            assert session_id not in [item["id"] for item in listed]

        # The replica comes back (same node id, same data dir, its state file still there):
        # the session stays lost, on it and through the other replica.
        with replica(tmp_path, "node-a", database, node_timeout=NODE_TIMEOUT) as a_again:
            for node in (a_again, b):
                with node.client() as agent:
                    again = agent.post("/v1/executions", json=call)
                    assert again.status_code == 410, (node.name, again.text)
                    assert again.json()["error"]["code"] == "session_lost"


def gated(tmp: Path) -> str:
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(GATED_POLICY))
    return str(policy)


def wait_until_seen_dead(node: Replica, dead: str) -> None:
    """`node` counts `dead` as silent: it settles what `dead` held from now on."""
    with node.client(ADMIN) as admin:

        def silent() -> bool:
            listed = admin.get("/v1/nodes").json()["data"]
            return not next(item for item in listed if item["id"] == dead)["alive"]

        eventually(silent, what=f"{node.name} seeing {dead} silent", within=NODE_TIMEOUT + 10)


def approve_on(node: Replica, held: dict[str, Any]) -> dict[str, Any]:
    """Approve `held` through `node` and return its record once the decision settled it."""
    with node.client(APPROVER) as approver, node.client() as agent:
        decided = approver.post(f"/v1/approvals/{held['approval']['id']}/approve", json={})
        assert decided.status_code == 200, decided.text
        final: dict[str, Any] = agent.get(
            f"/v1/executions/{held['id']}", params={"wait": 30}
        ).json()
    return final


def test_an_approved_call_of_a_dead_replicas_session_ends_session_lost(
    tmp_path: Path, database: str
) -> None:
    """Approved on B as soon as B counts A dead (before its heartbeat records A's sessions
    lost): the call never runs in a fresh shell on B, and says its session was lost with A,
    not that the session's working directory changed."""
    policy = gated(tmp_path)
    ran = tmp_path / "workspace" / "ran"
    with replica(tmp_path, "node-b", database, node_timeout=NODE_TIMEOUT, policy_file=policy) as b:
        with replica(
            tmp_path, "node-a", database, node_timeout=NODE_TIMEOUT, policy_file=policy
        ) as a:
            with a.client() as agent_a:
                made = agent_a.post("/v1/sessions", json={})
                assert made.status_code == 201, made.text
                session_id = made.json()["id"]
                call = {"command": f"echo gated > {ran}", "session": session_id, "async": True}
                held = agent_a.post("/v1/executions", json=call)
                assert held.status_code == 202, held.text
                assert held.json()["state"] == "awaiting_approval"
            kill(a)
        wait_until_seen_dead(b, "node-a")
        final = approve_on(b, held.json())

    assert final["state"] == "failed", final
    assert final["started_at"] is None
    assert not ran.exists()
    expected = f"session {session_id} was lost with replica node-a"
    assert final["notices"][-1].startswith(expected), final["notices"]
    assert "working directory" not in final["text"]


def test_an_approved_call_of_a_dead_replica_names_both_workspaces(
    tmp_path: Path, database: str
) -> None:
    """Replicas with workspaces of their own: the approver saw A's, B would run it in its own.
    Nothing runs, and the record says so with both directories, not that a session (there is
    none) changed its working directory."""
    policy = gated(tmp_path)
    settings: dict[str, Any] = {"node_timeout": NODE_TIMEOUT, "policy_file": policy}
    with replica(tmp_path, "node-b", database, own_workspace=True, **settings) as b:
        with replica(tmp_path, "node-a", database, own_workspace=True, **settings) as a:
            with a.client() as agent_a:
                held = agent_a.post(
                    "/v1/executions", json={"command": "echo gated > ran", "async": True}
                )
                assert held.status_code == 202, held.text
            kill(a)
        wait_until_seen_dead(b, "node-a")
        final = approve_on(b, held.json())

    shown = str(tmp_path / "node-a" / "workspace")
    here = str(tmp_path / "node-b" / "workspace")
    assert held.json()["cwd"] == shown
    assert final["state"] == "rejected", final
    assert final["started_at"] is None
    assert not (tmp_path / "node-b" / "workspace" / "ran").exists()
    notice = final["notices"][-1]
    assert shown in notice and here in notice, notice
    assert "session" not in notice and "nothing ran" in notice


def test_a_viewer_through_another_replica_gets_1013_when_the_owner_dies(
    tmp_path: Path, database: str
) -> None:
    """A viewer on B of A's execution (B relays A's stream) is closed with 1013 and a reason
    naming A when A is killed, as docs/streaming.md says, not left with a dropped connection."""
    with (
        replica(tmp_path, "node-b", database, node_timeout=NODE_TIMEOUT) as b,
        replica(tmp_path, "node-a", database, node_timeout=NODE_TIMEOUT) as a,
        a.client() as agent_a,
    ):
        # Its pty hangs up with A, so the command ends with it (no process left over).
        job = agent_a.post(
            "/v1/executions",
            json={"command": "echo started; read line", "pty": True, "async": True},
        )
        assert job.status_code == 202, job.text
        url = f"{b.ws_url}/v1/executions/{job.json()['id']}/stream"

        async def watch_through_b() -> tuple[int | None, str]:
            headers = {"Authorization": f"Bearer {AGENT}"}
            async with connect(url, additional_headers=headers) as viewer:
                seen = b""
                while b"started" not in seen:
                    frame = json.loads(await asyncio.wait_for(viewer.recv(), 30))
                    assert frame["type"] != "exit", frame
                    if frame["type"] == "output":
                        seen += frame["data"].encode()
                await asyncio.to_thread(kill, a)
                with pytest.raises(ConnectionClosed):
                    while True:
                        frame = json.loads(await asyncio.wait_for(viewer.recv(), 30))
                        assert frame["type"] != "exit", frame
                assert viewer.protocol.close_rcvd is not None, "no close frame"
                return viewer.close_code, viewer.close_reason

        code, reason = asyncio.run(watch_through_b())
    assert code == 1013, (code, reason)
    assert reason == "replica node-a stopped answering", reason


def test_an_mcp_job_wait_through_b_on_a_killed_replicas_job_ends_lost(
    tmp_path: Path, database: str
) -> None:
    """A is killed while its row still says alive (within the node timeout): B's `job_wait`
    cannot reach it, and follows the record in the database instead of answering a tool
    error, until B records A's job `lost` once A's heartbeat is overdue."""
    with (
        replica(tmp_path, "node-b", database, node_timeout=NODE_TIMEOUT) as b,
        replica(tmp_path, "node-a", database, node_timeout=NODE_TIMEOUT) as a,
        a.client() as agent_a,
    ):
        job = agent_a.post("/v1/executions", json={"command": "sleep 120", "async": True})
        assert job.status_code == 202, job.text
        kill(a)

        async def wait_through_b() -> CallToolResult:
            with anyio.fail_after(60):
                async with mcp_client(b, AGENT) as client:  # type: ignore[arg-type]
                    arguments = {"id": job.json()["id"], "seconds": 30}
                    return await client.call_tool("job_wait", arguments)

        result = anyio.run(wait_through_b)
    # The execution's result (a `lost` one is an error result), not a tool error about A.
    assert structured(result)["state"] == "lost", text_of(result)


def test_a_returning_replica_ends_and_reads_what_the_others_recorded_lost(
    tmp_path: Path, database: str
) -> None:
    """Data directories not shared, sandbox off: B records A's job `lost` without output (the
    log is on A's disk); its process died with A (the fence watcher). When A starts again
    the record gets the log's output and byte counts."""
    with replica(tmp_path, "node-b", database, node_timeout=NODE_TIMEOUT) as b:
        with (
            replica(tmp_path, "node-a", database, node_timeout=NODE_TIMEOUT) as a,
            a.client() as agent_a,
        ):
            job = agent_a.post(
                "/v1/executions", json={"command": "echo part-1; sleep 120", "async": True}
            )
            assert job.status_code == 202, job.text
            execution_id = job.json()["id"]
            eventually(
                lambda: b"part-1" in agent_a.get(f"/v1/executions/{execution_id}/output").content,
                what="the first line in A's log",
            )
            kill(a)
        with b.client() as agent_b:

            def recorded_lost() -> dict[str, Any] | None:
                record: dict[str, Any] = agent_b.get(f"/v1/executions/{execution_id}").json()
                return record if record["state"] == "lost" else None

            lost = eventually(recorded_lost, what="B recording A's job lost", within=20)
        assert lost is not None
        assert (lost["output"], lost["total_bytes"]) == ("", 0)  # B cannot read A's disk
        leader = _group_of(database, execution_id)
        try:
            assert not _alive(leader), "the job's process outlived its replica"
            # Done before the replica listens (a short log).
            with (
                replica(tmp_path, "node-a", database, node_timeout=NODE_TIMEOUT),
                b.client() as agent_b,
            ):
                record = agent_b.get(f"/v1/executions/{execution_id}").json()
        finally:
            if _alive(leader):
                os.killpg(leader, signal.SIGKILL)  # this test's own job, left by its replica
    assert record["state"] == "lost"
    assert record["output"] == "part-1\n"
    assert record["total_bytes"] == record["output_bytes"] == len("part-1\n")
    assert record["text"].startswith("part-1\n\n")


def _group_of(database: str, execution_id: str) -> int:
    engine = create_engine(database)
    with engine.connect() as connection:
        pgid = connection.execute(
            text("SELECT pgid FROM executions WHERE id = :id"), {"id": execution_id}
        ).scalar()
    engine.dispose()
    assert isinstance(pgid, int) and pgid > 1, pgid
    return pgid


def _alive(pid: int) -> bool:
    """Running (a zombie no parent reaps any more counts as gone), and still the job's `sleep`
    (its shell ran it in its own place)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read()
    except FileNotFoundError:
        return False
    return state != b"Z" and command == b"sleep\x00120\x00"


def test_a_viewer_through_another_replica_gets_1013_when_the_owner_hangs(
    tmp_path: Path, database: str
) -> None:
    """An owner that stops answering without closing its connections (a hung process, a host
    gone from the network: here A is stopped with SIGSTOP) is found out by B's pings on the
    relayed stream, and the viewer is closed with 1013 rather than left waiting for ever."""
    with (
        replica(tmp_path, "node-b", database, ws_ping_seconds=1) as b,
        replica(tmp_path, "node-a", database) as a,
        a.client() as agent_a,
    ):
        job = agent_a.post(
            "/v1/executions",
            json={"command": "echo started; read line", "pty": True, "async": True},
        )
        assert job.status_code == 202, job.text
        url = f"{b.ws_url}/v1/executions/{job.json()['id']}/stream"

        async def watch_through_b() -> tuple[int | None, str]:
            headers = {"Authorization": f"Bearer {AGENT}"}
            async with connect(url, additional_headers=headers) as viewer:
                seen = b""
                while b"started" not in seen:
                    frame = json.loads(await asyncio.wait_for(viewer.recv(), 30))
                    if frame["type"] == "output":
                        seen += frame["data"].encode()
                a.process.send_signal(signal.SIGSTOP)  # this test's own replica, by its pid
                with pytest.raises(ConnectionClosed):
                    while True:
                        frame = json.loads(await asyncio.wait_for(viewer.recv(), 30))
                        assert frame["type"] != "exit", frame
                assert viewer.protocol.close_rcvd is not None, "no close frame"
                return viewer.close_code, viewer.close_reason

        try:
            code, reason = asyncio.run(watch_through_b())
        finally:
            kill(a)  # SIGKILL ends a stopped process too; its pty job hangs up with it
    assert code == 1013, (code, reason)
    assert reason == "replica node-a stopped answering", reason
