"""The one quote/escape scanner: where a single- or double-quoted string ends, what a
backslash escapes. Every reader in this package skips quotes with these helpers, so that
they agree on where a quoted string ends."""

from __future__ import annotations

DOUBLE_QUOTE_ESCAPABLE = frozenset('"\\$`')


def is_escaped(text: str, i: int) -> bool:
    """The character at `i` follows an odd run of backslashes."""
    run = 0
    while i - run - 1 >= 0 and text[i - run - 1] == "\\":
        run += 1
    return run % 2 == 1


def skip_blanks(text: str, i: int) -> int:
    """The index of the first character at or after `i` that is not a space or a tab."""
    n = len(text)
    while i < n and text[i] in " \t":
        i += 1
    return i


def single_quote_end(text: str, i: int) -> int:
    """The index after the `'` closing the single-quoted string opened at `i`, or -1 when it is
    never closed (nothing inside single quotes is special, not even a backslash)."""
    close = text.find("'", i + 1)
    return -1 if close < 0 else close + 1


def double_quote_end(text: str, i: int, *, refuse_substitution: bool = False) -> int:
    """The index after the `"` closing the double-quoted string opened at `i`, or -1 when it is
    never closed. A backslash hides the character after it. With `refuse_substitution`, an
    unescaped backtick or `$(` inside counts as -1 too (the text holds a command)."""
    n = len(text)
    j = i + 1
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if refuse_substitution and (c == "`" or text.startswith("$(", j)):
            return -1
        if c == '"':
            return j + 1
        j += 1
    return -1


def read_double_quoted(text: str, i: int) -> tuple[str, int]:
    """The text of the double-quoted string opened at `i` with its escapes undone (a backslash
    escapes only `" \\ $` and a backtick there), and the index after its closing quote, or -1
    when it is never closed (the text then runs to the end). Expansions stay as written."""
    n = len(text)
    out: list[str] = []
    j = i + 1
    while j < n:
        c = text[j]
        if c == '"':
            return "".join(out), j + 1
        if c == "\\" and j + 1 < n and text[j + 1] in DOUBLE_QUOTE_ESCAPABLE:
            j += 1
        out.append(text[j])
        j += 1
    return "".join(out), -1


def quoted_end(text: str, i: int, *, refuse_substitution: bool = False) -> int:
    """The index after the backslash escape or the quoted string that starts at `i` (a `\\`, `'`
    or `"`), or -1 when it is never closed (see `double_quote_end` for `refuse_substitution`)."""
    c = text[i]
    if c == "\\":
        return -1 if i + 1 >= len(text) else i + 2
    if c == "'":
        return single_quote_end(text, i)
    return double_quote_end(text, i, refuse_substitution=refuse_substitution)
