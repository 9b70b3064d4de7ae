"""Where UTF-8 characters begin: cutting bytes without splitting a character (pure)."""

from __future__ import annotations

# The most continuation bytes a character has.
MAX_CONTINUATION = 3


def is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def floor_boundary(data: bytes, index: int, *, lowest: int = 0) -> int:
    """The nearest character boundary at or before `index` (< len(data)), not below `lowest`."""
    while index > lowest and is_continuation(data[index]):
        index -= 1
    return index


def ceil_boundary(data: bytes, index: int) -> int:
    """The nearest character boundary at or after `index`."""
    while index < len(data) and is_continuation(data[index]):
        index += 1
    return index


def incomplete_tail(data: bytes) -> int:
    """How many trailing bytes start a character that the next chunk should finish."""
    for back in range(1, min(MAX_CONTINUATION, len(data)) + 1):
        byte = data[-back]
        if is_continuation(byte):
            continue  # look further back for the lead
        if byte & 0xE0 == 0xC0:
            needed = 2
        elif byte & 0xF0 == 0xE0:
            needed = 3
        elif byte & 0xF8 == 0xF0:
            needed = 4
        else:
            return 0
        return back if needed > back else 0
    return 0
