"""The cgroup backends (`cgroup2`, and `cgroup1` with its memory, pids, freezer and cpuacct
hierarchies): where the server may create cgroups, one cgroup per execution, its limits, its
evidence and how its tree is killed."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path

from app.confinement.limits import (
    FORK_REFUSED_NOTICE,
    OUT_OF_MEMORY_NOTICE,
    Limits,
    MiB,
    cpu_notice,
    memory_notice,
    process_notice,
    total_memory_notice,
    total_process_notice,
)
from app.confinement.shared_ceiling import (
    SharedCeiling,
    server_memory_ceiling_mb,
    server_process_ceiling,
)
from app.confinement.units import (
    Backend,
    Unit,
    child_rlimits,
    reported_evidence,
    signal_evidence,
)
from app.process import ChildConfinement, ExitStatus, kill_marked_processes, kill_processes
from app.process.groups import wait_exited
from app.process.kernel_files import keyed_values, read_kernel_file

logger = logging.getLogger("shellgate.confinement")

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The longest a unit's release waits for a tree the kernel is ending (`release(ending=True)`)
# before it kills what is left the usual way: a sandbox's namespaces end in a few ms, more
# only on a starved machine.
ENDING_WAIT_SECONDS = 1.0


def cgroup_child_rlimits(limits: Limits) -> list[tuple[int, int, int]]:
    """The rlimits a command in a cgroup unit gets (memory and processes are the cgroup's):
    one definition for the units opened here and the standby shell that sets them itself."""
    return child_rlimits(limits, address_space=False, processes=False)


def instance_name(data_dir: Path) -> str:
    """`shellgate-<12 hex>` naming this data directory: the same after a restart, another for
    another server on the same host."""
    # The path's bytes: a directory whose name is not UTF-8 has a name too (the same digest as
    # `str(…).encode()` gave for every name that is).
    digest = hashlib.sha256(os.fsencode(data_dir.resolve())).hexdigest()[:12]
    return f"shellgate-{digest}"


def own_cgroups(text: str | None = None) -> dict[str, str]:
    """The server's cgroup per hierarchy from /proc/self/cgroup: controller → path; the unified
    hierarchy is under the key ``""``."""
    if text is None:
        text = Path("/proc/self/cgroup").read_text()
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            found[""] = path
        for controller in controllers.split(","):
            if controller:
                found[controller] = path
    return found


def _read(path: str | Path) -> str:
    """A small kernel file's text, "" when it cannot be read."""
    data = read_kernel_file(path)
    return "" if data is None else data.decode("ascii", "replace")


def _pids_in(directory: str) -> list[int]:
    return [int(word) for word in _read(f"{directory}/cgroup.procs").split() if word.isdigit()]


def _write(path: str | Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _wait_until(predicate: Callable[[], bool], within: float) -> bool:
    """Bounded wait on a kernel state with no notification (freezer, an emptying cgroup)."""
    deadline = time.monotonic() + within
    pause = 0.001
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return True


def _remove_directory(directory: str | Path) -> bool:
    """rmdir a cgroup (retrying while its last members are still exiting)."""
    for attempt in range(50):
        try:
            os.rmdir(directory)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.002 * (attempt + 1))
    logger.warning("could not remove cgroup %s", directory)
    return False


class CgroupUnit(Unit):
    """A cgroup per hierarchy (v1) or one cgroup (v2)."""

    def __init__(
        self,
        execution_id: str,
        limits: Limits,
        child: ChildConfinement,
        directories: dict[str, str],
        version: int,
        shared: SharedCeiling | None = None,
    ) -> None:
        super().__init__(execution_id, limits, child)
        # controller (or "" for v2) → cgroup directory; strings, not `Path`s: a unit is made
        # for every execution, and pathlib's parsing of each join was ~3 % of a foreground
        # call's interpreter time (bench/PROFILE.md, "Where each target stands").
        self.directories = directories
        self.version = version
        self.backend = "cgroup2" if version == 2 else "cgroup1"
        # The files the evidence reads, as strings once (see `_read`).
        memory, pids = self._dir("memory"), self._dir("pids")
        events = "memory.events" if version == 2 else "memory.oom_control"
        self._memory_events = f"{memory}/{events}" if memory is not None else None
        self._pids_events = f"{pids}/pids.events" if pids is not None else None
        self._memory_dir, self._pids_dir = memory, pids
        # The limits of all commands together, and the base's counters as the run starts.
        self.shared = shared
        self._shared_before = shared.counters() if shared is not None else None

    @property
    def watched(self) -> bool:
        return True

    def _dir(self, controller: str) -> str | None:
        if self.version == 2:
            return self.directories.get("")
        return self.directories.get(controller)

    def _memory_killed(self) -> bool:
        if self._memory_events is None:
            return False
        return keyed_values(self._memory_events).get("oom_kill", 0) > 0

    def _process_limit_hit(self) -> bool:
        if self._pids_events is None:
            return False
        return keyed_values(self._pids_events).get("max", 0) > 0

    def _cpu_seconds_used(self) -> float | None:
        if self.version == 2:
            directory = self._dir("")
            if directory is None:
                return None
            usage = keyed_values(f"{directory}/cpu.stat").get("usage_usec")
            return None if usage is None else usage / 1e6
        directory = self.directories.get("cpuacct")
        if directory is None:
            return None
        text = _read(f"{directory}/cpuacct.usage").strip()
        return int(text) / 1e9 if text.isdigit() else None

    def _own_memory_limit_reached(self) -> bool:
        """Its own limit, not one above it: v2 counts `oom` in the cgroup whose limit was
        reached; v1 a charge refused at its limit in `failcnt`, and its high-water mark is
        at the limit."""
        if self._memory_dir is None:
            return False
        if self.version == 2:
            return keyed_values(f"{self._memory_dir}/memory.events").get("oom", 0) > 0
        limit = self.limits.memory_mb
        peak = _read(f"{self._memory_dir}/memory.max_usage_in_bytes").strip()
        failed = _read(f"{self._memory_dir}/memory.failcnt").strip()
        return (failed.isdigit() and int(failed) > 0) or (
            limit is not None and peak.isdigit() and int(peak) >= limit * MiB
        )

    def _memory_evidence(self) -> str | None:
        """Which limit the kernel's OOM kill in this unit was for. The kill is counted in the
        victim's cgroup whichever limit ran out, so a kill at the commands' shared limit or
        the host's never reads as this execution's own."""
        if not self._memory_killed():
            return None
        own = self.limits.memory_mb
        if own is not None and self._own_memory_limit_reached():
            return memory_notice(own)
        shared, before = self.shared, self._shared_before
        if shared is not None and before is not None and shared.memory_reached_since(before):
            assert shared.memory_mb is not None
            return total_memory_notice(shared.memory_mb)
        return OUT_OF_MEMORY_NOTICE

    def _process_evidence(self) -> str | None:
        """Which limit refused a fork in this unit."""
        own = self.limits.processes
        shared = self.shared
        total = shared.processes if shared is not None else None
        if (own is None and total is None) or not self._process_limit_hit():
            return None
        if shared is not None and shared.local_fork_events:
            # cgroup v2 since 6.12: the unit's count is its own limit's alone.
            return process_notice(own) if own is not None else None
        # cgroup v1 and older v2 count here a fork refused by any limit: the one reached is
        # the one whose peak got to it.
        peak = _read(f"{self._pids_dir}/pids.peak").strip()
        if own is not None and (not peak.isdigit() or int(peak) >= own):
            return process_notice(own)
        if shared is not None and total is not None and shared.processes_reached():
            return total_process_notice(total)
        return FORK_REFUSED_NOTICE

    def check_running(self) -> str | None:
        limits = self.limits
        notice = self._memory_evidence() or self._process_evidence()
        if notice is not None:
            return notice
        if limits.cpu_seconds is not None:
            used = self._cpu_seconds_used()
            if used is not None and used >= limits.cpu_seconds:
                return cpu_notice(limits.cpu_seconds)
        return None

    def evidence(self, status: ExitStatus, output_tail: Callable[[], str]) -> str | None:
        if self.hit:
            return self.hit
        return (
            self.check_running()
            or signal_evidence(self.limits, status, cpu_seconds_used=self._cpu_seconds_used())
            or reported_evidence(self.limits, output_tail)
            or self._shared_fork_evidence(status)
        )

    def _shared_fork_evidence(self, status: ExitStatus) -> str | None:
        """cgroup v2 since 6.12 counts a fork the commands' shared limit refused only in the
        base: a failed run during which it refused one met that limit (the unit's own counter
        never shows it, so the monitor could not stop the run for it)."""
        shared, before = self.shared, self._shared_before
        failed = status.exit_code != 0 or status.signal is not None
        if (
            failed
            and shared is not None
            and before is not None
            and shared.processes is not None
            and shared.forks_refused_since(before)
        ):
            return total_process_notice(shared.processes)
        return None

    def members(self) -> set[int]:
        found: set[int] = set()
        for directory in self.directories.values():
            found.update(_pids_in(directory))
        return found

    def kill_all(self, *, sweep: bool = True) -> int:
        killed = 0
        if self.members():
            killed = self._kill_tree()
        if sweep:
            # A process that moved itself out of its cgroup (root can) still has the marker.
            killed += kill_marked_processes(self.marker)
        return killed

    def _freezer(self) -> tuple[str, str, str, Callable[[], bool]] | None:
        """The freeze file, its frozen and thawed values, and a check that it is frozen."""
        if self.version == 2:
            directory = self.directories[""]

            def frozen2() -> bool:
                return "frozen 1" in _read(f"{directory}/cgroup.events")

            return f"{directory}/cgroup.freeze", "1", "0", frozen2
        freezer = self.directories.get("freezer")
        if freezer is None:
            return None

        def frozen1() -> bool:
            return _read(f"{freezer}/freezer.state").strip() == "FROZEN"

        return f"{freezer}/freezer.state", "FROZEN", "THAWED", frozen1

    def _kill_tree(self) -> int:
        if self.version == 2:
            directory = self.directories[""]
            if os.path.exists(f"{directory}/cgroup.kill"):
                with contextlib.suppress(OSError):
                    _write(f"{directory}/cgroup.kill", "1")
                    _wait_until(lambda: not _pids_in(directory), 2.0)
                    return 1
        freezer = self._freezer()
        if freezer is None:
            return kill_processes(self.members())
        path, frozen, thawed, is_frozen = freezer
        # Frozen, nothing forks: the member list is complete when we kill it. Killed processes
        # die once thawed.
        with contextlib.suppress(OSError):
            _write(path, frozen)
        _wait_until(is_frozen, 1.0)
        killed = 0
        for _ in range(5):
            members = self.members()
            if not members:
                break
            killed += kill_processes(members)
            with contextlib.suppress(OSError):
                _write(path, thawed)
            if _wait_until(lambda: not self.members(), 1.0):
                break
        with contextlib.suppress(OSError):
            _write(path, thawed)
        return killed

    def release(self, *, kill: bool = True, sweep: bool = True, ending: bool = False) -> bool:
        if ending:
            # bwrap's init, still tearing its namespaces down after the command's end, is
            # what is usually left (the output's EOF comes at its files' close, before that):
            # its exit is waited for on a pidfd, where a kill went through the freezer and
            # polled the cgroup with sleeps of 1 ms and up (bench/PROFILE.md, "The sandboxed
            # call's end"). Whatever is left after the wait is killed as ever.
            wait_exited(self.members(), ENDING_WAIT_SECONDS)
        if kill:
            self.kill_all(sweep=sweep)
        elif self.members():
            return False
        done = True
        for directory in self.directories.values():
            done = _remove_directory(directory) and done
        return done


class CgroupBackend(Backend):
    def __init__(self, *, root: bool, bases: dict[str, Path], version: int) -> None:
        super().__init__(root=root)
        self.bases = bases  # controller (or "") → shellgate-<instance> directory
        self._base_names = {controller: str(base) for controller, base in bases.items()}
        self.version = version
        self.name = "cgroup2" if version == 2 else "cgroup1"
        self.shared: SharedCeiling | None = None

    def enforces_processes(self) -> bool:
        return True

    def server_ceilings(self, host_mb: int) -> tuple[int, int]:
        """What the server's own cgroups (and those above them) and the host let its subtree
        hold: processes and MB of memory."""
        pids_key = "" if self.version == 2 else "pids"
        memory_key = "" if self.version == 2 else "memory"

        def own_and_mount(key: str) -> tuple[Path | None, Path | None]:
            base = self.bases.get(key)
            if base is None:
                return None, None
            return base.parent, _hierarchy_mount(base)

        pids_dir, pids_mount = own_and_mount(pids_key)
        memory_dir, memory_mount = own_and_mount(memory_key)
        return (
            server_process_ceiling(pids_dir, pids_mount),
            server_memory_ceiling_mb(memory_dir, memory_mount, self.version, host_mb),
        )

    def limit_together(
        self, processes: int | None, memory_mb: int | None, *, required: Collection[str] = ()
    ) -> SharedCeiling:
        """Cap all units together (the base cgroups) at these limits (None: none); `required`:
        the settings the operator set, which must hold (`SharedCeiling.apply`)."""
        self.shared = SharedCeiling(self._base_names, self.version, processes, memory_mb)
        self.shared.apply(required=required)
        return self.shared

    def open_unit(self, execution_id: str, limits: Limits) -> Unit:
        directories: dict[str, str] = {}
        try:
            for controller, base in self._base_names.items():
                directory = f"{base}/{execution_id}"
                try:
                    os.mkdir(directory)
                except FileNotFoundError:
                    self._recreate_base(self.bases[controller])
                    os.mkdir(directory)
                directories[controller] = directory
            self._apply(directories, limits)
        except OSError:
            for directory in directories.values():
                _remove_directory(directory)
            raise
        child = ChildConfinement(
            cgroup_procs=tuple(f"{path}/cgroup.procs" for path in directories.values()),
            rlimits=tuple(self.rlimits(limits)),
        )
        return CgroupUnit(execution_id, limits, child, directories, self.version, self.shared)

    def rlimits(self, limits: Limits) -> list[tuple[int, int, int]]:
        return cgroup_child_rlimits(limits)

    def _recreate_base(self, base: Path) -> None:
        """A base removed from outside (an operator's cleanup of empty cgroups) is made again
        as start-up made it, once per unit that finds it gone: otherwise every later
        execution would fail until a restart. Only the base itself is created, never its
        parent: a server whose own cgroup is gone fails its executions with this error."""
        try:
            _create_base(base, self.version)
            if self.shared is not None:
                self.shared.apply_to(str(base))
        except OSError as error:
            raise OSError(
                error.errno,
                f"the server's cgroup {base} is gone and could not be re-created: "
                f"{error.strerror or error}",
            ) from error
        logger.warning("the cgroup %s was removed from outside the server: re-created it", base)

    def adopt(self, unit: Unit, execution_id: str) -> CgroupUnit:
        """A standby's unit (app/confinement/standby.py) becomes `execution_id`'s: its
        cgroups take the execution's name where the hierarchy allows a rename (v1; cgroup v2
        has none, so there they keep the standby's name), and its kill sweep the execution's
        marker."""
        assert isinstance(unit, CgroupUnit)  # the units this backend opens
        directories = dict(unit.directories)
        if self.version == 1:
            for controller, directory in unit.directories.items():
                renamed = f"{os.path.dirname(directory)}/{execution_id}"
                try:
                    os.rename(directory, renamed)
                except OSError as error:
                    logger.warning("could not rename the cgroup %s: %s", directory, error)
                    continue
                directories[controller] = renamed
        child = ChildConfinement(
            cgroup_procs=tuple(f"{path}/cgroup.procs" for path in directories.values()),
            rlimits=unit.child.rlimits,
        )
        return CgroupUnit(execution_id, unit.limits, child, directories, self.version, self.shared)

    def _apply(self, directories: dict[str, str], limits: Limits) -> None:
        if self.version == 2:
            directory = directories[""]
            if limits.memory_mb is not None:
                _write(f"{directory}/memory.max", str(limits.memory_mb * MiB))
                with contextlib.suppress(OSError):
                    _write(f"{directory}/memory.swap.max", "0")
            if limits.processes is not None:
                _write(f"{directory}/pids.max", str(limits.processes))
            return
        if limits.memory_mb is not None:
            memory = directories["memory"]
            _write(f"{memory}/memory.limit_in_bytes", str(limits.memory_mb * MiB))
            # With swap accounting, swap counts too (absent without it).
            with contextlib.suppress(OSError):
                _write(f"{memory}/memory.memsw.limit_in_bytes", str(limits.memory_mb * MiB))
        if limits.processes is not None:
            _write(f"{directories['pids']}/pids.max", str(limits.processes))

    def close(self) -> None:
        for base in self.bases.values():
            with contextlib.suppress(OSError):
                base.rmdir()  # refused while a unit (kept daemons) is still in it

    def sweep_leftovers(self) -> int:
        removed = 0
        names: set[str] = set()
        for base in self.bases.values():
            with contextlib.suppress(OSError):
                names.update(entry.name for entry in os.scandir(base) if entry.is_dir())
        for name in sorted(names):
            if not name.startswith("ex_"):
                continue  # only what this server names
            directories = {
                controller: f"{base}/{name}"
                for controller, base in self._base_names.items()
                if os.path.isdir(f"{base}/{name}")
            }
            unit = CgroupUnit(name, Limits(), ChildConfinement(), directories, self.version)
            unit.release(kill=True)
            removed += 1
        return removed


def _hierarchy_mount(directory: Path) -> Path | None:
    """The mount point of the cgroup hierarchy `directory` is in: its topmost parent that is a
    cgroup (None outside any)."""
    mounts = [
        parent
        for parent in directory.parents
        if (parent / "cgroup.procs").exists() and not (parent.parent / "cgroup.procs").exists()
    ]
    return mounts[0] if mounts else None


def _enable_child_controllers(directory: Path) -> None:
    """cgroup v2: memory and pids (and cpu, for its usage, where delegated) for the children
    of `directory`."""
    _write(directory / "cgroup.subtree_control", "+memory +pids")
    with contextlib.suppress(OSError):
        _write(directory / "cgroup.subtree_control", "+cpu")


def _create_base(base: Path, version: int) -> None:
    """The server's `shellgate-<instance>` cgroup of one hierarchy, ready for units: at start,
    and again when it was removed from outside (`CgroupBackend.open_unit`). Its parent must
    exist: nothing above it is created."""
    base.mkdir(exist_ok=True)
    if version == 2:
        _enable_child_controllers(base)


def cgroup2_base(instance: str, own: dict[str, str]) -> Path:
    """Where a cgroup-v2 unit directory goes, or OSError saying why not."""
    if "" not in own:
        raise OSError("the server is in no cgroup-v2 hierarchy")
    mount = (
        CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else CGROUP_ROOT / "unified"
    )
    if not (mount / "cgroup.controllers").exists():
        raise OSError("no cgroup2 filesystem at /sys/fs/cgroup or /sys/fs/cgroup/unified")
    own_dir = mount / own[""].lstrip("/")
    if own_dir.name == "server" and own[""] != "/":
        own_dir = own_dir.parent  # an earlier server of this process moved it into the leaf
    available = set(_read(own_dir / "cgroup.controllers").split())
    missing = {"memory", "pids"} - available
    if missing:
        raise OSError(
            f"controllers {', '.join(sorted(missing))} are not delegated to the server's cgroup "
            f"{own[''] or '/'}"
        )
    # Controllers can be enabled only for a cgroup's children, and (below the real root, which
    # alone has no cgroup.type) a cgroup with enabled controllers holds no processes: in a
    # delegated cgroup (systemd Delegate=yes, a container's private cgroup namespace) the
    # server moves the processes of its own cgroup (itself, and e.g. the container's init)
    # into a leaf `server` inside it: never out of its own subtree.
    if (own_dir / "cgroup.type").exists():
        leaf = own_dir / "server"
        leaf.mkdir(exist_ok=True)
        _write(leaf / "cgroup.procs", "0")
        for pid in _pids_in(str(own_dir)):
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                _write(leaf / "cgroup.procs", str(pid))
    _enable_child_controllers(own_dir)
    base = own_dir / instance
    _create_base(base, 2)
    probe = base / "probe"
    probe.mkdir(exist_ok=True)
    try:
        if not (probe / "pids.max").exists() or not (probe / "memory.max").exists():
            raise OSError("memory and pids controllers could not be enabled for child cgroups")
    finally:
        _remove_directory(probe)
    return base


def cgroup1_bases(instance: str, own: dict[str, str]) -> dict[str, Path]:
    bases: dict[str, Path] = {}
    for controller in ("pids", "memory", "freezer", "cpuacct"):
        mount = CGROUP_ROOT / controller
        if controller not in own or not (mount / "cgroup.procs").exists():
            if controller == "cpuacct":
                continue  # optional: RLIMIT_CPU still limits each process
            raise OSError(f"no cgroup-v1 {controller} hierarchy mounted at {mount}")
        base = mount / own[controller].lstrip("/") / instance
        try:
            _create_base(base, 1)
            probe = base / "probe"
            probe.mkdir(exist_ok=True)
            _remove_directory(probe)
        except OSError as error:
            if controller == "cpuacct":
                continue
            raise OSError(
                f"cannot create a cgroup below the server's {controller} cgroup "
                f"{own[controller]}: {error.strerror or error}"
            ) from error
        bases[controller] = base
    return bases
