"""The server's own open-files limit: raised to its hard limit at the start, never passed on.

A service manager commonly starts a process with a soft `RLIMIT_NOFILE` of 1024 and a hard one
far above (systemd: 1024:524288). Shellgate holds descriptors per execution (pipes, log, pidfd,
its proxy's connections: app/sandbox/egress.py), per WebSocket viewer and per database
connection: at a soft limit of 256, five sandboxed jobs holding their proxy connections left
the server none, and every spawn and log read failed (docs/operations.md#open-files). So
`shellgate serve` raises its soft limit to the hard one, as a program that needs many
descriptors should, and keeps the one it was given for its commands: a soft limit above 1024
breaks programs that still use `select()`, and a command that wants more raises its own
(`ulimit -n`, up to the hard limit: app/confinement/units.py).
"""

from __future__ import annotations

import logging
import resource

logger = logging.getLogger("shellgate.process")

# Above this the soft limit is not raised further: every descriptor a command may close at its
# start (a `close_range` fallback loop, an old daemon) costs a call per number.
SOFT_LIMIT_CEILING = 1 << 20

_inherited: int | None = None


def raise_soft_limit() -> None:
    """Raise this process's soft open-files limit to its hard one (at most SOFT_LIMIT_CEILING)
    and remember the soft limit it was started with. Call once, before threads start; a later
    call changes nothing it remembered."""
    global _inherited
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _inherited is None:
        _inherited = soft
    wanted = SOFT_LIMIT_CEILING if hard == resource.RLIM_INFINITY else min(hard, SOFT_LIMIT_CEILING)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError) as error:
        logger.warning("could not raise the open-files limit from %d: %s", soft, error)
        return
    logger.info("open-files limit raised from %d to %d (hard %d)", soft, wanted, hard)


def inherited_soft_limit() -> int:
    """The soft open-files limit this process was started with (the current one when
    `raise_soft_limit` never ran): what a command gets at most, unless it raises it itself."""
    if _inherited is not None:
        return _inherited
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def current_soft_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return SOFT_LIMIT_CEILING if soft == resource.RLIM_INFINITY else soft
