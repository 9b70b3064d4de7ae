"""`shellgate attach` in a real pseudo-terminal (ptyprocess) against a real server: typed
keys reach the remote PTY and echo back, a local window resize reaches the remote terminal,
Ctrl-] detaches and leaves the run going, the remote exit code becomes attach's own, and the
local terminal leaves raw mode on every way out (detach, the end, SIGTERM)."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ptyprocess import PtyProcess

from shellgate import Client
from tests.conftest import AGENT, LiveServer
from tests.waiting import eventually

SHELLGATE = str(Path(sys.executable).parent / "shellgate")
# Answers `size` with `stty size`, `quit` with exit 7, anything else with got:<line>.
REMOTE_LOOP = (
    'while IFS= read -r line; do case "$line" in size) stty size;; quit) exit 7;; '
    '*) echo "got:$line";; esac; done'
)


class Terminal:
    """`shellgate attach ID` running in a pty of its own, and what it wrote so far."""

    def __init__(self, server: LiveServer, execution_id: str, *extra: str) -> None:
        argv = [SHELLGATE, "--url", server.base_url, "--token", AGENT, "attach", *extra]
        env = {key: value for key, value in os.environ.items() if key != "SHELLGATE_TOKEN"}
        self.process = PtyProcess.spawn([*argv, execution_id], dimensions=(30, 100), env=env)
        self.seen = bytearray()

    def read_until(self, pattern: bytes, within: float = 30, start: int = 0) -> re.Match[bytes]:
        """The first match of `pattern` in what was written from `start` on, reading more as
        needed."""
        deadline = time.monotonic() + within
        while (match := re.compile(pattern).search(self.seen, start)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{pattern!r} not seen in {bytes(self.seen)!r}")
            ready, _, _ = select.select([self.process.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.process.fd, 65536)
                except OSError:  # EIO: the child closed its side
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"{pattern!r} not seen before EOF in {bytes(self.seen)!r}")
                self.seen += chunk
        return match

    def type(self, keys: bytes) -> None:
        self.process.write(keys)

    def is_raw(self) -> bool:
        return not termios.tcgetattr(self.process.fd)[3] & termios.ICANON

    def exit_status(self, within: float = 30) -> int:
        """attach's own exit status; a death by a signal's default action fails the test."""
        eventually(lambda: not self.process.isalive(), what="attach's exit", within=within)
        assert self.process.signalstatus is None, f"killed by signal {self.process.signalstatus}"
        status = self.process.exitstatus
        assert status is not None
        return status

    def close(self) -> None:
        if self.process.isalive():
            self.process.kill(signal.SIGKILL)
        self.process.close(force=True)


@pytest.fixture
def sdk(server: LiveServer) -> Iterator[Client]:
    with Client(server.base_url, AGENT) as client:
        yield client


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def test_attach_types_resizes_and_detaches(
    server: LiveServer, sdk: Client, terminals: list[Terminal]
) -> None:
    job = sdk.start(REMOTE_LOOP, pty=True, rows=24, cols=80)
    terminal = Terminal(server, job.id)
    terminals.append(terminal)
    terminal.read_until(rb"Ctrl-\] detaches")
    eventually(terminal.is_raw, what="raw mode on the local terminal")

    terminal.type(b"hello\r")
    # The remote PTY echoes what was typed, then the program answers.
    terminal.read_until(rb"hello\r\ngot:hello\r\n")
    # attach sent this window's size (30 x 100) when it started.
    terminal.type(b"size\r")
    terminal.read_until(rb"30 100\r\n")

    terminal.process.setwinsize(35, 110)  # the kernel sends attach a SIGWINCH

    def resized() -> bool:
        mark = len(terminal.seen)
        terminal.type(b"size\r")
        return terminal.read_until(rb"size\r\n(\d+ \d+)\r\n", start=mark).group(1) == b"35 110"

    eventually(resized, what="the remote terminal taking the new size", within=20, interval=0.2)

    terminal.type(b"\x1d")
    terminal.read_until(rb"detached; " + job.id.encode() + rb" keeps running")
    assert terminal.exit_status() == 0
    assert not terminal.is_raw(), "the local terminal was left in raw mode"
    assert sdk.get(job.id).state == "running"
    sdk.cancel(job.id)


def test_attach_exits_with_the_remote_exit_code(
    server: LiveServer, sdk: Client, terminals: list[Terminal]
) -> None:
    job = sdk.start(REMOTE_LOOP, pty=True)
    sdk.input(job.id, "before\r")
    eventually(lambda: b"got:before" in sdk.output(job.id), what="the first answer")
    terminal = Terminal(server, job.id, "--no-replay")
    terminals.append(terminal)
    eventually(terminal.is_raw, what="raw mode on the local terminal")
    terminal.type(b"quit\r")
    assert terminal.exit_status() == 7
    assert b"got:before" not in terminal.seen, "--no-replay replayed the log"
    assert not terminal.is_raw()
    assert (sdk.get(job.id).state, sdk.get(job.id).exit_code) == ("failed", 7)


def test_sigterm_restores_the_terminal_and_leaves_the_run(
    server: LiveServer, sdk: Client, terminals: list[Terminal]
) -> None:
    job = sdk.start(REMOTE_LOOP, pty=True)
    terminal = Terminal(server, job.id)
    terminals.append(terminal)
    eventually(terminal.is_raw, what="raw mode on the local terminal")
    terminal.process.kill(signal.SIGTERM)
    assert terminal.exit_status() == 128 + signal.SIGTERM
    assert not terminal.is_raw()
    assert sdk.get(job.id).state == "running"
    sdk.cancel(job.id)


def test_attach_refuses_a_run_without_a_pty(server: LiveServer, sdk: Client) -> None:
    job = sdk.start("sleep 30")
    from typer.testing import CliRunner

    from app.cli.main import cli

    result = CliRunner().invoke(cli, ["--url", server.base_url, "--token", AGENT, "attach", job.id])
    sdk.cancel(job.id)
    assert result.exit_code == 2
    assert "has no terminal" in result.stderr


def test_piped_input_is_typed_and_the_output_followed_to_the_end(
    server: LiveServer, sdk: Client
) -> None:
    job = sdk.start(REMOTE_LOOP, pty=True)
    argv = [SHELLGATE, "--url", server.base_url, "--token", AGENT, "attach", job.id]
    finished = subprocess.run(argv, input=b"piped\rquit\r", capture_output=True, timeout=60)
    assert finished.returncode == 7, finished.stderr
    assert b"got:piped\r\n" in finished.stdout
    assert b"Ctrl-]" not in finished.stderr  # no hint when no terminal is attached


def test_input_from_a_file_is_typed_too(server: LiveServer, sdk: Client, tmp_path: Path) -> None:
    job = sdk.start(REMOTE_LOOP, pty=True)
    keys = tmp_path / "keys"
    keys.write_bytes(b"from-file\rquit\r")
    argv = [SHELLGATE, "--url", server.base_url, "--token", AGENT, "attach", job.id]
    with keys.open("rb") as stdin:
        finished = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=60)
    assert finished.returncode == 7, finished.stderr
    assert b"got:from-file\r\n" in finished.stdout
