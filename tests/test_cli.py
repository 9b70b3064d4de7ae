"""The `shellgate` client commands against a real uvicorn on loopback (typer's CliRunner)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from app.cli.main import cli
from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer, free_port, make_settings, serve
from tests.databases import Databases

runner = CliRunner()
SHELLGATE = str(Path(sys.executable).parent / "shellgate")


def shellgate(url: str, token: str | None, *args: str, **env: str) -> Result:
    options = ["--url", url] + (["--token", token] if token else [])
    return runner.invoke(cli, [*options, *args], env={"SHELLGATE_TOKEN": None, **env})


def start_job(server: LiveServer, command: str) -> str:
    result = shellgate(server.base_url, AGENT, "run", "--async", command)
    assert result.exit_code == 0, result.output
    execution_id = result.stdout.strip()
    assert execution_id and "\n" not in execution_id
    return execution_id


def test_run_prints_the_result_text_and_exits_zero(server: LiveServer) -> None:
    result = shellgate(server.base_url, AGENT, "run", "echo hello-cli")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("hello-cli\n")
    assert "Wall time:" in result.stdout


def test_run_exits_with_the_commands_exit_code(server: LiveServer) -> None:
    result = shellgate(server.base_url, AGENT, "run", "echo before-exit; exit 3")
    assert result.exit_code == 3
    assert "before-exit" in result.stdout
    assert "Command exited with code 3" in result.stdout


def test_run_joins_several_words_into_one_command_as_ssh_does(server: LiveServer) -> None:
    result = shellgate(server.base_url, AGENT, "run", "echo", "joined", "words", "--env", "X=1")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("joined words\n")
    # After `--` every word is the command's, options of ours included.
    dashed = shellgate(server.base_url, AGENT, "run", "--", "printf", "%s:%s", "-a", "--env")
    assert dashed.exit_code == 0, dashed.output
    assert dashed.stdout.startswith("-a:--env")


def test_run_names_the_double_dash_when_a_command_word_looks_like_an_option(
    server: LiveServer,
) -> None:
    result = shellgate(server.base_url, AGENT, "run", "ls", "-la")
    assert result.exit_code == 2
    assert "No such option: -l" in result.output
    assert "go after `--`" in result.output


def test_policy_check_joins_words_like_run(server: LiveServer) -> None:
    result = shellgate(
        server.base_url, AGENT, "policy", "check", "--", "rm", "-rf", "/nonexistent-x"
    )
    assert result.exit_code == 10, result.output
    assert "Critical pattern" in result.stdout


def test_run_raw_prints_the_output_byte_exact_and_exits_with_its_code(
    server: LiveServer,
) -> None:
    # CRLF, an invalid byte and a line far over the text's 768-character cut, as written.
    command = "printf 'a\\r\\nb\\xff\\n'; head -c 5000 /dev/zero | tr '\\0' x; exit 3"
    result = shellgate(server.base_url, AGENT, "run", "--raw", command)
    assert result.exit_code == 3, result.output
    assert result.stdout_bytes == b"a\r\nb\xff\n" + b"x" * 5000
    refused = shellgate(server.base_url, AGENT, "run", "--raw", "--async", "true")
    assert refused.exit_code == 2


def test_run_passes_env_and_cwd(server: LiveServer, tmp_path: Path) -> None:
    options = ["--env", "GREETING=hi", "--cwd", str(tmp_path)]
    result = shellgate(server.base_url, AGENT, "run", 'echo "$GREETING $PWD"', *options)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"hi {tmp_path}\n")


def test_run_refuses_an_env_value_without_equals_as_usage(server: LiveServer) -> None:
    result = shellgate(server.base_url, AGENT, "run", "true", "--env", "NOEQUALS")
    assert result.exit_code == 2
    assert "KEY=VALUE" in result.output


def test_async_run_prints_the_id_and_wait_reports_the_result(server: LiveServer) -> None:
    execution_id = start_job(server, "sleep 0.2; echo waited-for; exit 4")
    result = shellgate(server.base_url, AGENT, "wait", execution_id, "--seconds", "20")
    assert result.exit_code == 4
    assert "waited-for" in result.stdout


def test_jobs_lists_the_job_with_its_command_cut_to_60_chars(server: LiveServer) -> None:
    command = "echo " + "x" * 100
    execution_id = start_job(server, command)
    shellgate(server.base_url, AGENT, "wait", execution_id)
    result = shellgate(server.base_url, AGENT, "jobs", "--limit", "50")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if execution_id in line)
    assert "completed" in row
    assert command[:59] + "…" in row
    assert command not in row

    # An approver lists everyone's executions: each row says whose it is.
    seen_by_approver = shellgate(server.base_url, APPROVER, "jobs", "--limit", "50")
    row = next(line for line in seen_by_approver.stdout.splitlines() if execution_id in line)
    assert " alice " in row

    as_json = shellgate(server.base_url, AGENT, "jobs", "--json", "--state", "completed")
    page = json.loads(as_json.stdout)
    assert execution_id in [item["id"] for item in page["data"]]
    assert {item["state"] for item in page["data"]} == {"completed"}


def test_logs_writes_the_exact_bytes(server: LiveServer) -> None:
    execution_id = start_job(server, "printf 'a\\nb'; printf 'c' >&2")
    result = shellgate(server.base_url, AGENT, "logs", "--follow", execution_id)
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == b"a\nbc"

    again = shellgate(server.base_url, AGENT, "logs", execution_id)
    assert again.stdout_bytes == b"a\nbc"


def test_logs_and_wait_take_the_artifact_url_the_result_text_points_at(
    server: LiveServer,
) -> None:
    # A long line is cut in `text`, which then says "Read artifact://<id> for full output".
    ran = shellgate(server.base_url, AGENT, "run", "head -c 2000 /dev/zero | tr '\\0' a")
    assert ran.exit_code == 0, ran.output
    artifact = next(word for word in ran.stdout.split() if word.startswith("artifact://"))
    logs = shellgate(server.base_url, AGENT, "logs", artifact)
    assert logs.exit_code == 0, logs.output
    assert logs.stdout_bytes == b"a" * 2000
    waited = shellgate(server.base_url, AGENT, "wait", artifact, "--seconds", "0")
    assert waited.exit_code == 0, waited.output


def test_logs_follow_receives_bytes_written_after_it_started(server: LiveServer) -> None:
    # The job is still running when `logs --follow` connects; the rest arrives on the stream.
    execution_id = start_job(server, "printf 'first\\n'; sleep 1; printf '\\xff-second'")
    result = shellgate(server.base_url, AGENT, "logs", "--follow", execution_id)
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == b"first\n\xff-second"


def test_logs_follow_of_an_unknown_execution_is_refused(server: LiveServer) -> None:
    result = shellgate(server.base_url, AGENT, "logs", "--follow", "ex_doesnotexist00000")
    assert result.exit_code == 2
    assert "not found" in result.output


def test_cancel_ends_the_job_and_wait_exits_one(server: LiveServer) -> None:
    execution_id = start_job(server, "sleep 30")
    result = shellgate(server.base_url, AGENT, "cancel", execution_id)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{execution_id} cancelled"

    waited = shellgate(server.base_url, AGENT, "wait", execution_id)
    assert waited.exit_code == 1
    assert f"execution {execution_id} was cancelled" in waited.stderr

    again = shellgate(server.base_url, AGENT, "cancel", execution_id)
    assert again.exit_code == 2
    assert "HTTP 409" in again.stderr


def test_unreachable_server_is_one_line_and_exit_three() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = shellgate(url, AGENT, "run", "echo never")
    assert result.exit_code == 3
    assert result.stderr.startswith(f"shellgate: cannot reach the server at {url}")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_forbidden_run_prints_the_envelope_message(server: LiveServer) -> None:
    with server.client(APPROVER) as approver:
        expected = approver.post("/v1/executions", json={"command": "true"}).json()["error"]
    result = shellgate(server.base_url, APPROVER, "run", "echo not-allowed")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"shellgate: {expected['message']} ({expected['code']}, HTTP 403)"
    )
    assert "Traceback" not in result.output


def test_missing_token_file_and_no_token_is_reported_with_verbose(
    server: LiveServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    absent = shellgate(server.base_url, None, "token", SHELLGATE_DATA_DIR=str(data_dir))
    assert absent.exit_code == 1
    assert absent.stdout.strip() == f"{(data_dir / 'admin.token').resolve()} (does not exist)"

    (data_dir / "admin.token").write_text(AGENT + "\n")
    present = shellgate(server.base_url, None, "token", SHELLGATE_DATA_DIR=str(data_dir))
    assert present.exit_code == 0
    assert present.stdout.strip().endswith("(exists)")

    result = shellgate(
        server.base_url, None, "--verbose", "run", "echo via-file", SHELLGATE_DATA_DIR=str(data_dir)
    )
    assert result.exit_code == 0, result.output
    assert "via-file" in result.stdout
    assert f"token from {data_dir / 'admin.token'}" in result.stderr


@pytest.fixture(scope="module")
def policed(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """A server of its own whose policy `policy set` replaced with the admin token."""
    tmp = tmp_path_factory.mktemp("cli-policy")
    policy_file = tmp / "policy.yaml"
    policy_file.write_text(
        "default: allow\n"
        "rules:\n"
        "  - {match: 'echo needs-approval*', approval: prompt}\n"
        "  - {match: 'rm -rf *', approval: deny}\n"
    )
    with serve(make_settings(tmp, module_databases.new(), auto_background_ms=200)) as live:
        result = shellgate(live.base_url, ADMIN, "policy", "set", str(policy_file))
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == "policy replaced: 2 rules, default allow"
        yield live


def test_run_waits_for_an_auto_backgrounded_command_to_end(policed: LiveServer) -> None:
    result = shellgate(policed.base_url, AGENT, "run", "sleep 0.6; echo finally; exit 5")
    assert result.exit_code == 5, result.output
    assert result.stdout.startswith("finally\n")
    assert "Backgrounded" not in result.stdout


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_waiting_names_the_execution_that_goes_on_running(
    policed: LiveServer,
) -> None:
    marker = "sleep 30 # ctrl-c-while-waiting"
    argv = [SHELLGATE, "--url", policed.base_url, "--token", AGENT, "run", marker]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A terminal's Ctrl-C: the suite may itself run with SIGINT ignored (a background job
        # of a non-interactive shell, as CI can be), and Python keeps an ignored SIGINT.
        preexec_fn=_sigint_as_at_a_terminal,
    )
    with policed.client(AGENT) as rest:
        try:
            # Auto-backgrounded after 200 ms: the CLI is then waiting on the job.
            for _ in range(100):
                listed = rest.get("/v1/executions", params={"state": "running"}).json()["data"]
                running = [item for item in listed if item["command"] == marker]
                if running:
                    break
                time.sleep(0.1)
            assert running, "the command never ran"
            time.sleep(1)
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=20)
            execution_id = running[0]["id"]
            assert process.returncode == 130
            assert f"execution {execution_id} goes on running" in stderr.decode()
            assert f"shellgate cancel {execution_id}" in stderr.decode()
            assert b"Traceback" not in stderr
            assert rest.get(f"/v1/executions/{execution_id}").json()["state"] == "running"
        finally:
            process.kill()
            process.wait(timeout=10)
            for item in rest.get("/v1/executions", params={"state": "running"}).json()["data"]:
                if item["command"] == marker:
                    rest.post(f"/v1/executions/{item['id']}/cancel")


def test_policy_set_needs_the_admin_token(policed: LiveServer, tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.json"
    policy_file.write_text('{"default": "deny"}')
    result = shellgate(policed.base_url, AGENT, "policy", "set", str(policy_file))
    assert result.exit_code == 2
    assert "HTTP 403" in result.stderr
    shown = shellgate(policed.base_url, AGENT, "policy", "show")
    assert json.loads(shown.stdout)["default"] == "allow"


def test_policy_set_refuses_an_invalid_file_before_sending(
    policed: LiveServer, tmp_path: Path
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("default: sometimes\n")
    result = shellgate(policed.base_url, ADMIN, "policy", "set", str(policy_file))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"shellgate: invalid policy file {policy_file}: default")


def test_policy_check_shows_deny_for_a_denied_command(policed: LiveServer) -> None:
    result = shellgate(policed.base_url, AGENT, "policy", "check", "rm -rf /nonexistent-x")
    assert result.exit_code == 11, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "verdict: deny"
    assert lines[1].startswith("reason: ")
    assert "rm -rf *" in lines[1]


def test_policy_check_judges_env_names_too(policed: LiveServer) -> None:
    options = ["--env", "GREETING=hi", "--env", "BASH_ENV=/nonexistent-x", "--cwd", "/tmp"]
    result = shellgate(policed.base_url, AGENT, "policy", "check", "true", *options)
    assert result.exit_code == 11, result.output
    assert result.stdout.splitlines() == [
        "verdict: deny",
        "reason: Blocked environment variable: BASH_ENV",
        "env BASH_ENV: deny (BASH_ENV)",
    ]


def test_prompted_async_run_waits_for_approval_and_runs_once_approved(
    policed: LiveServer,
) -> None:
    url = policed.base_url
    execution_id = start_job(policed, "echo needs-approval now")
    noted = shellgate(url, AGENT, "run", "--async", "echo needs-approval also")
    assert noted.exit_code == 0 and noted.stdout.strip().startswith("ex_")
    assert f"execution {noted.stdout.strip()} awaits approval (approval ap_" in noted.stderr

    pending = shellgate(url, AGENT, "wait", execution_id, "--seconds", "0")
    assert pending.exit_code == 1
    assert "is awaiting approval" in pending.stderr

    table = shellgate(url, APPROVER, "approvals")
    assert table.exit_code == 0, table.output
    assert execution_id in table.stdout
    listing = json.loads(shellgate(url, APPROVER, "approvals", "--json").stdout)
    (approval,) = [item for item in listing["data"] if item["execution_id"] == execution_id]

    refused = shellgate(url, AGENT, "approve", approval["id"])
    assert refused.exit_code == 2
    assert "HTTP 403" in refused.stderr

    approved = shellgate(url, APPROVER, "approve", approval["id"], "--reason", "looks fine")
    assert approved.exit_code == 0, approved.output
    assert approved.stdout.strip() == f"{approval['id']} approved (execution {execution_id})"

    done = shellgate(url, AGENT, "wait", execution_id, "--seconds", "20")
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("needs-approval now\n")


def test_denied_approval_ends_the_run_rejected(policed: LiveServer) -> None:
    execution_id = start_job(policed, "echo needs-approval never")
    listing = json.loads(shellgate(policed.base_url, APPROVER, "approvals", "--json").stdout)
    (approval,) = [item for item in listing["data"] if item["execution_id"] == execution_id]
    denied = shellgate(policed.base_url, APPROVER, "deny", approval["id"], "--reason", "no")
    assert denied.exit_code == 0, denied.output
    result = shellgate(policed.base_url, AGENT, "wait", execution_id)
    assert result.exit_code == 1
    assert f"execution {execution_id} was rejected" in result.stderr


def test_policy_check_exits_0_allow_10_prompt_11_deny(policed: LiveServer) -> None:
    cases = [("echo fine", 0, "allow"), ("echo needs-approval x", 10, "prompt")]
    cases.append(("rm -rf /nonexistent-x", 11, "deny"))
    for command, exit_code, verdict in cases:
        result = shellgate(policed.base_url, AGENT, "policy", "check", command)
        assert result.exit_code == exit_code, result.output
        assert result.stdout.splitlines()[0] == f"verdict: {verdict}"
        as_json = shellgate(policed.base_url, AGENT, "policy", "check", "--json", command)
        assert as_json.exit_code == exit_code
        assert json.loads(as_json.stdout)["verdict"] == verdict
    shown = runner.invoke(cli, ["policy", "check", "--help"])
    assert "0 allow, 10 prompt, 11 deny" in shown.stdout


def test_run_with_approval_wait_zero_answers_at_once_awaiting_approval(
    policed: LiveServer,
) -> None:
    url = policed.base_url
    result = shellgate(url, AGENT, "run", "--approval-wait", "0", "echo needs-approval later")
    assert result.exit_code == 1, result.output
    assert "is awaiting approval (approval " in result.stderr
    assert result.stdout == ""  # nothing ran: no "(no output)" for a script to capture
    listing = json.loads(shellgate(url, APPROVER, "approvals", "--json").stdout)
    (approval,) = [
        item for item in listing["data"] if item["command"] == "echo needs-approval later"
    ]
    denied = shellgate(url, APPROVER, "deny", approval["id"])
    assert denied.exit_code == 0, denied.output


def test_run_refuses_a_negative_approval_wait_before_sending() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: a request would exit 3
    result = shellgate(url, AGENT, "run", "--approval-wait", "-1", "true")
    assert result.exit_code == 2
    assert "--approval-wait" in result.output


def test_run_in_a_session_uses_its_env_and_keeps_exports(server: LiveServer) -> None:
    with server.client(AGENT) as client:
        created = client.post("/v1/sessions", json={"env": {"GREETING": "from-session"}})
        session_id = created.json()["id"]
    first = shellgate(server.base_url, AGENT, "run", "--session", session_id, "export MARK=kept")
    assert first.exit_code == 0, first.output
    second = shellgate(
        server.base_url, AGENT, "run", "--session", session_id, 'echo "$GREETING $MARK"'
    )
    assert second.exit_code == 0, second.output
    assert second.stdout.startswith("from-session kept\n")
    outside = shellgate(server.base_url, AGENT, "run", 'echo "[$GREETING$MARK]"')
    assert outside.stdout.startswith("[]\n")

    unknown = shellgate(server.base_url, AGENT, "run", "--session", "se_doesnotexist00", "true")
    assert unknown.exit_code == 2
    assert "HTTP 404" in unknown.stderr


def test_run_with_pty_has_a_terminal(server: LiveServer) -> None:
    command = "test -t 1 && echo on-a-tty || echo no-tty"
    with_pty = shellgate(server.base_url, AGENT, "run", "--pty", command)
    assert with_pty.exit_code == 0, with_pty.output
    assert with_pty.stdout.startswith("on-a-tty")
    without = shellgate(server.base_url, AGENT, "run", command)
    assert without.stdout.startswith("no-tty")


def test_empty_jobs_and_approvals_lists_say_none(fresh_server: LiveServer) -> None:
    for command in ("jobs", "approvals"):
        result = shellgate(fresh_server.base_url, ADMIN, command)
        assert result.exit_code == 0, result.output
        assert result.stdout == "none\n"


def test_token_order_is_flag_then_environment_then_file(server: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "admin.token").write_text("sg_not-a-token-of-this-server\n")
    data = {"SHELLGATE_DATA_DIR": str(tmp_path)}
    flag = runner.invoke(
        cli,
        ["--url", server.base_url, "--token", AGENT, "-v", "run", "echo by-flag"],
        env={**data, "SHELLGATE_TOKEN": "sg_wrong"},
    )
    assert flag.exit_code == 0, flag.output
    assert "token from --token" in flag.stderr
    environment = runner.invoke(
        cli,
        ["--url", server.base_url, "-v", "run", "echo by-env"],
        env={**data, "SHELLGATE_TOKEN": AGENT},
    )
    assert environment.exit_code == 0, environment.output
    assert "token from SHELLGATE_TOKEN" in environment.stderr


def test_a_stale_token_file_is_named_instead_of_a_bare_401(
    server: LiveServer, tmp_path: Path
) -> None:
    token_file = tmp_path / "admin.token"
    token_file.write_text("sg_left-by-an-earlier-server\n")
    result = shellgate(server.base_url, None, "jobs", SHELLGATE_DATA_DIR=str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"shellgate: the token in {token_file} is not accepted by {server.base_url}: "
        "it is stale — set SHELLGATE_TOKEN or --token"
    )
    # The same wrong token given explicitly is the server's plain refusal, not a stale file.
    explicit = shellgate(server.base_url, "sg_left-by-an-earlier-server", "jobs")
    assert explicit.exit_code == 2
    assert "HTTP 401" in explicit.stderr


def test_no_token_anywhere_says_where_the_generated_one_was_looked_for(
    server: LiveServer, tmp_path: Path
) -> None:
    """Run away from the server's directory, the relative ./data has no token file: the 401
    names the file looked for and the ways to give one, not the server's bare refusal."""
    elsewhere = tmp_path / "elsewhere"
    result = shellgate(server.base_url, None, "jobs", SHELLGATE_DATA_DIR=str(elsewhere))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "shellgate: no token: none given (--token, SHELLGATE_TOKEN) and no generated one at "
        f"{(elsewhere / 'admin.token').resolve()} — run from the server's directory, set "
        "SHELLGATE_DATA_DIR to its data directory, or pass a token"
    )


def test_a_url_without_a_scheme_is_a_usage_error_not_an_unreachable_server() -> None:
    result = shellgate("127.0.0.1:8000", "some-token", "jobs")
    assert result.exit_code == 2, result.output
    assert "must start with http:// or https://" in result.output
