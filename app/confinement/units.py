"""What every backend shares, which is also the `rlimit` backend: `setrlimit` in the child only,
and a sweep of `/proc` for the execution's marker variable to kill its tree."""

from __future__ import annotations

import re
import resource
import signal
from collections.abc import Callable

from app.confinement.limits import Limits, MiB, cpu_notice, file_size_notice, memory_notice
from app.process import ChildConfinement, ExitStatus, kill_marked_processes, marked_processes
from app.process.descriptor_limit import inherited_soft_limit
from app.process.environment import EXECUTION_MARKER

# What a command may have used of its CPU limit outside its cgroup: its process began as a
# standby shell, whose first steps ran before it joined (milliseconds).
CPU_MARGIN = 0.1
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


def _commands_open_files_soft() -> int | None:
    """A lower soft limit stays (e.g. 1024 descriptors, which select()-based programs need):
    the one the server was started with, not the one it raised for its own descriptors
    (app/process/descriptor_limit.py). None: unlimited."""
    inherited = inherited_soft_limit()
    return None if inherited == resource.RLIM_INFINITY else inherited


def child_rlimits(
    limits: Limits, *, address_space: bool, processes: bool
) -> list[tuple[int, int, int]]:
    """setrlimit triples for the child. Only ever lowers: a hard limit already below ours
    stays."""
    wanted: list[tuple[int, int, int]] = []

    def lower(number: int, soft: int, hard: int | None = None) -> None:
        current_hard = resource.getrlimit(number)[1]
        hard = soft if hard is None else hard
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
        soft = min(soft, hard)
        inherited = _commands_open_files_soft()
        if number == resource.RLIMIT_NOFILE and inherited is not None:
            soft = min(soft, inherited)
        wanted.append((number, soft, hard))

    if limits.file_size_mb is not None:
        lower(resource.RLIMIT_FSIZE, limits.file_size_mb * MiB)
    if limits.cpu_seconds is not None:
        lower(resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + CPU_HARD_MARGIN)
    if limits.open_files is not None:
        lower(resource.RLIMIT_NOFILE, limits.open_files)
    else:
        # No limit of its own: the command still starts with the soft limit the server was
        # given, not the one it raised for itself.
        inherited = _commands_open_files_soft()
        current_soft, current_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if inherited is not None and current_soft != inherited:
            wanted.append((resource.RLIMIT_NOFILE, inherited, current_hard))
    if address_space and limits.memory_mb is not None:
        lower(resource.RLIMIT_AS, limits.memory_mb * MiB)
    if processes and limits.processes is not None:
        lower(resource.RLIMIT_NPROC, limits.processes)
    return wanted


def signal_evidence(
    limits: Limits, status: ExitStatus, *, cpu_seconds_used: float | None = None
) -> str | None:
    """SIGXCPU / SIGXFSZ killed the command, as the kernel reported its end.

    An exit status of 128 + N is a death by N only where it is a wrapper's report of the end
    (`status.passed_on`: a sandboxed command whose own status could not be read). Anywhere
    else it is what the command exited with: bash execs a lone command, whose death by a
    signal is then the status itself, and reports the death of any other (`line 1: 4242 File
    size limit exceeded`, read by `reported_evidence`) before it exits 128 + N; an `exit 153`
    is neither.

    `cpu_seconds_used`: the execution's CPU time, where the backend reads it from the kernel.
    A 152 passed on from a run that used less than its limit is then not the limit's either:
    no process can reach the limit alone with less."""

    def died_of(sig: int) -> bool:
        return status.signal == sig or (status.passed_on and status.exit_code == 128 + sig)

    cpu_seconds = limits.cpu_seconds
    if cpu_seconds is not None and died_of(signal.SIGXCPU):
        could_reach = cpu_seconds_used is None or cpu_seconds_used >= cpu_seconds - CPU_MARGIN
        if status.signal == signal.SIGXCPU or could_reach:
            return cpu_notice(cpu_seconds)
    if limits.file_size_mb is not None and died_of(signal.SIGXFSZ):
        return file_size_notice(limits.file_size_mb)
    return None


# bash's report of a command it ran that died of SIGXCPU / SIGXFSZ (`line 1: 4242 File size
# limit exceeded (core dumped) head …`): the script went on, but the run hit its limit.
REPORTED_LIMIT = re.compile(r": line \d+: +\d+ (CPU time|File size) limit exceeded")


def reported_evidence(limits: Limits, output_tail: Callable[[], str]) -> str | None:
    """A CPU time or file size limit that killed one command of the script, not its last."""
    if limits.cpu_seconds is None and limits.file_size_mb is None:
        return None  # the output is not even looked at
    for match in REPORTED_LIMIT.finditer(output_tail()):
        if match.group(1) == "CPU time" and limits.cpu_seconds is not None:
            return cpu_notice(limits.cpu_seconds)
        if match.group(1) == "File size" and limits.file_size_mb is not None:
            return file_size_notice(limits.file_size_mb)
    return None


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
        # The session whose call it ran, if any: daemons it keeps end with that session.
        self.session_id: str | None = None
        self.marker = f"{EXECUTION_MARKER}={execution_id}".encode()

    @property
    def watched(self) -> bool:
        """Whether the monitor has kernel counters to read for it."""
        return False

    def check_running(self) -> str | None:
        """A limit hit now (monitor thread), else None."""
        return None

    def evidence(self, status: ExitStatus, output_tail: Callable[[], str]) -> str | None:
        """After the exit: the notice of the limit that ended it, from the backend's evidence.
        `output_tail` gives the end of the run's output; asked only when it can decide (it
        builds the inline window, which most runs need not pay for twice)."""
        if self.hit:
            return self.hit
        notice = signal_evidence(self.limits, status) or reported_evidence(self.limits, output_tail)
        if notice:
            return notice
        failed = status.exit_code != 0 or status.signal is not None
        if (
            failed
            and self.limits.memory_mb is not None
            and any(word in output_tail() for word in ALLOCATION_FAILURES)
        ):
            return memory_notice(self.limits.memory_mb)
        return None

    def kill_all(self, *, sweep: bool = True) -> int:
        """SIGKILL every process of the execution; how many were signalled. Without a cgroup the
        sweep for the marker is the only way to find them, so `sweep` is always done here."""
        return kill_marked_processes(self.marker)

    def release(self, *, kill: bool = True, sweep: bool = True, ending: bool = False) -> bool:
        """Kill what is left (unless `kill` is false) and drop the unit; False when processes
        remain (kept daemons), so the unit must be released again later. `sweep` false skips
        the /proc sweep where a cgroup holds the tree (a run that ended by itself). `ending`:
        the kernel is already ending what is left (a sandbox's PID namespace, whose monitor
        exited): a backend that can see its members waits for them before it kills; here the
        sweep kills them as ever."""
        if kill:
            self.kill_all(sweep=sweep)
        elif marked_processes(self.marker):
            # Kept daemons: the unit stays, so their session's end or the server's stop finds
            # them (one sweep, what every run's end does anyway without `keep_daemons`).
            return False
        return True


class Backend:
    """Creates units; `rlimit` is the fallback that always works."""

    name = "rlimit"

    def __init__(self, *, root: bool) -> None:
        self.root = root

    def open_unit(self, execution_id: str, limits: Limits) -> Unit:
        return Unit(execution_id, limits, ChildConfinement(rlimits=tuple(self.rlimits(limits))))

    def rlimits(self, limits: Limits) -> list[tuple[int, int, int]]:
        """The rlimits a command's child sets itself under `limits`: here all of them, the
        address space standing in for memory."""
        return child_rlimits(limits, address_space=True, processes=not self.root)

    def adopt(self, unit: Unit, execution_id: str) -> Unit:
        """A standby's unit (app/confinement/standby.py) becomes `execution_id`'s: without a
        cgroup there is nothing to rename, and its kill sweeps the execution's marker."""
        return Unit(execution_id, unit.limits, unit.child)

    def enforces_processes(self) -> bool:
        return not self.root

    def sweep_leftovers(self) -> int:
        """Kill and remove units an earlier server left; the rlimit backend has none to find
        (recovery sweeps by marker instead)."""
        return 0

    def close(self) -> None:
        """Remove what the backend created at start (once its units are gone)."""
