"""The pid-reuse guard of restart recovery, on real process groups of our own."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.executions.recovery import kill_orphan_group, kill_orphan_tree
from app.process import boot_id, process_start_ticks
from app.process.environment import EXECUTION_MARKER
from app.store.models import Execution
from tests.waiting import eventually


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, EXECUTION_MARKER: "ex_marked000000000000"}
    process = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    # Until its exec the child still has this process's environment (no marker).
    eventually(
        lambda: Path(f"/proc/{process.pid}/cmdline").read_bytes().startswith(b"sleep"),
        what="the group leader's exec of sleep",
    )
    yield process
    process.kill()
    process.wait()


def record_for(process: subprocess.Popen[bytes], execution_id: str, ticks: int | None) -> Execution:
    return Execution(
        id=execution_id,
        owner="alice",
        command="sleep 60",
        original_command="sleep 60",
        cwd="/",
        state="running",
        artifact_path="/nonexistent-artifact",
        pid=process.pid,
        pgid=process.pid,
        proc_start_ticks=ticks,
        boot_id=boot_id(),
    )


def test_a_group_whose_leader_start_time_matches_is_killed(
    group: subprocess.Popen[bytes],
) -> None:
    record = record_for(group, "ex_other0000000000000", process_start_ticks(group.pid))
    assert kill_orphan_group(record, boot_id()) is True
    assert group.wait(5) == -9


def test_a_group_carrying_the_execution_marker_is_killed(group: subprocess.Popen[bytes]) -> None:
    record = record_for(group, "ex_marked000000000000", ticks=1)
    assert kill_orphan_group(record, boot_id()) is True
    assert group.wait(5) == -9


def test_an_unrelated_group_with_a_reused_id_is_left_alone(
    group: subprocess.Popen[bytes],
) -> None:
    record = record_for(group, "ex_someoneelse0000000", ticks=1)
    assert kill_orphan_group(record, boot_id()) is False
    assert group.poll() is None


def test_a_record_from_another_boot_is_never_signalled(group: subprocess.Popen[bytes]) -> None:
    record = record_for(group, "ex_marked000000000000", process_start_ticks(group.pid))
    assert kill_orphan_group(record, "another-boot") is False
    assert group.poll() is None


def test_recovery_kills_what_carries_the_marker_outside_the_group() -> None:
    env = {**os.environ, EXECUTION_MARKER: "ex_daemon0000000000000"}
    # Its own session: out of any recorded group, found only by its marker.
    daemon = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        # Until its exec the child still has this process's environment (no marker).
        eventually(
            lambda: Path(f"/proc/{daemon.pid}/cmdline").read_bytes().startswith(b"sleep"),
            what="the daemon's exec of sleep",
        )
        record = record_for(daemon, "ex_daemon0000000000000", ticks=1)
        record.pgid = bystander.pid  # a recorded group that is not its own
        assert kill_orphan_tree(record, boot_id()) == 1
        assert daemon.wait(5) == -9
        assert bystander.poll() is None
    finally:
        for process in (daemon, bystander):
            process.kill()
            process.wait()
