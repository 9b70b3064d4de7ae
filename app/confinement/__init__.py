"""Confinement: per-execution resource limits, and one unit per execution that nothing escapes.

Three backends, the strongest the host gives chosen at start:

- `cgroup2`: a cgroup per execution below the server's own (unified hierarchy) with
  `memory.max`, `pids.max`; evidence from `memory.events` (oom_kill) and `pids.events` (max),
  CPU time from `cpu.stat`; the tree is killed with `cgroup.kill`.
- `cgroup1`: the same with the v1 `memory`, `pids` and `freezer` hierarchies (and `cpuacct`
  when mounted); evidence from `memory.oom_control` (oom_kill) and `pids.events`; the tree is
  frozen, killed and thawed.
- `rlimit`: `setrlimit` in the child only, and a sweep of `/proc` for processes carrying the
  execution's marker variable to kill the tree. It cannot cap the processes of root.

Every backend also sets `RLIMIT_FSIZE`, `RLIMIT_CPU` and `RLIMIT_NOFILE` in the child (cgroups
have no file-size or descriptor limit; SIGXFSZ and SIGXCPU are the evidence), and every kill
also sweeps for the marker, which catches a process that left its cgroup.

Cgroups are created only below the server's own cgroup of each hierarchy (read from
`/proc/self/cgroup`), under `shellgate-<instance>/` where the instance names the data
directory, so a restarted server finds (and removes) what its predecessor left, and never
touches a cgroup it did not create.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from pathlib import Path

from app.confinement.cgroups import CgroupBackend, instance_name, own_cgroups
from app.confinement.choice import Choice, choose_backend
from app.confinement.limits import Limits, host_memory_mb, resolve_limits
from app.confinement.monitor import Monitor
from app.confinement.shared_ceiling import (
    MEMORY_SETTING,
    PROCESSES_SETTING,
    SharedCeiling,
    default_total_memory_mb,
    default_total_processes,
)
from app.confinement.standby import SandboxBuilder, SpawnAhead
from app.confinement.units import Backend, Unit
from app.process import StandbyShell

__all__ = [
    "Backend",
    "Choice",
    "Confinement",
    "Limits",
    "Unit",
    "build_confinement",
    "choose_backend",
    "instance_name",
    "own_cgroups",
    "require_shared_limits",
    "resolve_limits",
]

logger = logging.getLogger("shellgate.confinement")


# --- what the server holds ---------------------------------------------------------------------


class Confinement:
    """The chosen backend, the server's limits (the ceiling of every request) and the monitor."""

    def __init__(self, backend: Backend, ceiling: Limits, totals: Limits) -> None:
        self.backend = backend
        self.ceiling = ceiling
        # All commands together (memory_mb and processes; None: no such limit).
        self.totals = totals
        self.monitor = Monitor()
        self._spawn_ahead: SpawnAhead | None = None

    @property
    def shared(self) -> SharedCeiling | None:
        """The folder all commands share and its limits (a cgroup backend), else None."""
        return self.backend.shared if isinstance(self.backend, CgroupBackend) else None

    @property
    def name(self) -> str:
        return self.backend.name

    def resolve(self, *layers: dict[str, int | None] | None) -> Limits:
        """Limits from the request layers (later ones win per field: session, then call)."""
        merged: dict[str, int | None] = {}
        for layer in layers:
            for key, value in (layer or {}).items():
                if value is not None:
                    merged[key] = value
        return resolve_limits(merged, self.ceiling)

    def open_unit(self, execution_id: str, limits: Limits) -> Unit:
        unit = self.backend.open_unit(execution_id, limits)
        self.monitor.watch(unit)
        return unit

    def start_spawning_ahead(
        self,
        shell: str,
        data_dir: Path,
        nice: int = 0,
        sandbox: SandboxBuilder | None = None,
        count: int = 2,
    ) -> None:
        """Keep `count` standby shells ready, each in a unit with the server's limits, `nice`
        levels below the server (app/confinement/standby.py), waiting inside the sandbox
        `sandbox` builds for each (app/sandbox/). Of use with a cgroup backend (no cgroup move
        on the request's path) or a sandbox (no sandbox to build on it)."""
        useful = isinstance(self.backend, CgroupBackend) or sandbox is not None
        if useful and self._spawn_ahead is None:
            self._spawn_ahead = SpawnAhead(
                self.backend, self.ceiling, shell, data_dir, nice, sandbox, count
            )
            self._spawn_ahead.start()

    def take_standby(
        self,
        execution_id: str,
        limits: Limits,
        sandbox_key: Callable[[], Hashable] | None = None,
    ) -> tuple[Unit, StandbyShell] | None:
        """A unit for `execution_id` with a shell already in it, waiting in a sandbox built
        from what `sandbox_key` gives (`Sandbox.standby_fit`'s key; None: no sandbox), or
        None (open a unit)."""
        if self._spawn_ahead is None:
            return None
        standby = self._spawn_ahead.take(execution_id, limits, sandbox_key)
        if standby is None:
            return None
        self.monitor.watch(standby.unit)
        return standby.unit, standby.shell

    def close_unit(
        self,
        unit: Unit,
        *,
        kill: bool,
        sweep: bool = True,
        ending: bool = False,
        replace_standby: bool = True,
    ) -> bool:
        """End the unit (killing what is left unless `kill` is false); False when kept
        processes still run in it. `ending`: the kernel already ends what is left
        (`Unit.release`). `replace_standby` false: the caller calls `standby_wanted` itself,
        once its answer is out."""
        self.monitor.forget(unit)
        released = unit.release(kill=kill, sweep=sweep, ending=ending)
        if replace_standby:
            self.standby_wanted()
        return released

    def standby_wanted(self) -> None:
        """Time to make the next standbys, if fewer than wanted are ready."""
        if self._spawn_ahead is not None:
            self._spawn_ahead.unit_closed()

    def close(self) -> None:
        """At server stop: the standby, the monitor end and this server's (empty) cgroup
        folders go."""
        if self._spawn_ahead is not None:
            self._spawn_ahead.stop()
        self.monitor.stop()
        self.backend.close()


def build_confinement(
    data_dir: Path,
    wanted: str,
    *,
    memory_mb: int | None,
    processes: int,
    cpu_seconds: int,
    file_size_mb: int,
    open_files: int,
    total_processes: int | None = None,
    total_memory_mb: int | None = None,
) -> Confinement:
    """Choose the backend (logging why stronger ones were unavailable), remove what an earlier
    server of this data directory left, and fix the server's limits (0 = none) and, with a
    cgroup backend, those of all commands together (None: what the server may use itself, less
    its reserve: app/confinement/shared_ceiling.py)."""
    choice = choose_backend(data_dir, wanted)
    for reason in choice.reasons:
        logger.warning("confinement backend unavailable: %s", reason)
    backend = choice.backend
    if memory_mb is None:
        # Half the host by default where a cgroup enforces it; under rlimit, whose address-space
        # limit breaks runtimes that reserve large ranges (V8, the JVM), only when asked for.
        memory_mb = host_memory_mb() // 2 if isinstance(backend, CgroupBackend) else 0
    removed = backend.sweep_leftovers()
    if removed:
        logger.warning(
            "removed %d cgroups an earlier server left (their processes killed)", removed
        )
    totals = Limits()
    require_shared_limits(backend, total_processes, total_memory_mb)
    if isinstance(backend, CgroupBackend):
        # After the sweep: a predecessor's commands still in the folder could hold more than
        # the limit, which the kernel then refuses to set.
        shared = _limit_together(backend, total_processes, total_memory_mb)
        totals = Limits(memory_mb=shared.memory_mb, processes=shared.processes)
        # One execution cannot use more than all of them together may.
        memory_mb = _within(memory_mb, totals.memory_mb, "memory_mb")
        processes = _within(processes, totals.processes, "processes")
    ceiling = Limits(
        memory_mb=memory_mb or None,
        processes=processes or None,
        cpu_seconds=cpu_seconds or None,
        file_size_mb=file_size_mb or None,
        open_files=open_files or None,
    )
    logger.info(
        "confinement: %s, limits %s, all commands together %s",
        backend.name,
        ceiling.as_dict(),
        {"memory_mb": totals.memory_mb, "processes": totals.processes},
    )
    if ceiling.processes is not None and not backend.enforces_processes():
        logger.warning(
            "the process limit is not enforced: the rlimit backend of a root server has none "
            "(root ignores RLIMIT_NPROC); give the server a delegated cgroup"
        )
    return Confinement(backend, ceiling, totals)


def _limit_together(
    backend: CgroupBackend, processes: int | None, memory_mb: int | None
) -> SharedCeiling:
    """The base cgroups' limits: as set (0: none), or derived from the server's own."""
    set_totals = (processes, memory_mb)
    process_ceiling, memory_ceiling_mb = backend.server_ceilings(host_memory_mb())
    if processes is None:
        processes = default_total_processes(process_ceiling)
    elif processes > process_ceiling:
        _beyond_the_server(PROCESSES_SETTING, processes, process_ceiling)
    if memory_mb is None:
        memory_mb = default_total_memory_mb(memory_ceiling_mb)
    elif memory_ceiling_mb and memory_mb > memory_ceiling_mb:
        _beyond_the_server(MEMORY_SETTING, memory_mb, memory_ceiling_mb)
    return backend.limit_together(
        processes or None, memory_mb or None, required=_set_by_the_operator(set_totals)
    )


def _set_by_the_operator(totals: tuple[int | None, int | None]) -> list[str]:
    """The settings of the totals given a limit (not derived: None; not turned off: 0)."""
    names = (PROCESSES_SETTING, MEMORY_SETTING)
    return [name for name, value in zip(names, totals, strict=True) if value]


def require_shared_limits(backend: Backend, processes: int | None, memory_mb: int | None) -> None:
    """An OSError when the operator set a total (`SHELLGATE_LIMIT_TOTAL_*`) that `backend`
    cannot hold: without a cgroup no folder holds all commands, and the start fails rather
    than run without the limit it was asked for."""
    asked = _set_by_the_operator((processes, memory_mb))
    if asked and not isinstance(backend, CgroupBackend):
        raise OSError(
            f"{' and '.join(asked)} {'needs' if len(asked) == 1 else 'need'} a cgroup backend "
            f"(cgroup1 or cgroup2), and confinement is {backend.name}: all commands together "
            "are limited through the cgroup folder that holds theirs"
        )


def _beyond_the_server(setting: str, value: int, ceiling: int) -> None:
    logger.warning(
        "%s (%d) is above what the server's own cgroup and the host allow it (%d): the commands "
        "can take what the server needs before they meet it",
        setting,
        value,
        ceiling,
    )


def _within(value: int, total: int | None, name: str) -> int:
    """A per-execution limit (0: none) no larger than the total."""
    if total is None or (value and value <= total):
        return value
    logger.warning(
        "the per-execution limit %s (%s) is above what all commands together may use (%d): "
        "lowered to it",
        name,
        value or "none",
        total,
    )
    return total
