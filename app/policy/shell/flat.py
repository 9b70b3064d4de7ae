"""Flat, quote-aware scans for routing: the interceptor's split (docs/policy.md#interceptor)
and the shell-control test of `allow` rules (docs/policy.md#how-allow-matches).

They never descend into substitutions; on anything that hides structure they give up."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.policy.shell.scanner import quoted_end, single_quote_end, skip_blanks


@dataclass(frozen=True, slots=True)
class FlatSegment:
    """One segment of the interceptor's flat split, with its text as written."""

    text: str
    piped_stdin: bool


# ---------------------------------------------------------------------------------------------
# Shell-control detection for `allow` rules (docs/policy.md#how-allow-matches)

_CONTROL_CHARS = frozenset("\n\r;&|<>$()`")
# `-c`/`-e` style clusters make a quoted string executable (`sh -c "a; b"`, `git -c alias.x=…`).
_REINTERPRETING_OPTION = re.compile(
    r"(?:^|[\s'\"])(?:-[A-Za-z]*[ce][A-Za-z]*|--command|--eval)(?=[\s'\"=]|$)"
)


def _scan_control(command: str) -> tuple[bool, bool]:
    """Return (has unquoted or expanding control syntax, has quoted/escaped control chars).

    An unterminated quote or a trailing backslash counts as control syntax: the structure of
    such text is not what it looks like.
    """
    quoted = False
    n = len(command)
    i = 0
    while i < n:
        c = command[i]
        if c == "\\":
            if i + 1 >= n:
                return True, quoted
            if command[i + 1] in _CONTROL_CHARS:
                quoted = True
            i += 2
        elif c == "'":
            end = single_quote_end(command, i)
            if end < 0:
                return True, quoted
            if not quoted and any(ch in _CONTROL_CHARS for ch in command[i + 1 : end - 1]):
                quoted = True
            i = end
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    return True, quoted
                c = command[i]
                if c == '"':
                    break
                if c == "\\" and i + 1 < n:
                    if command[i + 1] in _CONTROL_CHARS:
                        quoted = True
                    i += 2
                    continue
                if c in "$`":
                    return True, quoted
                if c in _CONTROL_CHARS:
                    quoted = True
                i += 1
            i += 1
        elif c in _CONTROL_CHARS:
            return True, quoted
        else:
            i += 1
    return False, quoted


def has_control_syntax(command: str) -> bool:
    """True when an `allow` rule must not vouch for the command (docs/policy.md#how-allow-matches).

    That is an unquoted one of `\\n \\r ; & | < > $ ( )` or a backtick; `$` or a backtick inside
    double quotes; or a quoted/escaped control char while a `-c`/`-e` cluster, `--command` or
    `--eval` option is present.
    """
    direct, quoted = _scan_control(command)
    if direct:
        return True
    return quoted and _REINTERPRETING_OPTION.search(command) is not None


# ---------------------------------------------------------------------------------------------
# Interceptor flat splitter (docs/policy.md#interceptor)


def flat_segments(command: str) -> list[FlatSegment] | None:
    """Split on unquoted `&& || ; | |& &` and newlines, keeping each segment as written.

    Returns None (full-command check only) on anything that hides structure: a backtick, `$(`,
    `${`, a here-doc, an unquoted `(`/`)`, a `{`/`}` word, a trailing backslash or an
    unterminated quote.
    """
    return _FlatSplitter(command).split()


_FLAT_SEPARATORS = frozenset("\n;&|")


class _FlatSplitter:
    """One pass of `flat_segments` over a command: the segment being built and what the
    previous character means for the next one."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.segments: list[FlatSegment] = []
        self.current: list[str] = []
        self.piped = False
        self.at_word_start = True
        self.after_redirect = False  # the previous char was an unquoted `<` or `>`

    def split(self) -> list[FlatSegment] | None:
        command = self.command
        n = len(command)
        i = 0
        while i < n:
            c = command[i]
            if c in "\\'\"":
                end = quoted_end(command, i, refuse_substitution=True)
                if end < 0:
                    return None
                self.append(command[i:end])
                i = end
            elif self.hides_structure(i):
                return None
            elif c == "#" and self.at_word_start:
                newline = command.find("\n", i)
                if newline < 0:
                    break  # a comment runs to the end
                i = newline
            elif c in _FLAT_SEPARATORS and not self.is_redirect_part(i):
                i = self.separate(i)
            else:
                self.append(c)
                i += 1
                self.at_word_start = c in " \t"
                self.after_redirect = c in "<>"
        self.flush()
        return self.segments

    def hides_structure(self, i: int) -> bool:
        """A backtick, `$(`, `${`, a here-doc, a bare parenthesis or a `{`/`}` word."""
        command = self.command
        c = command[i]
        if c == "`" or command.startswith(("$(", "${", "<<"), i) or c in "()":
            return True
        return (
            c in "{}"
            and self.at_word_start
            and (i + 1 >= len(command) or command[i + 1] in " \t\n;&|")
        )

    def is_redirect_part(self, i: int) -> bool:
        """`&` of `>&`, `<&` or `&>`, and `|` of `>|`: part of a redirect, not a separator."""
        command = self.command
        if command[i] == "&":
            return self.after_redirect or command.startswith("&>", i)
        return command[i] == "|" and self.after_redirect and command[i - 1] == ">"

    def separate(self, i: int) -> int:
        """End the segment at the separator at `i`; return the index after the separator."""
        command = self.command
        c = command[i]
        flushed = self.flush()
        width = 1
        if c == "\n":
            # A blank line keeps the pipe open: `a |` newline `b` still feeds `b`.
            self.piped = self.piped and not flushed
        elif c in ";&":
            self.piped = False
            width = 2 if command.startswith("&&", i) else 1
        elif command.startswith("||", i):
            self.piped = False
            width = 2
        else:
            self.piped = True
            width = 2 if command.startswith("|&", i) else 1
        self.at_word_start = True
        self.after_redirect = False
        return i + width

    def append(self, text: str) -> None:
        self.current.append(text)
        self.at_word_start = False
        self.after_redirect = False

    def flush(self) -> bool:
        text = "".join(self.current).strip()
        self.current.clear()
        if text:
            self.segments.append(FlatSegment(text=text, piped_stdin=self.piped))
            return True
        return False


_ASSIGNMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def strip_leading_assignments(segment: str) -> str | None:
    """Drop leading `NAME=value` words (docs/policy.md#interceptor), or None if nothing useful
    remains.

    None when there was no assignment, when the segment is only assignments, or when a value
    is malformed (unterminated quote, trailing backslash).
    """
    n = len(segment)
    i = skip_blanks(segment, 0)
    stripped_any = False
    while (match := _ASSIGNMENT_NAME.match(segment, i)) is not None:
        i = match.end()
        while i < n and segment[i] not in " \t":
            i = quoted_end(segment, i) if segment[i] in "\\'\"" else i + 1
            if i < 0:
                return None
        stripped_any = True
        i = skip_blanks(segment, i)
    if not stripped_any or i >= n:
        return None
    return segment[i:]
