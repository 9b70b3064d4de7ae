"""The browser tests' fixtures, defined with their helpers in tests/web/browser.py."""

from tests.web.browser import admin, agent, approver, browser, console_server, page

__all__ = ["admin", "agent", "approver", "browser", "console_server", "page"]
