"""A short helper program run to its end for what it says (a probe at start), never a
command of a caller's."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class ShortRun:
    exit_code: int | None  # None: it could not be started, or did not end in time
    output: str  # stdout and stderr, merged; or why it could not run


def run_briefly(
    argv: list[str], *, cwd: str = "/", timeout: float = 10, pass_fds: tuple[int, ...] = ()
) -> ShortRun:
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            pass_fds=pass_fds,
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ShortRun(None, f"no answer within {timeout:g} s")
    except OSError as error:
        return ShortRun(None, error.strerror or str(error))
    return ShortRun(done.returncode, done.stdout.decode("utf-8", "replace").strip())
