"""`*`-only globs, matched in linear time: the one matcher behind policy rules and env rules.

An admin writes these; a backtracking regex built from one could stall the server, so a glob is
a prefix, a suffix and the middles found left to right by substring search.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

Matcher = Callable[[str], bool]


@functools.lru_cache(maxsize=1024)
def compile_glob(pattern: str) -> Matcher:
    """A `*`-only glob as a substring-search predicate: linear time, no regex backtracking.

    The common shapes (`git status`, `git *`, `*.sh`) become a single `str` method call.
    """
    parts = pattern.split("*")
    if len(parts) == 1:
        return parts[0].__eq__
    prefix, middles, suffix = parts[0], tuple(parts[1:-1]), parts[-1]
    if not middles and not suffix:
        return lambda text: text.startswith(prefix)
    if not middles and not prefix:
        return lambda text: text.endswith(suffix)
    minimum = len(prefix) + len(suffix) + sum(len(middle) for middle in middles)

    def matches(text: str) -> bool:
        if len(text) < minimum or not text.startswith(prefix) or not text.endswith(suffix):
            return False
        position, end = len(prefix), len(text) - len(suffix)
        for middle in middles:
            found = text.find(middle, position, end)
            if found < 0:
                return False
            position = found + len(middle)
        return True

    return matches
