"""The sync SDK against a real server: runs, jobs, output by offset, streams, signals, PTY
input, attach, sessions, approvals, the policy, and every error as its exception."""

from __future__ import annotations

import hashlib
import threading
from datetime import datetime
from pathlib import Path

import pytest

from shellgate import (
    AuthenticationError,
    Client,
    ConflictError,
    Execution,
    ExitFrame,
    InvalidRequestError,
    NotFoundError,
    OutputFrame,
    PermissionDeniedError,
    RateLimitedError,
    ServerUnreachableError,
    StateFrame,
)
from tests.conftest import AGENT, LiveServer, free_port
from tests.sdk.conftest import numbered_lines_bytes, numbered_lines_command


def test_run_answers_a_typed_terminal_record(client: Client) -> None:
    result = client.run("echo hello-sdk; exit 3")
    assert isinstance(result, Execution)
    assert (result.state, result.exit_code, result.output) == ("failed", 3, "hello-sdk\n")
    assert result.is_terminal and result.is_error
    assert isinstance(result.created_at, datetime)
    assert "Command exited with code 3" in result.text


def test_run_follows_an_auto_backgrounded_call_to_its_end(client: Client) -> None:
    first = client.run("sleep 0.8; echo late", follow=False)
    assert first.state == "running" and first.mode == "job"
    followed = client.run("sleep 0.8; echo followed")
    assert (followed.state, followed.output) == ("completed", "followed\n")


def test_start_wait_and_read_by_offset(client: Client) -> None:
    job = client.start(numbered_lines_command(3, 50))
    assert job.state == "running" and job.mode == "job"
    done = client.wait(job.id)
    assert (done.state, done.exit_code) == ("completed", 0)
    expected = numbered_lines_bytes(3, 50)
    chunk = client.read(job.id, offset=10, limit=7)
    assert chunk.data == expected[10:17]
    assert (chunk.offset, chunk.next_offset, chunk.total_bytes) == (10, 17, len(expected))
    assert chunk.complete and not chunk.at_end
    assert hashlib.sha256(client.output(job.id)).digest() == hashlib.sha256(expected).digest()


def test_wait_with_a_timeout_answers_the_running_record_then_cancel(client: Client) -> None:
    job = client.start("sleep 30")
    still = client.wait(job.id, timeout=0.3)
    assert still.state == "running" and not still.is_terminal
    cancelled = client.cancel(job.id)
    assert cancelled.state == "cancelled"
    with pytest.raises(ConflictError) as refused:
        client.cancel(job.id)
    assert (refused.value.status, refused.value.code) == (409, "conflict")
    assert "already cancelled" in refused.value.message


def test_stream_yields_the_log_then_the_exit_frame(client: Client) -> None:
    job = client.start("echo one; sleep 0.2; printf 'two\\xff'; exit 4")
    frames = list(client.stream(job.id))
    assert isinstance(frames[0], StateFrame)
    assert b"".join(f.data for f in frames if isinstance(f, OutputFrame)) == b"one\ntwo\xff"
    assert frames[-1] == ExitFrame(state="failed", exit_code=4, signal=None)
    # From an offset: only the bytes after it.
    tail = [f for f in client.stream(job.id, offset=4) if isinstance(f, OutputFrame)]
    assert b"".join(f.data for f in tail) == b"two\xff"


def test_signal_interrupts_the_process_group(client: Client) -> None:
    job = client.start("sleep 30")
    client.signal(job.id, "INT")
    ended = client.wait(job.id, timeout=20)
    assert (ended.state, ended.exit_code, ended.signal) == ("failed", 130, 2)
    with pytest.raises(ConflictError):
        client.signal(job.id, "TERM")
    with pytest.raises(ValueError, match="signal must be one of"):
        client.signal(job.id, "USR1")


def test_pty_input_and_resize_over_rest(client: Client) -> None:
    job = client.start("read x; stty size; echo got:$x", pty=True, rows=24, cols=80)
    client.resize(job.id, 30, 100)
    client.input(job.id, "hey\r")
    done = client.wait(job.id, timeout=20)
    assert done.state == "completed"
    assert "30 100\ngot:hey\n" in done.output
    with pytest.raises(ConflictError, match="is not running"):
        client.input(job.id, "late\r")


def test_attach_drives_a_pty_both_ways(client: Client) -> None:
    job = client.start("read -p 'name? ' x; stty size; echo \"hi $x\"", pty=True)
    seen = b""
    with client.attach(job.id) as attachment:
        for frame in attachment:
            if isinstance(frame, OutputFrame):
                seen += frame.data
                if seen.endswith(b"name? "):
                    attachment.resize(33, 101)
                    attachment.send(b"caf\xc3\xa9\r")
        assert attachment.exit == ExitFrame(state="completed", exit_code=0, signal=None)
        assert attachment.offset == len(seen)
    assert seen == "name? café\r\n33 101\r\nhi café\r\n".encode()


def test_sessions_keep_exports_between_runner_calls(client: Client) -> None:
    session = client.create_session(env={"GREETING": "hi"}, timeout_ms=60_000)
    assert session.id.startswith("se_") and session.env == {"GREETING": "hi"}
    assert session.tool.name == "bash_run"
    first = client.session_run(session.id, "export NAME=sdk; echo out; echo err >&2")
    assert (first.stdout, first.stderr, first.exit_code) == (b"out\n", b"err\n", 0)
    assert first.execution_id.startswith("ex_")
    second = client.session_run(session.id, 'echo "$GREETING $NAME"; exit 2')
    assert (second.stdout, second.exit_code) == (b"hi sdk\n", 2)
    via_executions = client.run('echo "$GREETING"', session=session.id)
    assert via_executions.output == "hi\n" and via_executions.session == session.id
    changed = client.update_session(session.id, env={"GREETING": "hello"})
    assert changed.env == {"GREETING": "hello"}
    assert session.id in [item.id for item in client.list_sessions().data]
    client.delete_session(session.id)
    with pytest.raises(NotFoundError):
        client.get_session(session.id)


def test_a_keep_cwd_session_keeps_the_directory(client: Client, tmp_path: Path) -> None:
    session = client.create_session(cwd=str(tmp_path), keep_cwd=True)
    assert session.keep_cwd is True
    (tmp_path / "inner").mkdir()
    client.session_run(session.id, "cd inner")
    assert client.session_run(session.id, "pwd").stdout == f"{tmp_path}/inner\n".encode()
    assert client.update_session(session.id, keep_cwd=False).keep_cwd is False
    client.delete_session(session.id)


def test_approvals_list_and_decide(client: Client, approver: Client) -> None:
    held = client.start("echo needs-approval yes")
    assert held.state == "awaiting_approval" and held.approval is not None
    pending = approver.list_approvals()
    assert held.approval.id in [item.id for item in pending.data]
    decided = approver.approve(held.approval.id, reason="fine")
    assert (decided.state, decided.decided_by) == ("approved", "carol")
    assert client.wait(held.id, timeout=20).output == "needs-approval yes\n"

    refused = client.start("echo needs-approval no")
    assert refused.approval is not None
    assert approver.deny(refused.approval.id, reason="no").state == "denied"
    assert client.wait(refused.id, timeout=20).state == "rejected"
    with pytest.raises(PermissionDeniedError) as agent_decides:
        client.approve(refused.approval.id)
    assert agent_decides.value.code == "forbidden"


def test_a_denied_command_raises_with_the_policy_message(client: Client) -> None:
    with pytest.raises(PermissionDeniedError) as denied:
        client.run("rm -rf /nonexistent-x")
    assert denied.value.code == "policy_denied"
    assert denied.value.details.get("rule") == "rm -rf *"


def test_policy_dry_run_is_typed(client: Client) -> None:
    assert client.get_policy()["default"] == "allow"
    evaluation = client.evaluate("rm -rf /nonexistent-x", env={"LD_PRELOAD": "x"})
    assert (evaluation.verdict, evaluation.command_verdict) == ("deny", "deny")
    assert evaluation.matched_rule is not None and evaluation.matched_rule["match"] == "rm -rf *"
    assert [(item.name, item.verdict) for item in evaluation.env] == [("LD_PRELOAD", "deny")]
    assert client.evaluate("echo needs-approval x").verdict == "prompt"


def test_errors_carry_status_code_and_message(sdk_server: LiveServer, client: Client) -> None:
    with (
        Client(sdk_server.base_url, "not-a-token") as stranger,
        pytest.raises(AuthenticationError) as unauthenticated,
    ):
        stranger.run("true")
    assert (unauthenticated.value.status, unauthenticated.value.code) == (401, "unauthenticated")
    assert unauthenticated.value.request_id

    with pytest.raises(NotFoundError) as missing:
        client.get("ex_doesnotexist0123456789")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    with pytest.raises(NotFoundError):
        list(client.stream("ex_doesnotexist0123456789"))

    with pytest.raises(InvalidRequestError) as empty:
        client.run("")
    assert (empty.value.code, empty.value.message) == (
        "invalid_request",
        "command must not be empty",
    )
    with pytest.raises(InvalidRequestError) as shape:
        client.run("true", limits={"memory_mb": 0})
    assert shape.value.code == "validation_error" and "memory_mb" in shape.value.message


@pytest.mark.settings(max_jobs=1)
def test_the_job_cap_raises_rate_limited_with_retry_after(fresh_server: LiveServer) -> None:
    with Client(fresh_server.base_url, AGENT) as client:
        running = client.start("sleep 30")
        with pytest.raises(RateLimitedError) as limited:
            client.start("true")
        client.cancel(running.id)
    assert (limited.value.status, limited.value.code) == (429, "job_limit_reached")
    assert limited.value.retry_after is not None and limited.value.retry_after > 0
    assert "Background job limit reached (1)" in limited.value.message


def test_an_unreachable_server_is_one_exception() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", AGENT, reconnects=1) as client:
        with pytest.raises(ServerUnreachableError, match="cannot reach"):
            client.get("ex_whatever")
        with pytest.raises(ServerUnreachableError, match="broke off 1 times in a row"):
            list(client.stream("ex_whatever"))


def test_closing_an_attachment_from_another_thread_detaches(client: Client) -> None:
    job = client.start("sleep 30", pty=True)
    frames = []
    with client.attach(job.id) as attachment:
        for frame in attachment:
            frames.append(frame)
            if isinstance(frame, StateFrame):
                threading.Timer(0.2, attachment.close).start()
    assert frames == [StateFrame("running")]
    assert attachment.exit is None
    assert client.get(job.id).state == "running"
    client.cancel(job.id)


def test_info_names_the_caller_and_the_limits(client: Client) -> None:
    info = client.info()
    assert (info.caller.name, info.caller.role) == ("alice", "agent")
    assert info.max_jobs >= 1 and "max_command_bytes" in str(info.limits)


def test_an_id_with_path_characters_reaches_the_server_whole(client: Client) -> None:
    """`?`, `#` and `%` in an id were sent raw: `ex_a?b` asked for `ex_a` (and a query), and
    the error named another id than the caller's."""
    for odd in ("ex_a?b", "ex_a#b", "ex_50%"):
        with pytest.raises(NotFoundError) as raised:
            client.get(odd)
        assert odd in str(raised.value), str(raised.value)
    with pytest.raises(NotFoundError) as raised:
        client.output("ex_a?offset=0")
    assert "ex_a?offset=0" in str(raised.value)
