"""Pure command policy: ordered glob rules, critical patterns, `evaluate()` → `Verdict`.

The models are also the wire shape of `GET/PUT /v1/policy` (docs/policy.md#policy-api).
Matching follows docs/policy.md#rules: `allow` vouches only for a whole
command without shell-control syntax, while `deny`/`prompt` fire on the whole command or any
segment found by `app.shell_syntax.read_command`, and what that reader cannot read statically
gets the policy's `unreadable` verdict. No I/O happens here.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Protocol

import re2
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from app.env_policy import EnvRules
from app.globs import Matcher, compile_glob
from app.shell_syntax import has_control_syntax, normalize_whitespace, read_command

__all__ = [
    "CRITICAL_PATTERNS",
    "CRITICAL_REASON",
    "RUNNER_CRITICAL_PATTERNS",
    "UNREADABLE_PREFIX",
    "CriticalPattern",
    "InterceptorRegex",
    "InterceptorRule",
    "InterceptorSettings",
    "PolicyDocument",
    "PolicyRule",
    "RuleAction",
    "Verdict",
    "compile_interceptor_pattern",
    "evaluate",
    "find_critical_hits",
    "first_runner_critical_match",
    "glob_matches",
    "trust_builtin_patterns",
]


class RuleAction(StrEnum):
    allow = "allow"
    prompt = "prompt"
    deny = "deny"


def _normalize_approval(value: Any) -> Any:
    # Approval values are accepted trimmed and in any case (docs/policy.md#the-policy-document).
    return value.strip().lower() if isinstance(value, str) else value


RuleActionValue = Annotated[RuleAction, BeforeValidator(_normalize_approval)]


class PolicyRule(BaseModel):
    """One ordered `{match, approval}` rule; `match` is a glob where `*` is the only wildcard."""

    model_config = ConfigDict(extra="forbid")

    match: str
    approval: RuleActionValue

    @field_validator("match")
    @classmethod
    def _match_not_blank(cls, value: str) -> str:
        normalized = normalize_whitespace(value)
        if not normalized:
            raise ValueError("match must not be blank")
        return normalized


# JavaScript flag letters: `i`, `m`, `s` change matching; `g`, `u`, `y` are accepted for
# compatibility with JavaScript-style configurations and change nothing (every test starts
# at 0).
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "g": 0, "u": 0, "y": 0}
_JS_NAMED_GROUP = re.compile(r"(?<!\\)((?:\\\\)*)\(\?<(?=[A-Za-z_])")
_JS_UNICODE_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9A-Fa-f]{4})")


class InterceptorRegex(Protocol):
    """What the interceptor needs from a compiled pattern (RE2 or, for built-ins, `re`)."""

    def search(self, text: str) -> object | None: ...


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


# The built-in interceptor rules use lookaround, which RE2 lacks; they are ours, reviewed to run
# in linear time and tested on hostile input, so they alone may use Python `re`.
_TRUSTED_PATTERNS: set[str] = set()


def trust_builtin_patterns(patterns: Iterable[str]) -> None:
    """Let these exact built-in sources compile with Python `re` (lookaround)."""
    _TRUSTED_PATTERNS.update(patterns)


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is a 422 for the admin, not a log line
    options.max_mem = 8 << 20
    return options


_RE2_OPTIONS = _re2_options()


@functools.lru_cache(maxsize=512)
def compile_interceptor_pattern(pattern: str, flags: str = "") -> InterceptorRegex:
    """Compile a JavaScript-style interceptor regex with RE2 (linear time); ValueError if invalid.

    RE2 never backtracks, so no pattern can stall the server (`^(a+)+$` stays linear). The
    price: backreferences and lookaround are refused (a 422 when the policy is saved).
    `(?<name>…)` is translated; `\\w`, `\\d`, `\\b` are ASCII-only and `$` without `m`
    matches only at the very end, as in JavaScript.
    """
    bits = _check_flags(flags)
    if pattern in _TRUSTED_PATTERNS:
        return re.compile(pattern, bits | re.ASCII)
    source = _JS_NAMED_GROUP.sub(r"\1(?P<", pattern)
    source = _JS_UNICODE_ESCAPE.sub(r"\1\\x{\2}", source)
    inline = "".join(letter for letter in "ims" if letter in flags)
    if inline:
        source = f"(?{inline}){source}"
    try:
        return re2.compile(source, _RE2_OPTIONS)  # type: ignore[no-any-return]
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"invalid regex /{pattern}/{flags}: {detail} (patterns run on RE2, in linear time: "
            "no backreferences, no lookaround)"
        ) from None


class InterceptorRule(BaseModel):
    """Route a command matching `pattern` to the dedicated `tool` (docs/policy.md#interceptor)."""

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

    default: RuleActionValue = RuleAction.allow
    critical: RuleActionValue = RuleAction.prompt
    # What a command the engine cannot read statically gets, when the policy has any deny or
    # prompt rule (or a default other than allow).
    unreadable: RuleActionValue = RuleAction.prompt
    rules: list[PolicyRule] = Field(default_factory=list)
    interceptor: InterceptorSettings = Field(default_factory=InterceptorSettings)
    # False: whatever a run started (daemons included) is killed when the run ends.
    keep_daemons: bool = False
    env: EnvRules = Field(default_factory=EnvRules)


# ---------------------------------------------------------------------------------------------
# Globs


@functools.lru_cache(maxsize=1024)
def _compile_glob(pattern: str) -> Matcher:
    """A rule's glob over whitespace-normalised text (see app/globs.py)."""
    return compile_glob(normalize_whitespace(pattern))


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
# Downloaders, and the shells and interpreters that run what they fetch.
_FETCH = r"\b(?:curl|wget|fetch|xh|https?ie|lwp-request|aria2c)\b"
_FETCH_KEYWORDS = ("curl", "wget", "fetch", "xh", "http", "lwp-", "aria2c")
_INTERPRETER_NAMES = (
    r"(?:(?:ba|da|z|k|mk|c|tc|fi|a|rba|ya|po)?sh|busybox\s+sh|python[0-9.]*|pypy[0-9.]*|"
    r"perl[0-9.]*|ruby[0-9.]*|node(?:js)?|php[0-9.]*|lua(?:jit|[0-9.]*)|Rscript|tclsh|wish|"
    r"pwsh|powershell|osascript|deno|bun|irb|jshell|groovy|source|\.)"
)
_INTERPRETER = r"""["']?(?:[^\s|;&'"]*/)?""" + _INTERPRETER_NAMES + r"""["']?(?=[\s;&|)]|$)"""
# The interpreter runs its stdin: nothing but options follows it, until `-` or `--` (after
# which come the script's own arguments). `python3 -m json.tool` or `perl -ne …` read data.
_READS_STDIN = (
    r"""(?:\s+-[^\s;&|)'"-][^\s;&|)]*)*(?:\s+--?(?=[\s;&|)]|$)[^\n;&|]*)?\s*(?:$|[;&|)\n`"'])"""
)
# Wrappers that may stand between a pipe and the interpreter (`| sudo -E env bash`).
_RUNNER_PREFIX = (
    r"(?:(?:[^\s|;&]*/)?(?:sudo|doas|env|nohup|nice|command|exec|builtin|stdbuf|setsid|"
    r"timeout\s+\S+|time)(?:\s+-\S+)*(?:\s+[A-Za-z_]\w*=\S*)*\s+)*"
)
# A function that pipes into itself in the background, under any name: `f(){ f|f& };f`.
_FORK_BOMB = (
    r"(?:^|[\s;&|({])(?:function\s+)?([^\s(){}|;&<>]{1,64})\s*(?:\(\s*\))?\s*\{[^}]{0,200}?"
    r"(?<![^\s;&|({])\1\s*\|&?\s*\1(?![^\s;&|)}])"
)
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
        ("fork-bomb-any-name", _FORK_BOMB, 0, ("(", "function")),
        (
            "write-block-device",
            r">\s*/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d)",
            _I,
            ("/dev/",),
        ),
        (
            "mkfs",
            r"\b(?:mkfs|mke2fs|mkswap|wipefs|mkntfs|mkdosfs|mkexfatfs)(?:\.|\b)",
            _I,
            ("mk", "wipefs"),
        ),
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
            _FETCH
            + r"[^\n;&]*?(?<!\|)\|(?!\|)&?\s*"
            + _RUNNER_PREFIX
            + _INTERPRETER
            + _READS_STDIN,
            _I,
            _FETCH_KEYWORDS,
        ),
        (
            "fetch-process-substitution",
            r"(?:^|[\s;&|(`])" + _RUNNER_PREFIX + _INTERPRETER + r"[^\n;&|]*?<\(\s*"
            r"(?:sudo\s+)?" + _FETCH,
            _I,
            ("<(",),
        ),
        (
            "fetch-substituted-into-interpreter",
            r"(?:^|[\s;&|(`])" + _RUNNER_PREFIX + r"(?:eval|" + _INTERPRETER_NAMES + r")"
            r"""["']?(?=[\s"'])[^\n;&|]*?(?:\$\(|`)\s*(?:sudo\s+)?""" + _FETCH,
            _I,
            _FETCH_KEYWORDS,
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


def find_critical_hits(
    command: str, segments: Sequence[str] = (), *, cwd: str | None = None
) -> list[str]:
    """Names of the critical patterns found in the raw command or in any segment.

    `cwd` is the directory the command starts in (None: unknown); a `cd` segment moves it for
    the segments after it, so `cd / && rm -rf .` is a recursive delete of `/`.
    """
    if not command.strip():
        return []
    texts = (command, *segments)
    # Joined, a keyword may straddle two texts; that only costs a needless regex run.
    folded = "\n".join(texts).casefold()
    hits = [
        pattern.name
        for pattern in CRITICAL_PATTERNS
        if any(keyword in folded for keyword in pattern.keywords)
        and any(pattern.regex.search(text) for text in texts)
    ]
    hits.extend(name for name in _segment_hits(segments, cwd) if name not in hits)
    return hits


# Where a recursive delete, chmod or chown is catastrophic: the root, the home directory and the
# top-level system directories, however they are spelled.
_HOME = os.path.expanduser("~") if os.path.expanduser("~") != "~" else "/root"
_SYSTEM_DIRS = frozenset(
    [
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/snap",
        "/srv",
        "/sys",
        "/usr",
        "/var",
        "/Users",
        "/System",
        "/Applications",
        "/Library",
    ]
)
_HOME_SPELLINGS = ("~", "$HOME", "${HOME}")
_TRAILING_GLOBS = ("/*", "/.*", "/{*,.*}", "/{.*,*}", "/**")
_HOST_POWER = frozenset({"shutdown", "reboot", "poweroff", "halt"})


def _resolve(path: str, cwd: str | None) -> str | None:
    """The absolute, normalised path a word names, or None when it depends on unknown state."""
    for spelling in _HOME_SPELLINGS:
        if path == spelling or path.startswith(spelling + "/"):
            path = _HOME + path[len(spelling) :]
            break
    else:
        if path.startswith("~"):  # `~user`: some user's home
            name, _, rest = path[1:].partition("/")
            path = f"/home/{name}/{rest}"
    while path.endswith(_TRAILING_GLOBS):
        path = path[: path.rindex("/")] or "/"
    if path in ("*", ".*", "{*,.*}"):
        path = "."
    if "$" in path or "`" in path:
        return None
    if not path.startswith("/"):
        if cwd is None:
            return None
        path = posixpath.join(cwd, path)
    return "/" + posixpath.normpath(path).lstrip("/")


def _is_precious(path: str | None) -> bool:
    if path is None:
        return False
    return (
        path == "/"
        or path == _HOME
        or path in _SYSTEM_DIRS
        or (posixpath.dirname(path) in ("/home", "/Users") and path.count("/") == 2)
    )


def _operands(words: Sequence[str]) -> list[str]:
    operands: list[str] = []
    options_done = False
    for word in words:
        if word == "--" and not options_done:
            options_done = True
        elif options_done or not word.startswith("-") or word == "-":
            operands.append(word)
    return operands


def _recursive(words: Sequence[str]) -> bool:
    return any(
        word in ("--recursive", "-R", "-r")
        or (word.startswith("-") and not word.startswith("--") and ("r" in word or "R" in word))
        for word in words
    )


def _segment_hits(segments: Sequence[str], cwd: str | None) -> list[str]:
    """Checks that need the words of each segment, and the directory it runs in."""
    hits: list[str] = []
    here = cwd
    for segment in segments:
        words = segment.split()
        if not words:
            continue
        name = words[0].rsplit("/", 1)[-1]
        args = words[1:]
        if name == "cd":
            targets = _operands(args)
            here = _resolve(targets[0] if targets else "~", here)
        elif name == "rm" and _recursive(args):
            if any(_is_precious(_resolve(target, here)) for target in _operands(args)):
                hits.append("rm-recursive-root-or-home")
        elif name in ("chmod", "chown", "chgrp") and _recursive(args):
            if any(_is_precious(_resolve(target, here)) for target in _operands(args)[1:]):
                hits.append("chmod-chown-recursive-root-or-home")
        elif name == "find" and (
            "-delete" in args
            or any(
                arg in ("-exec", "-execdir", "-ok", "-okdir")
                and args[i + 1 : i + 2] in (["rm"], ["/bin/rm"], ["shred"], ["unlink"])
                for i, arg in enumerate(args)
            )
        ):
            roots = []
            for arg in args:
                if arg.startswith(("-", "(", "!")):
                    break
                roots.append(arg)
            if any(_is_precious(_resolve(root, here)) for root in roots or ["."]):
                hits.append("find-delete-root-or-home")
        elif name in _HOST_POWER:
            hits.append("host-power")
        elif name in ("init", "telinit") and args[:1] in (["0"], ["6"]):
            hits.append("init-runlevel")
    return list(dict.fromkeys(hits))


# The streaming runner's list (docs/streaming.md#the-ndjson-runner): the exact sources runner
# clients see in `Pattern match found: …`, in evaluation order; every one is valid Python
# `re` as written. Raw string only, as the runner.
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

_SEVERITY = {RuleAction.allow: 0, RuleAction.prompt: 1, RuleAction.deny: 2}
CRITICAL_REASON = "Critical pattern detected"
UNREADABLE_PREFIX = "Unreadable command: "


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision plus what it rests on (also the body of `POST /v1/policy/evaluate`)."""

    approval: RuleAction
    reason: str
    matched_rule: PolicyRule | None
    segments: list[str] = field(default_factory=list)
    critical_hits: list[str] = field(default_factory=list)
    parse_error: str | None = None
    # Why parts of the command cannot be judged statically (empty when all of it was read).
    unreadable_reasons: list[str] = field(default_factory=list)


def _first_applicable_rule(
    rules: Sequence[PolicyRule], normalized: str, segments: Sequence[str], controlled: bool
) -> PolicyRule | None:
    if not normalized:
        return None
    for rule in rules:
        matches = _compile_glob(rule.match)
        if matches(normalized):
            # An allow must vouch for everything the shell will run, so never for compound text.
            if rule.approval is not RuleAction.allow or not controlled:
                return rule
        elif rule.approval is not RuleAction.allow:
            for segment in segments:
                if matches(segment):
                    return rule
    return None


def _guards(policy: PolicyDocument) -> bool:
    """A policy with something to hide from: any deny/prompt rule or a non-allow default."""
    return policy.default is not RuleAction.allow or any(
        rule.approval is not RuleAction.allow for rule in policy.rules
    )


def evaluate(policy: PolicyDocument, command: str, *, cwd: str | None = None) -> Verdict:
    """Decide allow / prompt / deny for one command; the first applicable rule wins.

    Order of precedence: a matching deny rule; then a critical pattern, which raises the
    outcome to `policy.critical` but never lowers it (so it beats an allow rule or a permissive
    default, and `critical: allow` turns the escalation off); then the rule or the default.
    Then fail closed: when part of the command cannot be read statically and the policy has
    something to hide from, the outcome is raised to `policy.unreadable`; text that cannot be
    parsed at all, or that reaches a limit of the reader, is never allowed, whatever the
    policy. `cwd` is the directory the command runs in, for the critical patterns (`rm -rf .`
    in `/`); None when unknown.
    """
    normalized = normalize_whitespace(command)
    reading = read_command(command)
    segments = list(reading.segments)
    parse_error = reading.parse_error
    unreadable = list(reading.unreadable)
    broken = parse_error is not None or reading.limit_reached is not None
    controlled = broken or has_control_syntax(command)
    rule = _first_applicable_rule(policy.rules, normalized, segments, controlled)
    hits = find_critical_hits(command, segments, cwd=cwd)

    def verdict(approval: RuleAction, reason: str) -> Verdict:
        return Verdict(approval, reason, rule, segments, hits, parse_error, unreadable)

    if rule is not None and rule.approval is RuleAction.deny:
        return verdict(RuleAction.deny, f"Blocked by bash pattern: {rule.match}")
    if rule is None:
        approval, reason = policy.default, f"No rule matched; default {policy.default}"
    elif rule.approval is RuleAction.allow:
        approval, reason = RuleAction.allow, f"Allowed by bash pattern: {rule.match}"
    else:
        approval, reason = RuleAction.prompt, f"Prompt required by bash pattern: {rule.match}"
    if (
        hits
        and policy.critical is not RuleAction.allow
        and _SEVERITY[policy.critical] >= _SEVERITY[approval]
    ):
        approval, reason = policy.critical, CRITICAL_REASON
    if unreadable and (broken or _guards(policy)):
        floor = policy.unreadable
        if broken and floor is RuleAction.allow:
            floor = RuleAction.prompt
        if _SEVERITY[floor] > _SEVERITY[approval]:
            approval, reason = floor, UNREADABLE_PREFIX + unreadable[0]
    return verdict(approval, reason)
