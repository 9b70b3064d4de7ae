"""Wire models of sandbox requests: what a call asks beyond its profile, and how an approval
shows it (docs/policy.md#asking-for-more)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.sandbox.policy_rules import NetworkSetting, PathList
from app.schemas.common import StrictModel

# A request names what it needs, not a filesystem: a few paths.
MAX_REQUESTED_PATHS = 64
MAX_JUSTIFICATION_CHARS = 4096


class SandboxRequest(StrictModel):
    """More than the policy's profile for this one call; beyond it, a human decides."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"write": ["/srv/out"], "justification": "the build writes its report there"},
                {"network": ["pypi.org:443"], "justification": "pip install"},
            ]
        },
    )

    write: PathList = Field(
        default_factory=list,
        max_length=MAX_REQUESTED_PATHS,
        description="Paths to make writable (absolute, or starting with $WORKSPACE or ~).",
    )
    network: NetworkSetting | None = Field(
        default=None,
        description='"on", "off" or a list of host[:port] globs; null: the profile\'s.',
    )
    justification: str | None = Field(
        default=None,
        max_length=MAX_JUSTIFICATION_CHARS,
        description="Why, in the caller's words: shown to the approver.",
    )


class SandboxProfilePublic(BaseModel):
    network: Literal["on", "off"] | list[str]
    write: list[str]
    hidden: list[str]


class SandboxRequestPublic(BaseModel):
    """On an approval of `kind: sandbox`: exactly what is asked beyond the profile."""

    write: list[str] = Field(description="Paths asked writable that the profile does not give.")
    network: Literal["on", "off"] | list[str] | None = Field(
        description="Network asked beyond the profile's (null: none)."
    )
    justification: str | None
    profile: SandboxProfilePublic = Field(description="The profile it asks beyond.")


class SandboxRecord(BaseModel):
    network: str | list[str] = Field(
        description="`off` (loopback only), `on` (the host's network), or host globs."
    )
    write: list[str] = Field(description="Writable paths (everything else is read-only).")
    hidden: list[str] = Field(description="Paths absent for the command (hidden wins).")
    escalated: bool = Field(description="Widened beyond the policy's profile by an approval.")


class SandboxInfo(BaseModel):
    enforced: bool = Field(
        description="Every command runs in a sandbox (false: SHELLGATE_SANDBOX=off, "
        "commands run unsandboxed)."
    )
    mechanisms: list[str] = Field(description="What the boundary is built from.")
    landlock_abi: int | None = Field(
        description="The kernel's Landlock ABI (informational; null: none)."
    )
