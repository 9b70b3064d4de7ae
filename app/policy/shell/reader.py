"""The policy reader: every simple command bash would run, at any depth, and why parts of
a command cannot be read (docs/policy.md). Also the never-failing rough reading used when the
structure cannot be read."""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Callable, Sequence

from app.policy.shell.embedded import embedded_scripts, note_computed_scripts, shell_reads_stdin
from app.policy.shell.findings import (
    ALIASES,
    LIMITS,
    MAX_DEPTH,
    MAX_SCRIPT_CHARS,
    MAX_VARIANT_CHARS,
    MAX_VARIANTS,
    REASONS,
    CommandReading,
    LimitError,
    TooDeepError,
    UnparseableCommandError,
    note_limit,
    note_unreadable,
)
from app.policy.shell.lexer import lex
from app.policy.shell.scanner import read_double_quoted, single_quote_end
from app.policy.shell.tree import tree_commands
from app.policy.shell.words import ShellWord, SimpleCommand, normalize_whitespace
from app.policy.shell.wrappers import (
    ASSIGNMENT_WORD,
    XARGS_INPUT,
    strip_reserved,
    unwrapped_variants,
)


def _check_command_name(words: list[str]) -> None:
    """Note a command whose name bash only knows at run time (`$x`, `$(…)`, a glob, braces,
    or the `{}` that `find -exec` and `xargs -I` fill in)."""
    for word in words:
        if ASSIGNMENT_WORD.match(word):
            continue
        if XARGS_INPUT in word:
            note_unreadable(f"command name filled in at run time: {word}")
            return
        if isinstance(word, ShellWord):
            if word.expanded:
                note_unreadable(f"command name built by expansion: {word}")
            elif word.pattern and word not in ("[", "[["):
                note_unreadable(f"command name is a glob or brace expansion: {word}")
        return


_ScriptReader = Callable[[str, int], list[str]]


def _segments_of(command: SimpleCommand, depth: int, read_script: _ScriptReader) -> list[str]:
    words = strip_reserved(command.words)
    out: list[str] = []
    if words and command.redirects:
        out.append(normalize_whitespace(" ".join([*words, *command.redirects])))
    elif command.redirects:
        out.append(normalize_whitespace(" ".join(command.redirects)))
    if words:
        out.extend(_expand_words(words, command.stdin_texts, depth, read_script))
        if command.stdin_unknown and read_script is _strict_segments and shell_reads_stdin(words):
            note_unreadable("a shell reads its script from an expansion or process substitution")
    if read_script is _strict_segments:
        for word in command.words:
            if isinstance(word, ShellWord) and word.literal_code:
                out.extend(_literal_script_segments(word, depth + 1))
                for text in word.literal_texts:
                    out.extend(_literal_script_segments(text, depth + 1))
    return out


def _literal_script_segments(text: str, depth: int) -> list[str]:
    """A string holding `$(`, a backtick, `<(` or `>(` may be run later (`$((x))`, `printf -v`,
    an env value, …): its commands are matched too. It is data until something runs it, so
    what it makes unreadable is not noted."""
    token = REASONS.set(None)
    limits_token = LIMITS.set(None)
    try:
        return _strict_segments(text, depth)
    except UnparseableCommandError:
        return rough_segments(text)
    finally:
        REASONS.reset(token)
        LIMITS.reset(limits_token)


def _expand_words(
    words: list[str], stdin_texts: Sequence[str], depth: int, read_script: _ScriptReader
) -> list[str]:
    """The command itself plus every unwrapped variant, and the segments of embedded scripts.

    Each variant is one layer of wrapping less, so a stack of any height is unwrapped; only
    the work budget bounds it, and a strict reader that exhausts it raises `LimitError`.
    """
    strict = read_script is _strict_segments
    out: list[str] = []
    seen: set[tuple[str, ...]] = set()
    queue: deque[list[str]] = deque([words])
    budget = MAX_VARIANTS + 4 * len(words)
    chars = 0
    while queue:
        if budget == 0 or chars > MAX_VARIANT_CHARS:
            if strict and not note_limit("too many wrapper layers to unwrap"):
                raise LimitError("too many wrapper layers to unwrap")
            break
        budget -= 1
        current = strip_reserved(queue.popleft())
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
        for script in embedded_scripts(current, stdin_texts):
            out.extend(read_script(script, depth + 1))
        queue.extend(unwrapped_variants(current))
    return out


def _dedupe(items: list[str]) -> list[str]:
    return [item for item in dict.fromkeys(items) if item]


# A backslash before a CR escapes the CR, not the newline after it: `a \<CR><LF>rm x` is `a $'\r'`
# then `rm x` to bash, never the line continuation that a plain CRLF→LF would make of it.
_ESCAPED_CR = re.compile(r"\\\r\n?")


def _unify_newlines(text: str) -> str:
    # A lone CR is not a separator to bash, but treating it as one only adds segments, which can
    # only make deny/prompt stricter; `allow` already refuses any command containing one. An
    # escaped CR becomes a line continuation followed by a newline that ends the command (an
    # escaped backslash before it, `\\<CR>`, stays a backslash ended by that newline).
    text = _ESCAPED_CR.sub("\\\n\n", text)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _strict_segments(text: str, depth: int) -> list[str]:
    if depth > MAX_DEPTH:
        raise TooDeepError("command nesting is too deep")
    text = _unify_newlines(text)
    if not text.strip():
        return []
    if len(text) > MAX_SCRIPT_CHARS:
        raise LimitError(f"command longer than {MAX_SCRIPT_CHARS} characters")
    commands = tree_commands(text, depth)
    if commands is None:
        # The grammar found an error; the lexer reads what bash itself accepts that the grammar
        # does not (and raises on what bash would refuse too).
        commands = lex(text, depth)
    segments: list[str] = []
    for command in commands:
        segments.extend(_segments_of(command, depth, _strict_segments))
    readers = [command for command in commands if shell_reads_stdin(command.words)]
    if readers:
        segments.extend(_piped_script_segments(commands, depth))
        if any(not reader.stdin_texts and not reader.redirects for reader in readers):
            note_computed_scripts(commands, readers)
        if any("<&" in redirect for reader in readers for redirect in reader.redirects):
            note_unreadable("a shell reads its script from another descriptor")
    return _dedupe(segments)


# Words of one command upstream of a shell reading its stdin that are read as its script.
_MAX_PIPED_WORDS = 64


def _piped_script_segments(commands: list[SimpleCommand], depth: int) -> list[str]:
    """When a shell runs its stdin (`cat <<EOF | sh`, `echo 'rm -rf x' | bash`), any word or
    here-doc body upstream may be its script: read each as one. This can only add segments, so
    deny/prompt get stricter and nothing becomes allowed."""
    segments: list[str] = []
    for command in commands:
        arguments = command.words[1:]
        if len(arguments) > _MAX_PIPED_WORDS:
            if not note_limit("too many words upstream of a shell reading its stdin"):
                raise LimitError("too many words upstream of a shell reading its stdin")
            arguments = arguments[:_MAX_PIPED_WORDS]
        # What `echo rm -rf x` prints is one line of words: each run of the words up to the
        # last is read too (`printf '%s ' rm -rf x` skips its format that way).
        runs = [" ".join(arguments[i:]) for i in range(len(arguments) - 1)]
        for text in [*command.stdin_texts, *arguments, *runs]:
            try:
                segments.extend(_strict_segments(text, depth + 1))
            except LimitError:
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
            if not note_limit("too many alias uses to read"):
                raise LimitError("too many alias uses to read")
            break
        seen.add(expanded)
        out.append(normalize_whitespace(expanded))
        try:
            found = _strict_segments(expanded, 1)
        except LimitError:
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
    token = REASONS.set(reasons)
    limits_token = LIMITS.set(limits)
    aliases_token = ALIASES.set(aliases)
    try:
        segments = _strict_segments(command, 0)
        if aliases:
            segments = _dedupe([*segments, *_alias_uses(segments, aliases)])
    except LimitError as exc:
        why = f"{exc} (a limit of the reader)"
        return CommandReading(tuple(rough_segments(command)), (why,), None, str(exc))
    except UnparseableCommandError as exc:
        why = f"cannot parse command: {exc}"
        return CommandReading(tuple(rough_segments(command)), (why,), str(exc))
    finally:
        REASONS.reset(token)
        LIMITS.reset(limits_token)
        ALIASES.reset(aliases_token)
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
        raise LimitError(reading.limit_reached)
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
            end = single_quote_end(text, i)
            word.append(text[i + 1 : end - 1] if end > 0 else text[i + 1 :])
            in_word = True
            i = end if end > 0 else n
        elif c == '"':
            unquoted, end = read_double_quoted(text, i)
            word.append(unquoted)
            in_word = True
            i = end if end > 0 else n
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
    if depth > MAX_DEPTH:
        return []
    segments: list[str] = []
    for words in _rough_tokenize(text):
        stripped = strip_reserved(words)
        if stripped:
            segments.extend(_expand_words(stripped, (), depth, _rough_script_segments))
    return segments


def rough_segments(command: str) -> list[str]:
    """Best-effort segments of text `policy_segments` refused; never raises.

    Good enough to let deny rules fire on unparseable commands; never a reason to allow one.
    """
    return _dedupe(_rough_script_segments(command, 0))
