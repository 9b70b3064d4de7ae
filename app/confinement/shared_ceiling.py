"""The limits of all commands together: a ceiling on the `shellgate-<instance>` cgroup that holds
every execution's unit.

Each execution has its own limits (512 processes, half the host's memory by default), and
nothing else bounded their sum: 32 jobs could together take more than the server itself may use
(its cgroup's `pids.max`, systemd's `TasksMax`, the host's memory), and then the server's own
forks and threads failed, or the kernel's OOM killer chose among everyone. The base cgroup holds
the units and not the server, so a ceiling on it makes the commands meet their limit together,
never the server's (docs/operations.md#confinement).

The default is what the server may use itself, less a reserve for the server and the host: the
tightest `pids.max` and memory limit of the server's cgroup and its ancestors, the kernel's pid
limits (and a non-root user's process limit) and the host's memory.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import resource
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from app.confinement.limits import MiB
from app.process.kernel_files import keyed_values, read_kernel_file

logger = logging.getLogger("shellgate.confinement")

PROCESSES_SETTING = "SHELLGATE_LIMIT_TOTAL_PROCESSES"
MEMORY_SETTING = "SHELLGATE_LIMIT_TOTAL_MEMORY_MB"

# What stays for the server and the rest of the host: an eighth of the ceiling, at least this
# much, at most half of it. The server's thread pools at their caps are ≈ 125 threads (the
# execution path's 40, anyio's 40, the database's up to 30, the proxy's resolvers, the log
# writers, libuv's), besides its helper processes: 256 leaves it room under load.
RESERVED_SHARE = 8
RESERVED_PROCESSES = 256
RESERVED_MEMORY_MB = 256
# cgroup v1 says "no memory limit" with the largest page-aligned counter (2^63 less a page).
V1_NO_MEMORY_LIMIT = 1 << 62


def _number(path: str | Path) -> int | None:
    """A cgroup or sysctl file holding one number; None for "max", absent or unreadable."""
    data = read_kernel_file(path)
    if data is None:
        return None
    text = data.strip()
    return int(text) if text.isdigit() else None


def _upward(directory: Path, mount: Path) -> list[Path]:
    """`directory` and each of its parents up to the hierarchy's mount point."""
    found = [directory]
    while directory != mount and mount in directory.parents:
        directory = directory.parent
        found.append(directory)
    return found


def _tightest(directories: list[Path], name: str) -> int | None:
    values = [value for value in (_number(d / name) for d in directories) if value is not None]
    return min(values) if values else None


def _after_reserve(ceiling: int, least_reserved: int) -> int:
    reserved = min(max(least_reserved, ceiling // RESERVED_SHARE), ceiling // 2)
    return ceiling - reserved


def server_process_ceiling(pids_dir: Path | None, mount: Path | None) -> int:
    """The most processes (threads included) the server's subtree may hold: its cgroup's and
    its ancestors' `pids.max`, the kernel's own pid limits, and for a server not run by root
    its user's `RLIMIT_NPROC` (which its commands share: a cgroup backend gives them none of
    their own)."""
    limits = [
        value
        for value in (
            _number("/proc/sys/kernel/pid_max"),
            _number("/proc/sys/kernel/threads-max"),
        )
        if value is not None
    ]
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if os.geteuid() != 0 and soft != resource.RLIM_INFINITY:
        limits.append(soft)
    if pids_dir is not None and mount is not None:
        tightest = _tightest(_upward(pids_dir, mount), "pids.max")
        if tightest is not None:
            limits.append(tightest)
    return min(limits) if limits else 4194304


def server_memory_ceiling_mb(
    memory_dir: Path | None, mount: Path | None, version: int, host_mb: int
) -> int:
    """The most memory the server's subtree may use: its cgroup's and its ancestors' limit, and
    the host's memory."""
    limits = [host_mb] if host_mb > 0 else []
    if memory_dir is not None and mount is not None:
        name = "memory.max" if version == 2 else "memory.limit_in_bytes"
        tightest = _tightest(_upward(memory_dir, mount), name)
        if tightest is not None and tightest < V1_NO_MEMORY_LIMIT:
            limits.append(tightest // MiB)
    return min(limits) if limits else 0


def default_total_processes(ceiling: int) -> int:
    return _after_reserve(ceiling, RESERVED_PROCESSES)


def default_total_memory_mb(ceiling_mb: int) -> int | None:
    return _after_reserve(ceiling_mb, RESERVED_MEMORY_MB) if ceiling_mb > 0 else None


@dataclass(frozen=True)
class Counters:
    """The base's counts of its own limits reached, read when an execution starts: what grew
    since then happened while it ran."""

    memory: int
    processes: int


class SharedCeiling:
    """The base cgroups' limits (`processes`, `memory_mb`; None: none) and what the kernel
    says about them."""

    def __init__(
        self, bases: dict[str, str], version: int, processes: int | None, memory_mb: int | None
    ) -> None:
        self.version = version
        self.processes = processes
        self.memory_mb = memory_mb
        self._pids_dir = bases.get("" if version == 2 else "pids")
        self._memory_dir = bases.get("" if version == 2 else "memory")
        # cgroup v2 since Linux 6.12 counts a refused fork in the cgroup whose limit refused it
        # (`pids.events`, and the base's own in `pids.events.local`); v1 and older v2 count it
        # in the forking cgroup, the unit, whichever limit refused it (`CgroupUnit` tells the
        # two apart by `pids.peak`).
        self.local_fork_events = version == 2 and os.path.exists(
            f"{self._pids_dir}/pids.events.local"
        )

    def apply(self, *, required: Collection[str] = ()) -> None:
        """Write the limits into the base cgroups at start. A limit derived by the server that
        cannot be written is logged and reported as none (`GET /v1/info`); one the operator set
        (its setting's name in `required`) is an OSError: the start fails rather than run
        without the limit it was asked for."""
        if self.processes is not None and not self._try(
            self._write_processes, PROCESSES_SETTING, required
        ):
            self.processes = None
        if self.memory_mb is not None and not self._try(
            self._write_memory, MEMORY_SETTING, required
        ):
            self.memory_mb = None

    def apply_to(self, base: str) -> None:
        """Write them again into `base`, made again after it was removed from outside; an
        OSError when they cannot be: a base without them would not hold the commands."""
        if base == self._pids_dir and self.processes is not None:
            self._write_processes()
        if base == self._memory_dir and self.memory_mb is not None:
            self._write_memory()

    def _write_processes(self) -> None:
        _write_file(f"{self._pids_dir}/pids.max", str(self.processes))

    def _write_memory(self) -> None:
        value = str((self.memory_mb or 0) * MiB)
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        _write_file(f"{self._memory_dir}/{name}", value)
        swap = "memory.swap.max" if self.version == 2 else "memory.memsw.limit_in_bytes"
        with contextlib.suppress(OSError):  # absent without swap accounting
            _write_file(f"{self._memory_dir}/{swap}", "0" if self.version == 2 else value)

    @staticmethod
    def _try(write: Callable[[], None], setting: str, required: Collection[str]) -> bool:
        try:
            write()
        except OSError as error:
            if setting in required:
                raise OSError(
                    error.errno, f"{setting} is set but cannot be applied: {error}"
                ) from error
            logger.warning(
                "could not limit all commands together: %s; only each execution's own limits apply",
                error,
            )
            return False
        return True

    def counters(self) -> Counters:
        """v2's counts of the base's own limits reached (v1 has none that are kept: its
        `failcnt` stays 0 for a parent whose limit refused a child's charge, seen on 6.18)."""
        if self.version != 2:
            return Counters(memory=0, processes=0)
        processes = (
            keyed_values(f"{self._pids_dir}/pids.events.local").get("max", 0)
            if self.local_fork_events
            else 0
        )
        memory = keyed_values(f"{self._memory_dir}/memory.events.local").get("oom", 0)
        return Counters(memory=memory, processes=processes)

    def processes_now(self) -> float:
        """Processes (threads included) of all commands together; NaN when unreadable."""
        value = _number(f"{self._pids_dir}/pids.current")
        return math.nan if value is None else float(value)

    def memory_now(self) -> float:
        """Bytes charged to all commands together; NaN when unreadable."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        value = _number(f"{self._memory_dir}/{name}")
        return math.nan if value is None else float(value)

    def memory_reached_since(self, before: Counters) -> bool:
        """v2: the base's limit was reached since `before`. v1: its usage's high-water mark is
        at the limit (a charge there is refused), the closest v1 keeps to an event."""
        if self.memory_mb is None:
            return False
        if self.version == 2:
            return self.counters().memory > before.memory
        peak = _number(f"{self._memory_dir}/memory.max_usage_in_bytes")
        return peak is not None and peak >= self.memory_mb * MiB

    def forks_refused_since(self, before: Counters) -> bool:
        """cgroup v2 since 6.12 only: the base refused a fork since `before`."""
        return (
            self.processes is not None
            and self.local_fork_events
            and self.counters().processes > before.processes
        )

    def processes_reached(self) -> bool:
        """The commands together were at the process limit at some time (`pids.peak`)."""
        if self.processes is None:
            return False
        peak = _number(f"{self._pids_dir}/pids.peak")
        return peak is not None and peak >= self.processes


def _write_file(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
