"""The environment a command runs with: what it inherits of the server's (never the server's
own settings, and no credential unless the operator passes it), non-interactive defaults, the
caller's variables, then guard keys the caller cannot override (docs/api.md#the-process)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from app.core.config import DEFAULT_COMMAND_ENV_EXCLUDE, CommandInherit, Settings

EXECUTION_MARKER = "SHELLGATE_EXECUTION_ID"

_SKIPPED_HOST_KEYS = frozenset(
    {"PS1", "PWD", "OLDPWD", "SHLVL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "_"}
)
# The server's own credentials and settings never leak into commands.
_SKIPPED_HOST_PREFIXES = ("SHELLGATE_", "BASH_FUNC_")

# `core` inheritance: what a shell and the usual tools need to run as the server's user.
CORE_VARIABLES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
)


# A URL that carries a password (`redis://:secret@cache`, `http://user:secret@proxy:3128`): a
# credential whatever the variable is called.
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:[^/?#@\s]+@")


@dataclass(frozen=True)
class Inheritance:
    """Which of the server's variables a command inherits: `inherit` picks the base (all of them,
    the core ones, none), `exclude` drops names from it, as does a value that is a URL with a
    password, and `passed` names go through whatever the others say. Names are matched with
    case-insensitive globs."""

    inherit: CommandInherit = "all"
    exclude: tuple[str, ...] = DEFAULT_COMMAND_ENV_EXCLUDE
    passed: tuple[str, ...] = ()

    def admits(self, name: str, value: str) -> bool:
        if _matches(name, self.passed):
            return True
        if self.inherit == "none" or (
            self.inherit == "core" and not _matches(name, CORE_VARIABLES)
        ):
            return False
        return not _matches(name, self.exclude) and not _URL_WITH_PASSWORD.search(value)


def inheritance_of(settings: Settings) -> Inheritance:
    return Inheritance(
        settings.command_env_inherit,
        tuple(settings.command_env_exclude),
        tuple(settings.command_env_pass),
    )


def _matches(name: str, globs: tuple[str, ...]) -> bool:
    folded = name.upper()
    return any(fnmatchcase(folded, glob.upper()) for glob in globs)


_FALSE = shutil.which("false") or "false"

NON_INTERACTIVE_ENV: dict[str, str] = {
    **dict.fromkeys(
        (
            "PAGER",
            "GIT_PAGER",
            "MANPAGER",
            "SYSTEMD_PAGER",
            "BAT_PAGER",
            "DELTA_PAGER",
            "GH_PAGER",
            "GLAB_PAGER",
            "PSQL_PAGER",
            "MYSQL_PAGER",
            "HOMEBREW_PAGER",
        ),
        "cat",
    ),
    "AWS_PAGER": "",
    "LESS": "FRX",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PYTHONUNBUFFERED": "1",
    "GIT_EDITOR": "true",
    "VISUAL": "true",
    "EDITOR": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "SSH_ASKPASS": _FALSE,
    "GIT_ASKPASS": _FALSE,
    "CI": "true",
    "AGENT": "1",
    "npm_config_yes": "true",
    "npm_config_update_notifier": "false",
    "npm_config_fund": "false",
    "npm_config_audit": "false",
    "npm_config_progress": "false",
    "PNPM_DISABLE_SELF_UPDATE_CHECK": "true",
    "PNPM_UPDATE_NOTIFIER": "false",
    "YARN_ENABLE_TELEMETRY": "0",
    "YARN_ENABLE_PROGRESS_BARS": "0",
    "CARGO_TERM_PROGRESS_WHEN": "never",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "TF_INPUT": "0",
    "TF_IN_AUTOMATION": "1",
    "GH_PROMPT_DISABLED": "1",
    "COMPOSER_NO_INTERACTION": "1",
    "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
}
GUARD_KEYS = (
    "SSH_ASKPASS",
    "GIT_ASKPASS",
    "GIT_TERMINAL_PROMPT",
    "GIT_EDITOR",
    "EDITOR",
    "VISUAL",
    "CI",
)
# A PTY is interactive on purpose: it skips the non-interactive hardening
# and drops these host keys.
PTY_DROPPED_KEYS = ("GIT_EDITOR", "GPG_TTY", "CI", "NO_COLOR")


def host_environment(
    inheritance: Inheritance, source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The host's variables a command inherits (a fresh dict: callers change it)."""
    if source is not None:
        return _without_noise(source, inheritance)
    return dict(_process_environment(inheritance))


def withheld_names(inheritance: Inheritance) -> list[str]:
    """The server's variables no command inherits, besides its own settings and shell noise."""
    return sorted(
        name
        for name, value in os.environ.items()
        if not _is_noise(name) and not inheritance.admits(name, value)
    )


def _is_noise(key: str) -> bool:
    return key in _SKIPPED_HOST_KEYS or key.startswith(_SKIPPED_HOST_PREFIXES)


def _without_noise(source: Mapping[str, str], inheritance: Inheritance) -> dict[str, str]:
    return {
        key: value
        for key, value in dict(source).items()
        if not _is_noise(key) and inheritance.admits(key, value)
    }


# Reading `os.environ` decodes every name and value on each call (≈ 30-100 µs per execution,
# bench/PROFILE.md, "Lean hot routes"); comparing its raw bytes mapping with the one last seen
# is ≈ 1 µs, so the filtered copy is rebuilt only when the environment (or the inheritance)
# changed.
_last_seen: tuple[dict[bytes, bytes], Inheritance, dict[str, str]] | None = None


def _process_environment(inheritance: Inheritance) -> dict[str, str]:
    global _last_seen
    raw = getattr(os.environ, "_data", None)  # CPython's encoded mapping behind os.environ
    if not isinstance(raw, dict):
        return _without_noise(os.environ, inheritance)
    seen = _last_seen
    if seen is not None and seen[1] == inheritance and seen[0] == raw:
        return seen[2]
    snapshot = dict(raw)
    filtered = _without_noise(os.environ, inheritance)
    _last_seen = (snapshot, inheritance, filtered)
    return filtered


def build_environment(
    *,
    execution_id: str,
    caller_env: Mapping[str, str] | None,
    pty: bool,
    inheritance: Inheritance,
) -> dict[str, str]:
    env = host_environment(inheritance)
    if pty:
        for key in PTY_DROPPED_KEYS:
            env.pop(key, None)
        env["TERM"] = "xterm-256color"
        env.update(caller_env or {})
    else:
        env.update(NON_INTERACTIVE_ENV)
        env.update(caller_env or {})
        for key in GUARD_KEYS:
            env[key] = NON_INTERACTIVE_ENV[key]
    # Lets restart recovery recognise this execution's processes (pid-reuse guard).
    env[EXECUTION_MARKER] = execution_id
    return env
