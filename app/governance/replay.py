"""Replaying a draft policy over the approval history (docs/policy.md#replaying-a-draft): for
each past command approval, what the draft would decide for the same call now beside what the
human decided. A pure read: nothing is judged into the registry, nothing runs, the policy in
force is unchanged."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from app.core.auth import Principal
from app.core.errors import ForbiddenError
from app.governance.service import PolicyService
from app.policy.engine import PolicyDocument, RuleAction
from app.schemas import PolicyReplay, ReplayedApproval
from app.store import crud
from app.store.db import Database
from app.store.models import Approval, ApprovalState
from app.store.timestamps import aware_utc


def require_reviewer(principal: Principal) -> None:
    # The history holds every owner's commands: those who may read all approvals replay them.
    if principal.role not in ("approver", "admin"):
        raise ForbiddenError("only an approver or an admin can replay the approval history")


def agreement(draft: RuleAction, human: str) -> bool | None:
    """Whether the draft's verdict says what the human said (None: nothing to compare — the
    draft would still ask, or no human decided)."""
    if draft is RuleAction.prompt or human not in (ApprovalState.approved, ApprovalState.denied):
        return None
    approved = human == ApprovalState.approved
    return (draft is RuleAction.allow) == approved


async def replay(
    policy: PolicyService,
    db: Database,
    draft: PolicyDocument,
    *,
    limit: int,
    since: datetime | None,
) -> PolicyReplay:
    # The draft is checked as PUT /v1/policy would check it, so a replay never shows verdicts
    # of a document that could not be installed.
    policy.check_sandbox(draft)
    if since is not None:
        # Stored in UTC (SQLite keeps no offset): compare in UTC; a naive `since` is UTC.
        since = since.astimezone(UTC) if since.tzinfo else since.replace(tzinfo=UTC)
    history = await db.call(
        crud.list_approvals, state=None, requested_by=None, limit=limit, since=since
    )
    commands = [approval for approval in history if approval.kind == "command"]
    data = [await _replayed(policy, draft, approval) for approval in commands]
    return PolicyReplay(data=data, skipped=len(history) - len(commands))


async def _replayed(
    policy: PolicyService, draft: PolicyDocument, approval: Approval
) -> ReplayedApproval:
    # Judged as submit judges it, in the directory it would have run in, with its env and as
    # its owner (the draft's remembered rules for that owner apply).
    judgement = await policy.judge(
        approval.command,
        env=json.loads(approval.env),
        cwd=approval.cwd,
        owner=approval.requested_by,
        document=draft,
    )
    verdict = judgement.command
    return ReplayedApproval(
        approval_id=approval.id,
        execution_id=approval.execution_id,
        command=approval.command,
        requested_by=approval.requested_by,
        created_at=aware_utc(approval.created_at),
        human=approval.state,
        decided_by=approval.decided_by,
        draft_verdict=judgement.approval,
        draft_reason=judgement.reason,
        draft_rule=verdict.matched_rule if verdict.remembered_rule is None else None,
        draft_remembered_rule=verdict.remembered_rule,
        agrees=agreement(judgement.approval, approval.state),
    )


__all__ = ["agreement", "replay", "require_reviewer"]
