"""What one reading of a command finds besides its segments, and what stops it.

The result (`CommandReading`), the errors that end a reading, the reader's limits, and the
per-reading notes (why some text is unreadable, which limits were reached, the aliases the
command defines), kept in context variables so that concurrent readings never share them.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass


class UnparseableCommandError(ValueError):
    """The command's structure could not be determined, so its segment list cannot be trusted."""


class LimitError(UnparseableCommandError):
    """A limit of the reader (size, count, wrapper variants) was reached: what lies beyond it
    was not read, so the command is unreadable."""


class TooDeepError(LimitError):
    """Nesting beyond `MAX_DEPTH`."""


@dataclass(frozen=True, slots=True)
class CommandReading:
    """What the policy reader found in one command.

    `segments`: every simple command bash would run, for deny/prompt matching.
    `unreadable`: why some of it cannot be judged statically (a command name built by
    expansion, code in a string bash runs later, a limit of the reader…); empty when all of it
    was read. `parse_error`: set when the text's structure could not be read at all; the
    segments are then a best-effort split.
    """

    segments: tuple[str, ...]
    unreadable: tuple[str, ...] = ()
    parse_error: str | None = None
    limit_reached: str | None = None


# Reasons found while reading the current command (a context variable, so concurrent readers
# on worker threads never share a list).
REASONS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "shell_syntax_unreadable_reasons", default=None
)


# Limits reached while reading the current command: the reading keeps what it found (so deny
# rules still see it) and is marked as never allowable.
LIMITS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "shell_syntax_limits", default=None
)


# Aliases the current command defines (name → value as written): bash pastes a value in front
# of the words that follow the name where it is used, so `alias t='rm -rf'` then `t /x` runs
# `rm -rf /x`, a text no single segment holds. `_read` reads each use again, expanded.
ALIASES: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "shell_syntax_aliases", default=None
)


def note_limit(why: str) -> bool:
    """Record a reached limit; False when no reading collects limits (the caller raises)."""
    limits = LIMITS.get()
    if limits is None:
        return False
    if why not in limits:
        limits.append(why)
    return True


def note_unreadable(why: str) -> None:
    reasons = REASONS.get()
    if reasons is not None and why not in reasons:
        reasons.append(why)


# Limits of the reader. Reaching one makes the command unreadable (never allowed unread).
# Past this depth of nested substitutions / `bash -c` scripts the text is not read further.
MAX_DEPTH = 16
# tree-sitter reads ~5 MB/s; bigger commands are not read at all.
MAX_SCRIPT_CHARS = 1_000_000
MAX_COMMANDS = 20_000
# Unwrapping makes one variant per wrapper layer (`sudo env A=1 timeout 5 nice rm …`): the
# work per segment is capped at this many variants plus a few per word, and the text of all
# variants of one command at `MAX_VARIANT_CHARS`.
MAX_VARIANTS = 64
MAX_VARIANT_CHARS = 2_000_000
# What `((` scans may read beyond four passes over the text (see `Lexer.arithmetic_budget`).
ARITHMETIC_SCAN_SLACK = 65_536
