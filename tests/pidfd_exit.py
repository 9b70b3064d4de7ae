"""Whether this kernel keeps a process's wait status on its pidfd (Linux 6.15+), which the
record of a sandboxed command's death by signal relies on (app/process/exit_witness.py)."""

from __future__ import annotations

import functools
import os
import subprocess

from app.process.exit_witness import wait_status


@functools.cache
def kernel_keeps_exit_status() -> bool:
    child = subprocess.Popen(["/bin/sh", "-c", "exit 3"])
    pidfd = os.pidfd_open(child.pid)
    try:
        child.wait()
        return wait_status(pidfd) == 3 << 8
    finally:
        os.close(pidfd)
