"""The child side of confinement: what runs between fork and exec (cgroup entry, rlimits,
default signals), or the environment that has bash apply it from `app/process/confine.sh`."""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Callable
from pathlib import Path

from app.process.signal_defaults import INHERITED
from app.process.spec import ChildConfinement, SpawnSpec


def _restore_default_signals() -> None:
    """Runs in the PTY child before exec: Python ignores SIGPIPE and SIGXFSZ, ignored signals
    survive exec, and ptyprocess (unlike subprocess) does not restore them, so `yes | head`
    would complain of a broken pipe instead of ending quietly. The server may also have
    inherited INT, QUIT or HUP ignored from its launcher (app/process/signal_defaults.py): a
    Ctrl-C must still interrupt."""
    for number in (signal.SIGPIPE, signal.SIGXFSZ, *INHERITED):
        signal.signal(number, signal.SIG_DFL)


def _enter_confinement(confinement: ChildConfinement) -> None:
    """Runs in the child before exec, so only async-signal-tolerant calls: raw writes of `0`
    (\"the writing process\") to each cgroup's `cgroup.procs`, then setrlimit. Any failure
    aborts the spawn: a command never runs unconfined by accident."""
    for path in confinement.cgroup_procs:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    for number, soft, hard in confinement.rlimits:
        resource.setrlimit(number, (soft, hard))


# Bash runs this file (BASH_ENV) before the command: the confinement without a preexec
# function, which would force a full fork of the server (about 20 ms more per spawn than vfork).
BASH_CONFINE_SCRIPT = Path(__file__).parent / "confine.sh"
# setrlimit resource → bash `ulimit` flag and the unit of its value in bytes (or 1).
_ULIMIT_FLAGS = {
    resource.RLIMIT_FSIZE: ("-f", 1024),
    resource.RLIMIT_CPU: ("-t", 1),
    resource.RLIMIT_NOFILE: ("-n", 1),
    resource.RLIMIT_AS: ("-v", 1024),
    resource.RLIMIT_NPROC: ("-u", 1),
}


def _bash_confinement_env(spec: SpawnSpec) -> dict[str, str] | None:
    """The environment that makes bash confine itself before the command (see
    confine.sh), or None when this spawn cannot use it (another shell, a PTY, a limit bash
    cannot set, a BASH_ENV of the caller's)."""
    confinement = spec.confinement
    if confinement is None or spec.pty or os.path.basename(spec.argv[0]) != "bash":
        return None
    if not BASH_CONFINE_SCRIPT.is_file():
        return None
    if "BASH_ENV" in spec.env:
        # The caller's own BASH_ENV (the policy's env rules let it through): bash must read
        # exactly that, so this spawn confines itself between fork and exec instead.
        return None
    steps = ulimit_steps(confinement.rlimits)
    if steps is None:
        return None
    return {
        "BASH_ENV": str(BASH_CONFINE_SCRIPT),
        "__SHELLGATE_CGROUPS": "\n".join(confinement.cgroup_procs),
        "__SHELLGATE_ULIMITS": steps,
    }


def ulimit_steps(rlimits: tuple[tuple[int, int, int], ...]) -> str | None:
    """The setrlimit triples as one bash command list (`:` for none), or None when one of
    them has no `ulimit` flag."""
    steps = []
    for number, soft, hard in rlimits:
        if number not in _ULIMIT_FLAGS:
            return None
        flag, unit = _ULIMIT_FLAGS[number]

        def value(limit: int, unit: int = unit) -> str:
            return "unlimited" if limit == resource.RLIM_INFINITY else str(limit // unit)

        # Soft first: a hard limit below the current soft one would be refused.
        steps.append(f"builtin ulimit -S {flag} {value(soft)}")
        steps.append(f"builtin ulimit -H {flag} {value(hard)}")
    return " && ".join(steps) or ":"


def _child_setup(spec: SpawnSpec, pty: bool) -> Callable[[], None] | None:
    """What runs in the child between fork and exec; None when nothing must (a pipe spawn
    then lowers its priority by its argv: `nice_prefix`)."""
    confinement = spec.confinement
    confined = confinement is not None and bool(confinement.cgroup_procs or confinement.rlimits)
    if not confined and not pty:
        # Without a preexec function subprocess can vfork: much cheaper in a large process.
        return None

    def setup() -> None:
        if pty:
            _restore_default_signals()
            if spec.nice > 0:  # before exec: nothing it starts can run at the server's
                os.nice(spec.nice)
            # ptyprocess keeps `pass_fds` open through the fork but, unlike `Popen`, leaves
            # them close-on-exec.
            for fd in spec.pass_fds:
                os.set_inheritable(fd, True)
        if confined:
            assert confinement is not None
            _enter_confinement(confinement)

    return setup
