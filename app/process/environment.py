"""The environment a command runs with: host env minus noise, non-interactive defaults, the
caller's variables, then guard keys the caller cannot override (docs/api.md#the-process)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

EXECUTION_MARKER = "SHELLGATE_EXECUTION_ID"

_SKIPPED_HOST_KEYS = frozenset(
    {"PS1", "PWD", "OLDPWD", "SHLVL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "_"}
)
# The server's own credentials and settings never leak into commands.
_SKIPPED_HOST_PREFIXES = ("SHELLGATE_", "BASH_FUNC_")

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


def host_environment(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The host's variables a command inherits (a fresh dict: callers change it)."""
    if source is not None:
        return _without_noise(source)
    return dict(_process_environment())


def _without_noise(source: Mapping[str, str]) -> dict[str, str]:
    return {
        key: value
        for key, value in dict(source).items()
        if key not in _SKIPPED_HOST_KEYS and not key.startswith(_SKIPPED_HOST_PREFIXES)
    }


# Reading `os.environ` decodes every name and value on each call (≈ 30-100 µs per execution,
# bench/PROFILE.md, "Lean hot routes"); comparing its raw bytes mapping with the one last seen
# is ≈ 1 µs, so the filtered copy is rebuilt only when the environment changed.
_last_seen: tuple[dict[bytes, bytes], dict[str, str]] | None = None


def _process_environment() -> dict[str, str]:
    global _last_seen
    raw = getattr(os.environ, "_data", None)  # CPython's encoded mapping behind os.environ
    if not isinstance(raw, dict):
        return _without_noise(os.environ)
    seen = _last_seen
    if seen is not None and seen[0] == raw:
        return seen[1]
    snapshot = dict(raw)
    filtered = _without_noise(os.environ)
    _last_seen = (snapshot, filtered)
    return filtered


def build_environment(
    *,
    execution_id: str,
    caller_env: Mapping[str, str] | None,
    pty: bool,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    env = host_environment(base)
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
