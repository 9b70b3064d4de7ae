"""Foreground runs through HTTP: results, exit codes, timeouts, cwd, env, output windows
(docs/api.md#running-a-command)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from app.output.artifact_log import artifact_log_path
from tests.conftest import ADMIN, LiveServer
from tests.conftest import run_foreground as run
from tests.waiting import eventually


def body_without_wall_time(text: str) -> str:
    return text.split("\n\nWall time:")[0]


# 1
def test_echo_returns_its_output_with_the_default_timeout(fg: httpx.Client) -> None:
    result = run(fg, "echo 'test output'")
    assert "test output" in str(result["text"])
    assert result["output"] == "test output\n"
    assert result["timeout_seconds"] == 300
    assert result["state"] == "completed"
    assert result["exit_code"] == 0


# 2
def test_text_reports_wall_time_with_two_decimals(fg: httpx.Client) -> None:
    result = run(fg, "true")
    assert re.search(r"Wall time: \d+\.\d{2} seconds", str(result["text"]))
    assert isinstance(result["wall_time_ms"], float)
    assert result["wall_time_ms"] >= 0
    assert result["text"].startswith("(no output)")  # type: ignore[union-attr]


# 3, 4
@pytest.mark.parametrize("code", [3, 1])
def test_nonzero_exit_is_data_not_an_http_error(fg: httpx.Client, code: int) -> None:
    result = run(fg, f"exit {code}")
    assert result["is_error"] is True
    assert result["exit_code"] == code
    assert result["state"] == "failed"
    assert result["timeout_seconds"] == 300
    assert str(result["text"]).endswith(f"Command exited with code {code}")


# 5
def test_zero_exit_has_no_error_and_no_exit_code_text(fg: httpx.Client) -> None:
    result = run(fg, "printf hi")
    assert result["is_error"] is False
    assert result["output"] == "hi"
    assert "Command exited with code" not in str(result["text"])


# 6
@pytest.mark.parametrize(
    ("command", "expected"), [("seq 1 5 | head -n2", "1\n2"), ("seq 1 5 | tail -n2", "4\n5")]
)
def test_pipelines_return_their_last_stage_output(
    fg: httpx.Client, command: str, expected: str
) -> None:
    assert body_without_wall_time(str(run(fg, command)["text"])).strip() == expected


# 7
def test_timeout_marks_the_result_with_exactly_one_timeout_notice(fg: httpx.Client) -> None:
    result = run(fg, "sleep 3", timeout=1)
    assert result["is_error"] is True
    assert result["timed_out"] is True
    assert result["state"] == "timed_out"
    assert result["exit_code"] is None
    assert str(result["text"]).count("[Command timed out after 1 seconds]") == 1
    assert str(result["text"]).startswith("[Command timed out after 1 seconds]")


# 8
def test_a_tiny_timeout_is_clamped_to_one_second_and_still_expires(fg: httpx.Client) -> None:
    result = run(fg, "sleep 5", timeout=0.05)
    assert result["timed_out"] is True
    assert re.search("timed out", str(result["text"]), re.IGNORECASE)
    assert "Timeout clamped to 1s (requested 0.05s; allowed range 1-3600s)." in result["notices"]  # type: ignore[operator]


# 11
def test_missing_cwd_is_refused_with_the_reference_message(
    fg: httpx.Client, fg_server: LiveServer
) -> None:
    artifacts = fg_server.settings.artifacts_dir
    before = set(artifacts.iterdir()) if artifacts.exists() else set()
    response = fg.post("/v1/executions", json={"command": "pwd", "cwd": "/nonexistent-dir-x"})
    assert response.status_code == 422
    assert response.json()["error"]["message"] == (
        "Working directory does not exist: /nonexistent-dir-x"
    )
    # Refused before anything ran: no log, no record, no job slot.
    assert (set(artifacts.iterdir()) if artifacts.exists() else set()) == before
    listed = fg.get("/v1/executions", params={"limit": 200}).json()["data"]
    assert not [item for item in listed if item["cwd"] == "/nonexistent-dir-x"]
    assert fg.get("/v1/info").json()["running_jobs"] == 0


def test_cwd_that_is_a_file_is_refused(fg: httpx.Client, tmp_path: Path) -> None:
    target = tmp_path / "plain-file"
    target.write_text("x")
    response = fg.post("/v1/executions", json={"command": "pwd", "cwd": str(target)})
    assert response.status_code == 422
    assert response.json()["error"]["message"] == (
        f"Working directory is not a directory: {target}"
    )


# 12
def test_multiline_command_starting_with_cd_is_not_rewritten(fg: httpx.Client) -> None:
    result = run(fg, "cd /nonexistent-x\necho first && echo second")
    output = str(result["output"])
    assert "first" in output and "second" in output
    assert result["command"] == "cd /nonexistent-x\necho first && echo second"


def test_leading_cd_becomes_the_working_directory(fg: httpx.Client, tmp_path: Path) -> None:
    result = run(fg, f"cd {tmp_path} && pwd")
    assert result["cwd"] == str(tmp_path)
    assert result["command"] == "pwd"
    assert str(result["output"]).strip() == str(tmp_path)


def test_leading_cd_to_a_missing_dir_fails_like_cwd(fg: httpx.Client) -> None:
    response = fg.post("/v1/executions", json={"command": "cd /nonexistent-y && ls"})
    assert response.status_code == 422
    assert "Working directory does not exist: /nonexistent-y" in response.text


# 13
def test_timeout_over_the_range_is_clamped_with_the_exact_notice(fg: httpx.Client) -> None:
    result = run(fg, "true", timeout=7200)
    assert result["timeout_seconds"] == 3600
    assert result["requested_timeout_seconds"] == 7200
    assert "Timeout clamped to 3600s (requested 7200s; allowed range 1-3600s)." in str(
        result["text"]
    )


# 14, 61
def test_timeout_zero_arms_no_deadline(fg: httpx.Client) -> None:
    result = run(fg, "sleep 1.2; echo finished", timeout=0)
    assert result["timeout_disabled"] is True
    assert result["timeout_seconds"] is None
    assert result["state"] == "completed"
    assert "finished" in str(result["output"])


@pytest.mark.settings(max_timeout=1, auto_background_ms=0)
def test_timeout_zero_cannot_escape_the_server_ceiling(fresh_server: LiveServer) -> None:
    # With SHELLGATE_MAX_TIMEOUT set, `timeout: 0` gets the ceiling, not an unbounded run.
    with fresh_server.client() as client:
        result = run(client, "sleep 4; echo finished", timeout=0)
    assert (result["state"], result["timed_out"]) == ("timed_out", True)
    assert result["timeout_seconds"] == 1
    assert result["timeout_disabled"] is None
    assert result["requested_timeout_seconds"] == 0
    assert "Timeout clamped to 1s (requested 0s; allowed range 1-3600s)." in str(result["text"])
    assert "finished" not in str(result["output"])


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"BIG": "a" * 200_000},
            "env entry BIG is 200004 bytes; the limit is 131071 bytes",
        ),
        (
            {f"V{i}": "a" * 100_000 for i in range(6)},
            "env is 600024 bytes; the limit is 524288 bytes",
        ),
    ],
)
def test_an_env_the_kernel_cannot_take_is_a_422_and_nothing_is_stored(
    fg: httpx.Client, env: dict[str, str], message: str
) -> None:
    # Beyond the kernel's sizes the spawn failed with E2BIG and left a `failed` record.
    before = fg.get("/v1/executions", params={"limit": 500}).json()["data"]
    response = fg.post("/v1/executions", json={"command": "true", "env": env})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == message
    session = fg.post("/v1/sessions", json={"env": env})
    assert session.status_code == 422, session.text
    # A session's env and a call's are within the sizes each, not together.
    half = {f"S{i}": "a" * 100_000 for i in range(3)}
    made = fg.post("/v1/sessions", json={"env": half}).json()
    call = {f"C{i}": "a" * 100_000 for i in range(3)}
    response = fg.post(
        "/v1/executions", json={"command": "true", "session": made["id"], "env": call}
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == "env is 600024 bytes; the limit is 524288 bytes"
    fg.delete(f"/v1/sessions/{made['id']}")
    after = fg.get("/v1/executions", params={"limit": 500}).json()["data"]
    assert [item["id"] for item in after] == [item["id"] for item in before]


# 15
def test_env_values_are_passed_verbatim_never_parsed(fg: httpx.Client, tmp_path: Path) -> None:
    value = "graph TD\n  A[\"quoted > arrow\"] --> B{$(touch pwned)}\n  `tick` 'single' ;rm"
    result = run(fg, "printf '%s' \"$MERMAID\"", env={"MERMAID": value}, cwd=str(tmp_path))
    assert result["output"] == value
    assert list(tmp_path.iterdir()) == []


def test_invalid_env_name_is_refused_with_the_reference_message(fg: httpx.Client) -> None:
    response = fg.post("/v1/executions", json={"command": "true", "env": {"1BAD": "x"}})
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "Invalid bash env name: 1BAD"


# 16
def test_large_output_points_at_its_artifact(fg: httpx.Client, fg_server: LiveServer) -> None:
    result = run(fg, "seq 1 15000")
    assert result["truncated"] is True
    assert result["artifact"] == f"artifact://{result['id']}"
    assert f"Read artifact://{result['id']} for full output" in str(result["text"])
    log = artifact_log_path(fg_server.data_dir / "artifacts", result["id"])
    assert log.read_bytes() == subprocess.run(["seq", "1", "15000"], capture_output=True).stdout


# 56
def test_exit_code_cwd_and_non_interactive_environment(fg: httpx.Client, tmp_path: Path) -> None:
    assert run(fg, "exit 7")["exit_code"] == 7
    assert str(run(fg, "pwd", cwd=str(tmp_path))["output"]).strip() == str(tmp_path)
    result = run(
        fg, 'printf "%s" "$AGENT:$GIT_TERMINAL_PROMPT:$PI_TEST_ENV"', env={"PI_TEST_ENV": "hello"}
    )
    assert result["output"] == "1:0:hello"


def test_caller_cannot_override_guard_variables(fg: httpx.Client) -> None:
    result = run(
        fg,
        'printf "%s:%s" "$CI" "$GIT_TERMINAL_PROMPT"',
        env={"CI": "no", "GIT_TERMINAL_PROMPT": "1"},
    )
    assert result["output"] == "true:0"


def test_stdin_is_dev_null_so_readers_do_not_hang(fg: httpx.Client) -> None:
    result = run(fg, "cat; echo after", timeout=5)
    assert result["state"] == "completed"
    assert result["output"] == "after\n"


# 57
def test_timeout_stops_the_command_before_it_finishes(fg: httpx.Client) -> None:
    result = run(fg, "sleep 10; echo done", timeout=1)
    assert result["timed_out"] is True
    assert "done" not in str(result["output"])


def is_running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


# 58
def test_timeout_kills_background_children_of_the_group(fg: httpx.Client, tmp_path: Path) -> None:
    marker, pid_file = tmp_path / "marker", tmp_path / "child.pid"
    command = (
        f"{{ echo $BASHPID > {pid_file}; sleep 2; touch {marker}; }} & "
        f"while [ ! -s {pid_file} ]; do sleep 0.01; done; sleep 10"
    )
    result = run(fg, command, timeout=1)
    assert result["timed_out"] is True
    # Killed with its group: gone (or never started) long before it would touch the marker.
    child = int(pid_file.read_text()) if pid_file.exists() else None
    eventually(lambda: child is None or not is_running(child), what="the background child's end")
    assert not marker.exists()


# 59
def test_completion_is_process_exit_not_pipe_eof(fg: httpx.Client) -> None:
    started = time.monotonic()
    result = run(fg, "{ sleep 2; echo late; } & echo immediate")
    elapsed = time.monotonic() - started
    assert result["exit_code"] == 0
    assert result["output"] == "immediate\n"
    assert elapsed < 1.5  # the background child sleeps 2 s; we must not wait for it


# A child left running after a normal end survives only under the policy's `keep_daemons`
# (docs/operations.md#confinement).
def test_background_child_pid_is_real_and_alive(fg: httpx.Client, fg_server: LiveServer) -> None:
    with fg_server.client(ADMIN) as admin:
        policy = admin.get("/v1/policy").json()
        document = {key: policy[key] for key in ("default", "critical", "rules", "interceptor")}
        assert admin.put("/v1/policy", json={**document, "keep_daemons": True}).status_code == 200
        try:
            result = run(fg, "sleep 30 >/dev/null 2>&1 & echo $!")
        finally:
            assert admin.put("/v1/policy", json=document).status_code == 200
    pid = int(str(result["output"]).strip())
    try:
        assert Path(f"/proc/{pid}").exists()
        # The child may still be between fork and exec (a bash copy) on a loaded machine.
        eventually(
            lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"),
            what="the background child's exec of sleep",
            within=5,
        )
    finally:
        os.kill(pid, 9)


def test_background_child_ends_with_the_run_by_default(fg: httpx.Client) -> None:
    result = run(fg, "sleep 30 >/dev/null 2>&1 & echo $!")
    pid = int(str(result["output"]).strip())

    # Killed when the run ended (it may linger as init's zombie for a moment: no cmdline).
    def gone() -> bool:
        try:
            return not Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return True

    eventually(gone, what="the end of the background child", within=5)


def test_signal_death_reports_signal_and_bash_exit_code(fg: httpx.Client) -> None:
    result = run(fg, "kill -KILL $$")
    assert result["signal"] == 9
    assert result["exit_code"] == 137
    assert result["state"] == "failed"


# 64
def test_100k_bytes_of_one_line_stay_inside_the_inline_window(fg: httpx.Client) -> None:
    result = run(fg, "head -c 100000 /dev/zero | tr '\\0' a")
    assert result["total_bytes"] == 100000
    assert int(result["output_bytes"]) <= 51200 + 20480  # type: ignore[call-overload]


def test_seq_100000_keeps_the_tail_and_counts_every_line(fg: httpx.Client) -> None:
    result = run(fg, "seq 1 100000")
    assert result["exit_code"] == 0
    assert int(result["total_lines"]) >= 100000  # type: ignore[call-overload]
    assert int(result["output_bytes"]) <= 50 * 1024 + 20 * 1024 + 1024  # type: ignore[call-overload]
    assert str(result["output"]).rstrip().endswith("99999\n100000")
    assert "elided" in str(result["output"])


def test_a_million_lines_stay_bounded_inline_and_exact_on_disk(
    fg: httpx.Client, fg_server: LiveServer
) -> None:
    result = run(fg, "seq 1 1000000")
    assert int(result["output_bytes"]) <= 71 * 1024  # type: ignore[call-overload]
    assert result["total_bytes"] == 6_888_896
    expected = subprocess.run(["seq", "1", "1000000"], capture_output=True).stdout
    received = bytearray()
    offset = 0
    while True:
        response = fg.get(
            f"/v1/executions/{result['id']}/output", params={"offset": offset, "limit": 1 << 20}
        )
        assert response.status_code == 200
        assert response.headers["X-Total-Bytes"] == "6888896"
        assert response.headers["X-Complete"] == "true"
        if not response.content:
            break
        received += response.content
        offset += len(response.content)
    assert len(received) == 6_888_896
    assert hashlib.sha256(received).digest() == hashlib.sha256(expected).digest()


def test_ansi_is_stripped_inline_but_kept_in_the_artifact(fg: httpx.Client) -> None:
    result = run(fg, r"printf '\033[31mred\033[0m\n'")
    assert result["output"] == "red\n"
    raw = fg.get(f"/v1/executions/{result['id']}/output").content
    assert raw == b"\x1b[31mred\x1b[0m\n"


def test_stdout_and_stderr_are_merged_in_one_log(fg: httpx.Client) -> None:
    result = run(fg, "echo out; echo err >&2")
    assert set(str(result["output"]).split()) == {"out", "err"}
