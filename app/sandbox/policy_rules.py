"""The policy's `sandbox` object and a rule's `sandbox` widening (docs/policy.md#sandbox), pure
models: what an admin writes, validated so that a mistake is a 422 naming the field, never a
profile the kernel is then handed.

Paths are kept as written (`$WORKSPACE/build`, `~/.cache`) and expanded when a profile is made
(app/sandbox/effective.py), so the document reads the same on every replica.
"""

from __future__ import annotations

import posixpath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from app.core.host_globs import check_host_glob

WORKSPACE_VARIABLE = "$WORKSPACE"
NETWORK_HELP = '"on", "off" or a list of host[:port] globs'


def _normalize_word(value: Any) -> Any:
    # Read like the rules' approvals: trimmed and in any case.
    return value.strip().lower() if isinstance(value, str) else value


def _network(value: Any, *, allow_off: bool) -> Any:
    value = _normalize_word(value)
    if isinstance(value, str):
        if value == "on" or (value == "off" and allow_off):
            return value
        allowed = NETWORK_HELP if allow_off else '"on" or a list of host[:port] globs'
        raise ValueError(f"network must be {allowed}, not {value!r}")
    if isinstance(value, list):
        if not value:
            raise ValueError('network: an empty host list reaches nothing; write "off"')
        if not all(isinstance(item, str) for item in value):
            raise ValueError("network: every host entry must be a string")
        return list(dict.fromkeys(check_host_glob(item) for item in value))
    raise ValueError(f"network must be {NETWORK_HELP}")


def check_path(path: str) -> str:
    """A path an admin or a request writes: absolute, or starting with `$WORKSPACE` or `~`;
    no NUL, no `..`; trimmed and normalised (`a//./b` is `a/b`), never resolved here."""
    text = path.strip()
    if not text:
        raise ValueError("a path must not be blank")
    if "\0" in text:
        raise ValueError(f"path {path!r} contains a NUL byte")
    if ".." in text.split("/"):
        raise ValueError(f"path {path!r} must not contain `..` (write the path it leads to)")
    for prefix in (WORKSPACE_VARIABLE, "${WORKSPACE}", "~"):
        if text == prefix or text.startswith(prefix + "/"):
            rest = text[len(prefix) :]
            head = WORKSPACE_VARIABLE if prefix != "~" else "~"
            return head + (posixpath.normpath(rest) if rest.strip("/") else "")
    if not text.startswith("/"):
        raise ValueError(
            f"path {path!r} must be absolute, or start with $WORKSPACE or ~ (relative paths "
            "would depend on where a command runs)"
        )
    return "/" + posixpath.normpath(text).lstrip("/")


def _paths(value: Any) -> Any:
    # Anything but a list of strings goes on to pydantic's own type error.
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return value
    return list(dict.fromkeys(check_path(item) for item in value))


NetworkSetting = Annotated[
    Literal["on", "off"] | list[str], BeforeValidator(lambda v: _network(v, allow_off=True))
]
WideningNetwork = Annotated[
    Literal["on"] | list[str], BeforeValidator(lambda v: _network(v, allow_off=False))
]
PathList = Annotated[list[str], BeforeValidator(_paths)]
Escalation = Annotated[Literal["prompt", "deny"], BeforeValidator(_normalize_word)]


class SandboxPolicy(BaseModel):
    """The policy's top-level `sandbox`: laid over the server's own profile (docs/sandbox.md)."""

    model_config = ConfigDict(extra="forbid")

    network: NetworkSetting | None = Field(
        default=None,
        description='"on", "off" or a list of host[:port] globs reached through the proxy; '
        "null: the server's default.",
    )
    write: PathList = Field(
        default_factory=list,
        description="Writable besides the server's default (the workspace and a private /tmp).",
    )
    hidden: PathList = Field(
        default_factory=list, description="Hidden besides the server's own list."
    )
    escalation: Escalation = Field(
        default="prompt",
        description="A request asking beyond the profile: `prompt` asks a human, `deny` "
        "refuses it (403).",
    )

    @field_validator("hidden")
    @classmethod
    def _not_everything(cls, value: list[str]) -> list[str]:
        if "/" in value:
            raise ValueError("hidden must not contain / (it would hide everything)")
        return value


class SandboxWidening(BaseModel):
    """A rule's `sandbox`: more for what the rule matches, never less."""

    model_config = ConfigDict(extra="forbid")

    network: WideningNetwork | None = None
    write: PathList = Field(default_factory=list)
