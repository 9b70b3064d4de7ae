"""The console's approve-and-remember choice (docs/policy.md#remembered-decisions): approving
with "remember for <owner>" lets that owner's identical call run without a prompt under a rule
the card then shows; "remember for everyone" is offered to an admin only, and an agent is
offered no decision at all."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer
from tests.web.browser import (
    NEEDS_CHROMIUM,
    PROMPT_PREFIX,
    pending_card,
    request_approval,
    sign_in,
)

pytestmark = NEEDS_CHROMIUM


def test_remember_for_the_owner_lets_the_identical_call_run_and_names_the_rule(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    command = f"{PROMPT_PREFIX}-remembered first"
    held = request_approval(agent, command)
    approval_id = held["approval"]["id"]

    sign_in(page, console_server, APPROVER)
    card = pending_card(page, approval_id)
    choice = card.locator("fieldset.remember")
    expect(choice.get_by_label("this call only")).to_be_checked()
    expect(choice.get_by_label("remember for everyone")).to_have_count(0)
    pattern = choice.get_by_label("Remembered pattern")
    expect(pattern).to_be_hidden()

    choice.get_by_label("remember for alice").check()
    expect(pattern).to_have_value(f"{PROMPT_PREFIX}-remembered *")
    choice.get_by_label("Remember for how long").select_option(label="8 h")
    card.get_by_label("Decision reason").fill("harmless echo")
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_count(0)

    decided = page.locator(f"#history-list [data-approval-id='{approval_id}']")
    remembered = decided.locator("dd[data-field='remembered']")
    expect(remembered).to_contain_text(f"{PROMPT_PREFIX}-remembered * for alice until")
    rule_id = remembered.inner_text().split(":", 1)[0]
    assert rule_id.startswith("rr_"), rule_id

    rules = agent.get("/v1/policy").json()["remembered"]
    [rule] = [rule for rule in rules if rule["id"] == rule_id]
    assert (rule["owner"], rule["author"], rule["reason"]) == ("alice", "carol", "harmless echo")

    again = agent.post("/v1/executions", json={"command": command})
    assert again.status_code == 200, again.text
    record = again.json()
    assert record["state"] == "completed", record
    assert record["remembered_rule"] == rule_id
    assert record["reason"].startswith(f"Allowed by remembered rule {rule_id}:")


def test_a_refused_remember_shows_the_servers_reason_and_leaves_the_approval_pending(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    approval_id = request_approval(agent, f"{PROMPT_PREFIX}-refused x")["approval"]["id"]
    sign_in(page, console_server, APPROVER)
    card = pending_card(page, approval_id)
    card.get_by_label("remember for alice").check()
    card.get_by_label("Remembered pattern").fill("kubectl *")
    card.get_by_role("button", name="Approve").click()
    expect(card.locator(".error")).to_contain_text("matches neither")
    expect(card.get_by_role("button", name="Approve")).to_be_enabled()
    assert approver.get(f"/v1/approvals/{approval_id}").json()["state"] == "pending"


def test_remember_for_everyone_is_offered_to_an_admin_only_and_an_agent_decides_nothing(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    approval_id = request_approval(agent, f"{PROMPT_PREFIX}-everyone x")["approval"]["id"]
    for token, offered in ((APPROVER, 0), (ADMIN, 1)):
        sign_in(page, console_server, token)
        card = pending_card(page, approval_id)
        expect(card.get_by_label("remember for alice")).to_have_count(1)
        expect(card.get_by_label("remember for everyone")).to_have_count(offered)
        page.get_by_role("button", name="Sign out").click()

    # The agent sees its own approval waiting, with no approve and nothing to remember.
    sign_in(page, console_server, AGENT)
    card = pending_card(page, approval_id)
    expect(card.locator(".decision.waiting")).to_be_visible()
    expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    expect(card.locator("fieldset.remember")).to_have_count(0)


def test_saving_edited_rules_keeps_a_decision_remembered_while_the_editor_was_open(
    page: Page,
    console_server: LiveServer,
    agent: httpx.Client,
    approver: httpx.Client,
    admin: httpx.Client,
) -> None:
    original = admin.get("/v1/policy").json()
    try:
        sign_in(page, console_server, ADMIN)
        page.get_by_role("tab", name="Policy").click()
        page.get_by_role("button", name="Edit rules").click()
        editor = page.locator("#policy-editor")
        editor.get_by_role("button", name="Add rule").click()
        editor.get_by_label("Match", exact=True).last.fill("echo edited-meanwhile*")

        # Another approver remembers a decision while the edit is open.
        approval_id = request_approval(agent, f"{PROMPT_PREFIX}-meanwhile x")["approval"]["id"]
        decided = approver.post(
            f"/v1/approvals/{approval_id}/approve",
            json={"remember": {"scope": "owner", "for_seconds": 3600}},
        )
        assert decided.status_code == 200, decided.text
        rule_id = decided.json()["remembered_rule"]

        editor.get_by_role("button", name="Save policy").click()
        expect(page.locator("#policy-rules tr").last).to_contain_text("echo edited-meanwhile*")
        saved = admin.get("/v1/policy").json()
        assert saved["rules"][-1]["match"] == "echo edited-meanwhile*"
        assert rule_id in [rule["id"] for rule in saved["remembered"]]
    finally:
        current = admin.get("/v1/policy").json()
        restored = {**original, "remembered": current["remembered"]}
        assert admin.put("/v1/policy", json=restored).status_code == 200
