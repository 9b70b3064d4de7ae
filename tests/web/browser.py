"""What every browser test of the console shares: Debian's Chromium driven by Playwright, one
real server per test module, and a page that fails its test on any script error or dialog."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Dialog,
    Page,
    expect,
    sync_playwright,
)

from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parent / "artifacts"
PROMPT_PREFIX = "echo needs-approval"
XSS = "<img src=x onerror=alert(1)>"

# Each browser test module sets `pytestmark = NEEDS_CHROMIUM`.
# A files rule of the console's policy: writes under it are denied, reads left to the defaults.
FILE_DENY_GLOB = "/nonexistent-x/*"
NEEDS_CHROMIUM = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
)


@pytest.fixture(scope="module")
def console_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    with serve(make_settings(tmp_path_factory.mktemp("console"), module_databases.new())) as live:
        policy = {
            "default": "allow",
            "rules": [{"match": f"{PROMPT_PREFIX}*", "approval": "prompt"}],
            "files": {
                "workspace": "allow",
                "outside": "prompt",
                "rules": [{"match": FILE_DENY_GLOB, "approval": "deny", "access": "write"}],
            },
        }
        with live.client(ADMIN) as admin:
            response = admin.put("/v1/policy", json=policy)
            assert response.status_code == 200, response.text
        yield live


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Watch:
    """What the page did that it must not: script errors and dialogs (an alert() means XSS)."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", self._console)
        page.on("dialog", self._dialog)

    def _console(self, message: ConsoleMessage) -> None:
        # Resource and socket failures are the network's business (a test aborts some on
        # purpose); what counts here is the page's own code failing.
        expected = ("Failed to load resource", "WebSocket")
        if message.type == "error" and not message.text.startswith(expected):
            self.errors.append(message.text)

    def _dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    watch = Watch(page)
    yield page
    context.close()
    assert watch.dialogs == []
    assert watch.errors == []


@pytest.fixture
def agent(console_server: LiveServer) -> Iterator[httpx.Client]:
    with console_server.client(AGENT) as client:
        yield client


@pytest.fixture
def admin(console_server: LiveServer) -> Iterator[httpx.Client]:
    with console_server.client(ADMIN) as client:
        yield client


@pytest.fixture
def approver(console_server: LiveServer) -> Iterator[httpx.Client]:
    with console_server.client(APPROVER) as client:
        yield client


def sign_in(page: Page, server: LiveServer, token: str) -> None:
    page.goto(f"{server.base_url}/console")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#workspace")).to_be_visible()


def wait_until_live(page: Page) -> None:
    expect(page.locator("#approvals-live")).to_have_attribute("data-live", "live")


def shown_view(page: Page) -> Any:
    """The execution tab on show (each open execution has a view; one is shown at a time)."""
    return page.locator("section.execution-view:not([hidden])")


def request_approval(agent: httpx.Client, command: str) -> dict[str, Any]:
    response = agent.post("/v1/executions", json={"command": command, "async": True})
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    assert body["state"] == "awaiting_approval"
    return body


def pending_card(page: Page, approval_id: str) -> Any:
    return page.locator(f"#pending-list [data-approval-id='{approval_id}']")
