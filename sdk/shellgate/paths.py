"""Ids in request paths."""

from __future__ import annotations

import urllib.parse


def segment(value: str) -> str:
    """An id as one path segment: `?`, `/`, `#`, `%` and the rest escaped, so that an odd id
    reaches the server whole (its 404 then names it) instead of cutting the path short."""
    return urllib.parse.quote(value, safe="")
