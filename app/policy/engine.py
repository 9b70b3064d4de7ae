"""Pure command policy: ordered glob rules, critical patterns, `evaluate()` → `Verdict`.

The models are also the wire shape of `GET/PUT /v1/policy` (docs/policy.md#policy-api).
Matching follows docs/policy.md#rules: `allow` vouches only for a whole
command without shell-control syntax, while `deny`/`prompt` fire on the whole command or any
segment found by `app.policy.shell.syntax.read_command`, and what that reader cannot read statically
gets the policy's `unreadable` verdict. The critical patterns themselves live in
`app.policy.critical_patterns`. No I/O happens here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Protocol

import re2
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from app.core.globs import Matcher, compile_glob
from app.policy.critical_patterns import find_critical_hits
from app.policy.env_rules import EnvRules
from app.policy.file_rules import FileRules
from app.policy.remembered import RememberedRule
from app.policy.shell.syntax import (
    CommandReading,
    has_control_syntax,
    normalize_whitespace,
    read_command,
)
from app.sandbox.policy_rules import SandboxPolicy, SandboxWidening

__all__ = [
    "CRITICAL_REASON",
    "UNREADABLE_PREFIX",
    "InterceptorRegex",
    "InterceptorRule",
    "InterceptorSettings",
    "PolicyDocument",
    "PolicyRule",
    "RuleAction",
    "Verdict",
    "compile_interceptor_pattern",
    "evaluate",
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
    # More sandbox for what this rule decides (docs/policy.md#sandbox); left out: none.
    sandbox: SandboxWidening | None = None

    @field_validator("match")
    @classmethod
    def _match_not_blank(cls, value: str) -> str:
        normalized = normalize_whitespace(value)
        if not normalized:
            raise ValueError("match must not be blank")
        return normalized

    @model_validator(mode="after")
    def _sandbox_not_on_deny(self) -> PolicyRule:
        if self.sandbox is not None and self.approval is RuleAction.deny:
            raise ValueError("a deny rule cannot carry a sandbox: what it matches never runs")
        return self

    @model_serializer(mode="wrap")
    def _without_empty_sandbox(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        # A rule without a sandbox reads as it always did: `{match, approval}`.
        data: dict[str, Any] = handler(self)
        if data.get("sandbox") is None:
            data.pop("sandbox", None)
        return data


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
    # Reads and writes through the files API (docs/policy.md#files).
    files: FileRules = Field(default_factory=FileRules)
    # Decisions approvers remembered: scoped `allow`s that end by themselves
    # (docs/policy.md#remembered-decisions).
    remembered: list[RememberedRule] = Field(default_factory=list)
    # What every command may write, must not see and may reach (docs/policy.md#sandbox).
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)


# ---------------------------------------------------------------------------------------------
# Globs


@functools.lru_cache(maxsize=1024)
def _compile_glob(pattern: str) -> Matcher:
    """A rule's glob over whitespace-normalised text (see app/core/globs.py)."""
    return compile_glob(normalize_whitespace(pattern))


def glob_matches(pattern: str, command: str) -> bool:
    """Anchored, case-sensitive `*` glob over whitespace-normalised text; "" never matches."""
    text = normalize_whitespace(command)
    return bool(text) and _compile_glob(pattern)(text)


# ---------------------------------------------------------------------------------------------
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
    # The remembered rule (`rr_…`) that turned this command's prompt into an allow, if one did.
    remembered_rule: str | None = None


def _vouched_for(rules: Sequence[PolicyRule], segments: Sequence[str]) -> bool:
    """Every command the reader found in a simple command — what a wrapper, `find -exec` or
    an option (`git -c core.pager=…`, `bash -c`) runs besides it — matches an allow rule."""
    allows = [_compile_glob(rule.match) for rule in rules if rule.approval is RuleAction.allow]
    return all(any(matches(segment) for matches in allows) for segment in segments)


def _first_applicable_rule(
    rules: Sequence[PolicyRule], normalized: str, segments: Sequence[str], controlled: bool
) -> PolicyRule | None:
    if not normalized:
        return None
    vouched: bool | None = None
    for rule in rules:
        matches = _compile_glob(rule.match)
        if matches(normalized):
            # An allow must vouch for everything that will run: never for compound text, and
            # only when every command found inside is allowed too (`timeout 5 x` runs `x`).
            if rule.approval is not RuleAction.allow:
                return rule
            if not controlled:
                if vouched is None:
                    vouched = _vouched_for(rules, segments)
                if vouched:
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


def evaluate(
    policy: PolicyDocument,
    command: str,
    *,
    cwd: str | None = None,
    scripts: Sequence[str] = (),
    home: str | None = None,
    cdpath: bool = False,
    readings: Mapping[str, CommandReading] | None = None,
) -> Verdict:
    """Decide allow / prompt / deny for one command; the first applicable rule wins.

    Order of precedence: a matching deny rule; then a critical pattern, which raises the
    outcome to `policy.critical` but never lowers it (so it beats an allow rule or a permissive
    default, and `critical: allow` turns the escalation off); then the rule or the default.
    Then fail closed: when part of the command cannot be read statically and the policy has
    something to hide from, the outcome is raised to `policy.unreadable`; text that cannot be
    parsed at all, or that reaches a limit of the reader, is never allowed, whatever the
    policy. `cwd` is the directory the command runs in, for the critical patterns (`rm -rf .`
    in `/`); None when unknown. `scripts`: shell text the command's programs run besides it
    (env values such as `GIT_EXTERNAL_DIFF`, `app.policy.shell.syntax.env_scripts`), each judged as
    a command of its own: the strictest verdict wins, and their segments, critical hits and
    unreadable parts join the command's. `home`: the `HOME` the request's env sets, which is
    what `~` means to the critical patterns; `cdpath`: its env sets `CDPATH`. `readings`:
    `read_command` of some of these texts, when the caller has them already (read in a process
    of their own: `app.policy.reader_process`).
    """
    known = readings or {}
    verdict = _evaluate_text(policy, command, cwd, home, cdpath, known.get(command))
    for script in scripts:
        other = _evaluate_text(policy, script, cwd, home, cdpath, known.get(script))
        strictest = other if _SEVERITY[other.approval] > _SEVERITY[verdict.approval] else verdict
        verdict = Verdict(
            strictest.approval,
            strictest.reason,
            strictest.matched_rule,
            [*verdict.segments, *other.segments],
            [
                *verdict.critical_hits,
                *(h for h in other.critical_hits if h not in verdict.critical_hits),
            ],
            verdict.parse_error or other.parse_error,
            [*verdict.unreadable_reasons, *other.unreadable_reasons],
        )
    return verdict


def _evaluate_text(
    policy: PolicyDocument,
    command: str,
    cwd: str | None,
    home: str | None,
    cdpath: bool,
    reading: CommandReading | None,
) -> Verdict:
    normalized = normalize_whitespace(command)
    if reading is None:
        reading = read_command(command)
    segments = list(reading.segments)
    parse_error = reading.parse_error
    unreadable = list(reading.unreadable)
    broken = parse_error is not None or reading.limit_reached is not None
    controlled = broken or has_control_syntax(command)
    rule = _first_applicable_rule(policy.rules, normalized, segments, controlled)
    hits = find_critical_hits(command, segments, cwd=cwd, home=home, cdpath=cdpath)

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
