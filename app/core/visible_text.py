"""Text a command or a request planted, made safe to show (pure): every character a terminal,
a log reader or a human would not see as itself is written as an escape instead.

What an approver is shown must be what runs: a carriage return or an ANSI/OSC sequence
(`\\x1b[2K`, `\\x1b]0;…\\x07`) rewrites the terminal line it is printed on, a bidi override
(U+202E) reorders what follows, a zero-width character hides between two others, and a newline
in a log line forges the next line. Such characters become `\\r`, `\\x1b`, `\\u202e`, …
(RELIABILITY.md, "Bytes and text a command plants").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator

# Control characters (C0, DEL, C1), format characters (bidi controls, zero-width characters,
# the BOM, soft hyphen, …), line and paragraph separators, lone surrogates (a name that was not
# UTF-8, after os.fsdecode), private-use and unassigned code points: none shows as itself.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_hidden(char: str) -> bool:
    """Whether `char` does not show as itself (see the module docstring). A space other than
    U+0020 (no-break, en, ideographic, …) looks like one but is no word break to bash."""
    category = unicodedata.category(char)
    return category in _HIDDEN_CATEGORIES or (category == "Zs" and char != " ")


def escape_of(char: str) -> str:
    """The visible escape of one hidden character: `\\r`, `\\x1b`, `\\u202e`, `\\U000e0001`."""
    if char in _NAMED:
        return _NAMED[char]
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def pieces(text: str, *, keep: str = "") -> Iterator[tuple[str, bool]]:
    """`text` as runs of (text, escaped): visible runs as they are, each hidden character as its
    escape; the characters in `keep` (say "\\n\\t") are left as they are."""
    if text.isascii() and text.isprintable():  # the common case, at C speed
        if text:
            yield text, False
        return
    run: list[str] = []
    for char in text:
        if char not in keep and is_hidden(char):
            if run:
                yield "".join(run), False
                run = []
            yield escape_of(char), True
        else:
            run.append(char)
    if run:
        yield "".join(run), False


def visible(text: str, *, keep: str = "") -> str:
    """`text` with every hidden character (but those in `keep`) written as its escape."""
    return "".join(piece for piece, _ in pieces(text, keep=keep))
