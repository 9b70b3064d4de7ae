"""Commands yield the CPU to the server that runs them.

Under load the commands (16 compressing, hashing, printing binary) and the server share the
cores, and on 2 cores the event loop then waited behind them: `/healthz` p99 113 ms in the
soak, 63-74 ms with the commands 10 nice levels down, for the same work done
(RELIABILITY.md, "Soak"). But a starved command also streams slower and in smaller pieces,
so it is the operator's choice, off by default (docs/operations.md). Every execution's leader
runs `SHELLGATE_COMMAND_NICE` levels below the server, and so does its session's autogroup:
each execution is a session of its own (`setsid`), and where the kernel groups sessions for
scheduling (`sched_autogroup`, on in most distributions) the nice of a process only counts
inside its group, the group's own nice between groups. Best effort: a host that refuses either
leaves the command at the server's priority.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
from typing import Final

MAX_NICE: Final = 19
_NICE_PROGRAM: Final = shutil.which("nice")
_AUTOGROUP_NICE = re.compile(r"\bnice\s+(-?\d+)")


def lower_priority(pid: int, levels: int) -> None:
    """Run `pid`, a standby shell just spawned (it waits: nothing forked yet), and its
    session's autogroup `levels` nice levels below this process (at most 19)."""
    if levels <= 0:
        return
    with contextlib.suppress(OSError):
        own = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, pid, min(MAX_NICE, own + levels))
    lower_group_priority(pid, levels)


def lower_group_priority(pid: int, levels: int) -> None:
    """The autogroup of `pid`'s session `levels` below the server's own (at most 19): for a
    command spawned directly, whose own nice its argv (`nice_prefix`) or its child setup
    lowered before exec. The group's nice applies to its members whenever it is set."""
    if levels <= 0:
        return
    own_group = _own_autogroup_nice()
    if own_group is not None:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/autogroup", "w") as autogroup:
            autogroup.write(str(min(MAX_NICE, own_group + levels)))


def nice_prefix(levels: int) -> list[str]:
    """What to put before a command's argv so that it starts `levels` below the server (nice
    counts from the caller's own), when no function runs in the child before exec: set from
    the server after the spawn, the command could already have started others at the
    server's priority."""
    if levels <= 0 or _NICE_PROGRAM is None:
        return []
    return [_NICE_PROGRAM, "-n", str(levels)]


@functools.cache
def _own_autogroup_nice() -> int | None:
    """The nice of the server's own autogroup; None where the kernel has no autogroups."""
    try:
        with open("/proc/self/autogroup") as autogroup:
            return autogroup_nice(autogroup.read())
    except OSError:
        return None


def autogroup_nice(text: str) -> int:
    """The nice in a `/proc/<pid>/autogroup` text. A process of the kernel's default group
    (a session init started without `setsid`, as a CI runner or a service manager may) reads
    an empty file: that group weighs as nice 0, so its sessions' commands still go `levels`
    below 0, not unlowered."""
    match = _AUTOGROUP_NICE.search(text)
    return int(match.group(1)) if match else 0
