"""Approve and remember over real HTTP (docs/policy.md#remembered-decisions): a remembered
decision lets the owner's identical call run without a prompt and names its rule; another
owner still prompts; it ends by itself; agents never remember; admins alone remember for all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, AGENT, AGENT2, APPROVER, LiveServer
from tests.waiting import eventually

TERRAFORM_POLICY = {
    "default": "allow",
    "rules": [{"match": "terraform *", "approval": "prompt"}],
}
PLAN = "terraform plan -input=false"


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(TERRAFORM_POLICY))
    return path


def held(client: httpx.Client, command: str = PLAN) -> dict[str, Any]:
    """Submit `command` so that it answers at once with its pending approval."""
    response = client.post("/v1/executions", json={"command": command, "approval_wait": 0})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["state"] == "awaiting_approval"
    approval: dict[str, Any] = body["approval"]
    return approval


def approve(client: httpx.Client, approval_id: str, **remember: Any) -> httpx.Response:
    return client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "plans are read-only", "remember": remember},
    )


@pytest.fixture
def remembering(tmp_path: Path, database: Any, policy_file: Path) -> Any:
    from tests.conftest import make_settings, serve

    settings = make_settings(tmp_path, database, policy_file=policy_file, remember_min_seconds=0.5)
    with serve(settings) as live:
        yield live


def test_remember_for_alice_lets_her_identical_call_run_and_names_the_rule(
    remembering: LiveServer,
) -> None:
    with (
        remembering.client(AGENT) as alice,
        remembering.client(AGENT2) as bob,
        remembering.client(APPROVER) as carol,
    ):
        first = held(alice)
        shown = carol.get(f"/v1/approvals/{first['id']}").json()
        assert shown["suggested_pattern"] == "terraform plan *"
        decided = approve(carol, first["id"], scope="owner", for_seconds=3600)
        assert decided.status_code == 200, decided.text
        rule_id = decided.json()["remembered_rule"]
        assert rule_id.startswith("rr_")

        remembered = alice.get("/v1/policy").json()["remembered"]
        assert [
            (rule["id"], rule["match"], rule["owner"], rule["author"]) for rule in remembered
        ] == [(rule_id, "terraform plan *", "alice", "carol")]
        assert remembered[0]["reason"] == "plans are read-only"
        versions = carol.get("/v1/policy/versions").json()["data"]
        assert versions[0]["author"] == "carol"

        again = alice.post("/v1/executions", json={"command": PLAN})
        assert again.status_code == 200, again.text
        record = again.json()
        assert record["state"] != "awaiting_approval"
        assert record["remembered_rule"] == rule_id
        assert record["reason"].startswith(
            f"Allowed by remembered rule {rule_id}: terraform plan *"
        )
        stored = alice.get(f"/v1/executions/{record['id']}").json()
        assert stored["remembered_rule"] == rule_id

        # Another owner's identical call, and a command the pattern does not cover, still ask.
        held(bob)
        held(alice, "terraform apply -auto-approve")
        # Compound text is never vouched for by an allow, remembered or not.
        held(alice, f"{PLAN}; terraform apply")


def test_a_remembered_decision_ends_by_itself(remembering: LiveServer) -> None:
    with remembering.client(AGENT) as alice, remembering.client(APPROVER) as carol:
        first = held(alice)
        decided = approve(carol, first["id"], pattern="terraform plan *", for_seconds=1)
        assert decided.status_code == 200, decided.text
        assert alice.post("/v1/executions", json={"command": PLAN}).json()["remembered_rule"]
        eventually(
            lambda: alice.get("/v1/policy").json()["remembered"] == [],
            what="the remembered rule to expire",
        )
        held(alice)


def test_an_agent_never_remembers_and_only_an_admin_remembers_for_everyone(
    remembering: LiveServer,
) -> None:
    with (
        remembering.client(AGENT) as alice,
        remembering.client(AGENT2) as bob,
        remembering.client(APPROVER) as carol,
        remembering.client(ADMIN) as root,
    ):
        first = held(alice)
        for agent in (alice, bob):
            refused = approve(agent, first["id"], scope="owner", for_seconds=3600)
            assert refused.status_code == 403
        refused = approve(carol, first["id"], scope="all", for_seconds=3600)
        assert refused.status_code == 403
        assert "admin" in refused.json()["error"]["message"]
        assert alice.get("/v1/policy").json()["remembered"] == []
        assert carol.get(f"/v1/approvals/{first['id']}").json()["state"] == "pending"

        everyone = approve(root, first["id"], scope="all", for_seconds=3600)
        assert everyone.status_code == 200, everyone.text
        assert bob.post("/v1/executions", json={"command": PLAN}).json()["remembered_rule"]


def test_remember_refuses_what_it_cannot_keep(remembering: LiveServer) -> None:
    with remembering.client(AGENT) as alice, remembering.client(APPROVER) as carol:
        first = held(alice)
        cases = [
            ({"pattern": "kubectl *", "for_seconds": 60}, "matches neither"),
            ({"pattern": "* plan", "for_seconds": 60}, "first word"),
            ({"pattern": "terraform plan *", "for_seconds": 0.1}, "for_seconds"),
            ({"pattern": "terraform plan *", "for_seconds": 10**9}, "for_seconds"),
        ]
        for remember, message in cases:
            refused = approve(carol, first["id"], **remember)
            assert refused.status_code in (400, 422), refused.text
            assert message in refused.text
        denied = carol.post(
            f"/v1/approvals/{first['id']}/deny",
            json={"remember": {"pattern": "terraform plan *"}},
        )
        assert denied.status_code == 422
        assert "approve only" in denied.text
        assert carol.get(f"/v1/approvals/{first['id']}").json()["state"] == "pending"
        assert alice.get("/v1/policy").json()["remembered"] == []
