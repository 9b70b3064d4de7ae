"""`POST /v1/policy/replay` over real HTTP (docs/policy.md#replaying-a-draft): a draft policy
judged against the approval history, newest first, beside what the human decided — and the
policy in force, its versions and the approvals left exactly as they were."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer

PROMPTING_POLICY = {
    "default": "allow",
    "rules": [{"match": "echo needs-approval*", "approval": "prompt"}],
}
DRAFT = {
    "default": "allow",
    "rules": [
        {"match": "echo needs-approval build*", "approval": "allow"},
        {"match": "echo needs-approval drop*", "approval": "deny"},
        {"match": "echo needs-approval*", "approval": "prompt"},
    ],
}


@pytest.fixture
def history(tmp_path: Path, database: Any) -> Any:
    """A server whose history holds, oldest first: `build` approved, `drop` denied, `later`
    still pending."""
    from tests.conftest import make_settings, serve

    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(PROMPTING_POLICY))
    with serve(make_settings(tmp_path, database, policy_file=policy_file)) as live:
        with live.client(AGENT) as alice, live.client(APPROVER) as carol:
            for command, decision in (
                ("echo needs-approval build", "approve"),
                ("echo needs-approval drop", "deny"),
                ("echo needs-approval later", None),
            ):
                held = alice.post("/v1/executions", json={"command": command, "async": True})
                assert held.status_code == 202, held.text
                if decision is not None:
                    approval_id = held.json()["approval"]["id"]
                    decided = carol.post(f"/v1/approvals/{approval_id}/{decision}", json={})
                    assert decided.status_code == 200, decided.text
        yield live


def replay(client: httpx.Client, draft: dict[str, Any], **params: Any) -> httpx.Response:
    return client.post("/v1/policy/replay", json=draft, params=params)


def test_a_draft_is_judged_against_each_past_approval_beside_the_human_decision(
    history: LiveServer,
) -> None:
    with history.client(APPROVER) as carol:
        before = carol.get("/v1/policy").json()
        versions = carol.get("/v1/policy/versions").json()["data"]
        approvals = carol.get("/v1/approvals", params={"state": "all"}).json()

        answered = replay(carol, DRAFT)
        assert answered.status_code == 200, answered.text
        body = answered.json()
        assert body["skipped"] == 0
        rows = [
            (
                item["command"],
                item["human"],
                item["draft_verdict"],
                item["draft_rule"]["match"] if item["draft_rule"] else None,
                item["agrees"],
            )
            for item in body["data"]
        ]
        assert rows == [
            ("echo needs-approval later", "pending", "prompt", "echo needs-approval*", None),
            ("echo needs-approval drop", "denied", "deny", "echo needs-approval drop*", True),
            ("echo needs-approval build", "approved", "allow", "echo needs-approval build*", True),
        ]
        assert all(item["requested_by"] == "alice" for item in body["data"])
        assert body["data"][1]["decided_by"] == "carol"

        # A draft that allows everything disagrees with the denial.
        lax = replay(carol, {"default": "allow", "rules": []}).json()["data"]
        assert [(item["draft_verdict"], item["agrees"]) for item in lax] == [
            ("allow", None),
            ("allow", False),
            ("allow", True),
        ]

        # A pure read: the policy, its versions and the approvals are as they were.
        assert carol.get("/v1/policy").json() == before
        assert carol.get("/v1/policy/versions").json()["data"] == versions
        assert carol.get("/v1/approvals", params={"state": "all"}).json() == approvals


def test_limit_and_since_bound_the_history_replayed(history: LiveServer) -> None:
    with history.client(ADMIN) as root:
        newest = replay(root, DRAFT, limit=1).json()["data"]
        assert [item["command"] for item in newest] == ["echo needs-approval later"]
        future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        assert replay(root, DRAFT, since=future).json()["data"] == []
        past = (datetime.now(UTC) - timedelta(hours=1)).astimezone(timezone(timedelta(hours=5)))
        assert len(replay(root, DRAFT, since=past.isoformat()).json()["data"]) == 3


def test_an_agent_cannot_replay_and_a_bad_draft_is_a_422(history: LiveServer) -> None:
    with history.client(AGENT) as alice, history.client(APPROVER) as carol:
        refused = replay(alice, DRAFT)
        assert refused.status_code == 403
        assert "approver or an admin" in refused.json()["error"]["message"]
        bad = replay(carol, {"default": "maybe", "rules": []})
        assert bad.status_code == 422, bad.text
        too_many = replay(carol, DRAFT, limit=0)
        assert too_many.status_code == 422
