"""Commands start with SIGINT, SIGQUIT and SIGHUP at their default even when the server
inherited them ignored (started by `cmd &` in a script, or under nohup): spawned on pipes, run
by the shell started ahead, or on a terminal. Before, a server launched that way ran commands
that an INT signal frame or a Ctrl-C could not interrupt (found when the suite itself was
started in the background: every interrupt test failed)."""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.process.reserved_signals import RESERVED
from app.process.signal_defaults import INHERITED
from shellgate import Client
from tests.api.test_spawn_ahead import ready_standbys, spawns
from tests.conftest import AGENT, make_settings, serve
from tests.conftest import run_foreground as run
from tests.databases import SQLITE

pytestmark = pytest.mark.sqlite_only("signal dispositions, not the database")

INHERITED_MASK = sum(1 << (number - 1) for number in INHERITED)


@pytest.fixture
def launched_in_the_background() -> Iterator[None]:
    """This process (and so the in-process test server) ignores what a launcher leaves
    ignored, as `shellgate serve &` from a script would."""
    saved = {number: signal.getsignal(number) for number in INHERITED}
    for number in INHERITED:
        signal.signal(number, signal.SIG_IGN)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def ignored_by(output: str) -> int:
    (line,) = [line for line in output.splitlines() if line.startswith("SigIgn:")]
    return int(line.split()[1], 16)


@pytest.mark.usefixtures("launched_in_the_background")
@pytest.mark.parametrize("spawn_ahead", [True, False], ids=["standby", "spawn"])
def test_commands_start_with_the_signals_a_launcher_ignored_at_their_default(
    tmp_path: Path, spawn_ahead: bool
) -> None:
    settings = make_settings(tmp_path, SQLITE, spawn_ahead=spawn_ahead, auto_background_ms=0)
    with serve(settings) as live, live.client() as client:
        run(client, "true")
        if spawn_ahead:
            ready_standbys(live, 2)
        before = spawns(live, "standby")
        on_pipes = run(client, "grep SigIgn /proc/self/status")
        assert spawns(live, "standby") == before + (1 if spawn_ahead else 0)
        on_a_terminal = run(client, "grep SigIgn /proc/self/status", pty=True)
        for result in (on_pipes, on_a_terminal):
            assert ignored_by(str(result["output"])) & INHERITED_MASK == 0, result["output"]

        with Client(live.base_url, AGENT) as sdk:
            job = sdk.start("sleep 30")
            sdk.signal(job.id, "INT")
            ended = sdk.wait(job.id, timeout=20)
        assert (ended.state, ended.exit_code, ended.signal) == ("failed", 130, 2)


# A server whose launcher left the C library's reserved signals ignored (CI's runner does, for
# 32): only the kernel's own call can ignore or reset them, so this child ignores them that way,
# then serves and runs commands on every path (app/process/reserved_signals.py).
_RESERVED_IGNORED_SERVER = """
import ctypes, json, platform, sys
from pathlib import Path
from app.process.reserved_signals import RESERVED, ignored_signals
from tests.conftest import make_settings, serve, run_foreground as run
from tests.databases import SQLITE

number = {"x86_64": 13, "aarch64": 134}[platform.machine()]
ignore = (ctypes.c_ulong * 4)(1)  # SIG_IGN
libc = ctypes.CDLL(None, use_errno=True)
for signal_number in RESERVED:
    assert libc.syscall(number, signal_number, ctypes.byref(ignore), None, 8) == 0
assert ignored_signals() >= set(RESERVED)
seen = {}
for sandbox in ("on", "off"):
    settings = make_settings(Path(sys.argv[1]) / sandbox, SQLITE, sandbox=sandbox)
    with serve(settings) as live, live.client() as client:
        for pty in (False, True):
            record = run(client, "grep SigIgn /proc/self/status", pty=pty)
            seen[f"sandbox {sandbox}, pty {pty}"] = record["output"]
print(json.dumps(seen))
"""


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"), reason="the syscall's number is known here"
)
def test_commands_start_with_the_reserved_signals_at_their_default(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _RESERVED_IGNORED_SERVER, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    seen = json.loads(child.stdout.splitlines()[-1])
    assert len(seen) == 4, seen
    reserved_mask = sum(1 << (number - 1) for number in RESERVED)
    for path, output in seen.items():
        assert ignored_by(output) & reserved_mask == 0, (path, output)
