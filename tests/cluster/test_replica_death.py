"""A replica dies (SIGKILL of this test's own replica process, by its pid): the cluster tells
the truth about what it held (docs/operations.md, "When a replica dies"). Replicas are real
`python -m app serve` processes on loopback sharing a PostgreSQL database made for the test;
the node timeout is short so that each case stays within seconds."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cluster.replicas import Replica, fresh_database, replica
from tests.waiting import eventually

pytestmark = pytest.mark.postgres

NODE_TIMEOUT = 3


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
