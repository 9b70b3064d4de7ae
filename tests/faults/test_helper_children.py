"""The server's own helper children (the window process, the policy's command readers) under
real signals: a child stopped or killed mid-work never holds the server's stop past its grace,
never outlives the server, and never lets a command through."""

from __future__ import annotations

import hashlib
import os
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.process.helper_children import process_stopped
from tests.databases import ServerDatabase
from tests.faults.server_process import server_env, server_process
from tests.waiting import eventually

GRACE = 4.0
# How the server ends a graceful stop: 0, or the SIGTERM uvicorn raises again once done (not
# EXIT_GRACE_EXCEEDED, the watchdog's exit when the grace ran out).
STOPPED = (0, -signal.SIGTERM)


def _children(pid: int) -> dict[int, str]:
    """The server's children: pid → command line."""
    listing = subprocess.run(
        ["ps", "--ppid", str(pid), "-o", "pid=,args="], capture_output=True, text=True
    ).stdout
    children = {}
    for line in listing.strip().splitlines():
        child, _, args = line.strip().partition(" ")
        children[int(child)] = args
    return children


def _helper(server_pid: int, module: str, within: float = 30, script: str = "") -> int:
    wanted = script or f"-m {module}"
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for pid, args in _children(server_pid).items():
            if wanted in args:
                return pid
        time.sleep(0.02)
    raise AssertionError(f"no {module} child of the server")


def _gone(pid: int) -> bool:
    """Not a live process (gone, or a zombie about to be reaped by whoever adopted it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def _ends_after_its_server(pid: int) -> bool:
    """Whether the helper `pid` ends once its server has exited (it learns of it from the
    kernel, asynchronously), or is still alive after a generous wait."""
    try:
        eventually(lambda: _gone(pid), what=f"the end of helper {pid}", within=5)
    except AssertionError:
        return False
    return True


def _stop_server(process: subprocess.Popen[bytes]) -> tuple[float, int]:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)  # this test's own server, by its pid
    code = process.wait(30)
    return time.monotonic() - started, code


def _resume_and_kill(pid: int) -> None:
    """Clean up a helper the fault left behind (a child of this test's server, by its pid)."""
    if not _gone(pid):
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return


def test_sigterm_with_a_stopped_reader_mid_read_exits_in_the_grace_and_leaves_no_reader(
    tmp_path: Path, database: ServerDatabase
) -> None:
    env = server_env(tmp_path, database, shutdown_grace=str(GRACE))
    results: dict[str, Any] = {}
    # A command the reader takes seconds over (parsed in the child: over 1 KiB).
    hostile = "false && true" + "|a" * 16_000 + "|"
    with server_process(env, tmp_path / "server.log") as server:
        client = server.client(timeout=60)

        def submit() -> None:
            try:
                results["answer"] = client.post(
                    "/v1/executions", json={"command": hostile, "approval_wait": 0}
                )
            except httpx.HTTPError as error:
                results["answer"] = error

        thread = threading.Thread(target=submit, daemon=True)
        thread.start()
        reader = _helper(server.process.pid, "app.policy.reader_process")
        try:
            os.kill(reader, signal.SIGSTOP)  # mid-read: it never answers
            seconds, code = _stop_server(server.process)
            thread.join(10)
            left = not _ends_after_its_server(reader)
        finally:
            _resume_and_kill(reader)
        client.close()
    print(f"\nSIGTERM with a stopped reader: exit {code} after {seconds:.2f} s")
    assert not left, "the stopped reader outlived its server"
    assert code in STOPPED and seconds < GRACE, server.log()
    answer = results.get("answer")
    if isinstance(answer, httpx.Response):  # cut short by the stop: never allowed to run
        assert answer.status_code != 200, answer.text
        assert answer.status_code < 500 or answer.status_code == 503, answer.text


def test_sigterm_with_a_stopped_window_process_exits_at_once_and_leaves_no_child(
    tmp_path: Path, database: ServerDatabase
) -> None:
    env = server_env(tmp_path, database, shutdown_grace=str(GRACE))
    with server_process(env, tmp_path / "server.log") as server:
        with server.client() as client:
            record = client.post(
                "/v1/executions", json={"command": "head -c 600000 /dev/urandom; echo"}
            ).json()
            assert record["state"] == "completed", record
        window = _helper(server.process.pid, "app.output.window_process")
        try:
            os.kill(window, signal.SIGSTOP)  # idle and stopped: it cannot read the EOF
            seconds, code = _stop_server(server.process)
            left = not _ends_after_its_server(window)
        finally:
            _resume_and_kill(window)
    print(f"\nSIGTERM with a stopped window process: exit {code} after {seconds:.2f} s")
    assert not left, "the stopped window process outlived its server"
    # Nothing runs: the stop is the lifespan's few steps, not a wait for a child that
    # cannot answer.
    assert code in STOPPED and seconds < 2.0, server.log()


def test_a_stopped_standby_shell_does_not_hold_the_next_command(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """Before, the command handed to a SIGSTOPped standby never started and its call never
    answered (the claim waited for the shell's exec)."""
    env = server_env(tmp_path, database)
    with server_process(env, tmp_path / "server.log") as server:
        try:
            standby = _helper(server.process.pid, "", within=5, script="standby.sh")
        except AssertionError:
            pytest.skip("no standby shell here (cgroup confinement unavailable)")
        try:
            os.kill(standby, signal.SIGSTOP)  # a child of this test's server, by its pid
            with server.client(timeout=15) as client:
                for _ in range(2):  # the stopped one is passed over, then a fresh one used
                    record = client.post(
                        "/v1/executions", json={"command": "echo ran", "timeout": 10}
                    ).json()
                    assert (record["state"], record["output"]) == ("completed", "ran\n")
        finally:
            _resume_and_kill(standby)
        seconds, code = _stop_server(server.process)
    assert code in STOPPED and seconds < 5, server.log()


# What a command plants in the directory the server was started from: an `app` package whose
# command reader reads every command as a harmless `true`.
FORGED_READER = """
import json, sys
for line in sys.stdin.buffer:
    sys.stdout.write(json.dumps([["true"], [], None, None]) + "\\n")
    sys.stdout.flush()
"""


def test_a_package_planted_in_the_servers_directory_is_not_the_helpers_app(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """An operator who starts the server in the workspace (`cd project && shellgate serve`):
    before, `python -m app.policy.reader_process` put that directory first on the helper's path, so
    a command that wrote `app/policy/reader_process.py` there chose how every later long command
    read, and a denied one ran."""
    policy = tmp_path / "policy.json"
    policy.write_text(
        '{"default": "allow", "rules": [{"match": "nonexistent-tool-x *", "approval": "deny"}]}'
    )
    env = server_env(tmp_path, database, policy_file=str(policy))
    workspace = Path(env["SHELLGATE_WORKSPACE"])
    # Denied in its parse only: the rough split, which deny rules also see, shows no
    # `nonexistent-tool-x` at a command's start (and if it ran: command not found).
    denied = "echo $(nonexistent-tool-x --flag); : " + "x" * 1100  # > 1 KiB: a child reads it
    with (
        server_process(env, tmp_path / "server.log", cwd=workspace) as server,
        server.client() as client,
    ):
        plant = (
            "mkdir -p app/policy && : > app/__init__.py && "
            f"printf %s {shlex.quote(FORGED_READER)} > app/policy/reader_process.py && echo planted"
        )
        record = client.post("/v1/executions", json={"command": plant}).json()
        assert record["output"] == "planted\n", record
        answer = client.post("/v1/executions", json={"command": denied, "approval_wait": 0})
    assert answer.status_code == 403, answer.text


def _log(client: httpx.Client, execution_id: str) -> bytes:
    data, offset = b"", 0
    while True:
        page = client.get(f"/v1/executions/{execution_id}/output", params={"offset": offset})
        assert page.status_code == 200, page.text
        data += page.content
        offset = int(page.headers["X-Next-Offset"])
        if page.headers["X-Complete"] == "true" and not page.content:
            return data


def test_a_window_process_stopped_mid_flood_holds_no_other_run_and_loses_no_byte(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """Before, the stopped child held the one sink worker for the answer's deadline: a run
    printing 9 KB of binary meanwhile took 5.4 s."""
    env = server_env(tmp_path, database)
    flood = (
        "f=$(mktemp); for i in $(seq 24); do head -c 262144 /dev/urandom | tee -a $f; "
        'sleep 0.05; done; echo; sha256sum < "$f" | cut -c1-64; rm -f "$f"'
    )
    with server_process(env, tmp_path / "server.log") as server, server.client() as client:
        started = client.post("/v1/executions", json={"command": flood, "async": True})
        flood_id = started.json()["id"]
        window = _helper(server.process.pid, "app.output.window_process")
        try:
            output = f"/v1/executions/{flood_id}/output"
            eventually(
                lambda: int(client.get(output, params={"limit": 1}).headers["X-Total-Bytes"]),
                what="the flood's first output",
            )
            os.kill(window, signal.SIGSTOP)  # a child of this test's server, mid-flood
            # Delivered: stopped, or already found stopped and ended by the server.
            eventually(
                lambda: process_stopped(window) or _gone(window), what="the window process stop"
            )
            before = time.monotonic()
            small = client.post(
                "/v1/executions", json={"command": "head -c 9000 /dev/urandom; echo"}
            ).json()
            waited = time.monotonic() - before
        finally:
            _resume_and_kill(window)
        done = client.get(f"/v1/executions/{flood_id}", params={"wait": 60}).json()
        log = _log(client, flood_id)
    print(f"\n9 KB run while the window process is stopped: {waited:.2f} s")
    assert small["state"] == "completed" and waited < 2.5, small
    assert done["state"] == "completed", done
    body, _, digest = log.rstrip(b"\n").rpartition(b"\n")
    assert hashlib.sha256(body).hexdigest().encode() == digest  # the log byte-exact
    assert done["output"], "an inline window, fed in the server or by a new child"
