"""The leading `cd <dir> && rest` rewrite (docs/api.md#processing-order).

A routing helper, not a security check: it gives up rather than guess."""

from __future__ import annotations

from dataclasses import dataclass

from app.policy.shell.scanner import read_double_quoted, single_quote_end, skip_blanks


@dataclass(frozen=True, slots=True)
class LeadingCd:
    """A leading `cd <target> && rest` (or `; rest`) split off a command."""

    target: str
    rest: str


_CD_TOKEN_END = frozenset(" \t\n\r&|;<>()")


def extract_leading_cd(command: str) -> LeadingCd | None:
    """Split `cd <one token> && rest` / `cd <one token>; rest`, or return None.

    Anything that would need the shell to interpret the path (expansion, a second argument, a
    redirect, an open quote, a line continuation) leaves the command alone, because a wrong
    rewrite silently changes where a command runs.
    """
    if not command.startswith("cd") or len(command) < 3 or command[2] not in " \t":
        return None
    if "\\\n" in command:
        return None
    token = _read_target(command, skip_blanks(command, 2))
    if token is None:
        return None
    target, i = token
    if not target or any(ch in target for ch in "$`("):
        return None
    after = _after_separator(command, skip_blanks(command, i))
    if after is None:
        return None
    rest = command[after:].lstrip(" \t\r\n")
    if not rest:
        return None
    return LeadingCd(target=target, rest=rest)


def _read_target(command: str, i: int) -> tuple[str, int] | None:
    """The one word after `cd` with its quotes removed and the index after it, or None when a
    quote is never closed or a backslash ends the text."""
    n = len(command)
    token: list[str] = []
    while i < n and command[i] not in _CD_TOKEN_END:
        c = command[i]
        if c == "'":
            end = single_quote_end(command, i)
            if end < 0:
                return None
            token.append(command[i + 1 : end - 1])
        elif c == '"':
            text, end = read_double_quoted(command, i)
            if end < 0:
                return None
            token.append(text)
        elif c == "\\":
            if i + 1 >= n:
                return None
            token.append(command[i + 1])
            end = i + 2
        else:
            token.append(c)
            end = i + 1
        i = end
    return "".join(token), i


def _after_separator(command: str, i: int) -> int | None:
    """The index after the `&&` or `;` at `i` (not `;;` or `;&`, which end a `case` item)."""
    if command.startswith("&&", i):
        return i + 2
    if command.startswith(";", i) and not command.startswith((";;", ";&"), i):
        return i + 1
    return None
