"""CPU of a server's whole process tree: the server, the helpers it keeps (shellgate's standby
shell, SWE-ReX's session bash) and every child it ran and reaped, so that work a server hands
to another process is not left out of its cost.

Preferred: a cgroup of its own below the bench's, the server started inside it (everything it
spawns lands there or below, shellgate's confinement units included: they are made below the
server's own cgroup), read from `cpuacct.usage` (cgroup v1) or `cpu.stat` `usage_usec` (v2).
Where no such cgroup can be made (not root, no cpuacct hierarchy), the fallback is /proc:
the server's utime + stime + cutime + cstime (children it waited for, and theirs) plus utime +
stime of its live descendants; across a block a descendant alive at the start and reaped
before the end is counted once (its start is subtracted, all of it lands in cutime). What the
fallback misses: a grandchild reparented away from the server. The method used is printed in
every result (`TreeCpu.method`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CGROUP_ROOT = "/sys/fs/cgroup"


def _own_cgroup() -> tuple[str, str] | None:
    """(directory of this process's accounting cgroup, file to read) or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            for mount in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
                base = f"{CGROUP_ROOT}/{mount}"
                if os.path.isfile(f"{base}/cpuacct.usage"):
                    return base + path.rstrip("/"), "cpuacct.usage"
    for line in lines:
        if line.startswith("0::") and os.path.isfile(f"{CGROUP_ROOT}/cgroup.controllers"):
            return CGROUP_ROOT + line[3:].rstrip("/"), "cpu.stat"
    return None


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    # After the command name: state is field 3, ppid 4, utime 14 ... cstime 17 (man 5 proc).
    return text[text.rindex(")") + 2 :].split()


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                children.setdefault(int(_stat_fields(int(entry))[1]), []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def proc_tree_seconds(pid: int) -> float:
    """The /proc fallback: see the module docstring."""
    fields = _stat_fields(pid)
    ticks = sum(int(value) for value in fields[11:15])
    for child in _descendants(pid):
        with contextlib.suppress(OSError):  # it ended between the listing and the read
            child_fields = _stat_fields(child)
            ticks += int(child_fields[11]) + int(child_fields[12])
    return ticks / _clock_ticks()


class TreeCpu:
    """One server's accounting. `prepare()` in the parent before the spawn, `enter()` in the
    child (a `preexec_fn`), `seconds()` whenever, `remove()` after the server has exited."""

    def __init__(self, name: str) -> None:
        own = _own_cgroup()
        self.directory: str | None = None
        self.file = ""
        self.pid = 0
        if own is not None:
            base, self.file = own
            directory = f"{base}/shellgate-bench-{os.getpid()}-{name}"
            with contextlib.suppress(OSError):
                os.mkdir(directory)
                self.directory = directory
        self.method = (
            f"cgroup {self.file}" if self.directory else "/proc: own + reaped + live descendants"
        )

    def enter(self) -> None:
        """Runs in the forked child before exec: move itself into the cgroup."""
        if self.directory is not None:
            with open(f"{self.directory}/cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))

    def seconds(self) -> float:
        if self.directory is None:
            return proc_tree_seconds(self.pid)
        text = Path(f"{self.directory}/{self.file}").read_text()
        if self.file == "cpuacct.usage":
            return int(text) / 1e9
        usage = next(line for line in text.splitlines() if line.startswith("usage_usec "))
        return int(usage.split()[1]) / 1e6

    def remove(self) -> None:
        """Remove the cgroup and whatever the server left below it, deepest first (rmdir only
        succeeds on a cgroup with no process left)."""
        if self.directory is None:
            return
        for root, _, _ in sorted(os.walk(self.directory), key=lambda w: -w[0].count("/")):
            with contextlib.suppress(OSError):
                os.rmdir(root)
