"""Wire models: what clients send and receive. Persistence models live in `models.py`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.models import ApprovalState, ExecutionMode, ExecutionState


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExecutionCreate(StrictModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    command: str = Field(description="Shell text, run as `bash -c <command>`.")
    env: dict[str, str] | None = Field(
        default=None, description="Extra environment values (never parsed as shell text)."
    )
    timeout: float = Field(
        default=300,
        description="Seconds; 0 disables the deadline; otherwise clamped to 1..3600.",
    )
    cwd: str | None = Field(default=None, description="Working directory (`~` expands).")
    pty: bool = False
    async_: bool = Field(default=False, alias="async", description="Start as a background job.")
    session: str | None = Field(default=None, max_length=64)
    tools: list[str] | None = Field(default=None, max_length=64)
    rows: int = Field(default=40, description="PTY rows, clamped to 5..200.")
    cols: int = Field(default=120, description="PTY columns, clamped to 20..400.")
    approval_wait: float = Field(
        default=30,
        ge=0,
        le=3600,
        description="Seconds a foreground call waits for an approval before answering 202.",
    )


class ApprovalSummary(BaseModel):
    id: str
    state: ApprovalState
    reason: str
    expires_at: datetime


class ExecutionPublic(BaseModel):
    id: str
    state: ExecutionState
    mode: ExecutionMode
    owner: str
    command: str
    cwd: str
    pty: bool
    session: str | None = None
    exit_code: int | None
    signal: int | None
    timed_out: bool
    output: str
    truncated: bool
    total_bytes: int
    total_lines: int
    output_bytes: int
    output_lines: int
    elided_bytes: int
    artifact: str
    wall_time_ms: float | None
    timeout_seconds: float | None
    requested_timeout_seconds: float | None = None
    timeout_disabled: bool | None = None
    notices: list[str]
    is_error: bool
    text: str
    approval: ApprovalSummary | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ExecutionsPublic(BaseModel):
    data: list[ExecutionPublic]
    next_cursor: str | None


class ExecutionInput(StrictModel):
    data: str = Field(max_length=1024 * 1024)


class ExecutionResize(StrictModel):
    rows: int
    cols: int


class ApprovalPublic(BaseModel):
    id: str
    execution_id: str
    command: str
    cwd: str
    reason: str
    state: ApprovalState
    requested_by: str
    decided_by: str | None
    decision_reason: str | None
    created_at: datetime
    decided_at: datetime | None
    expires_at: datetime


class ApprovalsPublic(BaseModel):
    data: list[ApprovalPublic]


class ApprovalDecision(StrictModel):
    reason: str | None = Field(default=None, max_length=4096)


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorResponse(BaseModel):
    error: ErrorBody


class ToolObject(BaseModel):
    """An MCP tool object (name, description, inputSchema)."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")


class Health(BaseModel):
    status: Literal["ok"]


class Info(BaseModel):
    version: str
    max_jobs: int
    running_jobs: int
    limits: dict[str, Any]


class WsTicket(BaseModel):
    ticket: str
    expires_at: datetime
