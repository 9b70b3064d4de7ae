"""Pure interceptor: route commands that have a dedicated tool to that tool
(docs/policy.md#interceptor).

Best-effort routing, not a security boundary: a rule only fires when the caller has the tool
it names, and anything the flat splitter cannot read is checked as a whole command only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from app.policy.engine import (
    InterceptorRegex,
    InterceptorRule,
    InterceptorSettings,
    compile_interceptor_pattern,
    trust_builtin_patterns,
)
from app.policy.shell.syntax import flat_segments, strip_leading_assignments

__all__ = [
    "DEFAULT_INTERCEPTOR_RULES",
    "Interception",
    "check",
    "compile_rule",
    "effective_rules",
]

_DEVICE = r"/dev/(?:null|tty|stdout|stderr)"
# A redirect to a device sink, bare or quoted: the `write` tool cannot replace those.
_DEVICE_SINK = rf"""(?:"{_DEVICE}"|'{_DEVICE}'|{_DEVICE})(?=[\s;&|]|$)"""
# `>`, `>>`, `&>`, optionally `>|`; not the `|` of a clobber seen twice.
_REDIRECT = r"(?<!\|)&?>>?\|?\s*"
# echo/printf/`cat <<` whose own unquoted redirect goes to a real file. The scan stays inside
# the first simple command (no `; & |` or newline), skips quoted text as a unit (so
# `echo "a -> b"` passes), steps over fd duplication (`2>&1`, `>&2`) and device sinks, so
# `echo x > /dev/null > out.txt` still blocks.
_WRITE_REDIRECT = (
    r"""^\s*(?:echo|printf|cat\s*<<-?\s*)\s*(?<=\s|<)"""
    rf"""(?:[^"'>\n;&|]|"[^"]*"|'[^']*'|>&[\d-]*|{_REDIRECT}{_DEVICE_SINK})*"""
    rf"""{_REDIRECT}(?!{_DEVICE_SINK})[$\w./~"'-]"""
)
_BACKGROUND = r"^\s*nohup\s+|(?<![&\\])&\s*$"
_SERVICE = (
    r"^\s*(?:"
    r"(?:bun|npm|pnpm|yarn)\s+(?:run\s+)?(?:dev|start)(?=\s|$)"
    r"|(?:vite|next\s+dev|nuxt\s+dev|nodemon|lldb|gdb|tail\s+-f)(?=\s|$)"
    r"|docker[\s-]compose\s+up(?![^\n]*\s(?:-d|--detach)(?=\s|$))(?=\s|$)"
    r")"
)
_WATCH_MODE = (
    r"^\s*(?:(?:bun|npm|pnpm|yarn)\s+(?:run\s+)?\S+|cargo\s+watch|watchexec|pytest|vitest|jest|tsc)"
    r"[\s\S]*?(?<!\S)(?:--watch|-w)(?=\s|=|$)"
)

# These use lookaround, which RE2 lacks: they run on Python `re`; each is linear on hostile
# input (tests/test_interceptor.py measures it). Admin rules always run on RE2.
trust_builtin_patterns(
    (
        r"^\s*(cat|head|tail|less|more)\s+",
        r"^\s*(grep|rg|ripgrep|ag|ack)\s+",
        r"^\s*(find|fd|locate)\s+.*(-name|-iname|-type|--type|-glob)",
        r"^\s*sed\s+(-i|--in-place)",
        r"^\s*perl\s+.*-[pn]?i",
        r"^\s*awk\s+.*-i\s+inplace",
        _WRITE_REDIRECT,
        _BACKGROUND,
        _SERVICE,
        _WATCH_MODE,
    )
)

DEFAULT_INTERCEPTOR_RULES: tuple[InterceptorRule, ...] = (
    InterceptorRule(
        pattern=r"^\s*(cat|head|tail|less|more)\s+",
        tool="read",
        message="Use the `read` tool instead of cat/head/tail. "
        "It provides better context and handles binary files.",
    ),
    InterceptorRule(
        pattern=r"^\s*(grep|rg|ripgrep|ag|ack)\s+",
        tool="grep",
        message="Use the `grep` tool instead of grep/rg. "
        "It respects .gitignore and provides structured output.",
    ),
    InterceptorRule(
        pattern=r"^\s*(find|fd|locate)\s+.*(-name|-iname|-type|--type|-glob)",
        tool="glob",
        message="Use the `glob` tool instead of find/fd. "
        "It respects .gitignore and is faster for glob patterns.",
    ),
    InterceptorRule(
        pattern=r"^\s*sed\s+(-i|--in-place)",
        tool="edit",
        message="Use the `edit` tool instead of sed -i. "
        "It provides diff preview and fuzzy matching.",
    ),
    InterceptorRule(
        pattern=r"^\s*perl\s+.*-[pn]?i",
        tool="edit",
        message="Use the `edit` tool instead of perl -i. "
        "It provides diff preview and fuzzy matching.",
    ),
    InterceptorRule(
        pattern=r"^\s*awk\s+.*-i\s+inplace",
        tool="edit",
        message="Use the `edit` tool instead of awk -i inplace. "
        "It provides diff preview and fuzzy matching.",
    ),
    InterceptorRule(
        pattern=_WRITE_REDIRECT,
        tool="write",
        message="Use the `write` tool instead of echo/cat redirection. "
        "It handles encoding and provides confirmation.",
    ),
    InterceptorRule(
        pattern=_BACKGROUND,
        tool="bash",
        message="Use `bash` with `async: true` instead of nohup or background shell syntax "
        "so the process stays observable and managed.",
    ),
    InterceptorRule(
        pattern=_SERVICE,
        tool="bash",
        message="Use `bash` with `async: true` for services, watchers and debuggers; "
        "read their output later from the job.",
    ),
    InterceptorRule(
        pattern=_WATCH_MODE,
        tool="bash",
        message="Use `bash` with `async: true` for watch mode "
        "so its output and lifecycle stay managed.",
    ),
)


@dataclass(frozen=True, slots=True)
class Interception:
    """A block: the tool to use instead and the full error message for the caller."""

    tool: str
    message: str


def compile_rule(rule: InterceptorRule) -> InterceptorRegex | None:
    """The rule's regex (flags `i`, `m`, `s`; `g`, `u`, `y` ignored), or None if invalid.

    Validated models always compile; None covers rules built without validation, which are
    skipped silently.
    """
    try:
        return compile_interceptor_pattern(rule.pattern, rule.flags)
    except ValueError:
        return None


def effective_rules(settings: InterceptorSettings) -> list[InterceptorRule]:
    """`rules` left out means the defaults; an explicit `[]` means none."""
    if settings.rules is None:
        return list(DEFAULT_INTERCEPTOR_RULES)
    return list(settings.rules)


def _candidates(command: str) -> list[str]:
    candidates = [command.strip()]
    for segment in flat_segments(command) or ():
        if segment.piped_stdin:
            # A stage filtering piped stdin cannot be replaced by a path-based tool.
            continue
        candidates.append(segment.text)
        stripped = strip_leading_assignments(segment.text)
        if stripped is not None:
            candidates.append(stripped)
    return candidates


def check(
    command: str,
    tools: Collection[str],
    rules: Sequence[InterceptorRule],
    original_command: str,
) -> Interception | None:
    """First rule (in order) matching the command or one of its flat segments, or None.

    Rules whose tool the caller lacks are skipped, so nobody is told to use a tool they cannot
    call. The message quotes `original_command`, the text as the caller sent it.
    """
    candidates: list[str] | None = None
    for rule in rules:
        if rule.tool not in tools:
            continue
        regex = compile_rule(rule)
        if regex is None:
            continue
        if candidates is None:
            candidates = _candidates(command)
        if any(regex.search(candidate) for candidate in candidates):
            message = rule.message or "Command blocked"
            return Interception(
                tool=rule.tool,
                message=f"Blocked: {message}\n\nOriginal command: {original_command}",
            )
    return None
