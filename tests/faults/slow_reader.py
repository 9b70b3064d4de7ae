"""A command reader child that takes a minute over every command (a fault: a reading that
runs long, neither stopped nor dead). Started as `python -m tests.faults.slow_reader`."""

import sys
import time

if __name__ == "__main__":
    for _line in sys.stdin.buffer:
        time.sleep(60)
