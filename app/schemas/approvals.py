"""Wire models of approvals: the pending command as a reviewer sees it, and the decision."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import StrictModel
from app.schemas.sandbox import SandboxRequestPublic
from app.store.models import ApprovalState, ApprovalSubject


class ApprovalPublic(BaseModel):
    id: str
    subject: ApprovalSubject = Field(
        default="execution",
        description="What waits for the decision: an `execution` (`execution_id`), a "
        "`file_operation` (`file_operation_id`), or a `session`: a new session's sandbox "
        "request, made by the call that asked or a retry naming the approval (neither id).",
    )
    execution_id: str | None = Field(
        description="The execution that waits for it (a command). Null for a `file` "
        "approval (its subject is the file operation, `file_operation_id`) and for a new "
        "session's `sandbox` request (its subject is the session it would make)."
    )
    file_operation_id: str | None = Field(
        default=None,
        description="For a `file` approval: the file operation that waits for it "
        "(`GET /v1/files/operations`); null otherwise.",
    )
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
    suggested_pattern: str | None = Field(
        default=None,
        description="The pattern offered to remember with the approval: the prompting "
        "segment's command word and subcommand, the rest as `*` (null: this approval cannot be "
        "remembered, e.g. a files-API one).",
    )
    remembered_rule: str | None = Field(
        default=None,
        description="The remembered rule (`rr_…`) its approval made, if the approver chose to "
        "remember it.",
    )


class ApprovalsPublic(BaseModel):
    data: list[ApprovalPublic]


class RememberChoice(StrictModel):
    """Approve and remember (docs/policy.md#remembered-decisions)."""

    model_config = ConfigDict(extra="forbid")

    pattern: str | None = Field(
        default=None,
        max_length=4096,
        description="A rule glob that must match the approved command or one of the commands "
        "in it; its first word literal. Default: the approval's `suggested_pattern`.",
    )
    scope: Literal["owner", "all"] = Field(
        default="owner",
        description="`owner`: the requesting owner's calls only; `all`: everyone's (admins only).",
    )
    for_seconds: float = Field(
        default=3600,
        gt=0,
        description="How long it is remembered, within SHELLGATE_REMEMBER_MIN_SECONDS and "
        "SHELLGATE_REMEMBER_MAX_SECONDS.",
    )


class ApprovalDecision(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"reason": "expected cleanup"},
                {
                    "reason": "plans are read-only",
                    "remember": {
                        "pattern": "terraform plan *",
                        "scope": "owner",
                        "for_seconds": 3600,
                    },
                },
            ]
        },
    )

    reason: str | None = Field(
        default=None,
        max_length=4096,
        description="Stored with the decision and shown to the agent.",
    )
    remember: RememberChoice | None = Field(
        default=None,
        description="Approve only: also allow calls like this one for a while without a prompt "
        "(a remembered rule in a new policy version). Never on deny.",
    )
