"""A replica's graceful stop, seen through another replica (docs/operations.md, "Several
replicas"): requests about the stopping replica's executions get the truth from the database,
never a 503 for a listener that has just closed, nor a long-poll's answer cut short by the
stop. Each race is held open by real events rather than left to timing: the command on A
ignores SIGTERM, so the stop must wait out its kill grace before it records the command; a
long-poll is seen held on A (its gauge) before A gets SIGTERM; and A is frozen with SIGSTOP
once its listener is closed, before it can record anything."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import CallToolResult

from tests.api.test_mcp import mcp_client, structured, text_of
from tests.cluster.replicas import Replica, fresh_database, replica
from tests.conftest import ADMIN, AGENT
from tests.waiting import eventually

pytestmark = pytest.mark.postgres

# The stop ends A's command with TERM, then KILL after min(kill grace, shutdown grace / 4):
# a command that ignores TERM stays `running` that long into the stop.
SETTINGS: dict[str, Any] = {"kill_grace_seconds": 5, "shutdown_grace": 40}
STUBBORN = "trap '' TERM; echo started; sleep 300"


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_database() as url:
        yield url


def _in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []

    def run() -> None:
        try:
            answers.append(call())
        except Exception as error:  # reported by the assertion on the answer
            answers.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, answers


def _waiting_calls(server: Replica) -> float:
    with server.client() as client:
        for line in client.get("/metrics").text.splitlines():
            if line.startswith("shellgate_waiting_calls "):
                return float(line.split()[1])
    raise AssertionError("/metrics has no shellgate_waiting_calls")


def _refuses_connections(server: Replica) -> bool:
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def _stopping(observer: Replica, node_id: str) -> bool:
    with observer.client(ADMIN) as admin:
        nodes = admin.get("/v1/nodes").json()["data"]
    node = next(node for node in nodes if node["id"] == node_id)
    return bool(node["stopping"] and node["alive"])


@contextlib.contextmanager
def _stopping_and_frozen(a: Replica, observer: Replica) -> Iterator[Callable[[], None]]:
    """A gets SIGTERM and is frozen (SIGSTOP) once its listener is closed, before its stop
    records anything; yields `thaw` (SIGCONT), which the exit does too if it was not called."""
    frozen = False

    def thaw() -> None:
        nonlocal frozen
        if frozen:
            frozen = False
            with contextlib.suppress(ProcessLookupError):
                a.process.send_signal(signal.SIGCONT)

    try:
        a.process.send_signal(signal.SIGTERM)  # this test's own replica, by its pid
        eventually(lambda: _refuses_connections(a), what="A's listener closed")
        a.process.send_signal(signal.SIGSTOP)
        frozen = True
        assert _stopping(observer, a.name)
        yield thaw
    finally:
        thaw()


def _started_on(server: Replica) -> str:
    with server.client() as agent:
        job = agent.post("/v1/executions", json={"command": STUBBORN, "async": True})
        assert job.status_code == 202, job.text
        execution_id: str = job.json()["id"]
        eventually(
            lambda: agent.get(f"/v1/executions/{execution_id}/output").content == b"started\n",
            what="the command started",
            within=30,
        )
    return execution_id


def test_a_long_poll_through_b_cut_short_by_as_stop_gets_the_record_as_it_ends(
    tmp_path: Path, database: str
) -> None:
    """B forwards the long-poll to A and A holds it; A's stop ends every wait at once with the
    record as it stood (`running`). B, seeing A's row marked stopping (A marks it before it
    ends the waits), follows the record in the database instead: the caller reads `lost`,
    once A's stop has killed the command and recorded it."""
    with replica(tmp_path, "node-b", database) as b:
        with replica(tmp_path, "node-a", database, **SETTINGS) as a:
            execution_id = _started_on(a)
            with b.client(timeout=90) as agent_b:
                waiting, answers = _in_thread(
                    lambda: agent_b.get(f"/v1/executions/{execution_id}", params={"wait": 60})
                )
                eventually(lambda: _waiting_calls(a) == 1, what="the long-poll held on A")
                a.process.send_signal(signal.SIGTERM)  # this test's own replica, by its pid
                waiting.join(60)
                assert a.process.wait(60) in (0, -signal.SIGTERM), a.log()
        (answer,) = answers
        assert isinstance(answer, httpx.Response), answer
        assert answer.status_code == 200, answer.text
        record = answer.json()
        assert (record["state"], record["node"]) == ("lost", "node-a"), record
        assert record["output"] == "started\n", record


def _mcp_call(
    server: Replica, tool: str, arguments: dict[str, Any], within: float = 60
) -> CallToolResult:
    """An MCP tool, called on `server` with the MCP SDK's client."""

    async def call() -> CallToolResult:
        with anyio.fail_after(within + 30):
            async with mcp_client(server, AGENT) as client:  # type: ignore[arg-type]
                return await client.call_tool(tool, arguments)

    return anyio.run(call)


def _job_wait(server: Replica, execution_id: str, seconds: float) -> CallToolResult:
    return _mcp_call(server, "job_wait", {"id": execution_id, "seconds": seconds}, seconds)


def test_an_mcp_job_wait_through_b_cut_short_by_as_stop_gets_the_record_as_it_ends(
    tmp_path: Path, database: str
) -> None:
    """The MCP twin of the long-poll above: B's `job_wait` asks A, which holds the wait until
    its stop answers it with the record as it stood (`running`). B follows the record in the
    database instead, and the tool's result is the command's end, `lost`."""
    with (
        replica(tmp_path, "node-b", database) as b,
        replica(tmp_path, "node-a", database, **SETTINGS) as a,
    ):
        execution_id = _started_on(a)
        waiting, answers = _in_thread(lambda: _job_wait(b, execution_id, 60))
        eventually(lambda: _waiting_calls(a) == 1, what="the wait held on A")
        a.process.send_signal(signal.SIGTERM)  # this test's own replica, by its pid
        waiting.join(90)
        assert a.process.wait(60) in (0, -signal.SIGTERM), a.log()
    (result,) = answers
    assert isinstance(result, CallToolResult), result
    # The execution's result (a `lost` one is an error result), not a tool error about A.
    assert structured(result)["state"] == "lost", text_of(result)
    assert text_of(result).startswith("started\n"), text_of(result)


def test_requests_through_b_that_find_as_listener_closed_get_the_record_not_503(
    tmp_path: Path, database: str
) -> None:
    """A's listener is closed and its command not yet recorded (A frozen right there): the
    state behind the 503 `node_unreachable` of a rolling restart. Through B, a long-poll and a
    read of the log (the data directory shared) are answered once A's stop records the
    command, from the database and the shared log, never 503."""
    with replica(tmp_path, "node-b", database, shared_data=True) as b:
        with replica(tmp_path, "node-a", database, shared_data=True, **SETTINGS) as a:
            execution_id = _started_on(a)
            with _stopping_and_frozen(a, b) as thaw:
                with b.client(timeout=90) as agent_b:
                    state = agent_b.get(f"/v1/executions/{execution_id}").json()["state"]
                    assert state == "running"  # frozen within the kill grace: not recorded
                    polling, polled = _in_thread(
                        lambda: agent_b.get(f"/v1/executions/{execution_id}", params={"wait": 60})
                    )
                    reading, read = _in_thread(
                        lambda: agent_b.get(f"/v1/executions/{execution_id}/output")
                    )
                    thaw()
                    polling.join(60)
                    reading.join(60)
                assert a.process.wait(60) in (0, -signal.SIGTERM), a.log()
        (record,) = polled
        assert isinstance(record, httpx.Response), record
        assert record.status_code == 200, record.text
        assert record.json()["state"] == "lost", record.text
        (output,) = read
        assert isinstance(output, httpx.Response), output
        assert output.status_code == 200, output.text
        assert output.content == b"started\n"
        assert output.headers["X-Complete"] == "true"


def test_mcp_calls_through_b_that_find_as_listener_closed_get_the_record_not_an_error(
    tmp_path: Path, database: str
) -> None:
    """The MCP twin of the requests above: A's listener is closed, its command not yet
    recorded (A frozen right there). Through B, `read_output` (the data directory shared) and
    `job_cancel` wait for A's stop to record the command, as REST's do, then read the shared
    log, and answer that the command has already ended (REST's 409): never a tool error that
    A did not answer."""
    with (
        replica(tmp_path, "node-b", database, shared_data=True) as b,
        replica(tmp_path, "node-a", database, shared_data=True, **SETTINGS) as a,
    ):
        execution_id = _started_on(a)
        with _stopping_and_frozen(a, b) as thaw:
            reading, read = _in_thread(lambda: _mcp_call(b, "read_output", {"id": execution_id}))
            cancelling, cancelled = _in_thread(
                lambda: _mcp_call(b, "job_cancel", {"id": execution_id})
            )
            # Both are held on B until A's stop records the command (or, answered at once,
            # are checked below).
            eventually(
                lambda: _waiting_calls(b) + len(read) + len(cancelled) >= 2,
                what="both calls waiting on B",
            )
            thaw()
            reading.join(90)
            cancelling.join(90)
        assert a.process.wait(60) in (0, -signal.SIGTERM), a.log()
    (page,) = read
    assert isinstance(page, CallToolResult), page
    assert not page.is_error, text_of(page)
    assert text_of(page) == "started\n"
    assert structured(page)["complete"] is True, structured(page)
    (cancel,) = cancelled
    assert isinstance(cancel, CallToolResult), cancel
    assert cancel.is_error, text_of(cancel)
    assert text_of(cancel) == f"execution {execution_id} is already lost", text_of(cancel)


def test_a_session_call_through_b_to_a_stopping_a_is_503_node_unreachable(
    tmp_path: Path, database: str
) -> None:
    """A session's shell is on A alone, so no database record can answer for it: through B,
    a call naming the session while A stops (its listener closed, A frozen right there) is
    503 `node_unreachable` naming A, with `Retry-After`, never a fresh shell on B."""
    with (
        replica(tmp_path, "node-b", database) as b,
        replica(tmp_path, "node-a", database, **SETTINGS) as a,
    ):
        with a.client() as agent_a:
            made = agent_a.post("/v1/sessions", json={})
            assert made.status_code in (200, 201), made.text
            session_id = made.json()["id"]
        _started_on(a)  # the stop waits out its kill grace: A stays stopping for seconds
        with _stopping_and_frozen(a, b) as thaw:
            with b.client() as agent_b:
                call = agent_b.post(
                    "/v1/executions", json={"command": "echo here", "session": session_id}
                )
            thaw()
            assert a.process.wait(60) in (0, -signal.SIGTERM), a.log()
    assert call.status_code == 503, call.text
    error = call.json()["error"]
    assert error["code"] == "node_unreachable", error
    assert "node-a" in error["message"] and "stopping" in error["message"], error
    assert int(call.headers["Retry-After"]) > 0
