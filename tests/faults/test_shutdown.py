"""Graceful stop: SIGTERM answers every open wait, records every running command, keeps
pending approvals, closes viewers with 1012, and exits within SHELLGATE_SHUTDOWN_GRACE."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from app.executions.result_text import LOST_NOTICE
from app.main import create_app
from tests.conftest import AGENT, APPROVER, free_port, make_settings
from tests.databases import ServerDatabase
from tests.faults.server_process import server_env, server_process
from tests.faults.slow_reader import READING_NAME

GRACE = 10.0
POLICY = {"default": "allow", "rules": [{"match": "echo needs-approval*", "approval": "prompt"}]}


def _until(condition: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _reading(pid: int) -> bool:
    """Whether the slow reader `pid` has a command (it renames itself once it has)."""
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().strip() == READING_NAME
    except FileNotFoundError:
        return False


def _in_thread(results: dict[str, Any], name: str, call: Any) -> threading.Thread:
    def run() -> None:
        try:
            results[name] = call()
        except Exception as error:
            results[name] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _viewer(base_url: str, execution_id: str, first_frame: threading.Event) -> int | None:
    url = base_url.replace("http://", "ws://") + f"/v1/executions/{execution_id}/stream"
    with connect(url, additional_headers={"Authorization": f"Bearer {AGENT}"}) as ws:
        try:
            while True:
                ws.recv(timeout=60)
                first_frame.set()
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None


def test_sigterm_answers_waits_records_commands_and_exits_within_the_grace(
    tmp_path: Path, database: ServerDatabase
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    env = server_env(tmp_path, database, policy_file=str(policy))
    results: dict[str, Any] = {}
    with server_process(env, tmp_path / "server.log") as server:
        with server.client() as client:
            job = client.post(
                "/v1/executions", json={"command": "echo started; sleep 600", "async": True}
            ).json()["id"]
        long_client = server.client(timeout=700)
        threads = [
            _in_thread(results, "wait", lambda: long_client.get(f"/v1/executions/{job}?wait=600")),
            _in_thread(
                results,
                "approval",
                lambda: server.client(timeout=700).post(
                    "/v1/executions",
                    json={"command": "echo needs-approval-1", "approval_wait": 3600},
                ),
            ),
            _in_thread(
                results,
                "file",
                # Outside the workspace: the files rules prompt, and the read holds.
                lambda: server.client(timeout=700).get(
                    "/v1/files", params={"path": str(tmp_path / "held.txt"), "approval_wait": 3600}
                ),
            ),
            _in_thread(
                results,
                "foreground",
                lambda: server.client(timeout=700).post(
                    "/v1/executions", json={"command": "echo fg; sleep 20"}
                ),
            ),
        ]
        first_frame = threading.Event()
        threads.append(
            _in_thread(results, "viewer", lambda: _viewer(server.base_url, job, first_frame))
        )
        with server.client(APPROVER) as approver:

            def all_in_flight() -> bool:
                pending = approver.get("/v1/approvals", params={"state": "pending"}).json()
                running = approver.get("/v1/executions", params={"state": "running"}).json()
                commands = {item["command"] for item in running["data"]}
                return (
                    len(pending["data"]) == 2
                    and "echo fg; sleep 20" in commands
                    and first_frame.is_set()
                )

            _until(all_in_flight, 30, "the approvals, the foreground call and the viewer")

        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(GRACE + 10)
        elapsed = time.monotonic() - started
        for thread in threads:
            thread.join(10)
        log = server.log()
    print(f"SIGTERM to exit: {elapsed:.2f}s")
    assert elapsed < GRACE, f"stopped after {elapsed:.1f}s\n{log}"

    waited = results["wait"]
    assert isinstance(waited, httpx.Response), waited
    assert waited.status_code == 200 and waited.json()["state"] == "running"
    approval = results["approval"]
    assert isinstance(approval, httpx.Response), approval
    assert approval.status_code == 202 and approval.json()["state"] == "awaiting_approval"
    held_file = results["file"]
    assert isinstance(held_file, httpx.Response), held_file
    assert held_file.status_code == 202, held_file.text
    assert held_file.json()["state"] == "awaiting_approval"
    foreground = results["foreground"]
    assert isinstance(foreground, httpx.Response), foreground
    assert foreground.status_code == 202, foreground.text
    assert foreground.json()["state"] == "running"
    assert results["viewer"] == 1012

    # The next instance finds every command recorded and the approval still pending.
    with server_process(env, tmp_path / "server2.log") as again, again.client() as client:
        for execution_id, output in ((job, "started\n"), (foreground.json()["id"], "fg\n")):
            record = client.get(f"/v1/executions/{execution_id}").json()
            assert record["state"] == "lost", record
            assert LOST_NOTICE in record["notices"]
            assert record["finished_at"] is not None
            log_bytes = client.get(f"/v1/executions/{execution_id}/output").content
            assert log_bytes == output.encode()
        held = client.get(f"/v1/executions/{approval.json()['id']}").json()
        assert held["state"] == "awaiting_approval"
        assert held["approval"]["state"] == "pending"


# --- what the app does the moment the stop is requested (in process: the listener stays open)


@contextlib.contextmanager
def _serve_app(app: Any) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    _until(lambda: server.started, 30, "the server")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture
def stoppable(tmp_path: Path, database: ServerDatabase) -> Iterator[tuple[Any, str]]:
    app = create_app(make_settings(tmp_path, database))
    with _serve_app(app) as base_url:
        yield app, base_url


def test_once_stopping_readiness_fails_and_new_work_gets_503_with_retry_after(
    stoppable: tuple[Any, str],
) -> None:
    app, base_url = stoppable
    headers = {"Authorization": f"Bearer {AGENT}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        assert client.get("/readyz").status_code == 200
        job = client.post("/v1/executions", json={"command": "sleep 600", "async": True}).json()
        results: dict[str, Any] = {}
        waiting = _in_thread(
            results, "wait", lambda: client.get(f"/v1/executions/{job['id']}?wait=600")
        )
        _until(lambda: app.state.services.executions._changes._events, 10, "the long-poll")

        app.state.stop_signal.fire()
        waiting.join(5)
        assert results["wait"].status_code == 200

        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"]["code"] == "shutting_down"
        assert ready.headers["Retry-After"] == "5"
        for path, body in (
            ("/v1/executions", {"command": "echo never"}),
            ("/v1/sessions", {}),
            ("/v1/ws-tickets", None),
        ):
            refused = client.post(path, json=body)
            assert refused.status_code == 503, (path, refused.text)
            assert refused.json()["error"]["code"] == "shutting_down"
            assert int(refused.headers["Retry-After"]) > 0
        ended = client.get(f"/v1/executions/{job['id']}").json()
        assert ended["state"] in ("running", "lost")
        # The running command was stopped (TERM, then KILL) and recorded.
        _until(
            lambda: client.get(f"/v1/executions/{job['id']}").json()["state"] == "lost",
            10,
            "the job to be recorded lost",
        )


def test_a_foreground_command_that_ends_within_the_drain_answers_200_not_202(
    tmp_path: Path, database: ServerDatabase
) -> None:
    # A long drain, so that the command's end (released by the test once the stop is seen)
    # lands inside it on any machine; the default is 1 s.
    settings = make_settings(tmp_path, database, shutdown_grace=300, shutdown_drain=30)
    go = settings.workspace / "go"
    command = "touch started; while [ ! -e go ]; do sleep 0.01; done; echo done"
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {AGENT}"}
    with (
        _serve_app(app) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=60) as client,
    ):
        results: dict[str, Any] = {}
        call = _in_thread(
            results, "call", lambda: client.post("/v1/executions", json={"command": command})
        )
        _until((settings.workspace / "started").exists, 30, "the command to start")
        app.state.stop_signal.fire()
        # The stop has begun (new work is refused) while the command still runs.
        _until(lambda: client.get("/readyz").status_code == 503, 30, "the stop")
        refused = client.post("/v1/executions", json={"command": "echo never"})
        assert refused.status_code == 503, refused.text
        assert call.is_alive(), "the call was answered before its command ended"
        go.touch()
        call.join(60)
        answered = results["call"]
        assert isinstance(answered, httpx.Response), answered
        assert answered.status_code == 200, answered.text
        assert (answered.json()["state"], answered.json()["output"]) == ("completed", "done\n")


def _hold_spawns(
    app: Any, monkeypatch: pytest.MonkeyPatch, spawning: threading.Event, go: threading.Event
) -> None:
    """The seam: the server's real spawn, held at its start (`spawning` set) until `go`, so
    that a test can begin the stop while a command is on its way."""
    launcher = app.state.services.executions._launcher
    spawn = launcher._spawn

    async def held_spawn(*args: Any, **kwargs: Any) -> Any:
        spawning.set()
        await asyncio.to_thread(go.wait, 60)
        return await spawn(*args, **kwargs)

    monkeypatch.setattr(launcher, "_spawn", held_spawn)


def test_a_foreground_call_still_being_spawned_at_the_stop_answers_200_not_lost(
    tmp_path: Path, database: ServerDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call accepted before the signal whose command was not started yet (its policy checked,
    its spawn under way: slow under load) is one the drain waits for too. Before, the drain saw
    no call waiting for a command, the stop went on at once, and the command, started right
    after, was answered 202 and recorded `lost` though it ran to its end."""
    settings = make_settings(tmp_path, database, shutdown_grace=300, shutdown_drain=30)
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {AGENT}"}
    spawning, go = threading.Event(), threading.Event()
    with (
        _serve_app(app) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=60) as client,
    ):
        _hold_spawns(app, monkeypatch, spawning, go)
        results: dict[str, Any] = {}
        call = _in_thread(
            results, "call", lambda: client.post("/v1/executions", json={"command": "echo ran"})
        )
        _until(spawning.is_set, 30, "the spawn to begin")
        app.state.stop_signal.fire()
        _until(lambda: client.get("/readyz").status_code == 503, 30, "the stop")
        go.set()
        call.join(60)
        answered = results["call"]
        assert isinstance(answered, httpx.Response), answered
        assert answered.status_code == 200, answered.text
        assert (answered.json()["state"], answered.json()["output"]) == ("completed", "ran\n")
        record = client.get(f"/v1/executions/{answered.json()['id']}").json()
        assert record["state"] == "completed", record


def test_a_command_approved_just_before_the_stop_answers_its_waiting_caller_200(
    tmp_path: Path, database: ServerDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision starts the command in the approver's request, then hands it to the caller
    holding on: the drain counts that call through the spawn and the hand-over, so a command
    approved as the stop begins answers 200 rather than 202 and `lost`."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    settings = make_settings(
        tmp_path, database, shutdown_grace=300, shutdown_drain=30, policy_file=policy
    )
    app = create_app(settings)
    spawning, go = threading.Event(), threading.Event()
    with (
        _serve_app(app) as base_url,
        httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {AGENT}"}, timeout=60
        ) as client,
        httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {APPROVER}"}, timeout=60
        ) as approver,
    ):
        _hold_spawns(app, monkeypatch, spawning, go)
        results: dict[str, Any] = {}
        call = _in_thread(
            results,
            "call",
            lambda: client.post("/v1/executions", json={"command": "echo needs-approval"}),
        )

        def pending() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = approver.get(
                "/v1/approvals", params={"state": "pending"}
            ).json()["data"]
            return found

        _until(pending, 30, "the approval")
        approval_id = pending()[0]["id"]
        decision = _in_thread(
            results, "decision", lambda: approver.post(f"/v1/approvals/{approval_id}/approve")
        )
        _until(spawning.is_set, 30, "the approved command's spawn to begin")
        app.state.stop_signal.fire()
        _until(lambda: client.get("/readyz").status_code == 503, 30, "the stop")
        go.set()
        call.join(60)
        decision.join(60)
        answered = results["call"]
        assert isinstance(answered, httpx.Response), answered
        assert answered.status_code == 200, answered.text
        body = answered.json()
        assert (body["state"], body["output"]) == ("completed", "needs-approval\n")


def test_sigint_exits_within_the_grace_despite_a_stalled_request_and_a_term_proof_command(
    tmp_path: Path, database: ServerDatabase
) -> None:
    env = server_env(tmp_path, database)
    with server_process(env, tmp_path / "server.log") as server:
        with server.client() as client:
            stubborn = client.post(
                "/v1/executions",
                json={"command": "trap '' TERM; echo stubborn; sleep 600", "async": True},
            ).json()["id"]
            _until(
                lambda: client.get(f"/v1/executions/{stubborn}").json()["output"] == "stubborn\n",
                30,
                "the stubborn command to start",
            )
        port = int(server.base_url.rsplit(":", 1)[1])
        # A request whose body never finishes arriving: only uvicorn's cancel ends it.
        with socket.create_connection(("127.0.0.1", port)) as stalled:
            stalled.sendall(
                b"POST /v1/executions HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: Bearer {AGENT}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                + b'{"command": "echo'
            )
            started = time.monotonic()
            server.process.send_signal(signal.SIGINT)
            server.process.wait(GRACE + 10)
            elapsed = time.monotonic() - started
        log = server.log()
    print(f"SIGINT to exit with a stalled request: {elapsed:.2f}s")
    assert elapsed < GRACE, f"stopped after {elapsed:.1f}s\n{log}"
    with server_process(env, tmp_path / "server2.log") as again, again.client() as client:
        record = client.get(f"/v1/executions/{stubborn}").json()
        assert record["state"] == "lost"
        assert record["signal"] == signal.SIGKILL  # TERM was ignored: the grace ended in KILL
        assert client.get(f"/v1/executions/{stubborn}/output").content == b"stubborn\n"


# --- the answers a stop gives are the state when it began, whatever the stop writes meanwhile

HELD_CALLS = 4
STOP_ROUNDS = 10


def _stop_with_held_calls(
    tmp_path: Path, database: ServerDatabase, round_number: int
) -> dict[str, Any]:
    """A real server with held foreground calls and long-polls, then SIGTERM: their answers."""
    # The calls are still only intent files when the stop comes (the case that raced): the
    # answer's write of their `running` row and the stop's write of `lost` go together.
    env = server_env(
        tmp_path / f"round-{round_number}", database, foreground_record_delay_ms=30_000
    )
    markers = tmp_path / f"markers-{round_number}"
    markers.mkdir()
    results: dict[str, Any] = {}
    with server_process(env, tmp_path / f"server-{round_number}.log") as server:
        with server.client() as client:
            job = client.post("/v1/executions", json={"command": "sleep 600", "async": True})
            job_id = job.json()["id"]
        threads = []
        for index in range(HELD_CALLS):
            threads.append(
                _in_thread(
                    results,
                    f"foreground-{index}",
                    lambda index=index: server.client(timeout=60).post(
                        "/v1/executions",
                        json={"command": f"echo held-{index}; touch {markers}/{index}; sleep 30"},
                    ),
                )
            )
            threads.append(
                _in_thread(
                    results,
                    f"wait-{index}",
                    lambda: server.client(timeout=60).get(f"/v1/executions/{job_id}?wait=600"),
                )
            )
        _until(lambda: len(list(markers.iterdir())) == HELD_CALLS, 30, "the held foreground calls")
        # A long-poll that reached the server after the stop began would rightly read `lost`.
        with server.client() as client:
            _until(lambda: _waiting_calls(client) == HELD_CALLS, 30, "the long-polls to be held")
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(GRACE + 10)
        for thread in threads:
            thread.join(10)
        results["log"] = server.log()
    return results


def _waiting_calls(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("shellgate_waiting_calls "):
            return float(line.split()[1])
    raise AssertionError("/metrics has no shellgate_waiting_calls")


def _assert_answered_as_at_the_stop(results: dict[str, Any]) -> None:
    for index in range(HELD_CALLS):
        foreground = results[f"foreground-{index}"]
        assert isinstance(foreground, httpx.Response), foreground
        body = foreground.json()
        # A call whose command ran when the stop came: 202, `running`, its output so far.
        assert foreground.status_code == 202, foreground.text
        assert body["state"] == "running", body
        assert body["exit_code"] is None and body["finished_at"] is None, body
        assert LOST_NOTICE not in body["notices"], body
        # Its output so far: the pump may not have read the echo yet on a loaded machine.
        assert f"held-{index}\n".startswith(body["output"]), body
        waited = results[f"wait-{index}"]
        assert isinstance(waited, httpx.Response), waited
        assert waited.status_code == 200, waited.text
        assert waited.json()["state"] == "running", waited.json()


@pytest.mark.sqlite_only("a timing stress: the race is in the server, the same on PostgreSQL")
@pytest.mark.timeout(STOP_ROUNDS * 45)
def test_held_calls_answer_the_state_the_stop_found_in_every_round(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """Stress: the stop records every command `lost` while it answers their callers; the
    answers must say `running` every time, never whichever write won."""
    for round_number in range(STOP_ROUNDS):
        results = _stop_with_held_calls(tmp_path, database, round_number)
        try:
            _assert_answered_as_at_the_stop(results)
        except AssertionError as error:
            raise AssertionError(f"round {round_number}: {error}\n{results['log']}") from error


# --- every kind of wait open at the stop: a documented answer, never a 5xx or a traceback


def _streamed(server: Any, path: str, body: dict[str, Any]) -> tuple[int, str]:
    with (
        server.client(timeout=60) as client,
        client.stream("POST", path, json=body) as response,
    ):
        return response.status_code, response.read().decode()


def test_sigterm_with_every_kind_of_wait_open_answers_each_without_a_server_error(
    tmp_path: Path, database: ServerDatabase
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    env = server_env(tmp_path, database, policy_file=str(policy))
    markers = tmp_path / "markers"
    markers.mkdir()
    results: dict[str, Any] = {}
    with server_process(env, tmp_path / "server.log") as server:
        with server.client() as client:
            job = client.post("/v1/executions", json={"command": "sleep 600", "async": True})
            job_id = job.json()["id"]
            session_id = client.post("/v1/sessions", json={}).json()["id"]
            approval_session_id = client.post("/v1/sessions", json={}).json()["id"]
        opened = {
            "long_poll": lambda: server.client(timeout=60).get(f"/v1/executions/{job_id}?wait=600"),
            "foreground": lambda: server.client(timeout=60).post(
                "/v1/executions",
                json={"command": f"echo fg; touch {markers}/fg; sleep 30"},
            ),
            "approval_wait": lambda: server.client(timeout=60).post(
                "/v1/executions", json={"command": "echo needs-approval-fg", "approval_wait": 600}
            ),
            "file_approval_wait": lambda: server.client(timeout=60).get(
                "/v1/files", params={"path": str(tmp_path / "held.txt"), "approval_wait": 600}
            ),
            # A runner call whose command ignores TERM: it ends only with the KILL.
            "session_run": lambda: _streamed(
                server,
                f"/v1/sessions/{session_id}/run",
                {"command": f"trap '' TERM; echo run; touch {markers}/run; sleep 30"},
            ),
            "session_run_approval": lambda: _streamed(
                server,
                f"/v1/sessions/{approval_session_id}/run",
                {"command": "echo needs-approval-run"},
            ),
        }
        threads = [_in_thread(results, name, call) for name, call in opened.items()]
        with server.client(APPROVER) as approver:

            def all_open() -> bool:
                pending = approver.get("/v1/approvals", params={"state": "pending"}).json()
                return len(pending["data"]) == 3 and len(list(markers.iterdir())) == 2

            _until(all_open, 30, "every wait to be open")
        time.sleep(0.2)  # the long-poll's read of its record
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(GRACE + 10)
        elapsed = time.monotonic() - started
        for thread in threads:
            thread.join(10)
        log = server.log()
    assert elapsed < GRACE, f"stopped after {elapsed:.1f}s\n{log}"
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    answers = {name: results.get(name) for name in opened}
    for name, answer in answers.items():
        assert answer is not None and not isinstance(answer, Exception), (name, answer, log)
    assert answers["long_poll"].status_code == 200
    assert answers["long_poll"].json()["state"] == "running"
    assert answers["foreground"].status_code == 202, answers["foreground"].text
    assert answers["foreground"].json()["state"] == "running"
    for name in ("approval_wait", "file_approval_wait"):
        assert answers[name].status_code == 202, (name, answers[name].text)
        assert answers[name].json()["state"] == "awaiting_approval"
    status, body = answers["session_run"]
    # The stream had started: it ends with its last item (the KILL the stop sent), not a cut.
    assert status == 200, body
    last = json.loads(body.strip().splitlines()[-1])
    assert last["signal"] == signal.SIGKILL, body
    assert "run\n" in "".join(json.loads(line)["stdout"] for line in body.splitlines())
    status, body = answers["session_run_approval"]
    assert status == 503, body
    assert json.loads(body)["error"]["code"] == "shutting_down"


def test_a_request_the_stop_cuts_short_gets_503_not_a_500(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """uvicorn cancels what is still open half way through the grace: a POST whose body never
    finishes arriving, admitted before the stop, must get 503 `shutting_down`, not a 500."""
    env = server_env(tmp_path, database)
    with server_process(env, tmp_path / "server.log") as server:
        port = int(server.base_url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as stalled:
            stalled.sendall(
                b"POST /v1/executions HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: Bearer {AGENT}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                + b'{"command": "echo'
            )
            # A round trip after it: the stalled request was admitted (before the stop) and
            # is reading its body. Were it not, it would get the same 503 as new work.
            with server.client() as client:
                assert client.get("/healthz").status_code == 200
            server.process.send_signal(signal.SIGTERM)
            stalled.settimeout(GRACE + 10)
            answer = b""
            with contextlib.suppress(ConnectionError):
                while chunk := stalled.recv(65536):
                    answer += chunk
            server.process.wait(GRACE + 10)
        log = server.log()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), (answer, log)
    assert b"retry-after" in head.lower(), answer
    assert json.loads(body)["error"]["code"] == "shutting_down"
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log


def test_the_stop_ends_a_long_commands_reading_and_answers_its_call(
    tmp_path: Path, database: ServerDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reading under way when the stop came held its call until the reader's 10 s
    deadline, past uvicorn's cut at half the grace: the caller got no answer at all."""
    from app.process.line_child import LineChild

    monkeypatch.setattr(
        "app.policy.reader_process._start", lambda: LineChild("tests.faults.slow_reader")
    )
    app = create_app(make_settings(tmp_path, database))
    long_command = "echo never-runs; : " + "x" * 1100  # over 1 KiB: read by a child
    with _serve_app(app) as base_url:
        headers = {"Authorization": f"Bearer {AGENT}"}
        with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
            results: dict[str, Any] = {}
            call = _in_thread(
                results,
                "call",
                lambda: client.post("/v1/executions", json={"command": long_command}),
            )
            readers = app.state.services.policy._readers
            _until(lambda: readers._children, 10, "the reader")
            (child,) = readers._children
            _until(lambda: _reading(child.process.pid), 10, "the reading under way")
            fired = time.monotonic()
            app.state.stop_signal.fire()
            call.join(8)
            answered = time.monotonic() - fired
    answer = results.get("call")
    assert isinstance(answer, httpx.Response), answer
    assert answered < 3, f"answered {answered:.1f} s after the stop"
    # The reading became a limit: never run (held for an approval the stop answers).
    assert answer.status_code in (202, 403, 503), answer.text
    if answer.status_code == 202:
        assert answer.json()["state"] == "awaiting_approval", answer.text
