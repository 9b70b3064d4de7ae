"""The console's approval card for a sandbox request (docs/policy.md#asking-for-more): what is
asked beyond the profile and why, shown plainly, and approving it runs that one execution."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from tests.conftest import APPROVER, LiveServer
from tests.web.browser import NEEDS_CHROMIUM, pending_card, sign_in

pytestmark = NEEDS_CHROMIUM


def test_a_sandbox_request_shows_what_is_asked_beyond_the_profile_and_why(
    page: Page, console_server: LiveServer, agent: httpx.Client, tmp_path: Path
) -> None:
    outside = tmp_path / "reports"
    outside.mkdir()
    justification = "the nightly report \u202egoes here $(x)"
    command = f"echo written > {outside}/r && echo done"
    execution = agent.post(
        "/v1/executions",
        json={
            "command": command,
            "sandbox": {"write": [str(outside)], "justification": justification},
            "async": True,
        },
    ).json()
    assert execution["state"] == "awaiting_approval", execution

    sign_in(page, console_server, APPROVER)

    card = pending_card(page, execution["approval"]["id"])
    expect(card).to_have_attribute("data-kind", "sandbox")
    expect(card.locator(".kind")).to_have_text("sandbox")
    request = card.get_by_role("region", name="Sandbox request")
    expect(request.locator("h3")).to_have_text("Asks for more than its sandbox")
    expect(request.locator("dd[data-field='write beyond']")).to_have_text(str(outside))
    expect(request.locator("dd[data-field='network beyond']")).to_have_text("nothing more")
    # The caller's words are text: the bidi override shows as its escape, `$(x)` as itself.
    expect(request.locator("dd[data-field='justification']")).to_have_text(
        "the nightly report \\u202egoes here $(x)"
    )
    expect(request.locator("dd[data-field='profile writes']")).to_contain_text(
        str(console_server.settings.workspace)
    )
    expect(card.locator("dd[data-field='reason']")).to_have_text(
        f"Sandbox escalation requested: write {outside}"
    )
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_count(0)
    final = agent.get(f"/v1/executions/{execution['id']}", params={"wait": 15}).json()
    assert final["state"] == "completed", final
    assert (outside / "r").read_text() == "written\n"
