"""Commands start with the default handling of every signal, whatever the server inherited.

A server started in the background by a non-interactive shell (`shellgate serve &` in a script,
a CI step) inherits SIGINT and SIGQUIT ignored, and under `nohup` SIGHUP too; ignored signals
survive fork and exec, and bash cannot undo it ("signals ignored upon entry cannot be trapped or
reset"), so `sleep` would shrug off the INT of a signal frame or a Ctrl-C. Commands therefore
go through `env --default-signal` (coreutils 8.31+) when the server has any of them ignored;
the shell started ahead always does (app/process/standby.sh). The PTY child resets them itself
(confine_hooks.py)."""

from __future__ import annotations

import functools
import signal
import subprocess

ENV_PROGRAM = "/usr/bin/env"
# What a launcher commonly leaves ignored: `&` without job control (INT, QUIT), nohup (HUP).
INHERITED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)
# What a wrapper that passes signals on to its command (bubblewrap, app/sandbox/bwrap.py) must
# survive, so that the command alone decides what a signal sent to the group does: set to
# ignored before its exec (the disposition survives it), reset for the command behind it
# (`env --default-signal`). SIGCHLD is not among them (the wrapper waits for its child).
WRAPPER_IGNORED = (
    "HUP",
    "INT",
    "QUIT",
    "TERM",
    "USR1",
    "USR2",
    "ALRM",
    "PIPE",
    "VTALRM",
    "PROF",
    "XCPU",
    "XFSZ",
)


@functools.cache
def env_resets_signals() -> bool:
    """Whether this host's `env` has `--default-signal` (once per process)."""
    try:
        probe = subprocess.run(
            [ENV_PROGRAM, "--default-signal=INT", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def ignored_here() -> list[signal.Signals]:
    """The signals of INHERITED this process ignores now."""
    return [number for number in INHERITED if signal.getsignal(number) == signal.SIG_IGN]


def reset_prefix() -> list[str]:
    """What to put before a command's argv so it starts with those signals at their default:
    nothing when none is ignored (the common case) or when `env` cannot."""
    ignored = ignored_here()
    if not ignored or not env_resets_signals():
        return []
    names = ",".join(number.name.removeprefix("SIG") for number in ignored)
    return [ENV_PROGRAM, f"--default-signal={names}", "--"]
