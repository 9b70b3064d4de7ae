"""`/proc` readers of app/process/groups.py on what a command can make of its own entry, and
the wait for processes to exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from app.process.groups import group_members, process_start_ticks, wait_exited

# A command names itself with prctl(PR_SET_NAME): any bytes, so not always UTF-8.
RENAME_AND_WAIT = r"""
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, b"\xff\xfe odd)(name", 0, 0, 0)
print("renamed", flush=True)
time.sleep(60)
"""


def test_a_process_whose_name_is_not_utf8_is_still_read() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", RENAME_AND_WAIT], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"renamed\n"
        with open(f"/proc/{child.pid}/stat", "rb") as stat:
            assert b"\xff\xfe" in stat.read()  # the name the readers must get past
        ticks = process_start_ticks(child.pid)
        assert ticks is not None and ticks > 0
        assert group_members(os.getpgid(child.pid)) == [child.pid]
    finally:
        child.kill()
        child.wait(timeout=10)
    deadline = time.monotonic() + 5
    while process_start_ticks(child.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process_start_ticks(child.pid) is None  # gone: None, not an error


def waiting_child() -> subprocess.Popen[bytes]:
    """A process that exits once its stdin is closed."""
    return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)


def test_wait_exited_is_true_once_every_process_has_exited() -> None:
    children = [waiting_child(), waiting_child()]
    for child in children:
        assert child.stdin is not None
        child.stdin.close()
    assert wait_exited([child.pid for child in children], within=30)
    # Exited (zombies until reaped here), so each is reaped without waiting.
    assert all(child.poll() is not None for child in children)


def test_wait_exited_is_false_when_one_outlives_the_bound() -> None:
    ended, running = waiting_child(), waiting_child()
    assert ended.stdin is not None and running.stdin is not None
    ended.stdin.close()
    ended.wait(timeout=30)
    try:
        assert not wait_exited([ended.pid, running.pid], within=0.05)
        assert running.poll() is None
    finally:
        running.stdin.close()
        running.wait(timeout=30)


def test_wait_exited_counts_a_process_already_gone() -> None:
    child = waiting_child()
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=30)  # reaped: its pid names nothing now
    assert wait_exited([child.pid], within=0)
