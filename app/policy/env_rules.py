"""Pure environment rules: which `env` names a request may set (no I/O here).

A command's text is only half of what runs: bash executes `BASH_ENV` as a script, `PATH`
decides what `ls` means, `LD_PRELOAD` loads code into every program. So every name in a
request's `env` (and a session's) is judged here before anything runs. A name matching a
`deny` glob blocks the request; one matching a `prompt` glob needs a human approval that shows
the variables; any other name is allowed. Values are never judged: they are data, and the
approver sees them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.core.errors import InvalidRequestError
from app.core.globs import compile_glob
from app.core.limits import ENV_MAX_BYTES

__all__ = [
    "DEFAULT_ENV_DENY",
    "EnvAction",
    "EnvJudgement",
    "EnvNameVerdict",
    "EnvRules",
    "blocked_message",
    "glob_matches_name",
    "judge_env",
    "validate_env",
]

EnvAction = Literal["allow", "prompt", "deny"]
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names in one request's `env`: each is judged against every env glob on the event loop
# (100,000 names stalled the server 0.4 s); a real environment has a few hundred at most.
MAX_ENV_NAMES = 1000

# Names that make the shell, the dynamic loader or an interpreter run code of the caller's
# choosing, or change what a command name resolves to.
DEFAULT_ENV_DENY: tuple[str, ...] = (
    "BASH_ENV",
    "ENV",
    "BASH_FUNC_*",
    "SHELLOPTS",
    "BASHOPTS",
    "PS0",
    "PS1",
    "PS2",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "PATH",
    "LD_*",
    "GCONV_PATH",
    "PYTHONSTARTUP",
    "PERL5OPT",
    "NODE_OPTIONS",
    "RUBYOPT",
    # Programs an agent runs every day (git, rsync, ssh, less, man, editors) run these values
    # as shell text or as a program of the caller's choosing.
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EXTERNAL_DIFF",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PAGER",
    "GIT_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_*",
    "GIT_CONFIG_VALUE_*",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "RSYNC_RSH",
    "RSYNC_CONNECT_PROG",
    "LESSOPEN",
    "LESSCLOSE",
    "LESSEDIT",
    "PAGER",
    "MANPAGER",
    "SYSTEMD_PAGER",
    "EDITOR",
    "VISUAL",
    "FCEDIT",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "BROWSER",
    # Options read from the environment that start a program: tar's `--to-command=`,
    # `--checkpoint-action=exec=`, `--use-compress-program=`; zip's `-TT`; man's `-P`;
    # GNU parallel's `--ssh`.
    "TAR_OPTIONS",
    "ZIPOPT",
    "MANOPT",
    "PARALLEL",
)

# A glob is a variable name in which `*` stands for any run of characters (the only wildcard,
# as in the command rules); matching is case-sensitive, as environment names are.
_GLOB_SHAPE = re.compile(r"[A-Za-z0-9_*]+")
_SEVERITY: dict[EnvAction, int] = {"allow": 0, "prompt": 1, "deny": 2}


def _check_globs(globs: list[str]) -> list[str]:
    cleaned = []
    for glob in globs:
        text = glob.strip()
        if not _GLOB_SHAPE.fullmatch(text):
            raise ValueError(
                f"invalid env glob {glob!r}: use letters, digits, `_` and `*` (any run)"
            )
        cleaned.append(text)
    return cleaned


class EnvRules(BaseModel):
    """`{"deny": [globs], "prompt": [globs]}`; `deny` left out is the built-in list above,
    `"deny": []` lifts it (an explicit admin choice)."""

    model_config = ConfigDict(extra="forbid")

    deny: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ENV_DENY),
        max_length=1000,
        description="Env names refused outright (403); `*` matches any run of characters.",
    )
    prompt: list[str] = Field(
        default_factory=list,
        max_length=1000,
        description="Env names that need a human approval showing the variables.",
    )

    @field_validator("deny", "prompt")
    @classmethod
    def _globs_are_names(cls, value: list[str]) -> list[str]:
        return _check_globs(value)


def glob_matches_name(glob: str, name: str) -> bool:
    """Whole-name match where `*` is any run, in linear time whatever the glob's shape."""
    return compile_glob(glob)(name)


def _first_match(globs: Iterable[str], name: str) -> str | None:
    for glob in globs:
        if glob_matches_name(glob, name):
            return glob
    return None


@dataclass(frozen=True, slots=True)
class EnvNameVerdict:
    name: str
    action: EnvAction
    glob: str | None  # the deny or prompt glob that decided; None for allow


@dataclass(frozen=True, slots=True)
class EnvJudgement:
    """Every name's verdict, in the order given, and the strictest of them."""

    names: tuple[EnvNameVerdict, ...]

    @property
    def action(self) -> EnvAction:
        strictest: EnvAction = "allow"
        for verdict in self.names:
            if _SEVERITY[verdict.action] > _SEVERITY[strictest]:
                strictest = verdict.action
        return strictest

    def named(self, action: EnvAction) -> list[EnvNameVerdict]:
        return [verdict for verdict in self.names if verdict.action == action]

    @property
    def reason(self) -> str:
        """Why this judgement is not `allow` (empty when it is)."""
        denied = self.named("deny")
        if denied:
            return blocked_message(denied[0].name)
        prompted = self.named("prompt")
        if prompted:
            listed = ", ".join(f"{verdict.name} ({verdict.glob})" for verdict in prompted)
            return f"Prompt required for environment variables: {listed}"
        return ""


def blocked_message(name: str) -> str:
    return f"Blocked environment variable: {name}"


def judge_env(rules: EnvRules, names: Iterable[str]) -> EnvJudgement:
    """Deny beats prompt beats allow for each name; each name is judged once."""
    verdicts: list[EnvNameVerdict] = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        denied = _first_match(rules.deny, name)
        if denied is not None:
            verdicts.append(EnvNameVerdict(name, "deny", denied))
            continue
        prompted = _first_match(rules.prompt, name)
        if prompted is not None:
            verdicts.append(EnvNameVerdict(name, "prompt", prompted))
        else:
            verdicts.append(EnvNameVerdict(name, "allow", None))
    return EnvJudgement(tuple(verdicts))


# What the kernel takes at exec: one `NAME=value` string of at most 128 KiB with its NUL
# (MAX_ARG_STRLEN), all of them with the command within ARG_MAX (2 MiB as a rule, which the
# host's environment and a session's copies of the call's values share). Beyond these the
# spawn failed with E2BIG and left a `failed` record behind.
# The session wrapper's own names (app/sessions/session_wrapper.sh): its inputs, among them the
# command it runs, and its variables, among them where it writes the session's state. A caller's
# `__SHELLGATE_COMMAND` ran in place of the command the policy judged.
RESERVED_ENV_PREFIXES = ("__SHELLGATE_", "__shellgate_")
ENV_ENTRY_MAX_BYTES = 128 * 1024 - 1


def validate_env(env: dict[str, str] | None) -> None:
    """The shape every request's `env` must have (before any rule looks at it)."""
    if env is not None and len(env) > MAX_ENV_NAMES:
        raise InvalidRequestError(
            f"env has {len(env)} names; the limit is {MAX_ENV_NAMES}",
            details={"max_env_names": MAX_ENV_NAMES},
        )
    total = 0
    for key, value in (env or {}).items():
        if not ENV_NAME.match(key):
            raise InvalidRequestError(f"Invalid bash env name: {key}")
        if key.startswith(RESERVED_ENV_PREFIXES):
            raise InvalidRequestError(
                f"env name {key} is reserved: names starting with __SHELLGATE_ or __shellgate_ "
                "are the server's own"
            )
        if "\0" in value:
            raise InvalidRequestError(f"env value of {key} must not contain a NUL byte")
        size = len(key) + 1 + len(value.encode("utf-8", "surrogatepass"))
        if size > ENV_ENTRY_MAX_BYTES:
            raise InvalidRequestError(
                f"env entry {key} is {size} bytes; the limit is {ENV_ENTRY_MAX_BYTES} bytes"
            )
        total += size + 1
    if total > ENV_MAX_BYTES:
        raise InvalidRequestError(f"env is {total} bytes; the limit is {ENV_MAX_BYTES} bytes")
