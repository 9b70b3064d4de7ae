"""Reading the structure of a script from tree-sitter-bash: every simple command at any
depth, with the variables whose values are only known at run time."""

from __future__ import annotations

import re
import threading

import tree_sitter
import tree_sitter_bash

from app.policy.shell.embedded import note_run_time_names
from app.policy.shell.findings import (
    MAX_COMMANDS,
    MAX_DEPTH,
    LimitError,
    TooDeepError,
    note_unreadable,
)
from app.policy.shell.lexer import Lexer, dequote, dequote_words, lex_backtick
from app.policy.shell.words import ShellWord, SimpleCommand, is_dynamic
from app.policy.shell.wrappers import option_value

_BASH_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_PARSERS = threading.local()  # a tree-sitter Parser is not meant to be shared between threads
_REDIRECT_NODES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_COMMAND_NODES = frozenset({"command", "declaration_command", "unset_command"})
_ARITHMETIC_NODES = frozenset({"arithmetic_expansion", "c_style_for_statement"})
_PLAIN_VALUE = re.compile(r"[+-]?[0-9]+|[+-]?0[xX][0-9A-Fa-f]+|[A-Za-z_][A-Za-z0-9_]*|")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
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


class _TreeReader:
    """Collects the simple commands of one tree-sitter parse, at any depth.

    Backtick substitutions and unquoted here-doc bodies are read by the lexer instead: the
    grammar does not undo the backslashes of nested backticks and leaves backticks inside
    here-doc bodies as text.
    """

    def __init__(self, source: bytes, depth: int) -> None:
        self.source = source
        self.depth = depth
        self.sink: list[SimpleCommand] = []
        self.dynamic_names: set[str] = set()
        self.arithmetic_names: set[str] = set()
        # The grammar sometimes drops text without reporting an error (`python3 - <<EOF` loses
        # the `-`): every byte that is not blank must lie in a token, else the parse is refused.
        self.cursor = 0
        self.dropped_text = False
        # tree-sitter-bash 0.25.1 joins a line that starts with a backslash-escaped character to
        # the command on the line above (`true⏎\rm x` is one command `true ⏎\rm x` to it; to
        # bash a newline that no backslash escapes ends the command, so `rm x` runs): a command
        # whose words are apart by such a newline is refused, and the lexer reads the text.
        self.lines_joined = False
        # A here-doc body that holds its own delimiter line (see `heredoc`).
        self.heredoc_overrun = False
        # The grammar reads the `0` of `0<` / `0>` as an argument (`bash 0< <(…)` looked like
        # `bash` running a script file `0`): start byte of the redirect → its descriptor.
        self.io_numbers: dict[int, str] = {}

    def cover(self, node: tree_sitter.Node) -> None:
        if self.source[self.cursor : node.start_byte].strip(b" \t\r\n\\"):
            self.dropped_text = True
        self.cursor = max(self.cursor, node.end_byte)

    def text(self, node: tree_sitter.Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def read(self, root: tree_sitter.Node) -> list[SimpleCommand]:
        stack: list[tuple[tree_sitter.Node, int, bool]] = [(root, self.depth, False)]
        visit = self.visit  # called for every node: look the method up once
        while stack:
            node, depth, in_arithmetic = stack.pop()
            if depth > MAX_DEPTH:
                raise TooDeepError("command nesting is too deep")
            if len(self.sink) > MAX_COMMANDS:
                raise LimitError(f"more than {MAX_COMMANDS} commands")
            if not visit(node, depth, in_arithmetic):
                continue
            kind = node.type
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

    def visit(self, node: tree_sitter.Node, depth: int, in_arithmetic: bool) -> bool:
        """Read what `node` itself says; False when its children are not to be walked (the
        lexer read them, or its redirect did)."""
        kind = node.type
        if kind in _COMMAND_NODES:
            self.sink.append(self.command(node, depth))
        elif kind == "redirected_statement":
            self.compound_redirects(node, depth)
        elif kind == "variable_assignment":
            self.bare_assignment(node, depth)
        elif kind == "command_substitution" and self.text(node).startswith("`"):
            self.cover(node)
            self.sink.extend(lex_backtick(self.text(node), depth + 1))
            return False
        elif kind in ("word", "regex") and b"`" in self.source[node.start_byte : node.end_byte]:
            # The grammar leaves a backtick substitution that is the whole word of a `${…}`
            # operator as text (`${x:-`rm x`}`, `${x/`a`/b}`); bash runs it. Any backtick left in
            # a word is read as a substitution (an escaped one is skipped).
            # (A word node may end inside a character: those bytes are no backtick either way.)
            text = self.source[node.start_byte : node.end_byte].decode("utf-8", "replace")
            Lexer(text, depth, self.sink).scan_expansions()
        elif kind == "heredoc_body":
            self.cover(node)
            return False  # read with its redirect
        elif kind in ("raw_string", "ansi_c_string") and _quotes_nothing(node, in_arithmetic):
            # Single quotes that bash takes as literal characters: what lies between them
            # is expanded, substitutions included.
            Lexer(self.text(node), depth, self.sink).scan_expansions()
        elif kind in ("raw_string", "string", "ansi_c_string"):
            self.loose_string(node, depth)
        elif kind in ("for_statement", "select_statement"):
            self.loop_variable(node, depth)
        elif kind == "expansion" and self.text(node).endswith("@P}"):
            note_unreadable("prompt expansion ${…@P} runs code kept in a variable")
        elif in_arithmetic and kind in ("variable_name", "word"):
            name = self.text(node)
            if _NAME.fullmatch(name):
                self.arithmetic_names.add(name)
        return True

    def check_lines(self, node: tree_sitter.Node) -> None:
        """Note a child of `node` (a word of a command or redirect, a redirect of a statement)
        that the grammar put on the line after where bash ended the command."""
        previous_end = node.start_byte
        for child in node.children:
            if _ends_a_line(self.source[previous_end : child.end_byte]):
                self.lines_joined = True
            previous_end = child.end_byte

    def compound_redirects(self, node: tree_sitter.Node, depth: int) -> None:
        """Redirects of a compound command (`{ …; } > f`, `while …; done < f`); those of a
        simple command are read with it."""
        self.check_lines(node)
        body = node.child_by_field_name("body")
        if body is not None and body.type in _COMMAND_NODES:
            return
        command = SimpleCommand()
        for child in node.children:
            if child.type in _REDIRECT_NODES:
                self.redirect(child, command, depth)
        if command.redirects:
            self.sink.append(command)

    def bare_assignment(self, node: tree_sitter.Node, depth: int) -> None:
        """A `NAME=value` statement of its own (those before a command are its words)."""
        if node.parent is not None and node.parent.type in _COMMAND_NODES:
            return
        self.assignment(node)
        self.sink.append(SimpleCommand(words=[dequote(self.text(node), depth)]))

    def loose_string(self, node: tree_sitter.Node, depth: int) -> None:
        """Strings outside a simple command's words (a `for`/`case` word, an array element, a
        `[[ ]]` operand) may be evaluated later too (`$((x))`, `-v`)."""
        if not _outside_command(node):
            return
        word = dequote(self.text(node), depth)
        if word.literal_code:
            self.sink.append(SimpleCommand(words=[ShellWord(":"), word]))

    def command(self, node: tree_sitter.Node, depth: int) -> SimpleCommand:
        command = SimpleCommand()
        parent = node.parent
        # Nodes that touch form one word to bash, even where the grammar ends a node early
        # (`la'un'\\ch` is one word, the grammar gives two).
        pieces: list[tuple[int, int, bool]] = []  # (start, end, is an assignment)
        self.check_lines(node)
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
                command.words.append(dequote(raw, depth))
            else:
                command.words.extend(dequote_words(raw, depth))
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
            word = dequote(self.text(value), depth)
            if word.expanded or word.pattern or word.literal_code:
                self.dynamic_names.add(self.text(variable))
                return

    def note_readers(self, words: list[str]) -> None:
        """`read x`, `mapfile a`, `printf -v x …`, `let …`: variables and arithmetic."""
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]  # `IFS= read -r PS4`: the assignments are the command's
        if not words:
            return
        name = words[0]
        note_run_time_names(name, words[1:])
        if name in _READERS:
            self.dynamic_names.update(w for w in words[1:] if _NAME.fullmatch(w))
        elif name == "printf":
            value = option_value(words[1:], "-v", "-v")
            if value is not None:
                self.dynamic_names.add(value.split("[", 1)[0])
        elif name == "let":
            for word in words[1:]:
                if is_dynamic(word):
                    note_unreadable("let evaluates an argument built by expansion")
                self.arithmetic_names.update(_NAME.findall(word))

    def redirect(self, node: tree_sitter.Node, command: SimpleCommand, depth: int) -> None:
        if node.type == "heredoc_redirect":
            self.heredoc(node, command, depth)
            return
        self.check_lines(node)
        fd = self.io_numbers.get(node.start_byte, "")
        op = ""
        target: ShellWord | None = None
        for child in node.children:
            if child.type == "file_descriptor":
                fd = self.text(child)
            elif not child.is_named:
                op = op or self.text(child)
            elif target is None:
                target = dequote(self.text(child), depth)
        if target is None:
            return
        command.redirects.append(f"{fd}{op}{target}")
        if node.type == "herestring_redirect":
            command.stdin_texts.append(target)
        elif op == "<" and target.expanded:
            command.stdin_unknown = True

    def heredoc(self, node: tree_sitter.Node, command: SimpleCommand, depth: int) -> None:
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
        word = dequote(delimiter, depth)
        # While an expansion is open (`$((`, `${x:-`) the grammar reads the body on past the
        # delimiter line; bash ends the here-doc at the first line that is the delimiter and
        # runs what follows as commands. Such a tree is refused, and the lexer reads the text.
        for line in body.split("\n"):
            if (line.lstrip("\t") if op == "<<-" else line) == word:
                self.heredoc_overrun = True
        command.redirects.append(f"{op}{word}")
        command.stdin_texts.append(body)
        if expands and body:
            Lexer(body, depth, self.sink).scan_expansions()


# Blanks and line continuations; the grammar puts them at the start of a word (`⏎\rm`).
_LEADING_BLANKS = re.compile(rb"(?:[ \t\n]|\\\n)*")


def _ends_a_line(text: bytes) -> bool:
    """Whether the blanks that open `text` (the gap before a word of a command and the word)
    hold a newline that ends a command in bash: one that is not a line continuation."""
    blanks = _LEADING_BLANKS.match(text)
    return blanks is not None and b"\n" in blanks.group().replace(b"\\\n", b"")


# `${x:-word}` and its kin: inside double quotes bash takes single quotes in their word as
# literal characters (the pattern operators `#`, `%`, `/`, `^`, `,` still quote, bash 5.2).
_DEFAULTING_OPERATORS = frozenset({"-", ":-", "+", ":+", "=", ":=", "?", ":?"})
# Where a quoting context starts afresh: the text of a substitution is a script of its own.
_QUOTING_BOUNDARIES = frozenset({"command_substitution", "process_substitution", "program"})


def _quotes_nothing(node: tree_sitter.Node, in_arithmetic: bool) -> bool:
    """Whether the single quotes of a `'…'` / `$'…'` node are literal characters to bash, so
    that it runs a substitution between them: in arithmetic (`$(( '…' ))`, `$[ '…' ]`), in an
    array subscript (`${a['…']}`), and in the word of a `${x:-…}`-like expansion that is
    itself inside double quotes (`"${x:-'…'}"`)."""
    if in_arithmetic:
        return True
    defaulting = False
    child = node
    parent = node.parent
    while parent is not None and parent.type not in _QUOTING_BOUNDARIES:
        if parent.type == "subscript":
            return True
        if parent.type == "expansion" and not defaulting:
            operators = [c.type for c in parent.children if c.end_byte <= child.start_byte]
            defaulting = bool(operators) and operators[-1] in _DEFAULTING_OPERATORS
        if parent.type == "string" and defaulting:
            return True
        child = parent
        parent = parent.parent
    return False


def _outside_command(node: tree_sitter.Node) -> bool:
    parent = node.parent
    while parent is not None and parent.type != "program":
        if parent.type in _COMMAND_NODES:
            return False
        parent = parent.parent
    return True


# Places where bash evaluates a variable's value as arithmetic or as a name (which may hold
# a subscript, `a[$(cmd)]`): `${!x}`, `${a[x]}`, `${s:x}`, `[[ x -eq 0 ]]`, `[[ -v x ]]`,
# `declare -i i=x`.
_EVALUATING_CONTEXTS = (
    re.compile(r"\$\{!([A-Za-z_]\w*)"),
    # Any subscript: `${a[x]}`, `${#a[x]}`, `a[x]=1`, `read 'a[x]'`, `unset 'a[x]'`,
    # `[[ -v a[x] ]]`, `printf -v 'a[x]'` (an indexed array's subscript is arithmetic).
    re.compile(r"(?<![\w$])[A-Za-z_]\w*\[([^\]\[]*)\]"),
    re.compile(r"\$\{[A-Za-z_]\w*(?:\[[^\]]*\])?:(?![-=?+])([^}]*)\}"),
    re.compile(r"\[\[([^\]]*-(?:eq|ne|lt|le|gt|ge|v)\b.*?)\]\]"),
    re.compile(r"(?:^|[\s;&|(!])(?:test|\[)\s+(?:!\s+)?(-v\s+\S+)"),
    re.compile(r"\b(?:declare|typeset|local)\s+-[A-Za-z]*i[A-Za-z]*\s+([^;&|\n]*)"),
)
# `declare -i i` (assigning `i=x` later evaluates x) and `declare -n r[=target]` (a reference).
_DECLARED = re.compile(r"\b(?:declare|typeset|local)\s+((?:-[A-Za-z]+\s+)+)([^;&|\n]*)")


def _evaluated_names(text: str, dynamic: set[str], arithmetic: set[str]) -> tuple[set[str], bool]:
    """The names bash evaluates as arithmetic or as a name (besides `arithmetic`, found in the
    tree), and whether a reference (`declare -n r`) is set to a name known only at run time
    (`r=$x`)."""
    names: set[str] = set(arithmetic)
    for context in _EVALUATING_CONTEXTS:
        for match in context.finditer(text):
            names.update(_NAME.findall(match.group(1)))
    integers: set[str] = set()
    references: dict[str, str] = {}
    for match in _DECLARED.finditer(text):
        flags = match.group(1)
        for item in match.group(2).split():
            name, _, target = item.partition("=")
            if not _NAME.fullmatch(name):
                continue
            if "i" in flags:
                integers.add(name)
            if "n" in flags:
                references[name] = target
    for name in integers:  # `i=x` with `i` an integer evaluates x
        for value in re.findall(rf"(?<![\w$]){name}(?:\[[^\]]*\])?\+?=(\S*)", text):
            names.update(_NAME.findall(value))
    # A reference stands for its target wherever it is evaluated; one without a literal
    # target that gets a run-time value names whatever that value says.
    loose = False
    for name, target in references.items():
        if name in names and _NAME.fullmatch(target):
            names.add(target)
        if not target and name in dynamic:
            loose = True
    return names, loose


def tree_commands(text: str, depth: int) -> list[SimpleCommand] | None:
    """The simple commands tree-sitter-bash finds, or None when the grammar reports an error."""
    source = text.encode("utf-8", "surrogatepass")
    tree = _parser().parse(_scanner_safe(text))
    if tree.root_node.has_error:
        return None
    reader = _TreeReader(source, depth)
    commands = reader.read(tree.root_node)
    if reader.dropped_text or reader.lines_joined or reader.heredoc_overrun:
        return None
    evaluated, loose_reference = _evaluated_names(
        text, reader.dynamic_names, reader.arithmetic_names
    )
    reader.arithmetic_names.update(evaluated)
    if loose_reference:
        note_unreadable("a reference (declare -n) set to a name known only at run time")
    for name in sorted(reader.arithmetic_names & reader.dynamic_names):
        note_unreadable(
            f"arithmetic evaluation of ${name}, whose value is not a plain number or name"
        )
    return commands
