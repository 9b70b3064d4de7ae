"""A small bash lexer: dequotes words (decoding `$'…'`), descends into every kind of
substitution, and reads unquoted here-doc bodies and backticks, which the grammar leaves as
text. It also reads whole scripts when tree-sitter-bash reports an error."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.policy.shell.findings import (
    ARITHMETIC_SCAN_SLACK,
    MAX_DEPTH,
    LimitError,
    TooDeepError,
    UnparseableCommandError,
)
from app.policy.shell.scanner import DOUBLE_QUOTE_ESCAPABLE, is_escaped, single_quote_end
from app.policy.shell.words import (
    RESERVED_PREFIXES,
    PendingHeredoc,
    ShellWord,
    SimpleCommand,
    has_expansion,
    holds_code,
    is_pattern,
)

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


_SEPARATORS = frozenset("\n;|&")


@dataclass(slots=True)
class _ListState:
    """What `Lexer.lex_list` tracks between the tokens of one list."""

    command: SimpleCommand = field(default_factory=SimpleCommand)
    heredocs: list[PendingHeredoc] = field(default_factory=list)
    parens: int = 0  # open `(` subshells
    open_cases: int = 0  # `case` statements whose `esac` is still to come


class Lexer:
    """Reads shell text into simple commands, descending into every kind of substitution.

    Commands nested in `$(…)`, backticks, `<(…)`, `${…}`, arithmetic and unquoted here-doc bodies
    are appended to the shared sink as they are met. Anything the lexer cannot read with
    certainty raises `UnparseableCommandError`.
    """

    def __init__(self, text: str, depth: int, sink: list[SimpleCommand]) -> None:
        if depth > MAX_DEPTH:
            raise TooDeepError("command nesting is too deep")
        self.text = text
        self.n = len(text)
        self.depth = depth
        self.sink = sink
        # Characters `((` scans may read in all: each scan that turns out not to be arithmetic
        # reads on to the end of the text, so `((((…` would cost O(n²) without a bound.
        self.arithmetic_budget = 4 * self.n + ARITHMETIC_SCAN_SLACK

    def lex_all(self) -> None:
        self.lex_list(0, closer=False)

    def lex_list(self, i: int, *, closer: bool) -> int:
        """Lex commands from `i`; with `closer`, stop after the `)` ending a `$(`/`<(`."""
        text = self.text
        n = self.n
        state = _ListState()
        while i < n:
            c = text[i]
            if c in " \t":
                i += 1
            elif c == "#":
                newline = text.find("\n", i)
                i = n if newline < 0 else newline
            elif c in _SEPARATORS:
                i = self._separator(i, state)
            elif c == "(":
                i = self._open_paren(i, state)
            elif c == ")" and state.parens == 0 and state.open_cases == 0:
                self._end_command(state)
                if closer:
                    return i + 1
                raise UnparseableCommandError("unbalanced ')'")
            elif c == ")":
                i = self._close_paren(i, state)
            elif c in "<>" and not text.startswith("(", i + 1):
                i = self._redirect(i, "", state.command, state.heredocs)
            else:
                i = self._word(i, state)
        if closer:
            raise UnparseableCommandError("unterminated command substitution")
        if state.parens:
            raise UnparseableCommandError("unbalanced '('")
        self._finish(state.command)
        return i

    def _end_command(self, state: _ListState) -> None:
        self._finish(state.command)
        state.command = SimpleCommand()

    def _separator(self, i: int, state: _ListState) -> int:
        """A newline (then any pending here-doc bodies), `;`, `|` or `&` (unless it starts an
        `&>` redirect) ends the command."""
        if self.text.startswith("&>", i):
            return self._redirect(i, "", state.command, state.heredocs)
        self._end_command(state)
        if self.text[i] != "\n" or not state.heredocs:
            return i + 1
        end = self._read_heredoc_bodies(i + 1, state.heredocs)
        state.heredocs = []
        return end

    def _open_paren(self, i: int, state: _ListState) -> int:
        """`((…))` arithmetic in command position (or a `for ((…))` header), else a subshell."""
        if self.text.startswith("((", i) and _only_reserved_or(state.command.words, "for"):
            end = self._read_arithmetic(i + 2)
            if end is not None:
                return end
        self._end_command(state)
        state.parens += 1
        return i + 1

    def _close_paren(self, i: int, state: _ListState) -> int:
        """The end of a subshell, or of a `case` pattern such as `a|b)` (whose words before it
        are not a command)."""
        if state.parens == 0:
            state.command = SimpleCommand()
        else:
            self._end_command(state)
            state.parens -= 1
        return i + 1

    def _word(self, i: int, state: _ListState) -> int:
        """A word of the command, or the digits of a redirect's descriptor (`2>`)."""
        text = self.text
        start = i
        word, _quoted, i = self.read_word(i)
        raw = text[start:i]
        if i < self.n and text[i] in "<>" and raw.isdigit() and not text.startswith("(", i + 1):
            return self._redirect(i, raw, state.command, state.heredocs)
        if _only_reserved_or(state.command.words, None):
            if raw == "case":
                state.open_cases += 1
            elif raw == "esac" and state.open_cases > 0:
                state.open_cases -= 1
        state.command.words.append(word)
        return i

    def _finish(self, command: SimpleCommand) -> None:
        if command.words or command.redirects:
            self.sink.append(command)

    def _redirect(
        self, i: int, fd: str, command: SimpleCommand, heredocs: list[PendingHeredoc]
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
            heredocs.append(PendingHeredoc(target, expands, op == "<<-", command))
        elif op == "<<<":
            command.stdin_texts.append(target)
        command.redirects.append(f"{fd}{op}{target}")
        return i

    def _read_heredoc_bodies(self, i: int, heredocs: list[PendingHeredoc]) -> int:
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
                Lexer(body, self.depth, self.sink).scan_expansions()
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
        literal_texts: list[str] = []
        escaped = False
        while i < n:
            c = text[i]
            if c in "<>" and text.startswith("(", i + 1):
                end = Lexer(text, self.depth + 1, self.sink).lex_list(i + 2, closer=True)
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
                    escaped = True
                i += 2
            elif c == "'":
                end = single_quote_end(text, i)
                if end < 0:
                    raise UnparseableCommandError("unterminated single quote")
                buf.append(text[i + 1 : end - 1])
                literal_code = literal_code or holds_code(buf[-1])
                quoted = True
                i = end
            elif c == '"':
                start = len(buf)
                i = self._read_double_quoted(i + 1, buf)
                expanded = expanded or has_expansion("".join(buf[start:]))
                quoted = True
            elif c == "`":
                i = self._read_backtick(i, buf)
                expanded = True
            elif c == "$" and text.startswith("$'", i):
                start = len(buf)
                i = self._read_ansi_c(i + 2, buf)
                literal_code = literal_code or holds_code("".join(buf[start:]))
                quoted = True
            elif c == "$" and text.startswith('$"', i):
                start = len(buf)
                i = self._read_double_quoted(i + 2, buf)
                expanded = expanded or has_expansion("".join(buf[start:]))
                quoted = True
            elif c == "$":
                expanded = expanded or has_expansion(text[i : i + 2])
                i = self._read_dollar(i, buf, in_double_quotes=False)
                operand = _unquoted_operand(buf[-1])
                if operand is not None:  # `${x='$(cmd)'}`: its value is `$(cmd)`
                    literal_code = True
                    literal_texts.append(operand)
            else:
                buf.append(c)
                unquoted.append(c)
                i += 1
        word = ShellWord("".join(buf))
        word.expanded = expanded
        word.pattern = is_pattern("".join(unquoted))
        # Escaped text is code once its backslashes are gone: `declare -a x=\(\$\(cmd\)\)`.
        word.literal_code = literal_code or (
            (escaped or (expanded and "\\" in text)) and holds_code(word)
        )
        word.literal_texts = tuple(literal_texts)
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
                if nxt in DOUBLE_QUOTE_ESCAPABLE:
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
        Lexer("".join(inner), self.depth + 1, self.sink).lex_all()
        buf.append(text[i : j + 1])
        return j + 1

    def _read_dollar(self, i: int, buf: list[str], *, in_double_quotes: bool) -> int:
        """Read a `$…` expansion starting at `i`, lexing any command inside it."""
        text = self.text
        if text.startswith("$((", i):
            end = self._read_arithmetic(i + 3)
            if end is None:
                # `$((a); b)` is a command substitution holding a subshell, not arithmetic.
                end = Lexer(text, self.depth + 1, self.sink).lex_list(i + 2, closer=True)
        elif text.startswith("$(", i):
            end = Lexer(text, self.depth + 1, self.sink).lex_list(i + 2, closer=True)
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
        subscripts = 0  # open `[` of an array subscript, which is arithmetic
        scratch: list[str] = []
        while i < self.n:
            c = text[i]
            if c == "\\":
                i += 2
            elif c == "'" and not in_double_quotes:
                start = i
                i = single_quote_end(text, i)
                if i < 0:
                    raise UnparseableCommandError("unterminated single quote")
                if opening == "[" or subscripts > 0:
                    self._scan_literal_quotes(start, i)
            elif c == "[" and opening == "{":
                subscripts += 1
                i += 1
            elif c == "]" and subscripts > 0:
                subscripts -= 1
                i += 1
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

    def _scan_literal_quotes(self, start: int, end: int) -> None:
        """Read substitutions in `'…'` (from `start` to `end`) where bash takes the single
        quotes as literal characters and expands what is between them (arithmetic, an array
        subscript): `$(( '$(cmd)' ))` runs cmd."""
        Lexer(self.text[start + 1 : end - 1], self.depth, self.sink).scan_expansions()

    def _read_arithmetic(self, i: int) -> int | None:
        """Return the index after the `))` closing arithmetic that starts at `i`.

        None when the text is not arithmetic after all: a `)` at depth zero not followed by
        another `)` means `((a); b)` is nested subshells.
        """
        end = self._scan_arithmetic(i)
        self.arithmetic_budget -= (self.n if end is None else end) - i
        if self.arithmetic_budget < 0:
            raise LimitError("too many '((' to read")
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
                start = i
                i = single_quote_end(text, i)
                if i < 0:
                    return None
                self._scan_literal_quotes(start, i)
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
                while close > 0 and is_escaped(text, close):
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
    return all(word in RESERVED_PREFIXES or word == allowed for word in words)


def _unquoted_operand(expansion: str) -> str | None:
    """A `${…}` expansion's text with its quotes and backslashes removed, when that holds
    code: bash removes them from the word of `${x=word}`, `${x:-word}`, … and may then run
    the value (`${PS4='$(cmd)'}` assigns PS4, which `set -x` runs)."""
    if not expansion.startswith("${"):
        return None
    operand = expansion.translate(_QUOTE_CHARACTERS)
    return operand if holds_code(operand) and operand != expansion else None


_QUOTE_CHARACTERS = str.maketrans("", "", "'\"\\")


def lex(text: str, depth: int) -> list[SimpleCommand]:
    sink: list[SimpleCommand] = []
    Lexer(text, depth, sink).lex_all()
    return sink


def dequote(raw: str, depth: int) -> ShellWord:
    """One word of source text with quotes removed, read by the lexer (which decodes `$'…'`)."""
    try:
        word, _quoted, stop = Lexer(raw, depth, []).read_word(0)
    except UnparseableCommandError:
        stop = -1
    if stop == len(raw):
        return word
    # Not a single lexer word (an array value `(a b)`, a `[[ ]]` operand): keep the source.
    fallback = ShellWord(raw)
    fallback.expanded = has_expansion(raw)
    fallback.pattern = is_pattern(raw)
    fallback.literal_code = holds_code(raw) and any(ch in raw for ch in "'\\")
    return fallback


def dequote_words(raw: str, depth: int) -> list[ShellWord]:
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
            word, _quoted, stop = Lexer(raw, depth, []).read_word(i)
            if stop == i:
                return [dequote(raw, depth)]
            words.append(word)
            i = stop
    except UnparseableCommandError:
        return [dequote(raw, depth)]
    return words or [dequote(raw, depth)]


def lex_backtick(text: str, depth: int) -> list[SimpleCommand]:
    sink: list[SimpleCommand] = []
    Lexer(text, depth - 1, sink).read_word(0)
    return sink
