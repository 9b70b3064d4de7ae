"""Timeout resolution and clamping (docs/api.md#request-fields)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_TIMEOUT = 300.0
MIN_TIMEOUT = 1.0
MAX_TIMEOUT = 3600.0


@dataclass(frozen=True)
class ResolvedTimeout:
    seconds: float | None  # None = no deadline
    requested: float
    notices: list[str] = field(default_factory=list)

    @property
    def disabled(self) -> bool:
        return self.seconds is None

    @property
    def clamped(self) -> bool:
        return self.seconds is not None and self.seconds != self.requested


def format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def resolve_timeout(requested: float, *, global_max: float = 0) -> ResolvedTimeout:
    if requested == 0:
        if global_max <= 0:
            return ResolvedTimeout(seconds=None, requested=0)
        # Under a server ceiling `0` ("no deadline") gets the ceiling: it is a limit.
        capped = global_max
    else:
        capped = min(requested, global_max) if global_max > 0 else requested
    effective = max(MIN_TIMEOUT, min(MAX_TIMEOUT, capped))
    notices = []
    if effective != requested:
        # The range wording is used for every clamp, the server ceiling included
        # (docs/api.md#request-fields).
        shown, asked = format_seconds(effective), format_seconds(requested)
        notices.append(f"Timeout clamped to {shown}s (requested {asked}s; allowed range 1-3600s).")
    return ResolvedTimeout(seconds=effective, requested=requested, notices=notices)
