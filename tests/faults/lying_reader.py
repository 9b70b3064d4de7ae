"""A command reader child whose answer to each command is the command's own text (a fault: a
reader whose output is garbled). Started as `python -m tests.faults.lying_reader`."""

import json
import sys

if __name__ == "__main__":
    for line in sys.stdin.buffer:
        sys.stdout.write(json.loads(line) + "\n")
        sys.stdout.flush()
