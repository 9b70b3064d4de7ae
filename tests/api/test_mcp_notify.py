"""`notify_url` (and `idle_timeout` on session_run) through the official MCP SDK client: the
final record reaches a real HTTP receiver on loopback, signed, also for a command that went on
as a job after the call answered; a URL outside SHELLGATE_NOTIFY_ALLOW is a tool error."""

from __future__ import annotations

import json

import anyio
import pytest

from shellgate.webhooks import verify_signature
from tests.api.test_mcp import anyio_backend, mcp_client, structured, text_of  # noqa: F401
from tests.conftest import LiveServer
from tests.waiting import eventually
from tests.webhook_receiver import webhook_receiver

SECRET = "notify-secret-0123456789"
LOOPBACK = {
    "notify_allow": "http://127.0.0.1:*",
    "notify_secret": SECRET,
    "notify_backoff_seconds": 0.2,
    "notify_timeout_seconds": 3,
}
NOTICE = "No output for 1s; the command may be waiting for input or stuck."


@pytest.mark.anyio
@pytest.mark.settings(**LOOPBACK)
async def test_bash_and_session_run_deliver_the_final_record(fresh_server: LiveServer) -> None:
    with webhook_receiver() as receiver:
        with anyio.fail_after(40):
            async with mcp_client(fresh_server) as client:
                listed = {tool.name: tool for tool in (await client.list_tools()).tools}
                ran = await client.call_tool(
                    "bash", {"command": "echo via-mcp", "notify_url": receiver.url("/bash")}
                )
                session = structured(await client.call_tool("session_start", {}))["id"]
                held = await client.call_tool(
                    "session_run",
                    {
                        "session": session,
                        "command": "echo asking; sleep 2; echo later",
                        "idle_timeout": 1,
                        "notify_url": receiver.url("/session"),
                    },
                )
                refused = await client.call_tool(
                    "bash", {"command": "true", "notify_url": "http://10.0.0.1/x"}
                )
        # The session's command answered on idleness and went on; its end is delivered.
        posts = eventually(
            lambda: (found := receiver.posts()) and len(found) >= 2 and found,
            what="both deliveries",
            within=30,
        )
    for tool in ("bash", "session_run"):
        schema = listed[tool].input_schema["properties"]
        assert (
            "notify_url" in schema
            and "X-Shellgate-Signature" in schema["notify_url"]["description"]
        )
    assert "idle_timeout" in listed["session_run"].input_schema["properties"]
    assert ran.is_error is False and text_of(ran).startswith("via-mcp")
    assert NOTICE in text_of(held) and structured(held)["state"] == "running"
    by_path = {post.path: post for post in posts}
    for path, expected in (("/bash", "via-mcp\n"), ("/session", "asking\nlater\n")):
        post = by_path[path]
        assert verify_signature(post.body, post.headers["x-shellgate-signature"], SECRET) > 0
        record = json.loads(post.body)
        assert record["output"] == expected and record["state"] == "completed"
    assert json.loads(by_path["/session"].body)["id"] == structured(held)["id"]
    assert refused.is_error is True and "notify_url" in text_of(refused)
