"""Timestamps as the database hands them back, made timezone-aware.

Every timestamp is written in UTC; SQLite returns it naive, PostgreSQL aware. The wire and any
arithmetic want aware values, so every read goes through `aware_utc`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


@overload
def aware_utc(value: datetime) -> datetime: ...
@overload
def aware_utc(value: None) -> None: ...
def aware_utc(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value
