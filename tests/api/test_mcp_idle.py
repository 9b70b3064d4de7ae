"""The MCP `bash` tool's `idle_timeout` through the official SDK client."""

from __future__ import annotations

import pytest

from tests.api.test_mcp import anyio_backend, call, structured, text_of  # noqa: F401
from tests.conftest import AGENT, LiveServer

NOTICE = "No output for 1s; the command may be waiting for input or stuck."


@pytest.mark.anyio
async def test_bash_idle_timeout_answers_with_the_notice_and_job_wait_follows(
    server: LiveServer,
) -> None:
    result = await call(server, "bash", {"command": "echo asking; sleep 60", "idle_timeout": 1})
    text = text_of(result)
    record = structured(result)
    assert text.startswith("asking\n")
    assert NOTICE in text
    assert record["state"] == "running"
    with server.client(AGENT) as rest:
        assert rest.post(f"/v1/executions/{record['id']}/cancel").status_code == 200


@pytest.mark.anyio
async def test_bash_idle_cancel(server: LiveServer) -> None:
    result = await call(
        server,
        "bash",
        {"command": "echo asking; sleep 60", "idle_timeout": 1, "idle_action": "cancel"},
    )
    assert NOTICE in text_of(result)
    assert structured(result)["state"] == "cancelled"
    assert result.is_error is True
