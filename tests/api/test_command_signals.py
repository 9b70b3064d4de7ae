"""Commands start with SIGINT, SIGQUIT and SIGHUP at their default even when the server
inherited them ignored (started by `cmd &` in a script, or under nohup): spawned on pipes, run
by the shell started ahead, or on a terminal. Before, a server launched that way ran commands
that an INT signal frame or a Ctrl-C could not interrupt (found when the suite itself was
started in the background: every interrupt test failed)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.process.signal_defaults import INHERITED
from shellgate import Client
from tests.api.test_spawn_ahead import one_standby, spawns
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
            one_standby(live)
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
