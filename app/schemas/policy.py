"""Wire models of the policy API: evaluation, its verdicts and the stored versions."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.policy.engine import PolicyDocument, PolicyRule, RuleAction
from app.schemas.common import StrictModel
from app.schemas.sandbox import SandboxProfilePublic

# --- the policy (docs/policy.md#policy-api) -----------------------------------------------------


class PolicyEvaluate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"command": "cd /srv && rm -rf build", "tools": [], "env": {"GREETING": "hi"}}
            ]
        },
    )

    command: str = Field(
        max_length=1024 * 1024, description="The command as an agent would send it."
    )
    tools: list[str] | None = Field(
        default=None, max_length=64, description="The caller's dedicated tools (interceptor)."
    )
    env: dict[str, str] | None = Field(
        default=None,
        description="The `env` an agent would send; its names are judged by the env rules.",
    )
    cwd: str | None = Field(
        default=None,
        description="As in POST /v1/executions: the working directory (critical patterns judge "
        "`.` and `*` against it); when absent, a leading `cd <dir> &&` is rewritten and the "
        "interceptor also sees the rest of the command.",
    )


class InterceptionPublic(BaseModel):
    tool: str
    message: str


class CdRewrite(BaseModel):
    cwd: str
    command: str


class EnvVerdictPublic(BaseModel):
    name: str
    verdict: RuleAction = Field(description="allow | prompt | deny")
    rule: str | None = Field(description="The env glob that decided; null for allow.")


class PolicyEvaluation(BaseModel):
    verdict: RuleAction = Field(
        description="allow | prompt | deny: what submit would do, the stricter of the "
        "command's verdict and the env verdict."
    )
    reason: str
    command_verdict: RuleAction = Field(description="The command's verdict alone.")
    matched_rule: PolicyRule | None
    matched_segment: str | None = Field(
        description="What the matched rule applied to: the whole command or one of `segments`."
    )
    segments: list[str]
    critical_hits: list[str] = Field(description="Names of the critical patterns found.")
    unreadable_reasons: list[str] = Field(
        description="Why parts of the command cannot be read statically (empty: none)."
    )
    parse_error: str | None
    env_verdict: RuleAction = Field(description="The strictest verdict over the env names.")
    env: list[EnvVerdictPublic] = Field(description="Each env name's verdict, in request order.")
    cwd: str = Field(
        description="The working directory the command was judged in: the request's cwd or "
        "the leading-`cd` target, resolved against the workspace root."
    )
    cd_rewrite: CdRewrite | None = Field(
        description="The leading-`cd` rewrite submit would apply (null: none)."
    )
    interception: InterceptionPublic | None = Field(
        description="What the interceptor would block; null when nothing would, or when the "
        "verdict is deny (deny never reaches the interceptor; prompt reaches it on approval)."
    )
    sandbox: SandboxProfilePublic | None = Field(
        default=None,
        description="The sandbox profile it would run with outside a session, before any "
        "request asks more: the server's default, the policy's `sandbox` and the deciding "
        "rule's widening (null under deny).",
    )


class PolicyVersionPublic(BaseModel):
    id: int
    author: str
    created_at: datetime
    document: PolicyDocument


class PolicyVersionsPublic(BaseModel):
    data: list[PolicyVersionPublic] = Field(description="Newest first; the first is in force.")


# --- replaying a draft over the approval history (docs/policy.md#replaying-a-draft) ------------


class ReplayedApproval(BaseModel):
    approval_id: str
    execution_id: str
    command: str
    requested_by: str
    created_at: datetime
    human: str = Field(
        description="What became of the approval: approved, denied, expired or pending."
    )
    decided_by: str | None = Field(description="Who decided (`system` for an expiry).")
    draft_verdict: RuleAction = Field(
        description="allow | prompt | deny: what the draft would decide for this call now (the "
        "stricter of the command's verdict and its env's, as submit judges it)."
    )
    draft_reason: str
    draft_rule: PolicyRule | None = Field(
        description="The draft's rule that decided the command (null: the default, a critical "
        "pattern, an unreadable command or the env rules decided)."
    )
    draft_remembered_rule: str | None = Field(
        description="The draft's remembered rule (`rr_…`) that allowed it, if one did."
    )
    agrees: bool | None = Field(
        description="true: the draft allows what the human approved or denies what they "
        "denied; false: the opposite; null: the draft would still ask, or nobody decided "
        "(expired, pending)."
    )


class PolicyReplay(BaseModel):
    data: list[ReplayedApproval] = Field(description="Newest first.")
    skipped: int = Field(
        description="Approvals in the window that are not a command's (files-API and sandbox "
        "ones): the command rules do not decide them, so they are not replayed."
    )
