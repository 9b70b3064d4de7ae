"""The console's views, in a real Chromium against a real server: tabs of full-window
terminals opened by deep links, copy / download / search of output, the list's columns and the
signed-in user, a phone's width, and the rules edited by an admin. Screenshots at 1400 px and
420 px go to tests/web/artifacts/ (the README shows copies kept in docs/screenshots/)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import update

from app.store.models import Execution
from tests.conftest import ADMIN, AGENT, LiveServer
from tests.web.browser import (
    ARTIFACTS,
    NEEDS_CHROMIUM,
    PROMPT_PREFIX,
    Watch,
    request_approval,
    shown_view,
    sign_in,
)

pytestmark = NEEDS_CHROMIUM


def finished(agent: httpx.Client, command: str) -> dict[str, Any]:
    response = agent.post("/v1/executions", json={"command": command})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def execution_row(page: Page, execution_id: str) -> Any:
    return page.locator(f"#execution-rows [data-execution-id='{execution_id}']")


def test_a_deep_link_opens_its_execution_after_sign_in_and_tabs_keep_several_open(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    first = finished(agent, "echo first-output")
    second = finished(agent, "echo second-output")

    page.goto(f"{console_server.base_url}/console/#/executions/{first['id']}")
    page.get_by_label("Token").fill(AGENT)
    page.get_by_role("button", name="Sign in").click()

    expect(shown_view(page).locator(".view-id")).to_have_text(first["id"])
    expect(shown_view(page).locator(".view-terminal")).to_contain_text("first-output")
    expect(page.locator("#overview")).to_be_hidden()  # the terminal has the window
    page.get_by_role("tab", name="Overview").click()
    execution_row(page, second["id"]).locator(".owner-cell").click()  # anywhere on the row

    expect(page).to_have_url(re.compile(f"#/executions/{second['id']}$"))
    expect(shown_view(page).locator(".view-terminal")).to_contain_text("second-output")
    tabs = page.locator("#tab-list .execution-tab")
    expect(tabs).to_have_count(2)
    expect(tabs.nth(0)).to_contain_text("echo first-output")
    tabs.nth(0).get_by_role("tab").click()
    expect(shown_view(page).locator(".view-id")).to_have_text(first["id"])
    expect(shown_view(page).locator(".view-terminal")).to_contain_text("first-output")  # kept

    page.get_by_role("button", name=f"Close {first['id']}").click()
    expect(tabs).to_have_count(1)
    expect(page).to_have_url(re.compile("#/$"))
    expect(page.locator("#overview")).to_be_visible()


def test_a_running_executions_facts_name_its_owner_and_nothing_else(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    # No duration yet: the line must not read "owner alicenull".
    response = agent.post("/v1/executions", json={"command": "sleep 30", "async": True})
    assert response.status_code == 202, response.text
    execution_id = response.json()["id"]
    try:
        page.goto(f"{console_server.base_url}/console/#/executions/{execution_id}")
        page.get_by_label("Token").fill(AGENT)
        page.get_by_role("button", name="Sign in").click()
        expect(shown_view(page).locator(".view-state")).to_contain_text("running")
        expect(shown_view(page).locator(".view-facts")).to_have_text("owner alice")
    finally:
        agent.post(f"/v1/executions/{execution_id}/cancel")


def test_output_is_copied_as_text_downloaded_byte_exact_and_searched(
    browser: Browser, console_server: LiveServer, agent: httpx.Client
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console_server.base_url)
    page = context.new_page()
    watch = Watch(page)
    execution = finished(
        agent, r"printf '\033[31mred\033[0m\nneedle one\nbeta\nneedle two\n\377\n'"
    )
    raw = agent.get(f"/v1/executions/{execution['id']}/output").content
    assert raw.startswith(b"\x1b[31mred") and b"\xff" in raw

    page.goto(f"{console_server.base_url}/console/#/executions/{execution['id']}")
    page.get_by_label("Token").fill(AGENT)
    page.get_by_role("button", name="Sign in").click()
    view = shown_view(page)
    expect(view.locator(".view-terminal")).to_contain_text("needle two")

    view.get_by_label("Search output").fill("needle")
    view.get_by_label("Search output").press("Enter")
    status = view.locator(".search-status")
    expect(status).to_have_text("1 of 2")
    view.get_by_role("button", name="Next match").click()
    expect(status).to_have_text("2 of 2")
    view.get_by_role("button", name="Previous match").click()
    expect(status).to_have_text("1 of 2")
    view.get_by_label("Search output").fill("absent-word")
    view.get_by_label("Search output").press("Enter")
    expect(status).to_have_text("no match in the whole log")  # the server looked too

    view.get_by_role("button", name="Copy output").click()
    expect(view.locator(".tool-status")).to_contain_text(f"Copied {len(raw)} bytes")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == "red\nneedle one\nbeta\nneedle two\n\ufffd\n"  # escapes gone, text kept

    with page.expect_download() as download_info:
        view.get_by_role("button", name="Download").click()
    download = download_info.value
    assert download.suggested_filename == f"{execution['id']}.log"
    with open(download.path(), "rb") as saved:
        assert saved.read() == raw  # byte-exact, escapes and all
    screenshot(page, "console-terminal-1400.png")
    context.close()
    assert watch.errors == [] and watch.dialogs == []


def test_the_list_shows_exit_code_duration_owner_and_who_is_signed_in(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    failed = finished(agent, "sleep 0.3; exit 3")
    sign_in(page, console_server, AGENT)

    expect(page.locator("#signed-in-as")).to_have_text("alice (agent)")
    row = execution_row(page, failed["id"])
    expect(row.locator(".exit-cell")).to_have_text("3")
    expect(row.locator(".duration-cell")).to_have_text(re.compile(r"^0\.\d\d s$"))
    seconds = float(row.locator(".duration-cell").text_content().split()[0])  # type: ignore[union-attr]
    assert seconds >= 0.3
    expect(row.locator(".owner-cell")).to_have_text("alice")
    for header in ("State", "Command", "Exit", "Duration", "Owner", "Started"):
        expect(page.get_by_role("columnheader", name=header)).to_be_visible()
    screenshot(page, "console-1400.png")


def test_at_a_phone_width_the_command_stays_visible_and_a_tap_opens_the_terminal(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    page.set_viewport_size({"width": 420, "height": 860})
    execution = finished(agent, "echo a-command-that-a-phone-must-show; echo done-on-phone")
    sign_in(page, console_server, AGENT)

    row = execution_row(page, execution["id"])
    command = row.get_by_role("link", name=re.compile("a-command-that-a-phone-must-show"))
    expect(command).to_be_visible()
    box = command.bounding_box()
    assert box is not None and box["width"] > 150 and box["x"] + box["width"] <= 420
    assert page.evaluate("document.documentElement.scrollWidth") <= 420  # no sideways scroll
    screenshot(page, "console-420.png")

    row.locator(".state-cell").click()  # a tap on the row, not on the link
    terminal = shown_view(page).locator(".view-terminal")
    expect(terminal).to_contain_text("done-on-phone")
    terminal_box = terminal.bounding_box()
    assert terminal_box is not None
    assert terminal_box["y"] < 860 and terminal_box["width"] <= 420  # on screen, not below
    screenshot(page, "console-terminal-420.png")


def test_edit_rules_waits_for_the_policy_instead_of_swallowing_a_click(
    page: Page, console_server: LiveServer
) -> None:
    # Before the policy has arrived there is nothing to edit: a click then did nothing, silently
    # (a flaky CI run showed it). The button is disabled until the document is in.
    held: list[Any] = []
    page.route(
        re.compile(r".*/v1/policy$"),
        lambda route: held.append(route) if route.request.method == "GET" else route.continue_(),
    )
    sign_in(page, console_server, ADMIN)
    page.get_by_role("tab", name="Policy").click()
    edit = page.get_by_role("button", name="Edit rules")
    expect(edit).to_be_visible()
    for _ in range(200):  # the route handler runs while Playwright waits on the page
        if held:
            break
        page.wait_for_timeout(25)
    assert held, "the console did not ask for the policy"
    expect(edit).to_be_disabled()
    for route in held:
        route.continue_()
    expect(edit).to_be_enabled()
    edit.click()
    expect(page.locator("#policy-editor")).to_be_visible()


def test_an_admin_edits_the_rules_and_a_refused_document_changes_nothing(
    page: Page, console_server: LiveServer, admin: httpx.Client
) -> None:
    original = admin.get("/v1/policy").json()
    try:
        sign_in(page, console_server, ADMIN)
        expect(page.locator("#signed-in-as")).to_have_text("root (admin)")
        page.get_by_role("tab", name="Policy").click()
        page.get_by_role("button", name="Edit rules").click()
        editor = page.locator("#policy-editor")
        editor.get_by_role("button", name="Add rule").click()
        editor.get_by_label("Match", exact=True).last.fill("echo edited-in-browser*")
        editor.get_by_label("Approval", exact=True).last.select_option("deny")
        editor.get_by_role("button", name="Move up").last.click()  # first match wins
        editor.get_by_role("button", name="Save policy").click()

        rows = page.locator("#policy-rules tr")
        expect(rows).to_have_count(len(original["rules"]) + 1)
        expect(rows.nth(0)).to_contain_text("echo edited-in-browser*")
        expect(rows.nth(0)).to_have_attribute("data-approval", "deny")
        saved = admin.get("/v1/policy").json()
        assert saved["rules"][0] == {"match": "echo edited-in-browser*", "approval": "deny"}
        assert saved["rules"][1:] == original["rules"]
        assert saved["interceptor"] == original["interceptor"]  # fields not edited are kept
        assert saved["files"] == original["files"] and saved["files"]["rules"]

        page.get_by_role("button", name="Edit rules").click()
        editor.get_by_label("Match", exact=True).first.fill("   ")
        editor.get_by_role("button", name="Save policy").click()
        expect(page.locator("#policy-save-error")).not_to_be_empty()
        assert admin.get("/v1/policy").json() == saved  # refused: nothing changed
    finally:
        assert admin.put("/v1/policy", json=original).status_code == 200


def test_an_admin_edits_every_part_of_the_policy_and_sees_who_changed_it(
    page: Page, console_server: LiveServer, admin: httpx.Client
) -> None:
    """The editor covers what critical patterns and unreadable commands get, the env globs and
    the files rules, not only the rules; a files text that is not JSON sends nothing; the
    history lists each version with its author, the one in force first."""
    original = admin.get("/v1/policy").json()
    try:
        sign_in(page, console_server, ADMIN)
        page.get_by_role("tab", name="Policy").click()
        page.get_by_role("button", name="Edit rules").click()
        editor = page.locator("#policy-editor")
        editor.get_by_label("Critical patterns").select_option("deny")
        editor.get_by_label("Unreadable shell text").select_option("deny")
        deny = editor.get_by_label("Env deny (a name glob per line)")
        expect(deny).to_have_value("\n".join(original["env"]["deny"]))
        deny.fill(deny.input_value() + "\n\nSECRET_*\n")
        editor.get_by_label("Env prompt (a name glob per line)").fill("AWS_*")
        files = editor.get_by_label("Files rules (JSON: workspace, outside, rules)")
        files.fill("{not json")
        editor.get_by_role("button", name="Save policy").click()
        expect(page.locator("#policy-save-error")).to_contain_text("Files rules: not JSON")
        assert admin.get("/v1/policy").json() == original  # nothing sent
        files.fill('{"workspace": "allow", "outside": "deny", "rules": []}')
        editor.get_by_role("button", name="Save policy").click()
        expect(page.locator("#policy-summary")).to_contain_text("critical: deny")
        saved = admin.get("/v1/policy").json()
        assert (saved["critical"], saved["unreadable"]) == ("deny", "deny")
        assert saved["env"] == {"deny": [*original["env"]["deny"], "SECRET_*"], "prompt": ["AWS_*"]}
        assert saved["rules"] == original["rules"]
        assert saved["files"] == {"workspace": "allow", "outside": "deny", "rules": []}

        history = page.get_by_label("Policy versions, newest first").locator("tbody tr")
        newest = admin.get("/v1/policy/versions", params={"limit": 1}).json()["data"][0]
        expect(history.first).to_contain_text(f"#{newest['id']} in force")
        expect(history.first).to_contain_text("root")
        expect(history.nth(1)).not_to_contain_text("in force")
    finally:
        assert admin.put("/v1/policy", json=original).status_code == 200


def running_jobs_in_header(page: Page) -> int:
    text = page.locator("#server-info").text_content() or ""
    match = re.search(r"· (\d+)/\d+ jobs running$", text)
    assert match, text
    return int(match.group(1))


def test_the_headers_job_count_follows_jobs_starting_and_ending(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    # It was read once at sign-in: a job started or ended after that never showed.
    sign_in(page, console_server, AGENT)
    header = page.locator("#server-info")
    expect(header).to_contain_text("jobs running")
    before = running_jobs_in_header(page)

    page.get_by_label("Command").fill("echo counted; sleep 30")
    page.get_by_role("button", name="Run").click()
    view = shown_view(page)
    expect(view.locator(".view-terminal")).to_contain_text("counted")
    execution_id = view.locator(".view-id").text_content() or ""
    try:
        expect(header).to_contain_text(f"· {before + 1}/")
        page.get_by_role("button", name="Cancel").click()
        expect(view.locator(".view-state")).to_contain_text("cancelled")
        expect(header).to_contain_text(f"· {before}/")
    finally:
        agent.post(f"/v1/executions/{execution_id}/cancel")


def test_at_1280_px_state_exit_duration_and_a_dated_start_are_whole(
    page: Page, console_server: LiveServer, agent: httpx.Client, admin: httpx.Client
) -> None:
    page.set_viewport_size({"width": 1280, "height": 800})
    waiting = request_approval(agent, f"{PROMPT_PREFIX} held-while-the-table-is-measured")
    long_command = "echo " + "a-command-long-enough-to-want-the-whole-row " * 4 + "; exit 3"
    failed = finished(agent, long_command)
    # The widest a start and a duration get: another day's, and just under two hours.
    started = datetime.now(UTC) - timedelta(days=2)
    engine = console_server.database_engine()
    with engine.begin() as connection:
        connection.execute(
            update(Execution)
            .where(Execution.id == failed["id"])
            .values(started_at=started, finished_at=started + timedelta(minutes=118, seconds=59))
        )
    engine.dispose()
    response = agent.post("/v1/executions", json={"command": "sleep 30", "async": True})
    assert response.status_code == 202, response.text
    cancelled = agent.post(f"/v1/executions/{response.json()['id']}/cancel").json()
    assert cancelled["state"] == "cancelled", cancelled
    try:
        sign_in(page, console_server, ADMIN)
        for execution in (waiting, failed, cancelled):
            row = execution_row(page, execution["id"])
            expect(row).to_be_visible()
            for cell in ("state-cell", "exit-cell", "duration-cell", "started-cell"):
                # The text's own box, laid out without clipping, inside its cell and the window.
                text_box, cell_box = row.locator(f".{cell}").evaluate(
                    """cell => {
                        const range = document.createRange();
                        range.selectNodeContents(cell);
                        const text = range.getBoundingClientRect();
                        const box = cell.getBoundingClientRect();
                        return [[text.left, text.right], [box.left, box.right]];
                    }"""
                )
                assert cell_box[0] - 0.5 <= text_box[0] and text_box[1] <= cell_box[1] + 0.5, (
                    execution["state"],
                    cell,
                    text_box,
                    cell_box,
                )
                assert cell_box[1] <= 1280, (cell, cell_box)
        for execution in (waiting, failed, cancelled):
            expect(execution_row(page, execution["id"]).locator(".started-cell time")).to_have_text(
                re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}$")
            )
        expect(execution_row(page, waiting["id"]).locator(".state")).to_have_text(
            "awaiting_approval"
        )
        expect(execution_row(page, failed["id"]).locator(".exit-cell")).to_have_text("3")
        expect(execution_row(page, failed["id"]).locator(".duration-cell")).to_have_text(
            "118 min 59 s"
        )
        command_box = execution_row(page, failed["id"]).locator(".command-cell").bounding_box()
        assert command_box is not None and command_box["width"] > 150  # still a column
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        screenshot(page, "console-1280.png")
    finally:
        admin.post(f"/v1/approvals/{waiting['approval']['id']}/deny", json={"reason": "cleanup"})


def test_a_job_held_for_approval_opens_as_a_notice_then_its_output_once_approved(
    page: Page, console_server: LiveServer, agent: httpx.Client, admin: httpx.Client
) -> None:
    execution = request_approval(agent, f"{PROMPT_PREFIX} shown-after-approval")
    approval = execution["approval"]
    try:
        page.goto(f"{console_server.base_url}/console/#/executions/{execution['id']}")
        page.get_by_label("Token").fill(AGENT)
        page.get_by_role("button", name="Sign in").click()
        view = shown_view(page)
        waiting = view.locator(".view-waiting")
        expect(view.locator(".view-state")).to_have_text("awaiting_approval")
        expect(waiting).to_be_visible()
        expect(waiting).to_contain_text("Waiting for approval")
        expect(waiting.locator(".waiting-reason")).to_have_text(approval["reason"])
        expect(view.locator(".view-terminal")).to_be_hidden()
        expect(view.get_by_role("button", name="Ctrl-C")).to_be_disabled()  # nothing to signal

        decided = admin.post(f"/v1/approvals/{approval['id']}/approve", json={})
        assert decided.status_code == 200, decided.text

        expect(view.locator(".view-terminal")).to_contain_text(
            "needs-approval shown-after-approval"
        )
        expect(waiting).to_be_hidden()
        expect(view.locator(".view-state")).to_have_text("completed, exit code 0")
    finally:
        admin.post(f"/v1/approvals/{approval['id']}/deny", json={"reason": "cleanup"})


def test_a_pty_job_held_for_approval_gets_the_terminals_size_once_it_runs(
    page: Page, console_server: LiveServer, agent: httpx.Client, admin: httpx.Client
) -> None:
    # A resize sent while it waits is refused (no process yet): the size goes once it runs.
    response = agent.post(
        "/v1/executions",
        json={
            "command": f"{PROMPT_PREFIX} pty-held; read -r _; stty size",
            "pty": True,
            "async": True,
        },
    )
    assert response.status_code == 202, response.text
    execution = response.json()
    assert execution["state"] == "awaiting_approval"
    approval_id = execution["approval"]["id"]
    try:
        page.goto(f"{console_server.base_url}/console/#/executions/{execution['id']}")
        page.get_by_label("Token").fill(AGENT)
        page.get_by_role("button", name="Sign in").click()
        view = shown_view(page)
        expect(view.locator(".view-waiting")).to_be_visible()
        expect(view).to_have_attribute("data-stream", "live")

        assert admin.post(f"/v1/approvals/{approval_id}/approve", json={}).status_code == 200

        terminal = view.locator(".view-terminal")
        expect(terminal).to_contain_text("needs-approval pty-held")
        expect(terminal).to_have_attribute("data-size", re.compile(r"^\d+x\d+$"))
        rows, cols = (terminal.get_attribute("data-size") or "").split("x")
        terminal.click()
        page.keyboard.press("Enter")  # the size is in: let `stty size` say what it sees
        expect(view.locator(".view-state")).to_have_text("completed, exit code 0")
        final = agent.get(f"/v1/executions/{execution['id']}", params={"wait": 10}).json()
        assert f"{rows} {cols}" in final["output"]
        expect(view.locator(".view-error")).to_be_empty()  # no resize was refused
    finally:
        admin.post(f"/v1/approvals/{approval_id}/deny", json={"reason": "cleanup"})


def test_a_search_finds_what_left_the_scrollback_in_the_whole_log(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    """The terminal keeps its scrollback only: line 5 of 30,000 is not in it, so the console
    asks the server, which searches the whole log, and lists the line."""
    execution = finished(agent, "seq -f 'line %g: ok' 1 30000")
    page.goto(f"{console_server.base_url}/console/#/executions/{execution['id']}")
    page.get_by_label("Token").fill(AGENT)
    page.get_by_role("button", name="Sign in").click()
    view = shown_view(page)
    expect(view.locator(".view-terminal")).to_contain_text("line 30000: ok")

    view.get_by_label("Search output").fill("line 5:")
    view.get_by_label("Search output").press("Enter")
    expect(view.locator(".search-status")).to_have_text("not in view; 1 line in the whole log")
    found = view.get_by_label("Matches in the whole log").locator("li")
    expect(found).to_have_count(1)
    expect(found).to_have_text("line 5 line 5: ok")
    # Typing again clears the list; a match in view needs no server.
    view.get_by_label("Search output").fill("line 29999:")
    expect(view.get_by_label("Matches in the whole log")).to_be_hidden()
    view.get_by_label("Search output").press("Enter")
    expect(view.locator(".search-status")).to_have_text("1 of 1")
