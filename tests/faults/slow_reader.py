"""A command reader child that takes a minute over every command (a fault: a reading that
runs long, neither stopped nor dead). Started as `python -m tests.faults.slow_reader`.

Once it has a command it names itself `READING_NAME` (`/proc/<pid>/comm`): a test waits for
that instead of guessing when the reading is under way."""

import ctypes
import sys
import time

READING_NAME = b"slow-reading"
PR_SET_NAME = 15

if __name__ == "__main__":
    for _line in sys.stdin.buffer:
        ctypes.CDLL(None).prctl(PR_SET_NAME, READING_NAME, 0, 0, 0)
        time.sleep(60)
