"""`/proc` readers of app/process/groups.py on what a command can make of its own entry."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from app.process.groups import group_members, process_start_ticks

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
