"""Per-execution resource limits: the values, how a request resolves within the server's,
and the notices that say which limit ended a run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from app.core.errors import InvalidRequestError

MiB = 1024 * 1024


def memory_notice(mb: int) -> str:
    return f"Memory limit of {mb} MB reached"


def process_notice(count: int) -> str:
    return f"Process limit of {count} reached"


def total_memory_notice(mb: int) -> str:
    return f"Memory limit of {mb} MB for all commands together reached"


def total_process_notice(count: int) -> str:
    return f"Process limit of {count} for all commands together reached"


# The kernel ended the run at a limit that is not the server's to name: the host's memory, or a
# limit of the server's own cgroup or of one above it.
OUT_OF_MEMORY_NOTICE = (
    "Killed by the kernel's out-of-memory killer: memory ran out beyond this server's limits "
    "(the host's, or its own cgroup's)"
)
FORK_REFUSED_NOTICE = (
    "A new process was refused by a limit beyond this server's (the host's, or its own cgroup's)"
)


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
