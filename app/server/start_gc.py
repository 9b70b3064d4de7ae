"""No full collection while `shellgate serve` starts (bench/PROFILE.md, "Start-up: no full
collection before listening").

The start loads what lives as long as the process: the framework, SQLAlchemy, the policy
engine, the app (over 110,000 objects the collector tracks). Each full collection during it
walked all of them again, ≈ 0.07 s of CPU in two passes, half of what the collector cost the
start, and the migration child inherited the habit. The young generations keep being
collected, so what the start makes and drops is still freed (a full collection at the end finds
nothing left). Once the server listens it freezes what it loaded (app/server/serving.py) and
full collections resume, walking only what the work makes. Imports nothing but `gc`: the entry
point calls it before anything heavy is loaded.
"""

from __future__ import annotations

import gc

# More collections of the middle generation than a start makes (it makes ≈ 20).
NEVER = 1 << 30

_deferred: tuple[int, int, int] | None = None


def defer_full_collections() -> None:
    global _deferred
    if _deferred is None:
        _deferred = gc.get_threshold()
        gc.set_threshold(_deferred[0], _deferred[1], NEVER)


def resume_full_collections() -> None:
    """The thresholds `defer_full_collections` found; nothing if it was not called."""
    global _deferred
    if _deferred is not None:
        gc.set_threshold(*_deferred)
        _deferred = None
