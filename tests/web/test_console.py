"""The browser console, driven in a real Chromium (Debian's, through Playwright) against a real
uvicorn: approvals arriving live and decided, a PTY run typed into, a stream that reconnects,
and agent-written text that stays text."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from playwright.sync_api import Page, Request, WebSocketRoute, expect

from app.policy.env_rules import DEFAULT_ENV_DENY
from tests.conftest import AGENT, APPROVER, LiveServer
from tests.web.browser import (
    ARTIFACTS,
    FILE_DENY_GLOB,
    NEEDS_CHROMIUM,
    PROMPT_PREFIX,
    XSS,
    pending_card,
    request_approval,
    shown_view,
    sign_in,
    wait_until_live,
)

pytestmark = NEEDS_CHROMIUM


def test_console_page_is_served_with_a_script_only_policy(console_server: LiveServer) -> None:
    response = httpx.get(f"{console_server.base_url}/console", follow_redirects=True)
    assert response.status_code == 200
    assert response.url.path == "/console/"
    assert response.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert httpx.get(f"{console_server.base_url}/console/js/api.js").status_code == 200
    assert httpx.get(f"{console_server.base_url}/console/../app/main.py").status_code == 404
    assert httpx.get(f"{console_server.base_url}/console/js/missing.js").status_code == 404


def test_signing_in_as_approver_shows_the_pending_approvals(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    execution = request_approval(agent, f"{PROMPT_PREFIX} listed-before-sign-in")
    approval_id = execution["approval"]["id"]

    sign_in(page, console_server, APPROVER)

    card = pending_card(page, approval_id)
    expect(card.locator("pre.command")).to_have_text(f"{PROMPT_PREFIX} listed-before-sign-in")
    expect(card).to_contain_text("alice")  # requested_by
    expect(card).to_contain_text(execution["cwd"])
    approver.post(f"/v1/approvals/{approval_id}/deny", json={"reason": "cleanup"})


def test_an_agent_sees_its_pending_approval_without_buttons_it_cannot_use(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    # Deciding needs an approver or admin (403 otherwise): an agent gets no Approve / Deny.
    execution = request_approval(agent, f"{PROMPT_PREFIX} agent-waits")
    approval_id = execution["approval"]["id"]
    try:
        sign_in(page, console_server, AGENT)
        card = pending_card(page, approval_id)
        expect(card.locator("pre.command")).to_have_text(f"{PROMPT_PREFIX} agent-waits")
        expect(card).to_contain_text("Waiting for an approver's decision")
        expect(card.get_by_role("button", name="Approve")).to_have_count(0)
        expect(card.get_by_role("button", name="Deny")).to_have_count(0)
        card.get_by_role("button", name="View execution").click()
        expect(shown_view(page).locator(".view-id")).to_have_text(execution["id"])
    finally:
        approver.post(f"/v1/approvals/{approval_id}/deny", json={"reason": "cleanup"})


def test_a_new_approval_appears_live_and_approve_runs_the_command(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    sign_in(page, console_server, APPROVER)
    wait_until_live(page)
    approval_reads: list[str] = []

    def note_approval_reads(request: Request) -> None:
        if re.search(r"/v1/approvals(\?|$)", request.url):
            approval_reads.append(request.url)

    page.on("request", note_approval_reads)

    execution = request_approval(agent, f"{PROMPT_PREFIX} approved-in-browser")
    card = pending_card(page, execution["approval"]["id"])
    expect(card).to_be_visible()
    assert approval_reads == []  # it came over the socket, not by polling

    card.get_by_label("Decision reason").fill("looks harmless")
    card.get_by_role("button", name="Approve").click()

    expect(card).to_have_count(0)
    decided = page.locator(f"#history-list [data-approval-id='{execution['approval']['id']}']")
    expect(decided).to_have_attribute("data-state", "approved")
    expect(decided).to_contain_text("looks harmless")
    final = agent.get(f"/v1/executions/{execution['id']}", params={"wait": 10}).json()
    assert final["state"] == "completed"
    assert final["output"] == "needs-approval approved-in-browser\n"
    approval = agent.get(f"/v1/approvals/{execution['approval']['id']}").json()
    assert approval["decided_by"] == "carol"
    assert approval["decision_reason"] == "looks harmless"


def test_deny_in_the_browser_rejects_the_execution(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    sign_in(page, console_server, APPROVER)
    wait_until_live(page)
    execution = request_approval(agent, f"{PROMPT_PREFIX} denied-in-browser")
    card = pending_card(page, execution["approval"]["id"])

    card.get_by_role("button", name="Deny").click()

    expect(card).to_have_count(0)
    decided = page.locator(f"#history-list [data-approval-id='{execution['approval']['id']}']")
    expect(decided).to_have_attribute("data-state", "denied")
    final = agent.get(f"/v1/executions/{execution['id']}", params={"wait": 10}).json()
    assert final["state"] == "rejected"
    assert agent.get(f"/v1/approvals/{execution['approval']['id']}").json()["state"] == "denied"


def test_pty_run_from_the_browser_takes_typed_input_and_follows_the_terminal_size(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    sign_in(page, console_server, AGENT)
    page.get_by_label("Command").fill("read -p 'name? ' n; echo \"hello $n\"; stty size")
    page.get_by_label("PTY").check()
    page.get_by_role("button", name="Run").click()

    terminal = shown_view(page).locator(".view-terminal")
    screen = terminal.locator(".xterm-rows")
    expect(screen).to_contain_text("name?")
    expect(terminal).to_have_attribute("data-size", re.compile(r"^\d+x\d+$"))
    first_size = terminal.get_attribute("data-size")
    page.set_viewport_size({"width": 1100, "height": 900})  # the fit addon resizes the PTY
    expect(terminal).not_to_have_attribute("data-size", first_size or "")
    rows, cols = (terminal.get_attribute("data-size") or "").split("x")
    terminal.click()
    page.keyboard.type("world")
    page.keyboard.press("Enter")

    expect(screen).to_contain_text("hello world")
    expect(shown_view(page).locator(".view-state")).to_have_text("completed, exit code 0")
    expect(screen).to_contain_text("[completed, exit code 0]")
    execution_id = shown_view(page).locator(".view-id").text_content()
    final = agent.get(f"/v1/executions/{execution_id}", params={"wait": 10}).json()
    assert final["state"] == "completed"
    assert final["pty"] is True
    assert "hello world" in final["output"]
    assert f"{rows} {cols}" in final["output"]  # what `stty size` saw after the resize
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console.png"), full_page=True)


def test_agent_text_renders_as_text_never_as_markup(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    command = f"{PROMPT_PREFIX} '{XSS}'"
    execution = request_approval(agent, command)
    finished = agent.post("/v1/executions", json={"command": f"echo '{XSS}'"}).json()

    sign_in(page, console_server, APPROVER)

    card = pending_card(page, execution["approval"]["id"])
    expect(card.locator("pre.command")).to_have_text(command)
    row = page.locator(f"#execution-rows [data-execution-id='{finished['id']}']")
    expect(row).to_contain_text(f"echo '{XSS}'")
    row.get_by_role("link").click()
    expect(shown_view(page).locator(".view-command")).to_have_text(f"echo '{XSS}'")
    expect(shown_view(page).locator(".view-terminal .xterm-rows")).to_contain_text(XSS)
    assert page.locator("img").count() == 0
    approver.post(f"/v1/approvals/{execution['approval']['id']}/deny", json={"reason": "cleanup"})


def test_without_xterm_the_log_is_plain_text_and_a_dropped_stream_resumes_exactly(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    page.route("**/console/vendor/**", lambda route: route.abort())
    stream_urls: list[str] = []

    def drop_the_first_stream_early(socket: WebSocketRoute) -> None:
        stream_urls.append(socket.url)
        server = socket.connect_to_server()
        if len(stream_urls) > 1:
            return  # later connections pass through untouched
        forwarded = 0

        def forward(message: str | bytes) -> None:
            nonlocal forwarded
            socket.send(message)
            forwarded += 1
            if forwarded == 6:
                socket.close(code=1012, reason="dropped by the test")

        server.on_message(forward)

    page.route_web_socket(
        re.compile(r".*/v1/executions/[^/]+/stream.*"), drop_the_first_stream_early
    )
    sign_in(page, console_server, AGENT)
    page.get_by_label("Command").fill("for i in $(seq 1 120); do echo line-$i; sleep 0.01; done")
    page.get_by_role("button", name="Run").click()

    log = shown_view(page).locator(".view-terminal pre.plain-log")
    expect(log).to_contain_text("[completed, exit code 0]")
    expect(shown_view(page).get_by_role("note")).to_contain_text(
        "Plain log view: the terminal (xterm.js) could not be loaded"
    )
    expected = "".join(f"line-{i}\n" for i in range(1, 121))
    assert log.text_content() == expected + "\n[completed, exit code 0]\n"
    assert len(stream_urls) == 2
    resumed_at = int(re.search(r"[?&]offset=(\d+)", stream_urls[1]).group(1))  # type: ignore[union-attr]
    assert 0 < resumed_at < len(expected)
    expect(shown_view(page).locator(".view-terminal")).to_have_attribute(
        "data-offset", str(len(expected))
    )


def test_approvals_panel_reconnects_with_a_fresh_ticket_after_a_drop(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    sockets: list[tuple[WebSocketRoute, WebSocketRoute]] = []

    def pass_through(socket: WebSocketRoute) -> None:
        sockets.append((socket, socket.connect_to_server()))

    page.route_web_socket(re.compile(r".*/v1/approvals/stream.*"), pass_through)
    sign_in(page, console_server, APPROVER)
    wait_until_live(page)

    browser_side, server_side = sockets[0]
    server_side.close()
    browser_side.close(code=1012, reason="dropped by the test")
    execution = request_approval(agent, f"{PROMPT_PREFIX} requested-during-the-drop")

    expect(pending_card(page, execution["approval"]["id"])).to_be_visible()
    wait_until_live(page)
    assert len(sockets) == 2
    tickets = [re.search(r"ticket=([^&]+)", socket.url).group(1) for socket, _ in sockets]  # type: ignore[union-attr]
    assert tickets[0] != tickets[1]
    approver.post(f"/v1/approvals/{execution['approval']['id']}/deny", json={"reason": "cleanup"})


def test_ctrl_c_interrupts_and_cancel_cancels_a_running_job(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    sign_in(page, console_server, AGENT)
    view_state = shown_view(page).locator(".view-state")

    page.get_by_label("Command").fill("echo waiting; sleep 30")
    page.get_by_role("button", name="Run").click()
    expect(shown_view(page).locator(".view-terminal .xterm-rows")).to_contain_text("waiting")
    page.get_by_role("button", name="Ctrl-C").click()
    expect(view_state).to_contain_text("signal 2")
    interrupted_id = shown_view(page).locator(".view-id").text_content()
    interrupted = agent.get(f"/v1/executions/{interrupted_id}", params={"wait": 10}).json()
    assert interrupted["signal"] == 2

    page.get_by_role("tab", name="Overview").click()
    page.get_by_label("Command").fill("echo waiting; sleep 30")
    page.get_by_role("button", name="Run").click()
    expect(shown_view(page).locator(".view-id")).not_to_have_text(interrupted_id or "")
    expect(shown_view(page).locator(".view-terminal .xterm-rows")).to_contain_text("waiting")
    page.get_by_role("button", name="Cancel").click()
    expect(view_state).to_contain_text("cancelled")
    cancelled_id = shown_view(page).locator(".view-id").text_content()
    assert agent.get(f"/v1/executions/{cancelled_id}").json()["state"] == "cancelled"
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()


def test_approval_card_shows_env_session_and_pty_and_approving_runs_exactly_that(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    session = agent.post("/v1/sessions", json={"env": {"FROM_SESSION": "s"}, "pty": True}).json()
    payload = "$(launchmissiles)"
    command = f'{PROMPT_PREFIX} card; printf "%s|%s\\n" "$X" "$FROM_SESSION"'
    execution = agent.post(
        "/v1/executions",
        json={"command": command, "env": {"X": payload}, "session": session["id"], "async": True},
    ).json()
    assert execution["state"] == "awaiting_approval"

    sign_in(page, console_server, APPROVER)

    card = pending_card(page, execution["approval"]["id"])
    expect(card.locator("pre.command")).to_have_text(command)
    expect(card.locator("pre.env")).to_have_text(f"FROM_SESSION=s\nX={payload}")
    expect(card.locator("dd[data-field='session']")).to_have_text(session["id"])
    expect(card.locator("dd[data-field='pty']")).to_contain_text("yes")
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_count(0)
    final = agent.get(f"/v1/executions/{execution['id']}", params={"wait": 15}).json()
    assert final["state"] == "completed"
    assert f"{payload}|s" in final["output"]  # the env ran as shown, as data
    agent.delete(f"/v1/sessions/{session['id']}")


def test_approval_card_without_env_or_session_says_so(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    execution = request_approval(agent, f"{PROMPT_PREFIX} plain-card")
    sign_in(page, console_server, APPROVER)
    card = pending_card(page, execution["approval"]["id"])
    expect(card.locator("dd[data-field='env']")).to_have_text("none")
    expect(card.locator("dd[data-field='session']")).to_have_text("none")
    expect(card.locator("dd[data-field='pty']")).to_have_text("no")
    # An execution is the usual subject: the card names no other.
    expect(card.locator(".subject")).to_have_count(0)
    approver.post(f"/v1/approvals/{execution['approval']['id']}/deny", json={"reason": "cleanup"})


def test_policy_page_lists_the_rules_and_the_env_rules(
    page: Page, console_server: LiveServer
) -> None:
    sign_in(page, console_server, AGENT)
    page.get_by_role("tab", name="Policy").click()
    expect(page.get_by_role("button", name="Edit rules")).to_be_hidden()  # not an admin
    rows = page.locator("#policy-rules tr")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_contain_text(f"{PROMPT_PREFIX}*")
    expect(rows.nth(0)).to_have_attribute("data-approval", "prompt")
    expect(page.locator("#policy-summary [data-fact='default']")).to_have_text("default: allow")
    deny = page.locator("#policy-env dd[data-field='env deny'] li")
    expect(deny).to_have_count(len(DEFAULT_ENV_DENY))  # every default, none dropped
    expect(deny.first).to_have_text(DEFAULT_ENV_DENY[0])


def test_policy_dry_run_shows_the_verdict_and_what_decided_it(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    before = {
        item["id"] for item in agent.get("/v1/executions", params={"limit": 500}).json()["data"]
    }
    page.goto(f"{console_server.base_url}/console/#/policy")  # a deep link to the page
    page.get_by_label("Token").fill(AGENT)
    page.get_by_role("button", name="Sign in").click()
    form = page.locator("#dry-run-form")

    form.get_by_label("Shell text to judge").fill(f"ls && {PROMPT_PREFIX} dry")
    form.get_by_label("Working directory").fill("/tmp")
    form.get_by_role("button", name="Evaluate").click()
    result = page.locator("#dry-run-result")
    expect(page.locator("#dry-run-verdict")).to_have_attribute("data-verdict", "prompt")
    expect(page.locator("#dry-run-reason")).to_contain_text(f"{PROMPT_PREFIX}*")
    expect(result.locator("dd[data-field='matched']")).to_have_text(f"{PROMPT_PREFIX} dry")
    expect(result.locator("dd[data-field='cwd']")).to_have_text("/tmp")
    expect(result.locator("dd[data-field='segments'] li")).to_have_count(2)

    form.get_by_label("Shell text to judge").fill("ls")
    form.get_by_label("Environment (NAME=value per line)").fill(
        f"GREETING={XSS}\nLD_PRELOAD=/nonexistent-x.so"
    )
    form.get_by_role("button", name="Evaluate").click()
    expect(page.locator("#dry-run-verdict")).to_have_attribute("data-verdict", "deny")
    expect(page.locator("#dry-run-reason")).to_have_text("Blocked environment variable: LD_PRELOAD")
    env_rows = result.locator("table.env-verdicts tr")
    expect(env_rows).to_have_count(2)
    expect(env_rows.nth(0)).to_have_attribute("data-verdict", "allow")
    expect(env_rows.nth(1)).to_have_attribute("data-verdict", "deny")
    expect(env_rows.nth(1)).to_contain_text("LD_*")

    form.get_by_label("Environment (NAME=value per line)").fill("no equals sign")
    form.get_by_role("button", name="Evaluate").click()
    expect(page.locator("#dry-run-error")).to_contain_text('without "="')
    after = {
        item["id"] for item in agent.get("/v1/executions", params={"limit": 500}).json()["data"]
    }
    assert after == before  # a dry run runs nothing
    assert page.locator("img").count() == 0


def test_policy_page_shows_the_file_rules_and_dry_runs_a_file_access(
    page: Page, console_server: LiveServer
) -> None:
    sign_in(page, console_server, AGENT)
    page.get_by_role("tab", name="Policy").click()
    expect(page.locator("#policy-files-summary [data-fact='outside']")).to_have_text(
        "outside: prompt"
    )
    rows = page.locator("#policy-files tr")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_contain_text(FILE_DENY_GLOB)
    expect(rows.nth(0)).to_contain_text("write")
    expect(rows.nth(0)).to_have_attribute("data-approval", "deny")
    expect(page.locator("#policy-files-empty")).to_be_hidden()

    form = page.locator("#file-check-form")
    result = page.locator("#file-check-result")
    form.get_by_label("Path to judge").fill("/nonexistent-x/target")
    form.get_by_label("Access").select_option("write")
    form.get_by_role("button", name="Check").click()
    expect(page.locator("#file-check-verdict")).to_have_attribute("data-verdict", "deny")
    expect(result.locator("dd[data-field='rule']")).to_contain_text(FILE_DENY_GLOB)
    expect(result.locator("dd[data-field='judged']")).to_have_text("/nonexistent-x/target")
    # The same path read: no rule covers it, the outside default decides.
    form.get_by_label("Access").select_option("read")
    form.get_by_role("button", name="Check").click()
    expect(page.locator("#file-check-verdict")).to_have_attribute("data-verdict", "prompt")
    expect(result.locator("dd[data-field='rule']")).to_have_text("no rule: a default decided")
    form.get_by_label("Path to judge").fill("notes.txt")  # relative: inside the workspace
    form.get_by_role("button", name="Check").click()
    expect(page.locator("#file-check-verdict")).to_have_attribute("data-verdict", "allow")
    expect(result.locator("dd[data-field='path']")).to_have_text(
        str(console_server.settings.workspace / "notes.txt")
    )


def test_approval_card_shows_planted_control_and_bidi_characters_as_escapes(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    # U+202E would show `echo x ~ fr- mr` reversed; \r and the CSI sequence would hide a part; a
    # line break marked so that a wrapped line never reads as two commands.
    command = f"{PROMPT_PREFIX} \u202eok\u202c\r\x1b[2K\u200bz\nfalse && echo tail"
    execution = agent.post(
        "/v1/executions",
        json={"command": command, "env": {"PLANTED": "a\x1b]0;t\x07b"}, "async": True},
    ).json()
    assert execution["state"] == "awaiting_approval"
    sign_in(page, console_server, APPROVER)
    card = pending_card(page, execution["approval"]["id"])
    shown = f"{PROMPT_PREFIX} \\u202eok\\u202c\\r\\x1b[2K\\u200bz\\n\nfalse && echo tail"
    expect(card.locator("pre.command")).to_have_text(shown)
    expect(card.locator("pre.command .escape")).to_have_count(6)
    expect(card.locator("pre.env")).to_have_text("PLANTED=a\\x1b]0;t\\x07b")
    approver.post(f"/v1/approvals/{execution['approval']['id']}/deny", json={"reason": "cleanup"})


def pending_count(approver: httpx.Client) -> int:
    response = approver.get("/v1/approvals", params={"state": "pending", "limit": 500})
    assert response.status_code == 200, response.text
    return len(response.json()["data"])


def test_pending_approvals_list_newest_first_under_a_count_that_follows_them(
    page: Page, console_server: LiveServer, agent: httpx.Client, approver: httpx.Client
) -> None:
    # Three waiting at sign-in came in no order, a fourth landed below the fold, and nothing
    # said how many there were.
    waiting = [request_approval(agent, f"{PROMPT_PREFIX} inbox-{n}") for n in range(3)]
    ids = [execution["approval"]["id"] for execution in waiting]
    count = page.locator("#pending-count")
    try:
        sign_in(page, console_server, APPROVER)
        wait_until_live(page)
        cards = page.locator("#pending-list > li")
        expect(cards).to_have_count(pending_count(approver))
        order = cards.evaluate_all("cards => cards.map((card) => card.dataset.approvalId)")
        assert [approval_id for approval_id in order if approval_id in ids] == ids[::-1]
        expect(count).to_have_text(str(pending_count(approver)))

        fourth = request_approval(agent, f"{PROMPT_PREFIX} inbox-arrives")
        ids.append(fourth["approval"]["id"])
        expect(cards.first).to_have_attribute("data-approval-id", ids[-1])  # on top
        expect(count).to_have_text(str(pending_count(approver)))

        pending_card(page, ids[0]).get_by_role("button", name="Deny").click()
        expect(pending_card(page, ids[0])).to_have_count(0)
        expect(count).to_have_text(str(pending_count(approver)))
        approver.post(f"/v1/approvals/{ids[1]}/deny", json={"reason": "decided elsewhere"})
        expect(pending_card(page, ids[1])).to_have_count(0)
        expect(count).to_have_text(str(pending_count(approver)))
    finally:
        for approval_id in ids:
            approver.post(f"/v1/approvals/{approval_id}/deny", json={"reason": "cleanup"})


def test_an_approver_is_offered_no_run_form_and_no_controls_of_a_job_it_may_only_watch(
    page: Page, console_server: LiveServer, agent: httpx.Client
) -> None:
    # An approver may read and watch every execution but neither run nor drive one (403).
    response = agent.post(
        "/v1/executions",
        json={"command": "echo watched-by-approver; sleep 30", "async": True, "pty": True},
    )
    assert response.status_code == 202, response.text
    execution_id = response.json()["id"]
    try:
        sign_in(page, console_server, APPROVER)
        expect(page.locator("#execution-rows")).to_contain_text("watched-by-approver")
        expect(page.locator("#run-form")).to_be_hidden()
        expect(page.get_by_role("button", name="Run")).to_have_count(0)

        page.locator(f"#execution-rows [data-execution-id='{execution_id}'] a.command").click()
        view = shown_view(page)
        expect(view.locator(".view-terminal .xterm-rows")).to_contain_text("watched-by-approver")
        expect(view.locator(".view-state")).to_have_text("running")
        expect(view.get_by_role("button", name="Ctrl-C")).to_be_hidden()
        expect(view.get_by_role("button", name="Cancel")).to_be_hidden()
        expect(view.locator(".view-terminal")).not_to_have_attribute("data-size", re.compile("."))
        expect(view.locator(".view-error")).to_be_empty()  # nothing was sent to be refused
    finally:
        agent.post(f"/v1/executions/{execution_id}/cancel")


def test_a_file_approval_offers_no_execution_and_approving_it_lets_the_retry_write(
    page: Page, console_server: LiveServer, agent: httpx.Client, tmp_path: Path
) -> None:
    target = tmp_path / "approved-in-browser.txt"  # outside the console server's workspace
    asked = agent.put("/v1/files", params={"path": str(target), "approval_wait": 0}, content=b"x")
    assert asked.status_code == 202, asked.text
    record = asked.json()
    sign_in(page, console_server, APPROVER)
    card = pending_card(page, record["approval_id"])
    expect(card.locator("pre.command")).to_have_text(f"[file write] {target} (1 bytes)")
    # Its subject is the file operation, named on the card: there is no execution to view.
    expect(card.locator(".subject")).to_have_text("file operation")
    expect(card.get_by_role("button", name="View execution")).to_have_count(0)
    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_count(0)
    decided = page.locator(f"#history-list [data-approval-id='{record['approval_id']}']")
    expect(decided).to_have_attribute("data-state", "approved")
    expect(decided.locator(".subject")).to_have_text("file operation")
    expect(decided.get_by_role("button", name="View execution")).to_have_count(0)
    retry = agent.put(
        "/v1/files",
        params={"path": str(target), "approval_id": record["approval_id"]},
        content=b"x",
    )
    assert retry.status_code == 201, retry.text
    assert target.read_bytes() == b"x"
