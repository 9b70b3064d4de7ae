"""A shell word with quotes removed and what bash would still do to it, and the simple
command record the lexer and the tree reader both produce."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


def normalize_whitespace(text: str) -> str:
    """Trim and collapse every whitespace run to one space (docs/policy.md#rules)."""
    return " ".join(text.split())


class ShellWord(str):
    """A word with quotes removed that remembers what bash would still do to it at run time."""

    expanded: bool = False  # holds `$…`, `$(…)`, a backtick or `<(…)`: its value is dynamic
    pattern: bool = False  # holds an unquoted glob or brace expansion: it may become any name
    # Quoted text holds `$(`, a backtick, `<(` or `>(`: code if something runs it later.
    literal_code: bool = False
    # Such text with its quotes removed where bash removes them (a `${x='$(…)'}` operand).
    literal_texts: tuple[str, ...] = ()


_EXPANSION = re.compile(r"\$[A-Za-z0-9_@*#?$!{(\[-]|`")
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")


def holds_code(text: str) -> bool:
    return any(marker in text for marker in ("$(", "`", "<(", ">("))


def has_expansion(text: str) -> bool:
    return _EXPANSION.search(text) is not None


def is_pattern(unquoted: str) -> bool:
    return any(ch in unquoted for ch in "*?[") or _BRACE_EXPANSION.search(unquoted) is not None


def is_dynamic(word: str) -> bool:
    return isinstance(word, ShellWord) and (word.expanded or word.pattern)


@dataclass(slots=True)
class SimpleCommand:
    words: list[str] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    # Here-strings and here-doc bodies: a script when the command is a bare shell (`bash <<EOF`).
    stdin_texts: list[str] = field(default_factory=list)
    # Stdin comes from a file or process substitution whose name is built by expansion.
    stdin_unknown: bool = False


@dataclass(slots=True)
class PendingHeredoc:
    delimiter: str
    expands: bool
    strip_tabs: bool
    command: SimpleCommand


RESERVED_PREFIXES = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"}
    | {"coproc"}
)
# Headers whose words are never run as a command (`for x in a b`, `case $x in`).
HEADER_WORDS = frozenset({"for", "select", "case"})
