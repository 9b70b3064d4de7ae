"""Wire models of approvals: the pending command as a reviewer sees it, and the decision."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import StrictModel
from app.schemas.sandbox import SandboxRequestPublic
from app.store.models import ApprovalState


class ApprovalPublic(BaseModel):
    id: str
    execution_id: str
    command: str
    cwd: str
    env: dict[str, str] = Field(
        description="Every environment value the command will get from the request and its "
        "session (session env overlaid by the call's), exactly as it will run."
    )
    session: str | None = Field(description="The session the command runs in, if any.")
    pty: bool = Field(description="The command runs in a pseudo-terminal (it may read input).")
    reason: str
    kind: Literal["command", "file", "sandbox"] = Field(
        description="What is asked: to run `command`; a `file` operation through the files "
        "API; or a `sandbox` beyond the policy's profile for this one execution."
    )
    sandbox_request: SandboxRequestPublic | None = Field(
        default=None,
        description="For kind `sandbox`: what the request asks beyond the profile, and why.",
    )
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
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"reason": "expected cleanup"}]}
    )

    reason: str | None = Field(
        default=None,
        max_length=4096,
        description="Stored with the decision and shown to the agent.",
    )
