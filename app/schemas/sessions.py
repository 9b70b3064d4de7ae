"""Wire models of sessions and the streaming runner."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import StrictModel
from app.schemas.executions import ApprovalSummary, ExecutionLimits
from app.schemas.sandbox import SandboxRecord, SandboxRequest
from app.schemas.service import ToolObject

# --- sessions and the streaming runner (docs/streaming.md#sessions) ---------------------------

SESSION_DEFAULT_TIMEOUT_MS = 600_000
# The runner has no upper bound of its own; a day keeps a forgotten call from running forever.
SESSION_MAX_TIMEOUT_MS = 24 * 60 * 60 * 1000


class SessionCreate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"env": {"PROJECT": "demo"}, "timeout_ms": 120000}]},
    )

    cwd: str | None = Field(
        default=None,
        description="Working directory at the start of every call (`~` expands; relative to "
        "the workspace root; default the workspace root).",
    )
    env: dict[str, str] | None = Field(
        default=None,
        description="Environment values of every call (never parsed as shell text); judged by "
        "the policy's env rules now and again at every call.",
    )
    timeout_ms: int = Field(
        default=SESSION_DEFAULT_TIMEOUT_MS,
        ge=1,
        le=SESSION_MAX_TIMEOUT_MS,
        description="Deadline of each `/run` call; a call may only raise it.",
    )
    pty: bool = Field(default=False, description="Run the calls in a pseudo-terminal.")
    keep_cwd: bool = Field(
        default=False,
        description="Each call starts in the directory the session's last call ended in (a "
        "`cd` carries over, and `cwd` follows it); default false: every call starts in `cwd`.",
    )
    limits: ExecutionLimits | None = Field(
        default=None, description="Resource limits of every call (only lower than the server's)."
    )
    sandbox: SandboxRequest | None = Field(
        default=None,
        description="More than the policy's sandbox profile for every call of the session, "
        "fixed at its creation: beyond the profile an approval of kind `sandbox` (the call "
        "holds up to `approval_wait`, then answers 202), or 403 under `escalation: deny`.",
    )
    approval_wait: float = Field(
        default=30,
        ge=0,
        le=3600,
        description="Seconds the call waits for a sandbox approval before answering 202.",
    )
    approval_id: str | None = Field(
        default=None,
        max_length=64,
        description="Create the session with the sandbox an earlier call (answered 202) asked "
        "for, once its approval is approved; the same `sandbox` must be sent again.",
    )


class SessionPatch(StrictModel):
    """Fields left out keep their value; `env` replaces the whole environment."""

    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout_ms: int | None = Field(default=None, ge=1, le=SESSION_MAX_TIMEOUT_MS)
    pty: bool | None = None
    keep_cwd: bool | None = None
    limits: ExecutionLimits | None = Field(
        default=None, description="Replaces the session's limits (`{}` clears them)."
    )


class SessionPending(BaseModel):
    """`POST /v1/sessions` answered 202: its sandbox awaits a human's decision."""

    state: Literal["awaiting_approval"] = "awaiting_approval"
    approval: ApprovalSummary = Field(
        description="The approval it waits on (`GET /v1/approvals/{id}` follows it); send the "
        "same request again with `approval_id` once it is approved."
    )


class SessionPublic(BaseModel):
    id: str
    owner: str
    cwd: str = Field(
        description="Where the next call starts (with `keep_cwd`, where the last one ended)."
    )
    env: dict[str, str]
    timeout_ms: int
    pty: bool
    keep_cwd: bool = Field(description="A `cd` carries over to the next call.")
    limits: dict[str, int] = Field(default_factory=dict, description="Limits of every call.")
    sandbox: SandboxRecord | None = Field(
        default=None,
        description="The sandbox profile its calls run with, fixed at its creation "
        "(null: made while the sandbox was off).",
    )
    busy: bool = Field(description="A call holds the session's shell state right now.")
    created_at: datetime
    updated_at: datetime
    tool: ToolObject


class SessionsPublic(BaseModel):
    data: list[SessionPublic]


class RunRequest(StrictModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"command": "echo $PROJECT"}]}
    )

    command: str = Field(description="Shell text; must not start with `/`.")
    timeout_ms: int | None = Field(
        default=None,
        description="Per-call deadline in milliseconds; must be strictly greater than the "
        "session's timeout_ms (it can only raise it).",
    )
    sandbox: SandboxRequest | None = Field(
        default=None,
        description="Must stay within the session's sandbox profile (fixed at its creation); "
        "more is a 409 and nothing runs.",
    )


class RunItem(BaseModel):
    """One NDJSON line of `POST /v1/sessions/{id}/run`."""

    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    truncated: bool
    encoding: Literal["base64"] | None = Field(
        default=None, description="Present when the chunk is not valid UTF-8."
    )


# --- WebSocket client → server frames (docs/streaming.md#client-frames) ------------------------
