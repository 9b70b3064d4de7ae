"""Process groups and `/proc`: signalling a group, its members, the boot id and start ticks
that tell a live process from a reused pid, and the sweep for marked processes."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from app.process.kernel_files import read_kernel_file


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start_ticks(pid: int) -> int | None:
    """Start time of pid in clock ticks since boot (field 22 of /proc/pid/stat), or None."""
    data = read_kernel_file(f"/proc/{pid}/stat")
    if data is None:
        return None
    stat = data.decode("utf-8", "replace")
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        data = read_kernel_file(f"/proc/{entry.name}/stat")
        if data is None:
            continue
        stat = data.decode("utf-8", "replace")
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def process_environ_has(pid: int, marker: bytes) -> bool:
    environ = read_kernel_file(f"/proc/{pid}/environ")
    return environ is not None and marker in environ.split(b"\0")


def group_exists(pgid: int) -> bool:
    """Whether any process is left in the group (signal 0 checks without sending anything)."""
    if pgid <= 1 or pgid == os.getpgrp():
        raise ValueError(f"refusing to probe process group {pgid}")
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member runs as another user (e.g. under sudo): it exists
    return True


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a whole process group; never our own group, never init's. False if it is gone."""
    if pgid <= 1 or pgid == os.getpgrp():
        raise ValueError(f"refusing to signal process group {pgid}")
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def marked_processes(marker: bytes) -> list[int]:
    """Pids whose environment carries `marker` (`NAME=value`), never this process."""
    own = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        pid = int(entry.name) if entry.name.isdigit() else own
        if pid != own and process_environ_has(pid, marker):
            found.append(pid)
    return found


def wait_exited(pids: Iterable[int], within: float) -> bool:
    """Wait until each of `pids` has exited, at most `within` seconds in all; True when all
    did (a pid already gone counts). The kernel says each exit on a pidfd: no polling of `/proc`
    or a cgroup's files, no sleep longer than the exit itself."""
    fds = []
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                fds.append(os.pidfd_open(pid))
        waiting = select.poll()
        for fd in fds:
            waiting.register(fd, select.POLLIN)
        left = len(fds)
        deadline = time.monotonic() + within
        while left:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for fd, _ in waiting.poll(remaining * 1000):
                waiting.unregister(fd)
                left -= 1
        return True
    finally:
        for fd in fds:
            os.close(fd)


def kill_processes(pids: Iterable[int], sig: int = signal.SIGKILL) -> int:
    """Signal each pid (never init, never this process or its group); how many were hit."""
    own_pid, own_group = os.getpid(), os.getpgrp()
    hit = 0
    for pid in pids:
        if pid <= 1 or pid in (own_pid, own_group):
            continue
        try:
            os.kill(pid, sig)
            hit += 1
        except (ProcessLookupError, PermissionError):
            continue
    return hit


def kill_marked_processes(marker: bytes, rounds: int = 20) -> int:
    """Kill every process carrying `marker`, fork races included: stop what each sweep finds
    (a stopped process forks no more) until a sweep finds nothing new, then SIGKILL them all
    (a stopped process still dies of SIGKILL)."""
    stopped: set[int] = set()
    for _ in range(rounds):
        fresh = [pid for pid in marked_processes(marker) if pid not in stopped]
        if not fresh:
            break
        kill_processes(fresh, signal.SIGSTOP)
        stopped.update(fresh)
    return kill_processes(stopped, signal.SIGKILL)
