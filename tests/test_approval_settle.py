"""A decision heard twice at once settles its execution once, and neither hearer returns before
it is settled: an approver's deny and the replicas' polling fallback both hear it, and the
deny's 200 must not come while the execution still says `awaiting_approval`."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import httpx

from app.main import create_app
from app.store import crud
from app.store.models import ApprovalState, ExecutionState
from tests.conftest import AGENT, make_settings
from tests.databases import SQLITE

POLICY = {"critical": "prompt", "rules": [{"match": "*", "approval": "allow"}]}


async def _deny_heard_twice(tmp_path: Path) -> tuple[bool, str]:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    app = create_app(make_settings(tmp_path, SQLITE, policy_file=policy))
    async with app.router.lifespan_context(app):
        services = app.state.services
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            submitted = await client.post(
                "/v1/executions",
                json={"command": "rm -rf /nonexistent-x", "async": True},
                headers={"Authorization": f"Bearer {AGENT}"},
            )
            assert submitted.status_code == 202, submitted.text
            body = submitted.json()
            assert body["state"] == "awaiting_approval", body
        # The approver's conditional UPDATE has committed; then two hearers settle at once.
        approval_id = body["approval"]["id"]
        await services.db.call(
            crud.decide_approval,
            approval_id=approval_id,
            state=ApprovalState.denied,
            decided_by="carol",
            decision_reason=None,
            decided_at=datetime.now(UTC),
        )
        approval = await services.db.call(crud.get_approval, approval_id=approval_id)
        first = asyncio.create_task(services.approvals.on_settled(approval))
        second = asyncio.create_task(services.approvals.on_settled(approval))
        await second
        first_done_when_second_returned = first.done()
        await first
        record = await services.db.call(crud.get_execution, execution_id=body["id"])
        return first_done_when_second_returned, record.state


def test_the_second_hearer_of_a_decision_returns_only_once_it_is_settled(
    tmp_path: Path,
) -> None:
    first_done, state = asyncio.run(_deny_heard_twice(tmp_path))
    assert first_done, "the second hearer answered while the first was still settling"
    assert state == ExecutionState.rejected.value
