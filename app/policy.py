"""Pure command policy: ordered glob rules, critical patterns, `evaluate()` → `Verdict`.

The models are also the wire shape of `GET/PUT /v1/policy` (SPEC §5.4). Matching follows the
reference `bash.patterns` semantics (pi-bash-tool.md §4): `allow` vouches only for a whole
command without shell-control syntax, while `deny`/`prompt` fire on the whole command or any
segment found by `app.shell_syntax.policy_segments`. No I/O happens here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from app.shell_syntax import (
    UnparseableCommandError,
    has_control_syntax,
    normalize_whitespace,
    policy_segments,
    rough_segments,
)

__all__ = [
    "CRITICAL_PATTERNS",
    "CRITICAL_REASON",
    "RUNNER_CRITICAL_PATTERNS",
    "UNPARSEABLE_REASON",
    "Approval",
    "CriticalPattern",
    "InterceptorRule",
    "InterceptorSettings",
    "PolicyDocument",
    "PolicyRule",
    "Verdict",
    "compile_interceptor_pattern",
    "evaluate",
    "find_critical_hits",
    "first_runner_critical_match",
    "glob_matches",
]


class Approval(StrEnum):
    allow = "allow"
    prompt = "prompt"
    deny = "deny"


def _normalize_approval(value: Any) -> Any:
    # The reference accepts approval values trimmed and in any case (§4.2).
    return value.strip().lower() if isinstance(value, str) else value


ApprovalValue = Annotated[Approval, BeforeValidator(_normalize_approval)]


class PolicyRule(BaseModel):
    """One ordered `{match, approval}` rule; `match` is a glob where `*` is the only wildcard."""

    model_config = ConfigDict(extra="forbid")

    match: str
    approval: ApprovalValue

    @field_validator("match")
    @classmethod
    def _match_not_blank(cls, value: str) -> str:
        normalized = normalize_whitespace(value)
        if not normalized:
            raise ValueError("match must not be blank")
        return normalized


# JavaScript flag letters: `i`, `m`, `s` change matching; `g`, `u`, `y` are accepted for
# compatibility with reference configurations and change nothing (every test starts at 0).
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "g": 0, "u": 0, "y": 0}
_JS_NAMED_GROUP = re.compile(r"(?<!\\)((?:\\\\)*)\(\?<(?=[A-Za-z_])")
_JS_NAMED_BACKREF = re.compile(r"(?<!\\)((?:\\\\)*)\\k<([A-Za-z_][A-Za-z0-9_]*)>")


def _check_flags(flags: str) -> int:
    bits = 0
    for letter in flags:
        if letter not in _REGEX_FLAGS:
            raise ValueError(
                f"invalid regex flag {letter!r} in {flags!r}; allowed: i, m, s (g, u, y ignored)"
            )
        bits |= _REGEX_FLAGS[letter]
    if len(set(flags)) != len(flags):
        raise ValueError(f"duplicate regex flag in {flags!r}")
    return bits


@functools.lru_cache(maxsize=512)
def compile_interceptor_pattern(pattern: str, flags: str = "") -> re.Pattern[str]:
    """Compile a JavaScript-style interceptor regex with Python `re`; ValueError if invalid.

    `(?<name>…)` and `\\k<name>` are translated; `re.ASCII` keeps `\\w`, `\\d` and `\\b`
    ASCII-only as in JavaScript. One difference stays: without `m`, Python's `$` also matches
    before a final newline.
    """
    bits = _check_flags(flags)
    source = _JS_NAMED_GROUP.sub(r"\1(?P<", pattern)
    source = _JS_NAMED_BACKREF.sub(r"\1(?P=\2)", source)
    try:
        return re.compile(source, bits | re.ASCII)
    except re.error as exc:
        raise ValueError(f"invalid regex /{pattern}/{flags}: {exc}") from None


class InterceptorRule(BaseModel):
    """Route a command matching `pattern` to the dedicated `tool` (reference §5)."""

    model_config = ConfigDict(extra="forbid")

    pattern: str
    flags: str = ""
    tool: str
    message: str = "Command blocked"

    @field_validator("tool")
    @classmethod
    def _tool_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("tool must not be blank")
        return value.strip()

    @field_validator("flags")
    @classmethod
    def _flags_known(cls, value: str) -> str:
        _check_flags(value)
        return value

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str) -> str:
        compile_interceptor_pattern(value, "")
        return value


class InterceptorSettings(BaseModel):
    """`rules: None` means the built-in default rules; `[]` means no rules at all."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    rules: list[InterceptorRule] | None = None


class PolicyDocument(BaseModel):
    """The whole policy, exactly the JSON of `GET /v1/policy`."""

    model_config = ConfigDict(extra="forbid")

    default: ApprovalValue = Approval.allow
    critical: ApprovalValue = Approval.prompt
    rules: list[PolicyRule] = Field(default_factory=list)
    interceptor: InterceptorSettings = Field(default_factory=InterceptorSettings)


# ---------------------------------------------------------------------------------------------
# Globs


_Matcher = Callable[[str], bool]


@functools.lru_cache(maxsize=1024)
def _compile_glob(pattern: str) -> _Matcher:
    """A `*`-only glob as a substring-search predicate: linear time, no regex backtracking.

    The common shapes (`git status`, `git *`, `*.sh`) become a single `str` method call.
    """
    parts = normalize_whitespace(pattern).split("*")
    if len(parts) == 1:
        return parts[0].__eq__
    prefix, middles, suffix = parts[0], tuple(parts[1:-1]), parts[-1]
    if not middles and not suffix:
        return lambda text: text.startswith(prefix)
    if not middles and not prefix:
        return lambda text: text.endswith(suffix)
    minimum = len(prefix) + len(suffix) + sum(len(middle) for middle in middles)

    def matches(text: str) -> bool:
        if len(text) < minimum or not text.startswith(prefix) or not text.endswith(suffix):
            return False
        position, end = len(prefix), len(text) - len(suffix)
        for middle in middles:
            found = text.find(middle, position, end)
            if found < 0:
                return False
            position = found + len(middle)
        return True

    return matches


def glob_matches(pattern: str, command: str) -> bool:
    """Anchored, case-sensitive `*` glob over whitespace-normalised text; "" never matches."""
    text = normalize_whitespace(command)
    return bool(text) and _compile_glob(pattern)(text)


# ---------------------------------------------------------------------------------------------
# Critical patterns


@dataclass(frozen=True, slots=True)
class CriticalPattern:
    """A named critical regex. `keywords` are casefolded substrings of which at least one must
    occur in any text the regex can match; they let most texts skip the regex entirely."""

    name: str
    regex: re.Pattern[str]
    keywords: tuple[str, ...]


_I = re.IGNORECASE
# Command position: start of text or right after an operator, optionally behind `sudo`, so
# `echo reboot` and `npm run reboot-tests` are not host control.
_AT_COMMAND = r"(?:^|[;&|(\n`]|\$\()\s*(?:sudo\s+)?"

CRITICAL_PATTERNS: tuple[CriticalPattern, ...] = tuple(
    CriticalPattern(name, re.compile(source, flags), keywords)
    for name, source, flags, keywords in (
        # The recursive/force flag may sit among other options on either side; the lookahead
        # finds it and the possessive run then needs an absolute target, in linear time.
        (
            "rm-recursive-absolute",
            r"\brm(?=(?:\s+-\S+)*?\s+(?:-[a-z]*[rf][a-z]*|--recursive|--force)(?=\s))"
            r"(?:\s+-\S+)*+\s+/",
            _I,
            ("rm",),
        ),
        (
            "rm-no-preserve-root",
            r"\brm\b[^\n;&|]*?--no-preserve-root\b",
            _I,
            ("--no-preserve-root",),
        ),
        ("sudo-rm", r"\bsudo(?:\s+-[A-Za-z-]+(?:[= ][^\s-]\S*)?)*?\s+rm\b", _I, ("sudo",)),
        (
            "chmod-recursive-octal-absolute",
            r"\bchmod\s+(?:-[a-z]*r[a-z]*|--recursive)\s+[0-7]+\s+/",
            _I,
            ("chmod",),
        ),
        (
            "chmod-recursive-symbolic-absolute",
            r"\bchmod\s+(?:-[a-zA-Z]*R[a-zA-Z]*|--recursive)\s+[ugoa+\-=rwxXst,]+\s+/",
            0,
            ("chmod",),
        ),
        (
            "chown-recursive-absolute",
            r"\bchown\s+(?:-[a-z]*r[a-z]*|--recursive)\s+\S+\s+/",
            _I,
            ("chown",),
        ),
        ("fork-bomb", r":\(\)\s*\{\s*:\s*\|\s*:", 0, (":(",)),
        (
            "write-block-device",
            r">\s*/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d)",
            _I,
            ("/dev/",),
        ),
        ("mkfs", r"\bmkfs(?:\.|\b)", _I, ("mkfs",)),
        (
            "dd-to-device",
            r"\bdd\b[^\n;&|]*?\bof=/dev/(?!(?:null|zero|stdout|stderr|tty)\b)",
            _I,
            ("of=/dev/",),
        ),
        ("shred-device", r"\bshred\b[^\n;&|]*?\s/dev/", _I, ("shred",)),
        ("cryptsetup", r"\bcryptsetup\b", _I, ("cryptsetup",)),
        ("redirect-to-auth-file", r">\s*/etc/(?:passwd|shadow|sudoers)\b", _I, ("/etc/",)),
        ("tee-to-auth-file", r"\btee\s+(?:-\S+\s+)*/etc/(?:passwd|shadow|sudoers)\b", _I, ("tee",)),
        (
            "fetch-piped-to-shell",
            r"\b(?:curl|wget|fetch)\b[^\n;&]*?(?<!\|)\|(?!\|)\s*(?:sudo\s+(?:-\S+\s+)*)?"
            r"(?:bash|sh|zsh|fish|dash|ksh)\b",
            _I,
            ("curl", "wget", "fetch"),
        ),
        (
            "fetch-process-substitution",
            r"(?:^|[\s;&|(])(?:bash|sh|zsh|source|\.)\s+<\(\s*(?:curl|wget|fetch)\b",
            _I,
            ("<(",),
        ),
        (
            "eval-fetch",
            r"""\beval\s+["'`]?\$\(\s*(?:curl|wget|fetch)\b|\beval\s+["']?`\s*(?:curl|wget|fetch)\b""",
            _I,
            ("eval",),
        ),
        (
            "kill-init",
            r"\bkill\s+(?:-9|-KILL|-SIGKILL|-s\s+(?:9|KILL|SIGKILL))\s+-?1\b",
            0,
            ("kill",),
        ),
        (
            "host-power",
            _AT_COMMAND + r"(?:shutdown|poweroff|reboot|halt)(?=\s|$|[;|&)])"
            r"|\bsystemctl\s+(?:reboot|poweroff|halt|kexec)\b",
            _I,
            ("shutdown", "poweroff", "reboot", "halt", "systemctl"),
        ),
        ("init-runlevel", _AT_COMMAND + r"(?:init|telinit)\s+[06]\b", _I, ("init",)),
        (
            "netcat-exec",
            r"\b(?:nc|ncat|netcat)\b[^|;\n]*\s-[a-zA-Z]*[ec][a-zA-Z]*\s",
            _I,
            ("nc", "netcat"),
        ),
    )
)


def find_critical_hits(command: str, segments: Sequence[str] = ()) -> list[str]:
    """Names of the critical patterns found in the raw command or in any segment."""
    if not command.strip():
        return []
    texts = (command, *segments)
    # Joined, a keyword may straddle two texts; that only costs a needless regex run.
    folded = "\n".join(texts).casefold()
    return [
        pattern.name
        for pattern in CRITICAL_PATTERNS
        if any(keyword in folded for keyword in pattern.keywords)
        and any(pattern.regex.search(text) for text in texts)
    ]


# The streaming runner's list (streaming-runner-and-policies.md §1.5), verbatim sources in
# evaluation order; every one is valid Python `re` as written. Raw string only, as the runner.
_RUNNER_SOURCES: tuple[str, ...] = (
    r"(?i)\brm\s+-[a-z]*[rRfF][a-z]*\s+\/",
    r"(?i)\bsudo\s+rm\b",
    r"(?i)\bchmod\s+-R\s+[0-7]+\s+\/",
    r"\bchmod\s+-R\s+[ugoa+\-=rwxXst,]+\s+\/",
    r"(?i)\bchown\s+-R\s+\S+\s+\/",
    r"(?i):\(\)\s*\{\s*:\s*\|\s*:",
    r"(?i)>\s*\/dev\/sd[a-z]",
    r"(?i)\bmkfs(\.|\b)",
    r"(?i)\bdd\s+if=.+of=\/dev\/",
    r"(?i)\bshred\s+\/dev\/",
    r"(?i)\bcryptsetup\b",
    r"(?i)>\s*\/etc\/(?:passwd|shadow|sudoers)\b",
    r"(?i)\btee\s+(?:-a\s+)?\/etc\/(?:passwd|shadow|sudoers)\b",
    r"(?i)\b(?:curl|wget|fetch)\b[^|]*\|\s*(?:bash|sh|zsh|fish)\b",
    r"(?i)(?:^|[\s;&|(])(?:bash|sh|zsh|source|\.)\s+<\(\s*(?:curl|wget|fetch)\b",
    r"""(?i)\beval\s+["'`]?\$\(\s*(?:curl|wget|fetch)\b|\beval\s+`\s*(?:curl|wget|fetch)\b""",
    r"\bkill\s+-9\s+1\b",
    r"(?i)(?:^|[\s;&|(])(?:shutdown|poweroff|reboot|halt)(?:\s|$|[;|&])",
    r"(?i)(?:^|[\s;&|(])init\s+0\b",
    r"(?i)\bnc\b[^|;]*\s-[a-zA-Z]*[ec][a-zA-Z]*\s",
)
RUNNER_CRITICAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (source, re.compile(source)) for source in _RUNNER_SOURCES
)


def first_runner_critical_match(command: str) -> str | None:
    """Source of the first runner pattern found in the raw command (`Pattern match found: …`)."""
    for source, regex in RUNNER_CRITICAL_PATTERNS:
        if regex.search(command):
            return source
    return None


# ---------------------------------------------------------------------------------------------
# Evaluation

_SEVERITY = {Approval.allow: 0, Approval.prompt: 1, Approval.deny: 2}
CRITICAL_REASON = "Critical pattern detected"
UNPARSEABLE_REASON = "Command could not be parsed; approval required"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision plus what it rests on (also the body of `POST /v1/policy/evaluate`)."""

    approval: Approval
    reason: str
    matched_rule: PolicyRule | None
    segments: list[str] = field(default_factory=list)
    critical_hits: list[str] = field(default_factory=list)
    parse_error: str | None = None


def _first_applicable_rule(
    rules: Sequence[PolicyRule], normalized: str, segments: Sequence[str], controlled: bool
) -> PolicyRule | None:
    if not normalized:
        return None
    for rule in rules:
        matches = _compile_glob(rule.match)
        if matches(normalized):
            # An allow must vouch for everything the shell will run, so never for compound text.
            if rule.approval is not Approval.allow or not controlled:
                return rule
        elif rule.approval is not Approval.allow:
            for segment in segments:
                if matches(segment):
                    return rule
    return None


def evaluate(policy: PolicyDocument, command: str) -> Verdict:
    """Decide allow / prompt / deny for one command; the first applicable rule wins.

    Order of precedence: a matching deny rule; then a critical pattern, which raises the
    outcome to `policy.critical` but never lowers it (so it beats an allow rule or a permissive
    default, and `critical: allow` turns the escalation off); then the rule or the default.
    A command that cannot be parsed is checked against deny/prompt rules on a best-effort split
    and is never allowed.
    """
    normalized = normalize_whitespace(command)
    parse_error: str | None = None
    try:
        segments = policy_segments(command)
    except UnparseableCommandError as exc:
        parse_error = str(exc)
        segments = rough_segments(command)
    controlled = parse_error is not None or has_control_syntax(command)
    rule = _first_applicable_rule(policy.rules, normalized, segments, controlled)
    hits = find_critical_hits(command, segments)

    def verdict(approval: Approval, reason: str) -> Verdict:
        return Verdict(approval, reason, rule, segments, hits, parse_error)

    if rule is not None and rule.approval is Approval.deny:
        return verdict(Approval.deny, f"Blocked by bash pattern: {rule.match}")
    if rule is None:
        approval, reason = policy.default, f"No rule matched; default {policy.default}"
    elif rule.approval is Approval.allow:
        approval, reason = Approval.allow, f"Allowed by bash pattern: {rule.match}"
    else:
        approval, reason = Approval.prompt, f"Prompt required by bash pattern: {rule.match}"
    if (
        hits
        and policy.critical is not Approval.allow
        and _SEVERITY[policy.critical] >= _SEVERITY[approval]
    ):
        approval, reason = policy.critical, CRITICAL_REASON
    if parse_error is not None and approval is Approval.allow:
        approval, reason = Approval.prompt, UNPARSEABLE_REASON
    return verdict(approval, reason)
