"""Small files the kernel makes up on read (`/proc/<pid>/stat`, a cgroup's `cgroup.procs`),
read with plain descriptor calls. They are read for every execution (its start's evidence, its
unit, its release, the monitor's polls), and `Path.read_text` wraps three system calls in
pathlib's parsing, a text wrapper and an encoding lookup: on cgroup v1 that was a fifth of a
foreground call's interpreter time."""

from __future__ import annotations

import os
from pathlib import Path


def read_kernel_file(path: str | Path) -> bytes | None:
    """The file's bytes, read to the end (`cgroup.procs` of a large tree outgrows any single
    read), or None when it cannot be opened or read (a process or cgroup that is gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    pieces: list[bytes] = []
    try:
        while piece := os.read(fd, 65536):
            pieces.append(piece)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(pieces)


def keyed_values(path: str | Path) -> dict[str, int]:
    """A flat-keyed kernel file (`key value` lines: a cgroup's `memory.events`, `pids.events`,
    `cpu.stat`) as a dict; empty when it cannot be read."""
    data = read_kernel_file(path)
    values: dict[str, int] = {}
    for line in (data or b"").decode("ascii", "replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values
