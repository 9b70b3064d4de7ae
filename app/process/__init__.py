"""Spawning commands and signalling their process groups: the only package that touches file
descriptors, ptyprocess and signals.

`spec` holds what a spawn is given and reports, `running` the spawned process and the event
loop callbacks that read its output and see its exit, `groups` the process groups and `/proc`,
`confine_hooks` what runs in the child before exec (and the environment for
`app/process/confine.sh`), `standby` a shell started ahead of its command
(`app/process/standby.sh`)."""

from __future__ import annotations

from app.process.confine_hooks import BASH_CONFINE_SCRIPT, ulimit_steps
from app.process.groups import (
    boot_id,
    group_exists,
    group_members,
    kill_marked_processes,
    kill_processes,
    marked_processes,
    process_environ_has,
    process_start_ticks,
    signal_group,
)
from app.process.running import RunningProcess, bytes_buffered, select_one
from app.process.spec import (
    ChildConfinement,
    ExitStatus,
    OutputCallback,
    OutputCut,
    OutputStream,
    SpawnSpec,
)
from app.process.standby import StandbyGone, StandbyShell

__all__ = [
    "BASH_CONFINE_SCRIPT",
    "ChildConfinement",
    "ExitStatus",
    "OutputCallback",
    "OutputCut",
    "OutputStream",
    "RunningProcess",
    "SpawnSpec",
    "StandbyGone",
    "StandbyShell",
    "boot_id",
    "bytes_buffered",
    "group_exists",
    "group_members",
    "kill_marked_processes",
    "kill_processes",
    "marked_processes",
    "process_environ_has",
    "process_start_ticks",
    "select_one",
    "signal_group",
    "ulimit_steps",
]
