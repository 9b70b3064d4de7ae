"""Commands run `SHELLGATE_COMMAND_NICE` levels below the server, their session's autogroup
too, whichever way they are spawned (a standby shell, a pipe spawn, a PTY): under load the
event loop goes first (app/process/priority.py)."""

from __future__ import annotations

import os
import re

import pytest

from app.process.priority import MAX_NICE, _own_autogroup_nice, autogroup_nice
from tests.conftest import LiveServer, run_foreground

# The shell's own nice (field 19 of /proc/<pid>/stat) and its session's autogroup line. The
# server sets a directly spawned command's group nice just after the spawn, which the command
# may outrun: it waits (at most 2 s) for the group to leave nice 0 first.
REPORT = (
    "cut -d' ' -f19 /proc/$$/stat; "
    "for _ in $(seq 200); do grep -q 'nice 0$' /proc/$$/autogroup 2>/dev/null || break; "
    "sleep 0.01; done; cat /proc/$$/autogroup 2>/dev/null || echo none"
)


def _reported(output: str) -> tuple[int, int | None]:
    nice_line, autogroup_line = output.splitlines()[:2]
    match = re.search(r"nice\s+(-?\d+)", autogroup_line)
    return int(nice_line), int(match.group(1)) if match else None


def _expected(levels: int) -> tuple[int, int | None]:
    own_group = _own_autogroup_nice()
    return (
        min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, 0) + levels),
        None if own_group is None else min(MAX_NICE, own_group + levels),
    )


@pytest.mark.settings(command_nice=7)
@pytest.mark.parametrize("pty", [False, True], ids=["pipes", "pty"])
def test_a_command_runs_the_set_levels_below_the_server(
    fresh_server: LiveServer, pty: bool
) -> None:
    with fresh_server.client() as client:
        for _ in range(2):  # the first may be spawned, the next taken from a standby
            record = run_foreground(client, REPORT, pty=pty)
            assert _reported(str(record["output"])) == _expected(7)


@pytest.mark.settings(command_nice=7, confinement="rlimit")
def test_a_command_spawned_without_a_standby_is_lowered_too(fresh_server: LiveServer) -> None:
    with fresh_server.client() as client:
        record = run_foreground(client, REPORT)
    assert _reported(str(record["output"])) == _expected(7)


@pytest.mark.settings(command_nice=0)
def test_nice_zero_leaves_commands_at_the_servers_priority(fresh_server: LiveServer) -> None:
    with fresh_server.client() as client:
        record = run_foreground(client, REPORT.replace("seq 200", "seq 0"))
    assert _reported(str(record["output"])) == _expected(0)


def test_a_server_in_the_kernels_default_group_counts_as_nice_zero() -> None:
    # A session init started without setsid (a CI runner, a service manager's child) is in
    # the default group, whose file is empty: its commands must still go below nice 0.
    assert autogroup_nice("") == 0
    assert autogroup_nice("/autogroup-85 nice 3\n") == 3
    assert autogroup_nice("/autogroup-9 nice -2\n") == -2
