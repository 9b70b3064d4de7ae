"""What a spawn is given and what it reports: the spec, the child's confinement, the output
streams and the exit status."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class OutputStream(StrEnum):
    """Where a chunk of output came from: a pipe, or the terminal that merges both."""

    stdout = "stdout"
    stderr = "stderr"
    pty = "pty"


OutputCallback = Callable[[bytes, OutputStream], None]


class OutputCut(StrEnum):
    """Why reading stopped before EOF after the command exited (see the module docstring)."""

    background = "background"  # processes of its group, left running, hold the output open
    escaped = "escaped"  # no process of its group is left; one outside it holds the output


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None
    signal: int | None
    output_cut: OutputCut | None = None
    # The exit code is a wrapper's report of the command's end, not the command's own: bwrap
    # passes a death by signal N on as 128 + N, and the server could not read the command's
    # own status (app/process/exit_witness.py: before Linux 6.15). Such a 128 + N may be a
    # death by N; any other exit status is what the command (bash) exited with.
    passed_on: bool = False


@dataclass(frozen=True)
class ChildConfinement:
    """What the child does to itself between fork and exec (app/confinement.py decides it):
    join its cgroups (before it can fork anything that would stay outside) and lower its
    resource limits."""

    cgroup_procs: tuple[str, ...] = ()
    rlimits: tuple[tuple[int, int, int], ...] = ()  # (resource, soft, hard)


@dataclass(frozen=True)
class SpawnSpec:
    argv: list[str]
    cwd: str
    env: dict[str, str]
    pty: bool = False
    rows: int = 40
    cols: int = 120
    confinement: ChildConfinement | None = None
    nice: int = 0  # levels below the server (app/process/priority.py)
    # Exec'd by a standby: its memory files stay open in the command (app/process/standby.py).
    keep_memory_files: bool = False
    # Descriptors the spawned process keeps at their numbers (a witness channel's writing end,
    # app/process/exit_witness.py); the server closes its own copies after the spawn.
    pass_fds: tuple[int, ...] = ()
    # The process is bwrap (directly, or behind a standby's first stage) and the command runs
    # in its sandbox: its exit status is bwrap's report unless a witness reads the command's.
    sandboxed: bool = False
