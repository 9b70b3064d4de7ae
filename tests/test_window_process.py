"""Costly output is cleaned for the inline window in a child process (app/output/window_process.py):
the window that comes back is exactly what feeding it here gives, the child is replaced when
it dies, given up on when it keeps failing, and never outlives its server's stop."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.executions.registry import WINDOW_PROCESS_MIN_BYTES, LiveExecution
from app.output.artifact_log import ArtifactLog
from app.output.sink_worker import WINDOW_PROCESS
from app.output.window import OutputSink
from app.output.window_process import MAX_FAILURES, WindowProcess
from app.process import ExitStatus, OutputStream
from app.process.helper_children import process_stopped
from app.process.message_child import MessageChild
from tests.waiting import eventually


def _mixed_output(seed: int, size: int) -> bytes:
    """Random bytes, text with escapes and carriage returns, overlong lines: every path of the
    window's cleaning."""
    generator = random.Random(seed)
    pieces = []
    while sum(map(len, pieces)) < size:
        pieces.append(
            generator.choice(
                [
                    generator.randbytes(generator.randrange(1, 3000)),
                    "ünïcode line ✓\n".encode() * generator.randrange(1, 40),
                    b"\x1b[31mred\x1b[0m \x1b]0;title\x07progress 10%\r20%\r\n",
                    b"x" * generator.randrange(700, 2000) + b"\n",
                ]
            )
        )
    return b"".join(pieces)


def _fed_once(windows: WindowProcess) -> tuple[OutputSink, MessageChild]:
    """A first line fed through `windows`, and the child that fed it."""
    window = windows.feed(OutputSink(), b"first\n")
    assert window is not None and windows._child is not None
    return window, windows._child


def test_the_window_from_the_child_is_the_window_fed_here() -> None:
    windows = WindowProcess()
    try:
        for seed in range(3):
            data = _mixed_output(seed, 600_000)
            here, there = OutputSink(), OutputSink()
            cuts = sorted(random.Random(seed).sample(range(1, len(data)), 20))
            for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
                here.feed(data[start:end])
                sent = there
                fed = windows.feed(there, data[start:end])
                assert fed is not None
                assert sent.summary().total_bytes == start  # what was sent is left as it was
                there = fed
            here.flush()
            there.flush()
            assert there.summary() == here.summary()
    finally:
        windows.close()


def test_the_child_is_a_session_of_its_own() -> None:
    """So that its CPU is not charged to the server's scheduling group (sched_autogroup)."""
    windows = WindowProcess()
    try:
        _, child = _fed_once(windows)
        assert os.getsid(child.process.pid) == child.process.pid != os.getsid(0)
    finally:
        windows.close()


def test_a_child_that_died_is_replaced_and_the_window_it_had_is_not_lost() -> None:
    windows = WindowProcess()
    try:
        window, child = _fed_once(windows)
        os.kill(child.process.pid, 9)  # the child this test's WindowProcess started
        child.process.wait()
        assert windows.feed(window, b"second\n") is None  # the caller feeds it itself
        assert "second" not in window.summary().output
        again = windows.feed(window, b"second\n")
        assert again is not None and windows._child is not child
        assert again.summary().output == "first\nsecond\n"
    finally:
        windows.close()


def test_a_child_that_keeps_failing_is_given_up_on() -> None:
    windows = WindowProcess(module="app.no_such_module")  # python -m exits at once
    for _ in range(MAX_FAILURES):
        assert windows.feed(OutputSink(), b"text\n") is None
    assert windows._child is None
    assert windows.feed(OutputSink(), b"text\n") is None
    assert windows._child is None, "no new child after the last failure"


def test_the_child_ends_when_the_server_closes_it() -> None:
    windows = WindowProcess()
    assert windows.feed(OutputSink(), b"text\n") is not None
    child = windows._child
    assert child is not None
    windows.close()
    assert child.process.poll() is not None  # exited and reaped: no zombie, no orphan


@pytest.mark.anyio
async def test_a_binary_flood_is_cleaned_in_the_child_and_ends_as_fed_here(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "run", max_bytes=50_000_000)
    live = LiveExecution(
        "run", owner="alice", log=log, sink=OutputSink(), loop=asyncio.get_running_loop()
    )
    data = _mixed_output(7, 3 * 1024 * 1024)
    chunk = 128 * 1024
    assert chunk >= WINDOW_PROCESS_MIN_BYTES
    for start in range(0, len(data), chunk):
        live.accept_output(data[start : start + chunk], OutputStream.stdout)
        await asyncio.sleep(0)
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    await asyncio.wait_for(asyncio.shield(live.exited), 30)
    assert WINDOW_PROCESS._child is not None, "the worker cleaned it here, not in the child"

    expected = OutputSink()
    for start in range(0, len(data), chunk):
        expected.feed(data[start : start + chunk])
    expected.flush()
    assert live.summary() == expected.summary()


def test_a_child_that_stops_answering_is_killed_and_the_window_fed_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    windows = WindowProcess()
    try:
        window, child = _fed_once(windows)
        monkeypatch.setattr("app.output.window_process.ANSWER_SECONDS_BASE", 0.5)
        os.kill(child.process.pid, signal.SIGSTOP)  # stopped, not dead: it never answers
        assert windows.feed(window, b"second\n") is None
        assert child.process.poll() is not None, "the stopped child was killed and reaped"
    finally:
        windows.close()


def test_a_helper_child_gets_none_of_the_servers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.process.helper_children import helper_environment

    monkeypatch.setenv("SHELLGATE_TOKENS", "alice:agent:s3cret-s3cret-s3cret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    env = helper_environment()
    assert "SHELLGATE_TOKENS" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(__file__).resolve().parent.parent)


@pytest.mark.parametrize("mid_request", [False, True])
def test_closing_ends_a_stopped_child_at_once_even_mid_request(mid_request: bool) -> None:
    """The server's stop must not wait for a child that cannot answer: before, an idle stopped
    child held `close` 5 s (waiting for it to read its EOF), a request under way the answer's
    deadline first."""
    windows = WindowProcess()
    window, child = _fed_once(windows)
    os.kill(child.process.pid, signal.SIGSTOP)  # this test's own child
    answers: list[OutputSink | None] = []
    feeding = threading.Thread(target=lambda: answers.append(windows.feed(window, b"x\n")))
    if mid_request:
        feeding.start()
        time.sleep(0.2)  # the request is written; the answer never comes
    started = time.monotonic()
    windows.close()
    # Protocol, not speed: the stopped child is killed at once, not waited for (5 s before).
    assert time.monotonic() - started < 2
    assert child.process.returncode is not None, "killed and reaped"
    if mid_request:
        feeding.join(5)
        assert answers == [None]  # the caller feeds the window itself


def test_a_stopped_child_is_given_up_on_at_once_not_at_the_deadline() -> None:
    """The one child serves every execution's window, and every exit waits behind the worker:
    before, a SIGSTOPped child held them all for the whole answer deadline (5 s and more; a
    run of 9 KB of binary took 5.4 s on a live server)."""
    windows = WindowProcess()
    try:
        window, child = _fed_once(windows)
        os.kill(child.process.pid, signal.SIGSTOP)  # this test's own child
        started = time.monotonic()
        assert windows.feed(window, b"second\n") is None  # the caller feeds it itself
        # Protocol, not speed: given up on at once (a watch every 0.1 s), not at the answer's
        # 5 s deadline; 2 s leaves a loaded machine its margin.
        assert time.monotonic() - started < 2
        assert child.process.poll() is not None, "the stopped child was killed and reaped"
        again = windows.feed(window, b"second\n")  # and a new one takes the next
        assert again is not None and again.summary().output == "first\nsecond\n"
    finally:
        windows.close()


def test_a_helper_child_finds_app_only_where_the_server_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Neither its working directory nor an empty or relative PYTHONPATH entry (directories a
    command may write to) comes before, or at all on, the helper's path."""
    from app.process.helper_children import helper_environment

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", "relative/dir", str(tmp_path)]))
    root = str(Path(__file__).resolve().parent.parent)
    assert helper_environment()["PYTHONPATH"].split(os.pathsep) == [root, str(tmp_path)]


def test_a_helper_child_dies_with_a_sigkilled_server(tmp_path: Path) -> None:
    """Before, a helper outlived a SIGKILLed server for as long as its work took (a reader
    mid-parse), and for good when stopped: nothing signals a stopped orphan. A stand-in
    server (a process of this test) spawns a helper from a worker thread that has ended by
    the kill, as the server's idle worker threads do; the helper is stopped too."""
    script = (
        "import sys, threading\n"
        "from app.process.helper_children import spawn_helper\n"
        "made = []\n"
        "worker = threading.Thread(target=lambda: made.append(spawn_helper("
        "'tests.faults.slow_reader')))\n"
        "worker.start(); worker.join()\n"
        "print(made[0].pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert server.stdout is not None
    helper = int(server.stdout.readline())
    try:
        os.kill(helper, signal.SIGSTOP)  # the stand-in server's own child
        eventually(lambda: process_stopped(helper), what="the helper stopped")
        time.sleep(0.5)
        assert _alive(helper), "the helper lives while the server does, its spawner gone"
        server.kill()
        server.wait()
        eventually(lambda: not _alive(helper), what="the helper's end with the server")
    finally:
        if _alive(helper):
            os.kill(helper, signal.SIGKILL)
        if server.poll() is None:
            server.kill()
            server.wait()


def _alive(pid: int) -> bool:
    """`pid` exists and is no zombie (a helper whose parent died is reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b") ")[2][:1] != b"Z"
    except OSError:
        return False
