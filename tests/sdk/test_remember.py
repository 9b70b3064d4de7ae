"""Approve and remember through the SDK (docs/sdk.md, docs/policy.md#remembered-decisions),
sync and async, against a real server: the approval offers its suggested pattern, `approve`
with a `Remember` answers the rule's id, the owner's identical call then runs without a prompt
naming it, and what the server refuses (an agent deciding, an approver remembering for
everyone) raises with the server's reason."""

from __future__ import annotations

import pytest

from shellgate import AsyncClient, Client, PermissionDeniedError, Remember
from tests.conftest import AGENT, APPROVER, LiveServer


def test_approve_with_remember_lets_the_owners_identical_call_run(
    client: Client, approver: Client
) -> None:
    command = "echo needs-approval-sync remembered"
    held = client.start(command)
    assert held.approval is not None
    shown = approver.get_approval(held.approval.id)
    assert shown.suggested_pattern == "echo needs-approval-sync *"
    assert shown.remembered_rule is None

    decided = approver.approve(
        held.approval.id, reason="only echoes", remember=Remember(for_seconds=3600)
    )
    assert decided.state == "approved"
    assert decided.remembered_rule is not None and decided.remembered_rule.startswith("rr_")
    [rule] = [
        rule for rule in client.get_policy()["remembered"] if rule["id"] == decided.remembered_rule
    ]
    assert (rule["match"], rule["owner"], rule["reason"]) == (
        "echo needs-approval-sync *",
        "alice",
        "only echoes",
    )

    again = client.run(command)
    assert again.state == "completed" and again.output == "needs-approval-sync remembered\n"
    assert again.remembered_rule == decided.remembered_rule
    assert again.reason is not None
    assert again.reason.startswith(f"Allowed by remembered rule {decided.remembered_rule}:")


def test_the_server_refusing_a_remember_raises_with_its_reason(
    client: Client, approver: Client
) -> None:
    held = client.start("echo needs-approval-refused x")
    assert held.approval is not None
    with pytest.raises(PermissionDeniedError) as agent_decides:
        client.approve(held.approval.id, remember=Remember())
    assert (agent_decides.value.status, agent_decides.value.code) == (403, "forbidden")
    with pytest.raises(PermissionDeniedError) as for_everyone:
        approver.approve(held.approval.id, remember=Remember(scope="all"))
    assert "only an admin" in str(for_everyone.value)
    assert approver.get_approval(held.approval.id).state == "pending"
    assert approver.deny(held.approval.id).state == "denied"


@pytest.mark.anyio
async def test_the_async_client_approves_and_remembers_an_edited_pattern(
    sdk_server: LiveServer,
) -> None:
    async with (
        AsyncClient(sdk_server.base_url, AGENT) as client,
        AsyncClient(sdk_server.base_url, APPROVER) as approver,
    ):
        held = await client.start("echo needs-approval-async one")
        assert held.approval is not None
        decided = await approver.approve(
            held.approval.id,
            remember=Remember(pattern="echo needs-approval-async o*", for_seconds=600),
        )
        assert decided.remembered_rule is not None
        again = await client.run("echo needs-approval-async other")
        assert again.remembered_rule == decided.remembered_rule
        assert again.output == "needs-approval-async other\n"
