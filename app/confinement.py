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

import contextlib
import hashlib
import logging
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from app.environment import EXECUTION_MARKER
from app.errors import InvalidRequestError
from app.process import (
    ChildConfinement,
    ExitStatus,
    kill_marked_processes,
    kill_processes,
)

logger = logging.getLogger("shellgate.confinement")

CGROUP_ROOT = Path("/sys/fs/cgroup")
BACKENDS = ("cgroup2", "cgroup1", "rlimit")
MiB = 1024 * 1024
# Kernel counters the cgroup backends watch have no notification in v1 (pids.events): one
# monitor thread reads them for every running execution at this period.
MONITOR_PERIOD = 0.2
# RLIMIT_CPU sends SIGXCPU at the soft limit; a process that ignores it dies of SIGKILL here.
CPU_HARD_MARGIN = 2
# Output lines by which a program reports a failed allocation (the rlimit backend's evidence:
# RLIMIT_AS makes allocations fail instead of killing).
ALLOCATION_FAILURES = (
    "MemoryError",
    "Cannot allocate memory",
    "out of memory",
    "std::bad_alloc",
    "memory exhausted",
)


def memory_notice(mb: int) -> str:
    return f"Memory limit of {mb} MB reached"


def process_notice(count: int) -> str:
    return f"Process limit of {count} reached"


def cpu_notice(seconds: int) -> str:
    return f"CPU time limit of {seconds} s reached"


def file_size_notice(mb: int) -> str:
    return f"File size limit of {mb} MB reached"


@dataclass(frozen=True)
class Limits:
    """Per-execution limits; None means no limit."""

    memory_mb: int | None = None
    processes: int | None = None
    cpu_seconds: int | None = None
    file_size_mb: int | None = None
    open_files: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> Limits:
        names = {field.name for field in fields(cls)}
        return cls(**{key: value for key, value in (values or {}).items() if key in names})


LIMIT_NAMES = tuple(field.name for field in fields(Limits))


def resolve_limits(requested: dict[str, int | None] | None, ceiling: Limits) -> Limits:
    """The limits of one execution: what the request asks for, within the server's; a value
    above the server's limit is refused (a request may only lower a limit)."""
    values: dict[str, int | None] = {}
    for name in LIMIT_NAMES:
        cap = getattr(ceiling, name)
        asked = (requested or {}).get(name)
        if asked is None:
            values[name] = cap
        elif cap is not None and asked > cap:
            raise InvalidRequestError(
                f"limits.{name} of {asked} is above the server's limit of {cap}",
                details={"limit": name, "requested": asked, "allowed": cap},
            )
        else:
            values[name] = asked
    return Limits(**values)


def host_memory_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def instance_name(data_dir: Path) -> str:
    """`shellgate-<12 hex>` naming this data directory: the same after a restart, another for
    another server on the same host."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
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


def _child_rlimits(
    limits: Limits, *, address_space: bool, processes: bool
) -> list[tuple[int, int, int]]:
    """setrlimit triples for the child. Only ever lowers: a hard limit already below ours
    stays."""
    wanted: list[tuple[int, int, int]] = []

    def lower(number: int, soft: int, hard: int | None = None) -> None:
        current_soft, current_hard = resource.getrlimit(number)
        hard = soft if hard is None else hard
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
        soft = min(soft, hard)
        if current_soft != resource.RLIM_INFINITY:
            # Keep a lower soft limit (e.g. 1024 descriptors, which select()-based programs need).
            soft = min(soft, current_soft) if number == resource.RLIMIT_NOFILE else soft
        wanted.append((number, soft, hard))

    if limits.file_size_mb is not None:
        lower(resource.RLIMIT_FSIZE, limits.file_size_mb * MiB)
    if limits.cpu_seconds is not None:
        lower(resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + CPU_HARD_MARGIN)
    if limits.open_files is not None:
        lower(resource.RLIMIT_NOFILE, limits.open_files)
    if address_space and limits.memory_mb is not None:
        lower(resource.RLIMIT_AS, limits.memory_mb * MiB)
    if processes and limits.processes is not None:
        lower(resource.RLIMIT_NPROC, limits.processes)
    return wanted


def _signal_evidence(limits: Limits, status: ExitStatus) -> str | None:
    """SIGXCPU / SIGXFSZ killed the command (or, through bash's 128+N, its foreground child)."""

    def died_of(sig: int) -> bool:
        return status.signal == sig or status.exit_code == 128 + sig

    if limits.cpu_seconds is not None and died_of(signal.SIGXCPU):
        return cpu_notice(limits.cpu_seconds)
    if limits.file_size_mb is not None and died_of(signal.SIGXFSZ):
        return file_size_notice(limits.file_size_mb)
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _keyed(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values


def _pids_in(directory: Path) -> list[int]:
    return [int(word) for word in _read(directory / "cgroup.procs").split() if word.isdigit()]


def _write(path: Path, value: str) -> None:
    path.write_text(value)


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


def _remove_directory(directory: Path) -> bool:
    """rmdir a cgroup (retrying while its last members are still exiting)."""
    for attempt in range(50):
        try:
            directory.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.002 * (attempt + 1))
    logger.warning("could not remove cgroup %s", directory)
    return False


# --- units: one execution's confinement ---------------------------------------------------------


class Unit:
    """One execution's confinement: what its child does before exec, how to tell that a limit
    was hit, and how to kill everything it started."""

    backend = "rlimit"

    def __init__(self, execution_id: str, limits: Limits, child: ChildConfinement) -> None:
        self.execution_id = execution_id
        self.limits = limits
        self.child = child
        # The notice of a limit the monitor saw being hit while the command ran.
        self.hit: str | None = None
        self.marker = f"{EXECUTION_MARKER}={execution_id}".encode()

    @property
    def watched(self) -> bool:
        """Whether the monitor has kernel counters to read for it."""
        return False

    def check_running(self) -> str | None:
        """A limit hit now (monitor thread), else None."""
        return None

    def evidence(self, status: ExitStatus, output_tail: str) -> str | None:
        """After the exit: the notice of the limit that ended it, from the backend's evidence."""
        if self.hit:
            return self.hit
        notice = _signal_evidence(self.limits, status)
        if notice:
            return notice
        failed = status.exit_code != 0 or status.signal is not None
        if (
            failed
            and self.limits.memory_mb is not None
            and any(word in output_tail for word in ALLOCATION_FAILURES)
        ):
            return memory_notice(self.limits.memory_mb)
        return None

    def kill_all(self, *, sweep: bool = True) -> int:
        """SIGKILL every process of the execution; how many were signalled. Without a cgroup the
        sweep for the marker is the only way to find them, so `sweep` is always done here."""
        return kill_marked_processes(self.marker)

    def release(self, *, kill: bool = True, sweep: bool = True) -> bool:
        """Kill what is left (unless `kill` is false) and drop the unit; False when processes
        remain (kept daemons), so the unit must be released again later. `sweep` false skips
        the /proc sweep where a cgroup holds the tree (a run that ended by itself)."""
        if kill:
            self.kill_all(sweep=sweep)
        return True


class CgroupUnit(Unit):
    """A cgroup per hierarchy (v1) or one cgroup (v2)."""

    def __init__(
        self,
        execution_id: str,
        limits: Limits,
        child: ChildConfinement,
        directories: dict[str, Path],
        version: int,
    ) -> None:
        super().__init__(execution_id, limits, child)
        self.directories = directories  # controller (or "" for v2) → cgroup directory
        self.version = version
        self.backend = "cgroup2" if version == 2 else "cgroup1"

    @property
    def watched(self) -> bool:
        return True

    def _dir(self, controller: str) -> Path | None:
        if self.version == 2:
            return self.directories.get("")
        return self.directories.get(controller)

    def _memory_killed(self) -> bool:
        directory = self._dir("memory")
        if directory is None:
            return False
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _keyed(_read(directory / name)).get("oom_kill", 0) > 0

    def _process_limit_hit(self) -> bool:
        directory = self._dir("pids")
        if directory is None:
            return False
        return _keyed(_read(directory / "pids.events")).get("max", 0) > 0

    def _cpu_seconds_used(self) -> float | None:
        if self.version == 2:
            directory = self._dir("")
            if directory is None:
                return None
            usage = _keyed(_read(directory / "cpu.stat")).get("usage_usec")
            return None if usage is None else usage / 1e6
        directory = self.directories.get("cpuacct")
        if directory is None:
            return None
        text = _read(directory / "cpuacct.usage").strip()
        return int(text) / 1e9 if text.isdigit() else None

    def check_running(self) -> str | None:
        limits = self.limits
        if limits.memory_mb is not None and self._memory_killed():
            return memory_notice(limits.memory_mb)
        if limits.processes is not None and self._process_limit_hit():
            return process_notice(limits.processes)
        if limits.cpu_seconds is not None:
            used = self._cpu_seconds_used()
            if used is not None and used >= limits.cpu_seconds:
                return cpu_notice(limits.cpu_seconds)
        return None

    def evidence(self, status: ExitStatus, output_tail: str) -> str | None:
        if self.hit:
            return self.hit
        return self.check_running() or _signal_evidence(self.limits, status)

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

    def _freezer(self) -> tuple[Path, str, str, Callable[[], bool]] | None:
        """The freeze file, its frozen and thawed values, and a check that it is frozen."""
        if self.version == 2:
            directory = self.directories[""]

            def frozen2() -> bool:
                return "frozen 1" in _read(directory / "cgroup.events")

            return directory / "cgroup.freeze", "1", "0", frozen2
        freezer = self.directories.get("freezer")
        if freezer is None:
            return None

        def frozen1() -> bool:
            return _read(freezer / "freezer.state").strip() == "FROZEN"

        return freezer / "freezer.state", "FROZEN", "THAWED", frozen1

    def _kill_tree(self) -> int:
        if self.version == 2:
            directory = self.directories[""]
            if (directory / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(directory / "cgroup.kill", "1")
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

    def release(self, *, kill: bool = True, sweep: bool = True) -> bool:
        if kill:
            self.kill_all(sweep=sweep)
        elif self.members():
            return False
        done = True
        for directory in self.directories.values():
            done = _remove_directory(directory) and done
        return done


# --- backends --------------------------------------------------------------------------------


class Backend:
    """Creates units; `rlimit` is the fallback that always works."""

    name = "rlimit"

    def __init__(self, *, root: bool) -> None:
        self.root = root

    def open_unit(self, execution_id: str, limits: Limits) -> Unit:
        rlimits = _child_rlimits(limits, address_space=True, processes=not self.root)
        return Unit(execution_id, limits, ChildConfinement(rlimits=tuple(rlimits)))

    def enforces_processes(self) -> bool:
        return not self.root

    def sweep_leftovers(self) -> int:
        """Kill and remove units an earlier server left; the rlimit backend has none to find
        (recovery sweeps by marker instead)."""
        return 0

    def close(self) -> None:
        """Remove what the backend created at start (once its units are gone)."""


class CgroupBackend(Backend):
    def __init__(self, *, root: bool, bases: dict[str, Path], version: int) -> None:
        super().__init__(root=root)
        self.bases = bases  # controller (or "") → shellgate-<instance> directory
        self.version = version
        self.name = "cgroup2" if version == 2 else "cgroup1"

    def enforces_processes(self) -> bool:
        return True

    def open_unit(self, execution_id: str, limits: Limits) -> Unit:
        directories: dict[str, Path] = {}
        try:
            for controller, base in self.bases.items():
                directory = base / execution_id
                directory.mkdir()
                directories[controller] = directory
            self._apply(directories, limits)
        except OSError:
            for directory in directories.values():
                _remove_directory(directory)
            raise
        rlimits = _child_rlimits(limits, address_space=False, processes=False)
        child = ChildConfinement(
            cgroup_procs=tuple(str(path / "cgroup.procs") for path in directories.values()),
            rlimits=tuple(rlimits),
        )
        return CgroupUnit(execution_id, limits, child, directories, self.version)

    def _apply(self, directories: dict[str, Path], limits: Limits) -> None:
        if self.version == 2:
            directory = directories[""]
            if limits.memory_mb is not None:
                _write(directory / "memory.max", str(limits.memory_mb * MiB))
                with contextlib.suppress(OSError):
                    _write(directory / "memory.swap.max", "0")
            if limits.processes is not None:
                _write(directory / "pids.max", str(limits.processes))
            return
        if limits.memory_mb is not None:
            memory = directories["memory"]
            _write(memory / "memory.limit_in_bytes", str(limits.memory_mb * MiB))
            # With swap accounting, swap counts too (absent without it).
            with contextlib.suppress(OSError):
                _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_mb * MiB))
        if limits.processes is not None:
            _write(directories["pids"] / "pids.max", str(limits.processes))

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
                controller: base / name
                for controller, base in self.bases.items()
                if (base / name).is_dir()
            }
            unit = CgroupUnit(name, Limits(), ChildConfinement(), directories, self.version)
            unit.release(kill=True)
            removed += 1
        return removed


@dataclass
class Choice:
    backend: Backend
    reasons: list[str]  # why each stronger backend was not used


def _cgroup2_base(instance: str, own: dict[str, str]) -> Path:
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
        for pid in _pids_in(own_dir):
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                _write(leaf / "cgroup.procs", str(pid))
    _write(own_dir / "cgroup.subtree_control", "+memory +pids")
    with contextlib.suppress(OSError):
        _write(own_dir / "cgroup.subtree_control", "+cpu")
    base = own_dir / instance
    base.mkdir(exist_ok=True)
    _write(base / "cgroup.subtree_control", "+memory +pids")
    with contextlib.suppress(OSError):
        _write(base / "cgroup.subtree_control", "+cpu")
    probe = base / "probe"
    probe.mkdir(exist_ok=True)
    try:
        if not (probe / "pids.max").exists() or not (probe / "memory.max").exists():
            raise OSError("memory and pids controllers could not be enabled for child cgroups")
    finally:
        _remove_directory(probe)
    return base


def _cgroup1_bases(instance: str, own: dict[str, str]) -> dict[str, Path]:
    bases: dict[str, Path] = {}
    for controller in ("pids", "memory", "freezer", "cpuacct"):
        mount = CGROUP_ROOT / controller
        if controller not in own or not (mount / "cgroup.procs").exists():
            if controller == "cpuacct":
                continue  # optional: RLIMIT_CPU still limits each process
            raise OSError(f"no cgroup-v1 {controller} hierarchy mounted at {mount}")
        base = mount / own[controller].lstrip("/") / instance
        try:
            base.mkdir(exist_ok=True)
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


def choose_backend(data_dir: Path, wanted: str = "auto") -> Choice:
    """The strongest backend this host gives (or `wanted`; OSError when it is not available)."""
    root = os.geteuid() == 0
    instance = instance_name(data_dir)
    reasons: list[str] = []
    try:
        own = own_cgroups()
    except OSError as error:
        own = {}
        reasons.append(f"cannot read /proc/self/cgroup: {error}")
    for name in BACKENDS:
        if wanted not in ("auto", name):
            continue
        if name == "rlimit":
            return Choice(Backend(root=root), reasons)
        try:
            if name == "cgroup2":
                backend: Backend = CgroupBackend(
                    root=root, bases={"": _cgroup2_base(instance, own)}, version=2
                )
            else:
                backend = CgroupBackend(root=root, bases=_cgroup1_bases(instance, own), version=1)
        except OSError as error:
            reason = f"{name}: {error.strerror or error}" if error.strerror else f"{name}: {error}"
            if wanted == name:
                raise OSError(f"confinement {reason}") from error
            reasons.append(reason)
            continue
        return Choice(backend, reasons)
    raise OSError(f"unknown confinement backend {wanted!r}")


# --- the monitor -----------------------------------------------------------------------------


class Monitor:
    """One thread reading the kernel counters of every running confined execution; a hit
    kills the whole unit at once (a limit ends the run) and reports the notice."""

    def __init__(self) -> None:
        self._units: dict[str, Unit] = {}
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, unit: Unit) -> None:
        if not unit.watched:
            return
        with self._lock:
            self._units[unit.execution_id] = unit
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="confinement-monitor", daemon=True
                )
                self._thread.start()
            self._lock.notify()

    def forget(self, unit: Unit) -> None:
        with self._lock:
            self._units.pop(unit.execution_id, None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                # Idle (nothing confined runs) until a unit arrives.
                while not self._units and not self._stopped:
                    self._lock.wait()
                if self._stopped:
                    return
                watched = list(self._units.values())
            for unit in watched:
                if unit.hit is not None:
                    continue
                try:
                    notice = unit.check_running()
                except Exception:  # a vanished file must not end the monitor
                    logger.exception("reading the limits of %s failed", unit.execution_id)
                    continue
                if notice is not None:
                    unit.hit = notice
                    logger.info("%s: %s; killing its processes", unit.execution_id, notice)
                    unit.kill_all()  # the run ends: its pump sees the exit
            with self._lock:
                if not self._stopped:
                    self._lock.wait(MONITOR_PERIOD)


# --- what the server holds ---------------------------------------------------------------------


class Confinement:
    """The chosen backend, the server's limits (the ceiling of every request) and the monitor."""

    def __init__(self, backend: Backend, ceiling: Limits) -> None:
        self.backend = backend
        self.ceiling = ceiling
        self.monitor = Monitor()

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

    def close_unit(self, unit: Unit, *, kill: bool, sweep: bool = True) -> bool:
        """End the unit (killing what is left unless `kill` is false); False when kept
        processes still run in it."""
        self.monitor.forget(unit)
        return unit.release(kill=kill, sweep=sweep)

    def close(self) -> None:
        """At server stop: the monitor ends and this server's (empty) cgroup folders go."""
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
) -> Confinement:
    """Choose the backend (logging why stronger ones were unavailable), remove what an earlier
    server of this data directory left, and fix the server's limits (0 = none)."""
    choice = choose_backend(data_dir, wanted)
    for reason in choice.reasons:
        logger.warning("confinement backend unavailable: %s", reason)
    backend = choice.backend
    if memory_mb is None:
        # Half the host by default where a cgroup enforces it; under rlimit, whose address-space
        # limit breaks runtimes that reserve large ranges (V8, the JVM), only when asked for.
        memory_mb = host_memory_mb() // 2 if isinstance(backend, CgroupBackend) else 0
    ceiling = Limits(
        memory_mb=memory_mb or None,
        processes=processes or None,
        cpu_seconds=cpu_seconds or None,
        file_size_mb=file_size_mb or None,
        open_files=open_files or None,
    )
    removed = backend.sweep_leftovers()
    if removed:
        logger.warning(
            "removed %d cgroups an earlier server left (their processes killed)", removed
        )
    logger.info("confinement: %s, limits %s", backend.name, ceiling.as_dict())
    if ceiling.processes is not None and not backend.enforces_processes():
        logger.warning(
            "the process limit is not enforced: the rlimit backend of a root server has none "
            "(root ignores RLIMIT_NPROC); give the server a delegated cgroup"
        )
    return Confinement(backend, ceiling)
