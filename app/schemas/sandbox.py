"""The sandbox on the wire: the profile a command ran with, and what the server enforces
(docs/sandbox.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
