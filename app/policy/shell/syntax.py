"""Quote-aware reading of shell text, shared by the `cd` rewrite, the policy and the interceptor.

Pure functions only: nothing here runs, expands or resolves anything.

Three readers live here because three consumers need three different views:

* `extract_leading_cd` and `flat_segments` are small scanners with exactly the behaviour agents
  rely on (docs/api.md#processing-order, docs/policy.md#interceptor); they are routing
  helpers, not security checks, and give up rather than guess.
* `read_command` (and `policy_segments`) is the security-relevant reader: it must find every
  simple command the shell would run, at any depth, so that `deny`/`prompt` rules and critical
  patterns cannot be dodged by wrapping, and say what it cannot read statically (a command
  name built by expansion, code in a string bash runs later, a limit of the reader) so the
  policy can fail closed. The structure comes from tree-sitter-bash; a small local lexer
  dequotes words (it decodes `$'…'`), reads backtick substitutions and unquoted here-doc bodies
  (which the grammar leaves as text), and reads the text when the grammar reports an error.
* `rough_segments` is a plain flat tokenizer, kept as a never-failing best effort
  so deny rules still apply to text that could not be parsed.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tree_sitter
import tree_sitter_bash

__all__ = [
    "CommandReading",
    "FlatSegment",
    "LeadingCd",
    "UnparseableCommandError",
    "clear_segment_cache",
    "env_scripts",
    "extract_leading_cd",
    "flat_segments",
    "has_control_syntax",
    "normalize_whitespace",
    "policy_segments",
    "read_command",
    "rough_segments",
    "strip_leading_assignments",
]


class UnparseableCommandError(ValueError):
    """The command's structure could not be determined, so its segment list cannot be trusted."""


class _LimitError(UnparseableCommandError):
    """A limit of the reader (size, count, wrapper variants) was reached: what lies beyond it
    was not read, so the command is unreadable."""


class _TooDeepError(_LimitError):
    """Nesting beyond `_MAX_DEPTH`."""


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
_REASONS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "shell_syntax_unreadable_reasons", default=None
)


# Limits reached while reading the current command: the reading keeps what it found (so deny
# rules still see it) and is marked as never allowable.
_LIMITS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "shell_syntax_limits", default=None
)


# Aliases the current command defines (name → value as written): bash pastes a value in front
# of the words that follow the name where it is used, so `alias t='rm -rf'` then `t /x` runs
# `rm -rf /x`, a text no single segment holds. `_read` reads each use again, expanded.
_ALIASES: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "shell_syntax_aliases", default=None
)


def _note_limit(why: str) -> bool:
    """Record a reached limit; False when no reading collects limits (the caller raises)."""
    limits = _LIMITS.get()
    if limits is None:
        return False
    if why not in limits:
        limits.append(why)
    return True


def _note_unreadable(why: str) -> None:
    reasons = _REASONS.get()
    if reasons is not None and why not in reasons:
        reasons.append(why)


@dataclass(frozen=True, slots=True)
class LeadingCd:
    """A leading `cd <target> && rest` (or `; rest`) split off a command."""

    target: str
    rest: str


@dataclass(frozen=True, slots=True)
class FlatSegment:
    """One segment of the interceptor's flat split, with its text as written."""

    text: str
    piped_stdin: bool


def normalize_whitespace(text: str) -> str:
    """Trim and collapse every whitespace run to one space (docs/policy.md#rules)."""
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# Leading `cd` rewrite (docs/api.md#processing-order)

_CD_TOKEN_END = frozenset(" \t\n\r&|;<>()")
_DOUBLE_QUOTE_ESCAPABLE = frozenset('"\\$`')


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
    n = len(command)
    i = 2
    while i < n and command[i] in " \t":
        i += 1
    token: list[str] = []
    while i < n:
        c = command[i]
        if c in _CD_TOKEN_END:
            break
        if c == "'":
            close = command.find("'", i + 1)
            if close < 0:
                return None
            token.append(command[i + 1 : close])
            i = close + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    return None
                c = command[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n and command[i + 1] in _DOUBLE_QUOTE_ESCAPABLE:
                    token.append(command[i + 1])
                    i += 2
                else:
                    token.append(c)
                    i += 1
        elif c == "\\":
            if i + 1 >= n:
                return None
            token.append(command[i + 1])
            i += 2
        else:
            token.append(c)
            i += 1
    target = "".join(token)
    if not target or any(ch in target for ch in "$`("):
        return None
    while i < n and command[i] in " \t":
        i += 1
    if command.startswith("&&", i):
        i += 2
    elif command.startswith(";", i) and not command.startswith((";;", ";&"), i):
        i += 1
    else:
        return None
    rest = command[i:].lstrip(" \t\r\n")
    if not rest:
        return None
    return LeadingCd(target=target, rest=rest)


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
            close = command.find("'", i + 1)
            if close < 0:
                return True, quoted
            if not quoted and any(ch in _CONTROL_CHARS for ch in command[i + 1 : close]):
                quoted = True
            i = close + 1
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
    segments: list[FlatSegment] = []
    current: list[str] = []
    piped = False
    n = len(command)
    i = 0
    at_word_start = True
    after_redirect = False  # previous char was an unquoted `<` or `>`

    def flush() -> bool:
        text = "".join(current).strip()
        current.clear()
        if text:
            segments.append(FlatSegment(text=text, piped_stdin=piped))
            return True
        return False

    while i < n:
        c = command[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            current.append(command[i : i + 2])
            i += 2
            at_word_start = False
            after_redirect = False
            continue
        if c == "'":
            close = command.find("'", i + 1)
            if close < 0:
                return None
            current.append(command[i : close + 1])
            i = close + 1
            at_word_start = False
            after_redirect = False
            continue
        if c == '"':
            j = i + 1
            while True:
                if j >= n:
                    return None
                d = command[j]
                if d == "\\":
                    j += 2
                    continue
                if d == "`" or command.startswith("$(", j):
                    return None
                if d == '"':
                    break
                j += 1
            current.append(command[i : j + 1])
            i = j + 1
            at_word_start = False
            after_redirect = False
            continue
        if c == "`" or command.startswith(("$(", "${", "<<"), i) or c in "()":
            return None
        if c in "{}" and at_word_start and (i + 1 >= n or command[i + 1] in " \t\n;&|"):
            return None
        if c == "#" and at_word_start:
            newline = command.find("\n", i)
            if newline < 0:
                flush()
                return segments
            i = newline
            continue
        if c == "\n":
            if flush():
                piped = False
            i += 1
            at_word_start = True
            after_redirect = False
            continue
        if c == ";":
            flush()
            piped = False
            i += 1
            at_word_start = True
            after_redirect = False
            continue
        if c == "&":
            if after_redirect or command.startswith("&>", i):
                current.append(c)
                i += 1
                at_word_start = False
                after_redirect = False
                continue
            flush()
            piped = False
            i += 2 if command.startswith("&&", i) else 1
            at_word_start = True
            after_redirect = False
            continue
        if c == "|":
            if after_redirect and command[i - 1] == ">":
                current.append(c)
                i += 1
                at_word_start = False
                after_redirect = False
                continue
            flush()
            if command.startswith("||", i):
                piped = False
                i += 2
            else:
                piped = True
                i += 2 if command.startswith("|&", i) else 1
            at_word_start = True
            after_redirect = False
            continue
        current.append(c)
        i += 1
        at_word_start = c in " \t"
        after_redirect = c in "<>"
    flush()
    return segments


_ASSIGNMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def strip_leading_assignments(segment: str) -> str | None:
    """Drop leading `NAME=value` words (docs/policy.md#interceptor), or None if nothing useful
    remains.

    None when there was no assignment, when the segment is only assignments, or when a value
    is malformed (unterminated quote, trailing backslash).
    """
    n = len(segment)
    i = 0
    while i < n and segment[i] in " \t":
        i += 1
    stripped_any = False
    while True:
        match = _ASSIGNMENT_NAME.match(segment, i)
        if match is None:
            break
        i = match.end()
        while i < n and segment[i] not in " \t":
            c = segment[i]
            if c == "\\":
                if i + 1 >= n:
                    return None
                i += 2
            elif c == "'":
                close = segment.find("'", i + 1)
                if close < 0:
                    return None
                i = close + 1
            elif c == '"':
                j = i + 1
                while j < n and segment[j] != '"':
                    j += 2 if segment[j] == "\\" else 1
                if j >= n:
                    return None
                i = j + 1
            else:
                i += 1
        stripped_any = True
        while i < n and segment[i] in " \t":
            i += 1
    if not stripped_any or i >= n:
        return None
    return segment[i:]


# ---------------------------------------------------------------------------------------------
# Policy segmentation: a lexer that finds every simple command, at any depth

# Limits of the reader. Reaching one makes the command unreadable (never allowed unread).
# Past this depth of nested substitutions / `bash -c` scripts the text is not read further.
_MAX_DEPTH = 16
# tree-sitter reads ~5 MB/s; bigger commands are not read at all.
_MAX_SCRIPT_CHARS = 1_000_000
_MAX_COMMANDS = 20_000
# Unwrapping makes one variant per wrapper layer (`sudo env A=1 timeout 5 nice rm …`): the
# work per segment is capped at this many variants plus a few per word, and the text of all
# variants of one command at `_MAX_VARIANT_CHARS`.
_MAX_VARIANTS = 64
_MAX_VARIANT_CHARS = 2_000_000
# What `((` scans may read beyond four passes over the text (see `_Lexer.arithmetic_budget`).
_ARITHMETIC_SCAN_SLACK = 65_536

_WORD_BREAK = frozenset(" \t\n;&|()<>")
_ANSI_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI_C_HEX = {
    "x": re.compile(r"[0-9A-Fa-f]{1,2}"),
    "u": re.compile(r"[0-9A-Fa-f]{1,4}"),
    "U": re.compile(r"[0-9A-Fa-f]{1,8}"),
}
_ANSI_C_OCTAL = re.compile(r"[0-7]{1,3}")
# Escapes that decode to NUL, where bash ends a `$'…'` string.
_ANSI_C_NUL = re.compile(
    r"\\(?:0{1,3}(?![0-7])|x0{1,2}(?![0-9A-Fa-f])|u0{1,4}(?![0-9A-Fa-f])|"
    r"U0{1,8}(?![0-9A-Fa-f])|c@)"
)


def _escaped(text: str, i: int) -> bool:
    """The character at `i` follows an odd run of backslashes."""
    run = 0
    while i - run - 1 >= 0 and text[i - run - 1] == "\\":
        run += 1
    return run % 2 == 1


class ShellWord(str):
    """A word with quotes removed that remembers what bash would still do to it at run time."""

    expanded: bool = False  # holds `$…`, `$(…)`, a backtick or `<(…)`: its value is dynamic
    pattern: bool = False  # holds an unquoted glob or brace expansion: it may become any name
    # Quoted text holds `$(`, a backtick, `<(` or `>(`: code if something runs it later.
    literal_code: bool = False


_EXPANSION = re.compile(r"\$[A-Za-z0-9_@*#?$!{(\[-]|`")
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")


def _holds_code(text: str) -> bool:
    return any(marker in text for marker in ("$(", "`", "<(", ">("))


def _has_expansion(text: str) -> bool:
    return _EXPANSION.search(text) is not None


def _is_pattern(unquoted: str) -> bool:
    return any(ch in unquoted for ch in "*?[") or _BRACE_EXPANSION.search(unquoted) is not None


def _is_dynamic(word: str) -> bool:
    return isinstance(word, ShellWord) and (word.expanded or word.pattern)


@dataclass(slots=True)
class _SimpleCommand:
    words: list[str] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    # Here-strings and here-doc bodies: a script when the command is a bare shell (`bash <<EOF`).
    stdin_texts: list[str] = field(default_factory=list)
    # Stdin comes from a file or process substitution whose name is built by expansion.
    stdin_unknown: bool = False


@dataclass(slots=True)
class _PendingHeredoc:
    delimiter: str
    expands: bool
    strip_tabs: bool
    command: _SimpleCommand


_RESERVED_PREFIXES = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"}
    | {"coproc"}
)
# Headers whose words are never run as a command (`for x in a b`, `case $x in`).
_HEADER_WORDS = frozenset({"for", "select", "case"})


class _Lexer:
    """Reads shell text into simple commands, descending into every kind of substitution.

    Commands nested in `$(…)`, backticks, `<(…)`, `${…}`, arithmetic and unquoted here-doc bodies
    are appended to the shared sink as they are met. Anything the lexer cannot read with
    certainty raises `UnparseableCommandError`.
    """

    def __init__(self, text: str, depth: int, sink: list[_SimpleCommand]) -> None:
        if depth > _MAX_DEPTH:
            raise _TooDeepError("command nesting is too deep")
        self.text = text
        self.n = len(text)
        self.depth = depth
        self.sink = sink
        # Characters `((` scans may read in all: each scan that turns out not to be arithmetic
        # reads on to the end of the text, so `((((…` would cost O(n²) without a bound.
        self.arithmetic_budget = 4 * self.n + _ARITHMETIC_SCAN_SLACK

    def lex_all(self) -> None:
        self.lex_list(0, closer=False)

    def lex_list(self, i: int, *, closer: bool) -> int:
        """Lex commands from `i`; with `closer`, stop after the `)` ending a `$(`/`<(`."""
        text = self.text
        n = self.n
        command = _SimpleCommand()
        heredocs: list[_PendingHeredoc] = []
        parens = 0
        open_cases = 0
        while i < n:
            c = text[i]
            if c in " \t":
                i += 1
            elif c == "\n":
                self._finish(command)
                command = _SimpleCommand()
                i += 1
                if heredocs:
                    i = self._read_heredoc_bodies(i, heredocs)
                    heredocs = []
            elif c == "#":
                newline = text.find("\n", i)
                i = n if newline < 0 else newline
            elif c in ";|":
                self._finish(command)
                command = _SimpleCommand()
                i += 1
            elif c == "&":
                if text.startswith("&>", i):
                    i = self._redirect(i, "", command, heredocs)
                    continue
                self._finish(command)
                command = _SimpleCommand()
                i += 1
            elif c == "(":
                if text.startswith("((", i) and _only_reserved_or(command.words, "for"):
                    end = self._read_arithmetic(i + 2)
                    if end is not None:
                        i = end
                        continue
                self._finish(command)
                command = _SimpleCommand()
                parens += 1
                i += 1
            elif c == ")":
                if parens == 0 and open_cases > 0:
                    # A `case` pattern such as `a|b)`: the words before it are not a command.
                    command = _SimpleCommand()
                    i += 1
                    continue
                self._finish(command)
                command = _SimpleCommand()
                if parens == 0:
                    if closer:
                        return i + 1
                    raise UnparseableCommandError("unbalanced ')'")
                parens -= 1
                i += 1
            elif c in "<>" and not text.startswith("(", i + 1):
                i = self._redirect(i, "", command, heredocs)
            else:
                start = i
                word, _quoted, i = self.read_word(i)
                raw = text[start:i]
                if i < n and text[i] in "<>" and raw.isdigit() and not text.startswith("(", i + 1):
                    i = self._redirect(i, raw, command, heredocs)
                    continue
                if _only_reserved_or(command.words, None):
                    if raw == "case":
                        open_cases += 1
                    elif raw == "esac" and open_cases > 0:
                        open_cases -= 1
                command.words.append(word)
        if closer:
            raise UnparseableCommandError("unterminated command substitution")
        if parens:
            raise UnparseableCommandError("unbalanced '('")
        self._finish(command)
        return i

    def _finish(self, command: _SimpleCommand) -> None:
        if command.words or command.redirects:
            self.sink.append(command)

    def _redirect(
        self, i: int, fd: str, command: _SimpleCommand, heredocs: list[_PendingHeredoc]
    ) -> int:
        text = self.text
        for op in ("&>>", "&>", "<<<", "<<-", "<<", ">>", ">|", ">&", "<&", "<>", ">", "<"):
            if text.startswith(op, i):
                break
        i += len(op)
        while i < self.n and text[i] in " \t":
            i += 1
        if i >= self.n or (text[i] in _WORD_BREAK and not text.startswith(("<(", ">("), i)):
            raise UnparseableCommandError(f"redirection {op!r} has no target")
        start = i
        target, quoted, i = self.read_word(i)
        if op in ("<<", "<<-"):
            raw = text[start:i]
            expands = not quoted and not any(ch in raw for ch in "'\"\\")
            heredocs.append(_PendingHeredoc(target, expands, op == "<<-", command))
        elif op == "<<<":
            command.stdin_texts.append(target)
        command.redirects.append(f"{fd}{op}{target}")
        return i

    def _read_heredoc_bodies(self, i: int, heredocs: list[_PendingHeredoc]) -> int:
        text = self.text
        for heredoc in heredocs:
            lines: list[str] = []
            while i < self.n:
                newline = text.find("\n", i)
                end = self.n if newline < 0 else newline
                line = text[i:end]
                i = self.n if newline < 0 else newline + 1
                if (line.lstrip("\t") if heredoc.strip_tabs else line) == heredoc.delimiter:
                    break
                lines.append(line)
            body = "\n".join(lines)
            heredoc.command.stdin_texts.append(body)
            if heredoc.expands:
                _Lexer(body, self.depth, self.sink).scan_expansions()
        return i

    def scan_expansions(self) -> None:
        """Find substitutions in text where quotes are literal (an unquoted here-doc body)."""
        text = self.text
        i = 0
        scratch: list[str] = []
        while i < self.n:
            c = text[i]
            if c == "\\":
                i += 2
            elif c == "`":
                i = self._read_backtick(i, scratch)
            elif c == "$":
                i = self._read_dollar(i, scratch, in_double_quotes=True)
            else:
                i += 1

    def read_word(self, i: int) -> tuple[ShellWord, bool, int]:
        """Read one word with quotes removed; return (word, was any part quoted, next index).

        The word records whether bash would expand something in it (`$x`, `$(…)`, a backtick,
        `<(…)`) and whether it holds an unquoted glob or brace expansion.
        """
        text = self.text
        n = self.n
        buf: list[str] = []
        unquoted: list[str] = []
        quoted = False
        expanded = False
        literal_code = False
        while i < n:
            c = text[i]
            if c in "<>" and text.startswith("(", i + 1):
                end = _Lexer(text, self.depth + 1, self.sink).lex_list(i + 2, closer=True)
                buf.append(text[i:end])
                expanded = True
                i = end
            elif c in _WORD_BREAK:
                break
            elif c == "\\":
                if i + 1 >= n:
                    raise UnparseableCommandError("trailing backslash")
                if text[i + 1] != "\n":
                    buf.append(text[i + 1])
                    quoted = True
                    literal_code = literal_code or _holds_code(text[i + 1 : i + 3])
                i += 2
            elif c == "'":
                close = text.find("'", i + 1)
                if close < 0:
                    raise UnparseableCommandError("unterminated single quote")
                buf.append(text[i + 1 : close])
                literal_code = literal_code or _holds_code(buf[-1])
                quoted = True
                i = close + 1
            elif c == '"':
                start = len(buf)
                i = self._read_double_quoted(i + 1, buf)
                expanded = expanded or _has_expansion("".join(buf[start:]))
                quoted = True
            elif c == "`":
                i = self._read_backtick(i, buf)
                expanded = True
            elif c == "$" and text.startswith("$'", i):
                start = len(buf)
                i = self._read_ansi_c(i + 2, buf)
                literal_code = literal_code or _holds_code("".join(buf[start:]))
                quoted = True
            elif c == "$" and text.startswith('$"', i):
                start = len(buf)
                i = self._read_double_quoted(i + 2, buf)
                expanded = expanded or _has_expansion("".join(buf[start:]))
                quoted = True
            elif c == "$":
                expanded = expanded or _has_expansion(text[i : i + 2])
                i = self._read_dollar(i, buf, in_double_quotes=False)
            else:
                buf.append(c)
                unquoted.append(c)
                i += 1
        word = ShellWord("".join(buf))
        word.expanded = expanded
        word.pattern = _is_pattern("".join(unquoted))
        word.literal_code = literal_code or (expanded and _holds_code(word) and "\\" in text)
        return word, quoted, i

    def _read_double_quoted(self, i: int, buf: list[str]) -> int:
        text = self.text
        while True:
            if i >= self.n:
                raise UnparseableCommandError("unterminated double quote")
            c = text[i]
            if c == '"':
                return i + 1
            if c == "\\":
                if i + 1 >= self.n:
                    raise UnparseableCommandError("unterminated double quote")
                nxt = text[i + 1]
                if nxt in _DOUBLE_QUOTE_ESCAPABLE:
                    buf.append(nxt)
                elif nxt != "\n":
                    buf.append(c + nxt)
                i += 2
            elif c == "`":
                i = self._read_backtick(i, buf)
            elif c == "$":
                i = self._read_dollar(i, buf, in_double_quotes=True)
            else:
                buf.append(c)
                i += 1

    def _read_backtick(self, i: int, buf: list[str]) -> int:
        text = self.text
        j = i + 1
        inner: list[str] = []
        while True:
            if j >= self.n:
                raise UnparseableCommandError("unterminated backquote")
            c = text[j]
            if c == "`":
                break
            if c == "\\" and j + 1 < self.n:
                nxt = text[j + 1]
                inner.append(nxt if nxt in "`\\$" else c + nxt)
                j += 2
            else:
                inner.append(c)
                j += 1
        _Lexer("".join(inner), self.depth + 1, self.sink).lex_all()
        buf.append(text[i : j + 1])
        return j + 1

    def _read_dollar(self, i: int, buf: list[str], *, in_double_quotes: bool) -> int:
        """Read a `$…` expansion starting at `i`, lexing any command inside it."""
        text = self.text
        if text.startswith("$((", i):
            end = self._read_arithmetic(i + 3)
            if end is None:
                # `$((a); b)` is a command substitution holding a subshell, not arithmetic.
                end = _Lexer(text, self.depth + 1, self.sink).lex_list(i + 2, closer=True)
        elif text.startswith("$(", i):
            end = _Lexer(text, self.depth + 1, self.sink).lex_list(i + 2, closer=True)
        elif text.startswith("${", i):
            end = self._read_braced(i + 2, "{", "}", in_double_quotes=in_double_quotes)
        elif text.startswith("$[", i):
            end = self._read_braced(i + 2, "[", "]", in_double_quotes=in_double_quotes)
        else:
            buf.append("$")
            return i + 1
        buf.append(text[i:end])
        return end

    def _read_braced(self, i: int, opening: str, closing: str, *, in_double_quotes: bool) -> int:
        """Skip to the bracket closing a `${…}` or `$[…]`, lexing substitutions inside it."""
        text = self.text
        depth = 1
        scratch: list[str] = []
        while i < self.n:
            c = text[i]
            if c == "\\":
                i += 2
            elif c == "'" and not in_double_quotes:
                close = text.find("'", i + 1)
                if close < 0:
                    raise UnparseableCommandError("unterminated single quote")
                i = close + 1
            elif c == '"':
                i = self._read_double_quoted(i + 1, scratch)
            elif c == "`":
                i = self._read_backtick(i, scratch)
            elif c == "$":
                i = self._read_dollar(i, scratch, in_double_quotes=in_double_quotes)
            elif c == opening:
                depth += 1
                i += 1
            elif c == closing:
                depth -= 1
                i += 1
                if depth == 0:
                    return i
            else:
                i += 1
        raise UnparseableCommandError(f"unterminated '{opening}' expansion")

    def _read_arithmetic(self, i: int) -> int | None:
        """Return the index after the `))` closing arithmetic that starts at `i`.

        None when the text is not arithmetic after all: a `)` at depth zero not followed by
        another `)` means `((a); b)` is nested subshells.
        """
        end = self._scan_arithmetic(i)
        self.arithmetic_budget -= (self.n if end is None else end) - i
        if self.arithmetic_budget < 0:
            raise _LimitError("too many '((' to read")
        return end

    def _scan_arithmetic(self, i: int) -> int | None:
        text = self.text
        depth = 0
        scratch: list[str] = []
        while i < self.n:
            c = text[i]
            if c == "\\":
                i += 2
            elif c == "'":
                close = text.find("'", i + 1)
                if close < 0:
                    return None
                i = close + 1
            elif c == '"':
                i = self._read_double_quoted(i + 1, scratch)
            elif c == "`":
                i = self._read_backtick(i, scratch)
            elif c == "$":
                i = self._read_dollar(i, scratch, in_double_quotes=False)
            elif c == "(":
                depth += 1
                i += 1
            elif c == ")":
                if depth > 0:
                    depth -= 1
                    i += 1
                elif text.startswith("))", i):
                    return i + 2
                else:
                    return None
            else:
                i += 1
        return None

    def _read_ansi_c(self, i: int, buf: list[str]) -> int:
        """Decode a `$'…'` string, so `$'\\x72m'` is seen as `rm`."""
        text = self.text
        while True:
            if i >= self.n:
                raise UnparseableCommandError("unterminated $'…' quote")
            c = text[i]
            if c == "'":
                return i + 1
            if c != "\\" or i + 1 >= self.n:
                buf.append(c)
                i += 1
                continue
            nxt = text[i + 1]
            if _ANSI_C_NUL.match(text, i):
                # bash ends the string at a NUL: `$'rm\0x'` runs `rm`.
                close = text.find("'", i)
                while close > 0 and _escaped(text, close):
                    close = text.find("'", close + 1)
                if close < 0:
                    raise UnparseableCommandError("unterminated $'…' quote")
                return close + 1
            if nxt in _ANSI_C_ESCAPES:
                buf.append(_ANSI_C_ESCAPES[nxt])
                i += 2
            elif nxt in "xuU":
                digits = _ANSI_C_HEX[nxt].match(text, i + 2)
                if digits is None:
                    buf.append(c + nxt)
                    i += 2
                else:
                    code = int(digits.group(), 16)
                    buf.append(chr(code) if code <= 0x10FFFF else "\ufffd")
                    i += 2 + len(digits.group())
            elif nxt in "01234567":
                digits = _ANSI_C_OCTAL.match(text, i + 1)
                assert digits is not None  # nxt itself is an octal digit
                buf.append(chr(int(digits.group(), 8) & 0xFF))
                i += 1 + len(digits.group())
            elif nxt == "c" and i + 2 < self.n:
                buf.append(chr(ord(text[i + 2]) & 0x1F))
                i += 3
            else:
                buf.append(c + nxt)
                i += 2


def _only_reserved_or(words: Sequence[str], allowed: str | None) -> bool:
    """True when `words` holds only reserved words (plus `allowed`): command position is next."""
    return all(word in _RESERVED_PREFIXES or word == allowed for word in words)


def _lex(text: str, depth: int) -> list[_SimpleCommand]:
    sink: list[_SimpleCommand] = []
    _Lexer(text, depth, sink).lex_all()
    return sink


# --- tree-sitter-bash: the grammar that reads the structure ----------------------------------

_BASH_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_PARSERS = threading.local()  # a tree-sitter Parser is not meant to be shared between threads
_REDIRECT_NODES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_COMMAND_NODES = frozenset({"command", "declaration_command", "unset_command"})
_ARITHMETIC_NODES = frozenset({"arithmetic_expansion", "c_style_for_statement"})
_PLAIN_VALUE = re.compile(r"[+-]?[0-9]+|[+-]?0[xX][0-9A-Fa-f]+|[A-Za-z_][A-Za-z0-9_]*|")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Commands that store run-time data (never a plain number) in the variables they name.
_READERS = frozenset({"read", "mapfile", "readarray"})


def _parser() -> tree_sitter.Parser:
    parser: tree_sitter.Parser | None = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = tree_sitter.Parser(_BASH_LANGUAGE)
        _PARSERS.parser = parser
    return parser


# tree-sitter-bash 0.25.1 (the newest release) crashes the whole process on some input: its
# scanner tests the character after `{`, `{12`, `{..` or `{1..2` with the C `isdigit()`, whose
# table only covers -1..255. A larger code point (`{𱡀`, or a lone surrogate) reads up to
# 2 MiB past that table, and the process dies with SIGSEGV wherever that lands on an unmapped
# page, which depends on the memory layout of the run (upstream tree-sitter-bash issue #337;
# the fix, pull request #348, is not released). The grammar therefore never sees such a
# character: it reads a copy where each one is replaced by as many `_` as it has UTF-8 bytes,
# so every byte offset still points into the real text, which is what the reader slices. To
# the grammar both are characters of a word, as they are to bash.
_SCANNER_UNSAFE = re.compile(r"\{[0-9]*+(?:\.\.[0-9]*+)?+[^\x00-\xff]")


def _scanner_safe(text: str) -> bytes:
    """`text` encoded for tree-sitter-bash, with the characters its scanner cannot test masked
    (same length in bytes, so that offsets into the parse are offsets into `text`)."""

    def mask(match: re.Match[str]) -> str:
        unsafe = match.group()[-1]
        return match.group()[:-1] + "_" * len(unsafe.encode("utf-8", "surrogatepass"))

    return _SCANNER_UNSAFE.sub(mask, text).encode("utf-8", "surrogatepass")


def _dequote(raw: str, depth: int) -> ShellWord:
    """One word of source text with quotes removed, read by the lexer (which decodes `$'…'`)."""
    try:
        word, _quoted, stop = _Lexer(raw, depth, []).read_word(0)
    except UnparseableCommandError:
        stop = -1
    if stop == len(raw):
        return word
    # Not a single lexer word (an array value `(a b)`, a `[[ ]]` operand): keep the source.
    fallback = ShellWord(raw)
    fallback.expanded = _has_expansion(raw)
    fallback.pattern = _is_pattern(raw)
    fallback.literal_code = _holds_code(raw) and any(ch in raw for ch in "'\\")
    return fallback


def _dequote_words(raw: str, depth: int) -> list[ShellWord]:
    """Words of one grammar node: normally one, but the grammar reads `{ {` as one word where
    bash sees two, so blanks that bash would split on are honoured."""
    words: list[ShellWord] = []
    i = 0
    n = len(raw)
    try:
        while i < n:
            if raw[i] in " \t":
                i += 1
                continue
            word, _quoted, stop = _Lexer(raw, depth, []).read_word(i)
            if stop == i:
                return [_dequote(raw, depth)]
            words.append(word)
            i = stop
    except UnparseableCommandError:
        return [_dequote(raw, depth)]
    return words or [_dequote(raw, depth)]


class _TreeReader:
    """Collects the simple commands of one tree-sitter parse, at any depth.

    Backtick substitutions and unquoted here-doc bodies are read by the lexer instead: the
    grammar does not undo the backslashes of nested backticks and leaves backticks inside
    here-doc bodies as text.
    """

    def __init__(self, source: bytes, depth: int) -> None:
        self.source = source
        self.depth = depth
        self.sink: list[_SimpleCommand] = []
        self.dynamic_names: set[str] = set()
        self.arithmetic_names: set[str] = set()
        # The grammar sometimes drops text without reporting an error (`python3 - <<EOF` loses
        # the `-`): every byte that is not blank must lie in a token, else the parse is refused.
        self.cursor = 0
        self.dropped_text = False
        # The grammar reads the `0` of `0<` / `0>` as an argument (`bash 0< <(…)` looked like
        # `bash` running a script file `0`): start byte of the redirect → its descriptor.
        self.io_numbers: dict[int, str] = {}

    def cover(self, node: tree_sitter.Node) -> None:
        if self.source[self.cursor : node.start_byte].strip(b" \t\r\n\\"):
            self.dropped_text = True
        self.cursor = max(self.cursor, node.end_byte)

    def text(self, node: tree_sitter.Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def read(self, root: tree_sitter.Node) -> list[_SimpleCommand]:
        stack: list[tuple[tree_sitter.Node, int, bool]] = [(root, self.depth, False)]
        while stack:
            node, depth, in_arithmetic = stack.pop()
            if depth > _MAX_DEPTH:
                raise _TooDeepError("command nesting is too deep")
            kind = node.type
            if len(self.sink) > _MAX_COMMANDS:
                raise _LimitError(f"more than {_MAX_COMMANDS} commands")
            if kind in _COMMAND_NODES:
                self.sink.append(self.command(node, depth))
            elif kind == "redirected_statement":
                body = node.child_by_field_name("body")
                if body is None or body.type not in _COMMAND_NODES:
                    # Redirects of a compound command (`{ …; } > f`, `while …; done < f`).
                    command = _SimpleCommand()
                    for child in node.children:
                        if child.type in _REDIRECT_NODES:
                            self.redirect(child, command, depth)
                    if command.redirects:
                        self.sink.append(command)
            elif kind == "variable_assignment" and (
                node.parent is None or node.parent.type not in _COMMAND_NODES
            ):
                # A bare `NAME=value` statement.
                self.assignment(node)
                self.sink.append(_SimpleCommand(words=[_dequote(self.text(node), depth)]))
            elif kind == "command_substitution" and self.text(node).startswith("`"):
                self.cover(node)
                self.sink.extend(_lex_backtick(self.text(node), depth + 1))
                continue
            elif kind == "heredoc_body":
                self.cover(node)
                continue  # read with its redirect
            elif kind in ("raw_string", "string", "ansi_c_string") and _outside_command(node):
                # Strings outside a simple command's words (a `for`/`case` word, an array
                # element, a `[[ ]]` operand) may be evaluated later too (`$((x))`, `-v`).
                word = _dequote(self.text(node), depth)
                if word.literal_code:
                    self.sink.append(_SimpleCommand(words=[ShellWord(":"), word]))
            elif kind in ("for_statement", "select_statement"):
                self.loop_variable(node, depth)
            elif kind == "expansion" and self.text(node).endswith("@P}"):
                _note_unreadable("prompt expansion ${…@P} runs code kept in a variable")
            elif in_arithmetic and kind in ("variable_name", "word"):
                name = self.text(node)
                if _NAME.fullmatch(name):
                    self.arithmetic_names.add(name)
            nested = (
                depth + 1 if kind in ("command_substitution", "process_substitution") else depth
            )
            arithmetic = (
                in_arithmetic
                or kind in _ARITHMETIC_NODES
                or (kind == "compound_statement" and self.text(node).startswith("(("))
            )
            if node.child_count == 0:
                self.cover(node)
            stack.extend((child, nested, arithmetic) for child in reversed(node.children))
        if self.source[self.cursor :].strip(b" \t\r\n\\"):
            self.dropped_text = True
        return self.sink

    def command(self, node: tree_sitter.Node, depth: int) -> _SimpleCommand:
        command = _SimpleCommand()
        parent = node.parent
        # Nodes that touch form one word to bash, even where the grammar ends a node early
        # (`la'un'\\ch` is one word, the grammar gives two).
        pieces: list[tuple[int, int, bool]] = []  # (start, end, is an assignment)
        for child in node.children:
            kind = child.type
            if kind in _REDIRECT_NODES:
                self.redirect(child, command, depth)
            elif kind == "comment":
                continue
            elif (
                kind == "number"
                and self.text(child).isdigit()
                and self.source[child.end_byte : child.end_byte + 1] in (b"<", b">")
                and (
                    not pieces
                    or self.source[pieces[-1][1] : child.start_byte].replace(b"\\\n", b"")
                )
            ):
                # Digits that touch `<` or `>` are the redirect's descriptor, as bash reads them.
                self.io_numbers[child.end_byte] = self.text(child)
            else:
                if kind == "variable_assignment":
                    self.assignment(child)
                gap = self.source[pieces[-1][1] : child.start_byte] if pieces else b" "
                if not gap.replace(b"\\\n", b""):  # touching, or joined by line continuations
                    start, _end, assignment = pieces[-1]
                    pieces[-1] = (start, child.end_byte, assignment)
                else:
                    pieces.append((child.start_byte, child.end_byte, kind == "variable_assignment"))
        for start, end, assignment in pieces:
            raw = self.source[start:end].decode("utf-8", "surrogatepass")
            if assignment:
                command.words.append(_dequote(raw, depth))
            else:
                command.words.extend(_dequote_words(raw, depth))
        if parent is not None and parent.type == "redirected_statement":
            for child in parent.children:
                if child.type in _REDIRECT_NODES:
                    self.redirect(child, command, depth)
        self.note_readers(command.words)
        return command

    def assignment(self, node: tree_sitter.Node) -> None:
        name = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name is None:
            return
        plain = value is None or (
            value.type == "arithmetic_expansion"
            or (value.type in ("number", "word") and _PLAIN_VALUE.fullmatch(self.text(value)))
        )
        if not plain:
            self.dynamic_names.add(self.text(name).split("[", 1)[0])

    def loop_variable(self, node: tree_sitter.Node, depth: int) -> None:
        """`for x in …`: x takes run-time values when a word expands (`$(cmd)`, a glob)."""
        variable = node.child_by_field_name("variable")
        if variable is None:
            return
        for value in node.children_by_field_name("value"):
            word = _dequote(self.text(value), depth)
            if word.expanded or word.pattern or word.literal_code:
                self.dynamic_names.add(self.text(variable))
                return

    def note_readers(self, words: list[str]) -> None:
        """`read x`, `mapfile a`, `printf -v x …`, `let …`: variables and arithmetic."""
        if not words:
            return
        name = words[0]
        _note_run_time_names(name, words[1:])
        if name in _READERS:
            self.dynamic_names.update(w for w in words[1:] if _NAME.fullmatch(w))
        elif name == "printf":
            value = _option_value(words[1:], "-v", "-v")
            if value is not None:
                self.dynamic_names.add(value.split("[", 1)[0])
        elif name == "let":
            for word in words[1:]:
                if _is_dynamic(word):
                    _note_unreadable("let evaluates an argument built by expansion")
                self.arithmetic_names.update(_NAME.findall(word))

    def redirect(self, node: tree_sitter.Node, command: _SimpleCommand, depth: int) -> None:
        if node.type == "heredoc_redirect":
            self.heredoc(node, command, depth)
            return
        fd = self.io_numbers.get(node.start_byte, "")
        op = ""
        target: ShellWord | None = None
        for child in node.children:
            if child.type == "file_descriptor":
                fd = self.text(child)
            elif not child.is_named:
                op = op or self.text(child)
            elif target is None:
                target = _dequote(self.text(child), depth)
        if target is None:
            return
        command.redirects.append(f"{fd}{op}{target}")
        if node.type == "herestring_redirect":
            command.stdin_texts.append(target)
        elif op == "<" and target.expanded:
            command.stdin_unknown = True

    def heredoc(self, node: tree_sitter.Node, command: _SimpleCommand, depth: int) -> None:
        op = "<<"
        delimiter = ""
        body = ""
        for child in node.children:
            if child.type in ("<<", "<<-"):
                op = child.type
            elif child.type == "heredoc_start":
                delimiter = self.text(child)
            elif child.type == "heredoc_body":
                body = self.text(child)
        body = body.removesuffix("\n")
        expands = not any(ch in delimiter for ch in "'\"\\")
        command.redirects.append(f"{op}{_dequote(delimiter, depth)}")
        command.stdin_texts.append(body)
        if expands and body:
            _Lexer(body, depth, self.sink).scan_expansions()


_NAME_SETTERS = frozenset({"read", "mapfile", "readarray", "printf"})
_DECLARERS = frozenset({"declare", "typeset", "local", "export", "readonly"})


def _note_run_time_names(name: str, args: list[str]) -> None:
    """Variables that get run-time text where bash later runs it (`printf -v PS4 …`, `read
    PROMPT_COMMAND`), variable names built by expansion (`read "$x"`, `printf -v "$x"`, whose
    subscript bash evaluates), and namerefs to the tables of command names (`declare -n
    h=BASH_CMDS`)."""
    if name in _NAME_SETTERS:
        names = [arg for arg in args if not arg.startswith("-")]
        if name == "printf":
            value = _option_value(args, "-v", "-v")
            names = [] if value is None else [value]
        for variable in names:
            base = variable.split("[", 1)[0]
            if _is_code_variable(base):
                _note_unreadable(f"{name} sets {base}, which bash runs, to run-time text")
            elif _is_dynamic(variable):
                _note_unreadable(f"{name} sets a variable whose name is built by expansion")
    elif name in _DECLARERS and any(arg.startswith("-") and "n" in arg for arg in args):
        for arg in args:
            target = arg.split("=", 1)[1] if "=" in arg else ""
            if _is_dynamic(arg) or target.startswith(("BASH_CMDS", "BASH_ALIASES")):
                _note_unreadable(f"{name} -n makes a reference that cannot be read: {arg}")


def _outside_command(node: tree_sitter.Node) -> bool:
    parent = node.parent
    while parent is not None and parent.type != "program":
        if parent.type in _COMMAND_NODES:
            return False
        parent = parent.parent
    return True


def _lex_backtick(text: str, depth: int) -> list[_SimpleCommand]:
    sink: list[_SimpleCommand] = []
    _Lexer(text, depth - 1, sink).read_word(0)
    return sink


# Places where bash evaluates a variable's value as arithmetic or as a name (which may hold
# a subscript, `a[$(cmd)]`): `${!x}`, `${a[x]}`, `${s:x}`, `[[ x -eq 0 ]]`, `[[ -v x ]]`,
# `declare -i i=x`.
_EVALUATING_CONTEXTS = (
    re.compile(r"\$\{!([A-Za-z_]\w*)"),
    re.compile(r"\$\{[A-Za-z_]\w*\[([^\]]*)\]"),
    re.compile(r"\$\{[A-Za-z_]\w*:(?![-=?+])([^}]*)\}"),
    re.compile(r"\[\[([^\]]*-(?:eq|ne|lt|le|gt|ge|v)\b[^\]]*)\]\]"),
    re.compile(r"\b(?:declare|typeset|local)\s+-[A-Za-z]*i[A-Za-z]*\s+([^;&|\n]*)"),
)


def _evaluated_names(text: str) -> set[str]:
    names: set[str] = set()
    for context in _EVALUATING_CONTEXTS:
        for match in context.finditer(text):
            names.update(_NAME.findall(match.group(1)))
    return names


def _tree_commands(text: str, depth: int) -> list[_SimpleCommand] | None:
    """The simple commands tree-sitter-bash finds, or None when the grammar reports an error."""
    source = text.encode("utf-8", "surrogatepass")
    tree = _parser().parse(_scanner_safe(text))
    if tree.root_node.has_error:
        return None
    reader = _TreeReader(source, depth)
    commands = reader.read(tree.root_node)
    if reader.dropped_text:
        return None
    reader.arithmetic_names.update(_evaluated_names(text))
    for name in sorted(reader.arithmetic_names & reader.dynamic_names):
        _note_unreadable(
            f"arithmetic evaluation of ${name}, whose value is not a plain number or name"
        )
    return commands


# --- from simple commands to policy segments ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Wrapper:
    """How to skip a wrapper's own options to reach the command it runs (from its manual).

    `short_flags`/`long_flags` are the options that take no argument (or only an attached
    one, `--opt=x`, `-mFILE`); an option the model does not know is read both ways, taking the
    next word and not, so a missing entry makes the reader stricter, never blind.
    `positional_first`: the operands come before the options (`setarch ARCH [options] CMD`).
    """

    short_with_arg: str = ""
    long_with_arg: frozenset[str] = frozenset()
    positional: int = 0
    numeric_flags: bool = False
    assignments: bool = False
    short_flags: str = ""
    long_flags: frozenset[str] = frozenset()
    positional_first: bool = False


def _w(
    short_with_arg: str = "",
    long_with_arg: str = "",
    short_flags: str = "",
    long_flags: str = "",
    **kwargs: Any,
) -> _Wrapper:
    return _Wrapper(
        short_with_arg=short_with_arg,
        long_with_arg=frozenset(long_with_arg.split()),
        short_flags=short_flags,
        long_flags=frozenset(long_flags.split()),
        **kwargs,
    )


_WRAPPERS: dict[str, _Wrapper] = {
    "env": _w(
        "uCS",
        "--unset --chdir --split-string",
        "i0v",
        "--ignore-environment --null --debug --list-signal-handling --ignore-signal"
        " --default-signal --block-signal",
        assignments=True,
    ),
    "timeout": _w(
        "sk",
        "--signal --kill-after",
        "vfp",
        "--verbose --foreground --preserve-status",
        positional=1,
    ),
    "nohup": _w(),
    "nice": _w("n", "--adjustment", numeric_flags=True),
    "time": _w("fo", "--format --output", "pavq", "--portability --append --verbose --quiet"),
    "xargs": _w(
        "aLnPsdEI",
        "--arg-file --delimiter --max-args --max-procs --max-chars --process-slot-var",
        "0oprtxiel",
        "--null --open-tty --interactive --no-run-if-empty --verbose --exit --show-limits"
        " --eof --replace --max-lines",
    ),
    "sudo": _w(
        "CDghpRrTtUu",
        "--close-from --chdir --group --host --prompt --chroot --role --command-timeout --type"
        " --other-user --user",
        "ABbEeHiKklnPSsVv",
        "--askpass --bell --background --preserve-env --edit --set-home --login"
        " --remove-timestamp --reset-timestamp --list --non-interactive --preserve-groups"
        " --stdin --shell --version --validate",
    ),
    "doas": _w("uC", "", "nsL"),
    "command": _w("", "", "pvV"),
    "builtin": _w(),
    "exec": _w("a", "", "cl"),
    "stdbuf": _w("ioe", "--input --output --error"),
    "setsid": _w("", "", "cfw", "--ctty --fork --wait"),
    "ionice": _w("cnpPu", "--class --classdata --pid --pgid --uid", "t", "--ignore"),
    "busybox": _w(),
    "chrt": _w(
        "TPD",
        "--sched-runtime --sched-period --sched-deadline",
        "abdfiorRpmv",
        "--all-tasks --batch --deadline --fifo --idle --other --rr --reset-on-fork --pid"
        " --max --verbose",
        positional=1,
    ),
    "taskset": _w("", "", "acp", "--all-tasks --cpu-list --pid", positional=1),
    "flock": _w(
        "wEc",
        "--timeout --conflict-exit-code --command",
        "sxeunoF",
        "--shared --exclusive --unlock --nb --nonblock --close --no-fork --verbose",
        positional=1,
    ),
    "unbuffer": _w("", "", "p"),
    "runuser": _w(
        "ugGcsw",
        "--user --group --supp-group --command --session-command --shell --whitelist-environment",
        "lmpPf",
        "--login --preserve-environment --pty --fast",
    ),
    "pkexec": _w("u", "--user", "", "--disable-internal-agent --keep-cwd"),
    "chroot": _w("", "--userspec --groups", "", "--skip-chdir", positional=1),
    # Namespace options take an optional file only when attached (`-mFILE`, `--mount=FILE`).
    "unshare": _w(
        "SGwR",
        "--setuid --setgid --wd --root --map-user --map-users --map-group --map-groups"
        " --propagation --monotonic --boottime --load-interp",
        "muinpUCTfrc",
        "--mount --uts --ipc --net --pid --user --cgroup --time --fork --map-root-user"
        " --map-current-user --map-auto --mount-proc --kill-child --keep-caps --setgroups",
    ),
    "nsenter": _w(
        "tSGW",
        "--target --setuid --setgid --wdns",
        "amuinpUCTrwFZec",
        "--all --mount --uts --ipc --net --pid --user --cgroup --time --root --wd"
        " --preserve-credentials --no-fork --follow-context --user-parent --keep-caps --env"
        " --join-cgroup",
    ),
    "numactl": _w("CNmpP"),
    "faketime": _w("p", "", "f", positional=1),
    "fakeroot": _w("ls", "--lib --faked -i -s", "u", "--unknown-is-real"),
    "strace": _w(
        "abeEIoOpPsSuUX",
        "--columns --detach-on --expr --env --interruptible --output --summary-syscall-overhead"
        " --attach --trace-path --string-limit --summary-sort-by --user --summary-columns"
        " --const-print-style",
        "AcCdDfFhiknqrtTvVwxyYzZ",
        "--follow-forks --output-separately --summary --summary-only --instruction-pointer"
        " --stack-trace --syscall-number --relative-timestamps --absolute-timestamps"
        " --syscall-times --no-abbrev --failed-only --successful-only --daemonize"
        " --seccomp-bpf --summary-wall-clock --debug --help --version",
    ),
    "ltrace": _w("aeEfFlnopsuwxAD"),
    "torsocks": _w(),
    "proxychains": _w("f", "", "q"),
    "proxychains4": _w("f", "", "q"),
    "catchsegv": _w(),
    "dbus-run-session": _w(),
    "xvfb-run": _w("nslpefw"),
    "cpulimit": _w("lpe"),
    "trickle": _w("udwtlnL"),
    "caffeinate": _w("tw"),
    "systemd-run": _w(
        "pEMH",
        "--unit --property --description --slice --uid --gid --setenv --machine --host"
        " --working-directory --nice --on-active --on-calendar --timer-property --path-property"
        " --socket-property --service-type",
        "drtPGSq",
        "--user --system --scope --remain-after-exit --send-sighup --pty --pipe --quiet --wait"
        " --collect --shell --same-dir --no-block --no-ask-password",
    ),
    "parallel": _w("jSI"),
    "noglob": _w(),
    "screen": _w("SclpThtsXe"),
    "nocorrect": _w(),
    "prlimit": _w("p", "--pid --output"),
    "setpriv": _w(
        "",
        "--reuid --regid --ruid --rgid --euid --egid --groups --inh-caps --ambient-caps"
        " --bounding-set --securebits --pdeathsig --selinux-label --apparmor-profile",
        "dd",
        "--dump --nnp --no-new-privs --keep-groups --clear-groups --init-groups --reset-env",
    ),
    # `setarch ARCH [options] [program]`; the personality flags take no argument.
    "setarch": _w(
        "",
        "",
        "BFILRSTXZ3v",
        "--uname-2.6 --verbose --32bit --fdpic-funcptrs --short-inode --addr-compat-layout"
        " --addr-no-randomize --whole-seconds --sticky-timeouts --read-implies-exec"
        " --mmap-page-zero --3gb --4gb --list",
        positional=1,
        positional_first=True,
    ),
    "linux32": _w("", "", "BFILRSTXZ3v", "--addr-no-randomize --read-implies-exec --3gb"),
    "linux64": _w("", "", "BFILRSTXZ3v", "--addr-no-randomize --read-implies-exec --3gb"),
    "valgrind": _w(),
    "firejail": _w(),
    "cgexec": _w("g", "", "", "--sticky"),
    "rlwrap": _w("bCDefgHlpPqsStwz"),
    "daemonize": _w("ceEoplu"),
    "ssh-agent": _w("aEPt"),
    "dbus-launch": _w(),
    "entr": _w(),
    "tsp": _w("LND"),
    "nq": _w(),
}
# Runners whose first word after the subcommand is the command they run.
_SUBCOMMAND_RUNNERS = {
    "uv": "run",
    "poetry": "run",
    "pipenv": "run",
    "pdm": "run",
    "hatch": "run",
    "bundle": "exec",
    "conda": "run",
    "mamba": "run",
}
_SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "rbash", "csh", "tcsh", "yash"}
    | {"posh", "busybox-sh"}
)
_XARGS_INPUT = "{}"  # stands for the arguments xargs appends from its stdin
_ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
# Paths that name the shell's own stdin or another redirected fd (`bash /dev/stdin`,
# `source /dev/fd/3 3<<<…`): the text fed to it is the script.
_STDIN_PATHS = frozenset({"/dev/stdin", "-"})
_FD_PATH_PREFIXES = ("/dev/fd/", "/proc/self/fd/")


def _names_stdin(path: str | None) -> bool:
    return path is not None and (path in _STDIN_PATHS or path.startswith(_FD_PATH_PREFIXES))


# Variables whose value bash, or a program it starts, later runs as a command.
_CODE_VARIABLE_NAMES = (
    "PROMPT_COMMAND",
    "GIT_SSH_COMMAND",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PAGER",
    "GIT_ASKPASS",
    "GIT_EXTERNAL_DIFF",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "BROWSER",
    "PS0",
    "PS1",
    "PS2",
    "PS4",
    "RSYNC_RSH",
    "GIT_CONFIG_PARAMETERS",
    "GIT_PROXY_COMMAND",
    "GIT_SSH",
    "LESSEDIT",
    "SYSTEMD_PAGER",
)


def _is_code_variable(name: str) -> bool:
    """A variable whose value bash or a program it starts runs (`GIT_CONFIG_VALUE_0` too)."""
    return name in _CODE_VARIABLE_NAMES or name.startswith(("GIT_CONFIG_VALUE_", "GIT_CONFIG_KEY_"))


_CODE_VARIABLES = tuple(f"{name}{op}" for name in _CODE_VARIABLE_NAMES for op in ("=", "+="))


def env_scripts(env: Mapping[str, str]) -> list[str]:
    """The values of a request's `env` that a program runs as shell text (`GIT_EXTERNAL_DIFF`,
    `PAGER`, …): the variables this reader reads as code in a command's own assignments, so
    that a request's env is no way around what its text would be judged for."""
    return [value for name, value in env.items() if _is_code_variable(name) and value]


# Variables naming a script a shell sources before its command (bash, and sh as `ENV`).
_SCRIPT_PATH_VARIABLES = tuple(f"{name}{op}" for name in ("BASH_ENV", "ENV") for op in ("=", "+="))
# `git -c key=value` settings whose value git runs as a command (`!` marks a shell alias).
_GIT_CODE_KEY = re.compile(
    r"(?i)(?:core\.(?:pager|editor|sshcommand|fsmonitor|hookspath|askpass|gitproxy)|"
    r"sequence\.editor|diff\.(?:.*\.)?(?:external|command)|(?:diff|merge)tool\..*\.cmd|"
    r"merge\..*\.driver|gpg\.(?:.*\.)?program|protocol\..*|uploadpack\..*|remote\..*\.(?:uploadpack|receivepack|vcs|proxy)|"
    r"include\.path|includeif\..*|filter\..*|"
    r"credential\..*helper|.*\.(?:textconv|command|cmd|process|clean|smudge)|pager\..*|"
    r"alias\..*)="
)
# Programs that run their stdin as a script later or elsewhere (`echo cmd | at now`).
_STDIN_RUNNERS = frozenset({"at", "batch", "crontab"})


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1] if "/" in word else word


def _strip_reserved(words: list[str]) -> list[str]:
    i = 0
    while i < len(words):
        if words[i] == "coproc":
            # `coproc NAME { …; }` / `coproc NAME ( … )`: the name is not a command either.
            named = i + 2 < len(words) and words[i + 2] in ("{", "(")
            i += 2 if named else 1
        elif words[i] in _RESERVED_PREFIXES:
            i += 1
        elif words[i] == "function":
            i += 2  # `function name { …`: the name is not a command either
        else:
            break
    if i < len(words) and words[i] in _HEADER_WORDS:
        if words[i] in ("for", "select") and words[i + 2 : i + 3] == ["do"]:
            return _strip_reserved(words[i + 3 :])  # `for NAME do …` (no `in`): the body
        return []
    return words[i:] if i else words


def _option_widths(word: str, spec: _Wrapper) -> frozenset[int]:
    """How many words an option takes with its argument: {1}, {2}, or both when the model of
    the wrapper does not know the option (then both readings are followed)."""
    if word.startswith("--"):
        if "=" in word or word in spec.long_flags:
            return _ONE
        return _TWO if word in spec.long_with_arg else _EITHER
    if spec.numeric_flags and word[1:].isdigit():
        return _ONE
    widths: set[int] = set()
    letters = word[1:]
    for k, letter in enumerate(letters):
        last = k == len(letters) - 1
        if letter in spec.short_with_arg:
            widths.add(2 if last else 1)
            return frozenset(widths)
        if letter not in spec.short_flags:
            widths.update((1, 2) if last else (1,))  # may take the rest (or next word)
    widths.add(1)
    return frozenset(widths)


_ONE = frozenset({1})
_TWO = frozenset({2})
_EITHER = frozenset({1, 2})
# How many readings of a wrapper's options are followed for one command.
_MAX_OPTION_READINGS = 8


def _skip_options_all(words: list[str], spec: _Wrapper) -> list[list[str]]:
    """Every command a wrapper may run: `words` minus the wrapper, its options and operands,
    under each reading of the options its model does not know (first the model's own)."""
    n = len(words)
    starts: list[int] = []
    pending = [1 + (spec.positional if spec.positional_first else 0)]
    seen: set[int] = set()
    while pending and len(starts) < _MAX_OPTION_READINGS:
        i = pending.pop()
        if i in seen:
            continue
        seen.add(i)
        while i < n:
            word = words[i]
            if word == "--":
                i += 1
                break
            if word == "-":  # `env -` is `env -i`
                i += 1
            elif word.startswith("-") and len(word) > 1:
                widths = _option_widths(word, spec)
                if len(widths) > 1:
                    pending.append(i + 2)
                i += min(widths)
            else:
                break
        if spec.assignments:
            while i < n and _ASSIGNMENT_WORD.match(words[i]):
                i += 1
        if not spec.positional_first:
            i += spec.positional
        starts.append(i)
    return [words[i:] if i < n else [] for i in starts]


def _skip_options(words: list[str], spec: _Wrapper) -> list[str]:
    """Return what a wrapper runs under the model's own reading of its options."""
    return _skip_options_all(words, spec)[0]


def _find_exec_commands(words: list[str]) -> list[list[str]]:
    """Commands that `find … -exec CMD … ;` runs."""
    found: list[list[str]] = []
    i = 1
    while i < len(words):
        if words[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(words) and words[j] not in (";", "+"):
                j += 1
            if j > i + 1:
                found.append(words[i + 1 : j])
            i = j
        i += 1
    return found


def _unwrapped(words: list[str]) -> list[list[str]]:
    """Variants of one simple command with one layer of wrapping removed."""
    variants: list[list[str]] = []
    head = words[0]
    name = _basename(head)
    if name != head:
        variants.append([name, *words[1:]])
    if _ASSIGNMENT_WORD.match(head):
        i = 1
        while i < len(words) and _ASSIGNMENT_WORD.match(words[i]):
            i += 1
        if i < len(words):
            variants.append(words[i:])
    spec = _WRAPPERS.get(name)
    if spec is not None:
        # A block of words repeated at the front (`nohup nohup …`, `timeout 5 timeout 5 …`) is
        # skipped whole as well, so a tall stack reaches its command in one step.
        for size in (1, 2, 3):
            if words[:size] == words[size : 2 * size] and len(words) > 2 * size:
                rest = size
                while words[rest : rest + size] == words[:size]:
                    rest += size
                variants.append(words[rest:])
                break
        for inner in _skip_options_all(words, spec):
            if inner and name == "xargs":
                # Its replace-string stands for a line of its stdin (`xargs -I X bash -c X`).
                replace = _xargs_replace(words[1 : len(words) - len(inner)])
                if replace:
                    inner = [word.replace(replace, _XARGS_INPUT) for word in inner]
            if inner:
                variants.append(inner)
                if name == "xargs" and _XARGS_INPUT not in inner:
                    variants.append([*inner, _XARGS_INPUT])
    subcommand = _SUBCOMMAND_RUNNERS.get(name)
    if subcommand is not None and subcommand in words[1:]:
        inner = _skip_options(words[words.index(subcommand, 1) :], _Wrapper())
        if inner:
            variants.append(inner)
    if name == "find":
        variants.extend(_find_exec_commands(words))
    if any("IFS" in word for word in words):
        respaced = " ".join(words).replace("${IFS}", " ").replace("$IFS", " ").split()
        if respaced and respaced != words:
            variants.append(respaced)
    return variants


def _xargs_replace(options: list[str]) -> str | None:
    """The replace-string of xargs' options (`-I X`, `-iX`, `--replace`), if any."""
    for option in options:
        if option in ("-i", "--replace"):
            return "{}"
        if option.startswith("-i") and not option.startswith("--"):
            return option[2:]
    return _option_value(options, "-I", "--replace")


def _option_value(args: list[str], short: str, long: str) -> str | None:
    """Value of `-S value`, `-Svalue`, `--long value` or `--long=value` among `args`."""
    for i, arg in enumerate(args):
        if arg in (short, long):
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith(long + "="):
            return arg[len(long) + 1 :]
        if arg.startswith(short) and not arg.startswith("--") and len(arg) > len(short):
            return arg[len(short) :]
    return None


def _cluster_value(args: list[str], letter: str, long: str) -> str | None:
    """Value of an option given alone or ending a cluster (`-c x`, `-qc x`, `--command=x`)."""
    for i, arg in enumerate(args):
        if arg == long or (arg.startswith("-") and not arg.startswith("--") and arg[-1:] == letter):
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith(long + "="):
            return arg[len(long) + 1 :]
    return None


def _shell_script(args: list[str]) -> tuple[str | None, str | None]:
    """For `sh`-like argv tails: (the `-c` script if any, the script file operand if any).
    With `-s` the shell reads its script from stdin and every operand is an argument."""
    has_c = has_s = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("--command="):
            return arg[len("--command=") :], None
        if arg == "--command":
            has_c = True
            i += 1
        elif arg.startswith("--"):
            if arg in ("--rcfile", "--init-file") and i + 1 < len(args):
                _note_unreadable(f"a shell reads its start-up file from {args[i + 1]}")
            i += 2 if arg in ("--rcfile", "--init-file") else 1
        elif len(arg) > 1 and arg[0] in "-+":
            letters = arg[1:]
            if arg[0] == "-" and "c" in letters:
                has_c = True
            if arg[0] == "-" and "s" in letters:
                has_s = True
            i += 2 if letters[-1] in "oO" else 1
        else:
            break
    operand = args[i] if i < len(args) else None
    if has_c:
        return operand or "", None
    if has_s:
        return None, None
    return None, operand


def _script_option(name: str, args: list[str]) -> str | None:
    """The script a runner hands to a shell through an option (`su -c`, `script -qc`, …)."""
    if name in ("su", "runuser"):
        return _cluster_value(args, "c", "--command") or _option_value(
            args, "--session-command", "--session-command"
        )
    if name in ("flock", "script"):
        return _cluster_value(args, "c", "--command")
    if name == "sg":
        # `sg GROUP [-c] COMMAND`: the command is shell text.
        operands = [arg for arg in args if arg not in ("-", "-c")]
        return operands[1] if len(operands) > 1 else None
    if name == "env":
        return _cluster_value(args, "S", "--split-string") or _option_value(
            args, "-S", "--split-string"
        )
    if name == "tmux" and any(
        arg in ("new", "new-session", "new-window", "neww", "split-window", "splitw", "run-shell")
        for arg in args
    ):
        # The last word of these subcommands is a shell command tmux runs.
        return args[-1] if args and not args[-1].startswith("-") else None
    if name in ("mapfile", "readarray", "complete", "compgen"):
        return _option_value(args, "-C", "-C")  # a callback bash evaluates
    return None


# Options whose value a program runs as shell text (from each program's manual):
# program → (options taking the value as the next word or after `=`, `key=` prefixes of a
# `-o key=value` / `--opt=key=value` value that run it).
_CODE_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "git": (("-x", "--extcmd", "--upload-pack", "--receive-pack", "--exec", "-u"), ()),
    "tar": (
        (
            "--to-command",
            "--use-compress-program",
            "-I",
            "--info-script",
            "-F",
            "--new-volume-script",
            "--rsh-command",
            "--rmt-command",
        ),
        ("exec=",),
    ),
    "zip": (("-TT", "--unzip-command"), ()),
    "rsync": (("-e", "--rsh", "--rsync-path"), ()),
    "ssh": (("-o",), ("proxycommand=", "localcommand=", "knownhostscommand=")),
    "scp": (("-o", "-S"), ("proxycommand=", "localcommand=", "knownhostscommand=")),
    "sftp": (("-o", "-S"), ("proxycommand=", "localcommand=", "knownhostscommand=")),
}


def _option_scripts(name: str, args: list[str]) -> Iterator[str]:
    """Values of `_CODE_OPTIONS` among `args` (`rsync -e CMD`, `ssh -oProxyCommand=CMD`, `tar
    --checkpoint-action=exec=CMD`)."""
    spec = _CODE_OPTIONS.get(name)
    if spec is None:
        return
    options, keys = spec
    for i, arg in enumerate(args):
        value: str | None = None
        for option in options:
            if arg == option:
                value = args[i + 1] if i + 1 < len(args) else None
            elif option.startswith("--") and arg.startswith(option + "="):
                value = arg[len(option) + 1 :]
            elif not option.startswith("--") and arg.startswith(option) and len(arg) > len(option):
                value = arg[len(option) :]
            if value is not None:
                break
        value_is_keyed = value is None
        if value is None and arg.startswith("--") and "=" in arg:
            value = arg.split("=", 1)[1]  # `--checkpoint-action=exec=CMD`
            if not keys or not value.casefold().startswith(keys):
                value = None
        if value is None:
            continue
        if keys and (arg == "-o" or arg.startswith("-o") or value_is_keyed):
            if not value.casefold().startswith(keys):
                continue
            value = value.split("=", 1)[1]
        if _is_dynamic(value):
            _note_unreadable(f"{name} runs shell text built by expansion: {value}")
        yield value


# Programs that start a shell when given no command (from their manuals): `chroot DIR`,
# `su USER`, `script`, `newgrp`, `sudo -s`, … That shell reads its stdin as the script.
_SHELL_WHEN_NO_COMMAND = frozenset(
    {"chroot", "unshare", "nsenter", "setarch", "linux32", "linux64", "sudo", "doas"}
)
_SHELL_STARTERS = frozenset({"su", "runuser", "script", "newgrp", "sg", "login", "ksu"})


def _starts_shell_on_stdin(name: str, args: list[str]) -> bool:
    """`su root <<< …`, `chroot /`, `sudo -s`, `script -q /dev/null`: a shell that reads stdin."""
    if name in _SHELL_STARTERS:
        if name == "runuser" and any(arg in ("-u", "--user") for arg in args):
            return False
        if name == "sg":
            return len([arg for arg in args if not arg.startswith("-")]) <= 1
        return _script_option(name, args) is None
    if name in _SHELL_WHEN_NO_COMMAND:
        spec = _WRAPPERS[name]
        inner = _skip_options_all([name, *args], spec)
        if name in ("sudo", "doas"):
            shell_flag = any(
                arg in ("--shell", "--login")
                or (arg.startswith("-") and not arg.startswith("--") and ("s" in arg or "i" in arg))
                for arg in args
            )
            return shell_flag and any(not words for words in inner)
        return any(not words for words in inner)
    return False


def _assignment_words(words: list[str]) -> list[str]:
    """The words that assign a variable: those before the command name, and the arguments of
    `export`, `declare`, `local`, `readonly`, `typeset` (`echo PAGER=$PAGER` assigns nothing)."""
    i = 0
    while i < len(words) and _ASSIGNMENT_WORD.match(words[i]):
        i += 1
    if i < len(words) and _basename(words[i]) in _DECLARERS:
        return [word for word in words if not word.startswith("-")]
    return words[:i]


def _embedded_scripts(words: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """Shell text a command hands to another shell: `bash -c`, `eval`, `su -c`, `watch`, …

    Text that cannot be known statically is noted as unreadable instead.
    """
    name = _basename(words[0])
    args = words[1:]
    yield from _option_scripts(name, args)
    if name == "git" and any(arg.startswith("ext::") for arg in args):
        # `ext::CMD` remotes run CMD (`%` escapes a blank).
        for arg in args:
            if arg.startswith("ext::"):
                yield arg[5:].replace("% ", " ").replace("%%", "%")
    if name == "parallel" and ":::" in args:
        # GNU parallel runs each argument after `:::` as shell text (after the command, if any).
        cut = args.index(":::")
        command = _skip_options([name, *args[:cut]], _WRAPPERS["parallel"])
        for value in args[cut + 1 :]:
            if value not in (":::", "::::", ":::+"):
                yield " ".join([*command, value])
    if _starts_shell_on_stdin(name, args):
        yield from stdin_texts
    if name == "git":
        for option, value in itertools.pairwise(args):
            if option == "-c" and _GIT_CODE_KEY.match(value):
                if _is_dynamic(value):
                    _note_unreadable("git -c sets a command built by expansion")
                yield value.split("=", 1)[1].removeprefix("!")
    for word in _assignment_words(words):
        if word.startswith(("BASH_CMDS[", "BASH_CMDS=", "BASH_CMDS+=")):
            _note_unreadable("BASH_CMDS makes a command name run another program")
        if word.startswith(("BASH_ALIASES[", "BASH_ALIASES=", "BASH_ALIASES+=")):
            _note_unreadable("BASH_ALIASES makes a command name run another command")
        if word.startswith(_SCRIPT_PATH_VARIABLES) and _is_dynamic(word):
            # The script a shell sources first (`BASH_ENV=<(…) bash -c x`), as `. "$f"` is.
            variable = word.split("=", 1)[0].rstrip("+")
            _note_unreadable(f"{variable} names a script built by expansion")
        if word.startswith(_CODE_VARIABLES) or (
            word.startswith(("GIT_CONFIG_VALUE_", "GIT_CONFIG_KEY_")) and "=" in word
        ):
            variable, value = word.split("=", 1)
            if variable == "GIT_CONFIG_PARAMETERS":
                value = value.strip("'").split("=", 1)[-1]
            if _is_dynamic(word):
                _note_unreadable(f"{variable.rstrip('+')} set to a value built by expansion")
            yield value
    if name in _SHELLS:
        script, script_file = _shell_script(args)
        if _names_stdin(script_file):
            script_file = None
        if script is not None:
            if _is_dynamic(script):
                _note_unreadable(f"{name} -c runs a script built by expansion: {script}")
            yield script
            # The script inherits the stdin (`bash -c bash <<< …`): it may run it too.
            yield from stdin_texts
        elif script_file is None:
            yield from stdin_texts
        elif _is_dynamic(script_file):
            _note_unreadable(f"{name} reads a script from an expansion: {script_file}")
    elif name == "eval" and args[args[:1] == ["--"] :]:
        args = args[args[:1] == ["--"] :]  # `eval -- …`: bash's eval ends its options there
        if any(_is_dynamic(arg) for arg in args):
            _note_unreadable("eval of a non-literal argument")
        yield " ".join(args)
    elif name in ("source", "."):
        path = next((arg for arg in args if arg != "--"), None)
        if path is not None and _is_dynamic(path):
            _note_unreadable(f"{name} reads a script from an expansion: {path}")
        elif _names_stdin(path):
            yield from stdin_texts
    elif name == "alias":
        # An alias's value is code bash runs where the alias is used.
        aliases = _ALIASES.get()
        for arg in args:
            if "=" in arg and not arg.startswith("-"):
                if _is_dynamic(arg):
                    _note_unreadable("alias defined with a value built by expansion")
                alias, value = arg.split("=", 1)
                if aliases is not None:
                    aliases[alias] = value
                yield value
    elif name == "hash" and any(arg.startswith("-") and "p" in arg for arg in args):
        _note_unreadable("hash -p makes a command name run another program")
    elif name == "trap":
        handler = next((arg for arg in args if arg not in ("--",)), None)
        if handler is not None and handler not in ("-", "-p", "-l", ""):
            if _is_dynamic(handler):
                _note_unreadable("trap with code built by expansion")
            yield handler
    elif name == "watch":
        inner = _skip_options(
            words,
            _Wrapper(
                short_with_arg="nqsd", long_with_arg=frozenset({"--interval", "--differences"})
            ),
        )
        if inner:
            if any(_is_dynamic(word) for word in inner):
                _note_unreadable("watch runs a command built by expansion")
            yield " ".join(inner)
    else:
        script = _script_option(name, args)
        if script is not None:
            if _is_dynamic(script):
                _note_unreadable(f"{name} runs a script built by expansion: {script}")
            yield script


def _check_command_name(words: list[str]) -> None:
    """Note a command whose name bash only knows at run time (`$x`, `$(…)`, a glob, braces,
    or the `{}` that `find -exec` and `xargs -I` fill in)."""
    for word in words:
        if _ASSIGNMENT_WORD.match(word):
            continue
        if _XARGS_INPUT in word:
            _note_unreadable(f"command name filled in at run time: {word}")
            return
        if isinstance(word, ShellWord):
            if word.expanded:
                _note_unreadable(f"command name built by expansion: {word}")
            elif word.pattern and word not in ("[", "[["):
                _note_unreadable(f"command name is a glob or brace expansion: {word}")
        return


_ScriptReader = Callable[[str, int], list[str]]


def _segments_of(command: _SimpleCommand, depth: int, read_script: _ScriptReader) -> list[str]:
    words = _strip_reserved(command.words)
    out: list[str] = []
    if words and command.redirects:
        out.append(normalize_whitespace(" ".join([*words, *command.redirects])))
    elif command.redirects:
        out.append(normalize_whitespace(" ".join(command.redirects)))
    if words:
        out.extend(_expand_words(words, command.stdin_texts, depth, read_script))
        if command.stdin_unknown and read_script is _strict_segments and _shell_reads_stdin(words):
            _note_unreadable("a shell reads its script from an expansion or process substitution")
    if read_script is _strict_segments:
        for word in command.words:
            if isinstance(word, ShellWord) and word.literal_code:
                out.extend(_literal_script_segments(word, depth + 1))
    return out


def _literal_script_segments(text: str, depth: int) -> list[str]:
    """A string holding `$(`, a backtick, `<(` or `>(` may be run later (`$((x))`, `printf -v`,
    an env value, …): its commands are matched too. It is data until something runs it, so
    what it makes unreadable is not noted."""
    token = _REASONS.set(None)
    limits_token = _LIMITS.set(None)
    try:
        return _strict_segments(text, depth)
    except UnparseableCommandError:
        return rough_segments(text)
    finally:
        _REASONS.reset(token)
        _LIMITS.reset(limits_token)


def _expand_words(
    words: list[str], stdin_texts: Sequence[str], depth: int, read_script: _ScriptReader
) -> list[str]:
    """The command itself plus every unwrapped variant, and the segments of embedded scripts.

    Each variant is one layer of wrapping less, so a stack of any height is unwrapped; only
    the work budget bounds it, and a strict reader that exhausts it raises `_LimitError`.
    """
    strict = read_script is _strict_segments
    out: list[str] = []
    seen: set[tuple[str, ...]] = set()
    queue: deque[list[str]] = deque([words])
    budget = _MAX_VARIANTS + 4 * len(words)
    chars = 0
    while queue:
        if budget == 0 or chars > _MAX_VARIANT_CHARS:
            if strict and not _note_limit("too many wrapper layers to unwrap"):
                raise _LimitError("too many wrapper layers to unwrap")
            break
        budget -= 1
        current = _strip_reserved(queue.popleft())
        key = tuple(current)
        if not current or key in seen:
            continue
        seen.add(key)
        text = normalize_whitespace(" ".join(current))
        chars += len(text)
        if text:
            out.append(text)
        if strict:
            _check_command_name(current)
        for script in _embedded_scripts(current, stdin_texts):
            out.extend(read_script(script, depth + 1))
        queue.extend(_unwrapped(current))
    return out


def _dedupe(items: list[str]) -> list[str]:
    return [item for item in dict.fromkeys(items) if item]


def _unify_newlines(text: str) -> str:
    # A lone CR is not a separator to bash, but treating it as one only adds segments, which can
    # only make deny/prompt stricter; `allow` already refuses any command containing one.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _strict_segments(text: str, depth: int) -> list[str]:
    if depth > _MAX_DEPTH:
        raise _TooDeepError("command nesting is too deep")
    text = _unify_newlines(text)
    if not text.strip():
        return []
    if len(text) > _MAX_SCRIPT_CHARS:
        raise _LimitError(f"command longer than {_MAX_SCRIPT_CHARS} characters")
    commands = _tree_commands(text, depth)
    if commands is None:
        # The grammar found an error; the lexer reads what bash itself accepts that the grammar
        # does not (and raises on what bash would refuse too).
        commands = _lex(text, depth)
    segments: list[str] = []
    for command in commands:
        segments.extend(_segments_of(command, depth, _strict_segments))
    readers = [command for command in commands if _shell_reads_stdin(command.words)]
    if readers:
        segments.extend(_piped_script_segments(commands, depth))
        if any(not reader.stdin_texts and not reader.redirects for reader in readers):
            _note_computed_scripts(commands, readers)
        if any("<&" in redirect for reader in readers for redirect in reader.redirects):
            _note_unreadable("a shell reads its script from another descriptor")
    return _dedupe(segments)


_PRINTF_LITERAL_FORMAT = re.compile(r"(?:[^%\\]|\\n)*|(?:%[s%]|\\n|\s)*")


def _prints_literal_text(words: list[str]) -> bool:
    """`echo words`, `printf '%s\\n' words`, `cat` of a here-doc, `true`: what reaches the pipe
    is the words as read (`_piped_script_segments` reads them as a script)."""
    name = _basename(words[0])
    args = words[1:]
    if name == "echo":
        return not any(arg.startswith("-") and "e" in arg for arg in args)
    if name == "printf":
        operands = args[args[:1] == ["--"] :]
        return bool(operands) and _PRINTF_LITERAL_FORMAT.fullmatch(operands[0]) is not None
    if name == "cat":
        return all(arg.startswith("-") for arg in args)
    return name in ("true", ":")


def _note_computed_scripts(commands: list[_SimpleCommand], readers: list[_SimpleCommand]) -> None:
    """A shell reading its stdin from a pipe runs what the commands upstream print: unless they
    print literal text, that script is computed (`printf 'forb%s' idden | bash`, `base64 -d`,
    `tr`, `cat file`) and cannot be read."""
    for command in commands:
        if any(command is reader for reader in readers):
            continue
        words = _strip_reserved(command.words)
        if words and not _ASSIGNMENT_WORD.match(words[0]) and not _prints_literal_text(words):
            _note_unreadable(f"a shell reads its script from what `{_basename(words[0])}` prints")
            return


def _shell_reads_stdin(words: list[str]) -> bool:
    """A bare shell (also under wrappers: `sudo bash`) that runs whatever its stdin holds."""
    queue: deque[list[str]] = deque([_strip_reserved(words)])
    seen: set[tuple[str, ...]] = set()
    budget = _MAX_VARIANTS + 4 * len(words)
    chars = 0
    while queue:
        if budget == 0 or chars > _MAX_VARIANT_CHARS:
            if not _note_limit("too many wrapper layers to unwrap"):
                raise _LimitError("too many wrapper layers to unwrap")
            return False
        budget -= 1
        current = _strip_reserved(queue.popleft())
        key = tuple(current)
        if not current or key in seen:
            continue
        seen.add(key)
        chars += sum(len(word) + 1 for word in current)
        name = _basename(current[0])
        if name in _SHELLS:
            script, script_file = _shell_script(current[1:])
            if script is None and (script_file is None or _names_stdin(script_file)):
                return True
            if script is not None and _XARGS_INPUT in script:
                return True  # `… | xargs -I{} bash -c {}`: the script is a line of the pipe
        elif (
            _sources_stdin(name, current[1:])
            or _stdin_runner(name, current[1:])
            or _starts_shell_on_stdin(name, current[1:])
        ):
            return True
        queue.extend(_unwrapped(current))
    return False


def _sources_stdin(name: str, args: list[str]) -> bool:
    return name in ("source", ".") and any(_names_stdin(arg) for arg in args[:1])


def _stdin_runner(name: str, args: list[str]) -> bool:
    """`at now`, `batch`, `crontab -`: stdin is a script run later."""
    if name not in _STDIN_RUNNERS or any(arg in ("-f", "-l", "-r", "-e") for arg in args):
        return False
    return name != "crontab" or not args or "-" in args


# Words of one command upstream of a shell reading its stdin that are read as its script.
_MAX_PIPED_WORDS = 64


def _piped_script_segments(commands: list[_SimpleCommand], depth: int) -> list[str]:
    """When a shell runs its stdin (`cat <<EOF | sh`, `echo 'rm -rf x' | bash`), any word or
    here-doc body upstream may be its script: read each as one. This can only add segments, so
    deny/prompt get stricter and nothing becomes allowed."""
    segments: list[str] = []
    for command in commands:
        arguments = command.words[1:]
        if len(arguments) > _MAX_PIPED_WORDS:
            if not _note_limit("too many words upstream of a shell reading its stdin"):
                raise _LimitError("too many words upstream of a shell reading its stdin")
            arguments = arguments[:_MAX_PIPED_WORDS]
        # What `echo rm -rf x` prints is one line of words: each run of the words up to the
        # last is read too (`printf '%s ' rm -rf x` skips its format that way).
        runs = [" ".join(arguments[i:]) for i in range(len(arguments) - 1)]
        for text in [*command.stdin_texts, *arguments, *runs]:
            try:
                segments.extend(_strict_segments(text, depth + 1))
            except _LimitError:
                raise
            except UnparseableCommandError:
                segments.extend(rough_segments(text))
    return segments


# Approval flows evaluate the same command several times (submit, dry run, decision); parsing
# dominates evaluation cost. Big scripts are not cached so the cache stays a few MiB at most.
_CACHED_COMMAND_MAX_CHARS = 2048


# How many alias uses `_alias_uses` reads again (each one a script read of its own).
_MAX_ALIAS_USES = 256


def _expand_alias_use(
    words: list[str], aliases: dict[str, str], used: frozenset[str]
) -> tuple[str, frozenset[str]] | None:
    """The text bash runs for a segment whose command name is an alias, and the aliases pasted
    so far, or None. A value that ends in a blank makes the next word an alias too
    (`alias s='sudo '`); an alias is never pasted into its own expansion, as in bash."""
    out: list[str] = []
    i = 0
    while i < len(words) and words[i] in aliases and words[i] not in used:
        used |= {words[i]}
        value = aliases[words[i]]
        out.append(value)
        i += 1
        if not value[-1:].isspace():
            break
    if not out:
        return None
    return " ".join([*out, *words[i:]]), used


def _alias_uses(segments: Sequence[str], aliases: dict[str, str]) -> list[str]:
    """Each segment whose command name is an alias this command defined, read again with the
    alias's value pasted in, as bash reads it (also where bash would not expand: only stricter)."""
    out: list[str] = []
    seen: set[str] = set()
    queue = deque((segment, frozenset[str]()) for segment in segments)
    while queue:
        segment, used = queue.popleft()
        expansion = _expand_alias_use(segment.split(" "), aliases, used)
        if expansion is None or expansion[0] in seen:
            continue
        expanded, used = expansion
        if len(seen) >= _MAX_ALIAS_USES:
            if not _note_limit("too many alias uses to read"):
                raise _LimitError("too many alias uses to read")
            break
        seen.add(expanded)
        out.append(normalize_whitespace(expanded))
        try:
            found = _strict_segments(expanded, 1)
        except _LimitError:
            raise
        except UnparseableCommandError:
            found = rough_segments(expanded)
        out.extend(found)
        queue.extend((inner, used) for inner in found)  # an alias used in another's value
    return out


def _read(command: str) -> CommandReading:
    reasons: list[str] = []
    limits: list[str] = []
    aliases: dict[str, str] = {}
    token = _REASONS.set(reasons)
    limits_token = _LIMITS.set(limits)
    aliases_token = _ALIASES.set(aliases)
    try:
        segments = _strict_segments(command, 0)
        if aliases:
            segments = _dedupe([*segments, *_alias_uses(segments, aliases)])
    except _LimitError as exc:
        why = f"{exc} (a limit of the reader)"
        return CommandReading(tuple(rough_segments(command)), (why,), None, str(exc))
    except UnparseableCommandError as exc:
        why = f"cannot parse command: {exc}"
        return CommandReading(tuple(rough_segments(command)), (why,), str(exc))
    finally:
        _REASONS.reset(token)
        _LIMITS.reset(limits_token)
        _ALIASES.reset(aliases_token)
    if limits:
        noted = tuple(f"{why} (a limit of the reader)" for why in limits)
        return CommandReading(tuple(segments), (*noted, *reasons), None, limits[0])
    return CommandReading(tuple(segments), tuple(reasons))


_cached_read = functools.lru_cache(maxsize=2048)(_read)


def read_command(command: str) -> CommandReading:
    """Read a command for the policy: its segments and why parts of it cannot be read.

    Never raises. Segments come from `; && || | |& &` and newlines, `$(…)`, backticks,
    `( … )`, `{ …; }`, named `coproc` bodies, process substitution, arithmetic, unquoted
    here-doc bodies, string literals holding `$(`/backticks/`<(`/`>(`, and the scripts handed
    to `bash -c`, `sh -c`, `eval`, `trap`, `su -c`, `script -c`, `flock -c`, `watch` or a bare
    shell's stdin. Each segment also appears with wrappers removed, however many are stacked
    (`sudo env X=1 timeout 5 rm -rf /x` → `rm -rf /x`).
    """
    if len(command) > _CACHED_COMMAND_MAX_CHARS:
        return _read(command)
    return _cached_read(command)


def policy_segments(command: str) -> list[str]:
    """Every simple command the shell would run, at any depth, for deny/prompt matching
    (see `read_command`). Each segment is whitespace-normalised with quotes removed.

    Raises `UnparseableCommandError` when the structure cannot be determined or a limit of
    the reader is reached.
    """
    reading = read_command(command)
    if reading.parse_error is not None:
        raise UnparseableCommandError(reading.parse_error)
    if reading.limit_reached is not None:
        raise _LimitError(reading.limit_reached)
    return list(reading.segments)


def clear_segment_cache() -> None:
    """Forget cached readings (benchmarks measure first-time cost with it)."""
    _cached_read.cache_clear()


# --- best effort for unparseable text --------------------------------------------------------

_ROUGH_SPLIT = frozenset("\n\r;&|()`")


def _rough_tokenize(text: str) -> list[list[str]]:
    """A flat tokenizer that never fails: quotes removed, split on
    every unquoted `\\n ; & | ( )` (and backticks, so their contents become segments too)."""
    commands: list[list[str]] = []
    words: list[str] = []
    word: list[str] = []
    in_word = False
    n = len(text)
    i = 0

    def end_word() -> None:
        nonlocal in_word
        if in_word:
            words.append("".join(word))
            word.clear()
            in_word = False

    def end_command() -> None:
        end_word()
        if words:
            commands.append(words.copy())
            words.clear()

    while i < n:
        c = text[i]
        if c == "'":
            close = text.find("'", i + 1)
            close = n if close < 0 else close
            word.append(text[i + 1 : close])
            in_word = True
            i = close + 1
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n and text[i + 1] in _DOUBLE_QUOTE_ESCAPABLE:
                    i += 1
                word.append(text[i])
                i += 1
            in_word = True
            i += 1
        elif c == "\\" and i + 1 < n:
            word.append(text[i + 1])
            in_word = True
            i += 2
        elif c in _ROUGH_SPLIT:
            end_command()
            i += 1
        elif c in " \t":
            end_word()
            i += 1
        else:
            word.append(c)
            in_word = True
            i += 1
    end_command()
    return commands


def _rough_script_segments(text: str, depth: int) -> list[str]:
    if depth > _MAX_DEPTH:
        return []
    segments: list[str] = []
    for words in _rough_tokenize(text):
        stripped = _strip_reserved(words)
        if stripped:
            segments.extend(_expand_words(stripped, (), depth, _rough_script_segments))
    return segments


def rough_segments(command: str) -> list[str]:
    """Best-effort segments of text `policy_segments` refused; never raises.

    Good enough to let deny rules fire on unparseable commands; never a reason to allow one.
    """
    return _dedupe(_rough_script_segments(command, 0))
