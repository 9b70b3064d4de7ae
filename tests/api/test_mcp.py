"""The MCP endpoint `/mcp` through the real MCP SDK client over streamable HTTP: the tools call
the same use-cases as REST, under the same tokens, roles and policy."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.client import Client, ConnectMode
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from tests.conftest import ADMIN, AGENT, AGENT2, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.waiting import pending_approval_for

TOOLS = {
    "bash",
    "job_wait",
    "job_cancel",
    "read_output",
    "file_read",
    "file_write",
    "file_stat",
    "session_start",
    "session_run",
    "session_close",
}
POLICY = {
    "rules": [
        {"match": "rm -rf *", "approval": "deny"},
        {"match": "echo needs-approval*", "approval": "prompt"},
    ]
}
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def policy_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """A server of this module's own: its policy denies `rm -rf *` and prompts for one echo."""
    with serve(
        make_settings(tmp_path_factory.mktemp("mcp-policy"), module_databases.new())
    ) as live:
        with live.client(ADMIN) as admin:
            response = admin.put("/v1/policy", json=POLICY)
            assert response.status_code == 200, response.text
        yield live


@contextlib.asynccontextmanager
async def mcp_client(
    server: LiveServer, token: str = AGENT, mode: ConnectMode = "auto"
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        transport = streamable_http_client(f"{server.base_url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


async def call(
    server: LiveServer, tool: str, arguments: dict[str, Any], token: str = AGENT
) -> CallToolResult:
    with anyio.fail_after(25):
        async with mcp_client(server, token) as client:
            return await client.call_tool(tool, arguments)


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return dict(result.structured_content)


@pytest.mark.anyio
async def test_lists_the_tools_with_schemas_that_match_rest(server: LiveServer) -> None:
    with anyio.fail_after(20):
        async with mcp_client(server) as client:
            listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS
    with server.client(AGENT) as rest:
        rest_tool = rest.get("/v1/tool").json()
    schema = tools["bash"].input_schema
    assert schema["required"] == ["command"]
    assert {"command", "timeout", "cwd", "env", "async", "tools", "approval_wait"} <= set(
        schema["properties"]
    )
    assert (
        schema["properties"]["timeout"]["description"]
        == (rest_tool["inputSchema"]["properties"]["timeout"]["description"])
    )
    assert schema["properties"]["approval_wait"]["default"] == 30
    assert schema["properties"]["approval_wait"]["maximum"] == 3600
    assert tools["job_wait"].input_schema["properties"]["seconds"]["maximum"] == 60
    assert tools["read_output"].input_schema["properties"]["limit"]["maximum"] == 64 * 1024


@pytest.mark.anyio
async def test_descriptions_name_mcp_tools_and_never_a_rest_path(server: LiveServer) -> None:
    with anyio.fail_after(20):
        async with mcp_client(server) as client:
            listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    texts = [tool.description or "" for tool in listed.tools] + [
        str(parameter.get("description", ""))
        for tool in listed.tools
        for parameter in tool.input_schema["properties"].values()
    ]
    assert not [text for text in texts if "/v1/" in text or "GET " in text or "202" in text]
    bash = tools["bash"].description or ""
    assert "job_wait" in bash
    assert "read_output" in bash
    assert "`approval_wait` seconds (default 30)" in bash
    with server.client(AGENT) as rest:
        # The REST tool object keeps its REST wording: a different audience.
        assert "GET /v1/executions/{id}?wait=N" in rest.get("/v1/tool").json()["description"]


@pytest.mark.anyio
async def test_the_tools_parameter_says_what_it_is_for(server: LiveServer) -> None:
    with anyio.fail_after(20):
        async with mcp_client(server) as client:
            listed = await client.list_tools()
    bash = next(tool for tool in listed.tools if tool.name == "bash")
    description = bash.input_schema["properties"]["tools"]["description"]
    assert "other tools you can call" in description
    assert "naming the tool to use" in description
    assert "interceptor)" not in description


@pytest.mark.anyio
async def test_every_tool_carries_honest_annotations(server: LiveServer) -> None:
    with anyio.fail_after(20):
        async with mcp_client(server) as client:
            listed = await client.list_tools()
    hints = {
        tool.name: (
            tool.annotations.read_only_hint,
            tool.annotations.destructive_hint,
            tool.annotations.idempotent_hint,
            tool.annotations.open_world_hint,
        )
        for tool in listed.tools
        if tool.annotations is not None
    }
    assert hints == {
        "bash": (False, True, False, True),
        "job_wait": (True, False, True, False),
        "job_cancel": (False, True, True, False),
        "read_output": (True, False, True, False),
        "file_read": (True, False, True, False),
        "file_stat": (True, False, True, False),
        "file_write": (False, True, True, False),
        "session_start": (False, False, False, False),
        "session_run": (False, True, False, True),
        "session_close": (False, True, False, False),
    }
    assert all(tool.annotations and tool.annotations.title for tool in listed.tools)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_bash_runs_a_command_and_answers_its_text_block(
    server: LiveServer, mode: ConnectMode
) -> None:
    with anyio.fail_after(20):
        async with mcp_client(server, mode=mode) as client:
            result = await client.call_tool("bash", {"command": "echo hi"})
    text = text_of(result)
    assert text.startswith("hi\n")
    assert "Wall time:" in text
    assert result.is_error is False
    record = structured(result)
    assert record["state"] == "completed"
    assert record["exit_code"] == 0
    assert record["artifact"] == f"artifact://{record['id']}"
    with server.client(AGENT) as rest:
        assert rest.get(f"/v1/executions/{record['id']}").json()["owner"] == "alice"


@pytest.mark.anyio
async def test_bash_passes_env_cwd_and_timeout_through(server: LiveServer) -> None:
    result = await call(
        server,
        "bash",
        {"command": 'echo "$GREETING from $PWD"', "env": {"GREETING": "hello"}, "cwd": "/tmp"},
    )
    assert text_of(result).startswith("hello from /tmp\n")


@pytest.mark.anyio
async def test_a_failing_command_is_an_error_result_with_its_exit_line(
    server: LiveServer,
) -> None:
    result = await call(server, "bash", {"command": "echo oops; exit 3"})
    assert result.is_error is True
    text = text_of(result)
    assert text.startswith("oops\n")
    assert text.endswith("Command exited with code 3")
    assert structured(result)["state"] == "failed"
    assert structured(result)["exit_code"] == 3


@pytest.mark.anyio
async def test_an_invalid_env_name_is_a_tool_error_with_the_rest_message(
    server: LiveServer,
) -> None:
    result = await call(server, "bash", {"command": "true", "env": {"1X": "v"}})
    assert result.is_error is True
    assert text_of(result) == "Invalid bash env name: 1X"


@pytest.mark.anyio
async def test_an_async_job_is_collected_with_job_wait(server: LiveServer) -> None:
    with anyio.fail_after(25):
        async with mcp_client(server) as client:
            started = await client.call_tool(
                "bash", {"command": "sleep 0.3; echo job-done", "async": True}
            )
            job = structured(started)
            waited = await client.call_tool("job_wait", {"id": job["id"], "seconds": 20})
    assert job["state"] == "running"
    assert started.is_error is False
    assert f"Backgrounded as job {job['id']}" in text_of(started)
    assert f"Job {job['id']} is still running: call job_wait with this id" in text_of(started)
    assert "delivered automatically" not in text_of(started)  # the model collects it itself
    assert structured(waited)["state"] == "completed"
    assert text_of(waited).startswith("job-done\n")


@pytest.mark.anyio
async def test_job_cancel_ends_a_running_job(server: LiveServer) -> None:
    with anyio.fail_after(25):
        async with mcp_client(server) as client:
            started = await client.call_tool("bash", {"command": "sleep 30", "async": True})
            cancelled = await client.call_tool("job_cancel", {"id": structured(started)["id"]})
            again = await client.call_tool("job_cancel", {"id": structured(started)["id"]})
    assert structured(cancelled)["state"] == "cancelled"
    assert cancelled.is_error is False  # the cancel asked for succeeded
    assert "[Command cancelled]" in text_of(cancelled)
    assert again.is_error is True
    assert text_of(again) == f"execution {structured(started)['id']} is already cancelled"


@pytest.mark.anyio
async def test_job_wait_on_an_unknown_id_is_a_not_found_tool_error(server: LiveServer) -> None:
    result = await call(server, "job_wait", {"id": "ex_doesnotexist00000000", "seconds": 0})
    assert result.is_error is True
    assert text_of(result) == "execution ex_doesnotexist00000000 not found"


@pytest.mark.anyio
async def test_job_wait_refuses_more_than_sixty_seconds(server: LiveServer) -> None:
    result = await call(server, "job_wait", {"id": "ex_whatever000000000000", "seconds": 61})
    assert result.is_error is True
    assert "less than or equal to 60" in text_of(result)


@pytest.mark.anyio
async def test_another_agents_execution_reads_as_absent(server: LiveServer) -> None:
    mine = await call(server, "bash", {"command": "echo private"})
    theirs = await call(server, "job_wait", {"id": structured(mine)["id"]}, token=AGENT2)
    assert theirs.is_error is True
    assert text_of(theirs).endswith("not found")


@pytest.mark.anyio
async def test_read_output_pages_through_the_whole_log(server: LiveServer) -> None:
    expected = "".join(f"{n}\n" for n in range(1, 3001))
    with anyio.fail_after(25):
        async with mcp_client(server) as client:
            ran = await client.call_tool("bash", {"command": "seq 1 3000"})
            execution_id = structured(ran)["id"]
            pages: list[str] = []
            offset = 0
            page: dict[str, Any] = {"complete": False}
            for _ in range(20):
                result = await client.call_tool(
                    "read_output", {"id": execution_id, "offset": offset, "limit": 4096}
                )
                assert result.is_error is False
                pages.append(text_of(result))
                page = structured(result)
                offset = page["next_offset"]
                if page["complete"] and offset >= page["total_bytes"]:
                    break
    assert len(pages) == 4
    assert "".join(pages) == expected
    assert page["total_bytes"] == len(expected)


@pytest.mark.anyio
async def test_read_output_never_cuts_a_character_in_two(server: LiveServer) -> None:
    with anyio.fail_after(25):
        async with mcp_client(server) as client:
            ran = await client.call_tool("bash", {"command": "printf 'é%.0s' {1..10}"})
            execution_id = structured(ran)["id"]
            texts: list[str] = []
            offsets = [0]
            for _ in range(20):
                result = await client.call_tool(
                    "read_output", {"id": execution_id, "offset": offsets[-1], "limit": 3}
                )
                texts.append(text_of(result))
                offsets.append(structured(result)["next_offset"])
                if offsets[-1] >= structured(result)["total_bytes"]:
                    break
    assert texts == ["é"] * 10
    assert offsets == list(range(0, 21, 2))


@pytest.mark.anyio
async def test_a_policy_deny_is_a_tool_error_and_nothing_runs(
    policy_server: LiveServer, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    command = f"rm -rf /nonexistent-x; touch {marker}"
    result = await call(policy_server, "bash", {"command": command})
    assert result.is_error is True
    assert "Blocked by bash pattern: rm -rf *" in text_of(result)
    assert not marker.exists()
    with policy_server.client(AGENT) as rest:
        listed = rest.get("/v1/executions").json()["data"]
    assert all(execution["command"] != command for execution in listed)


@pytest.mark.anyio
async def test_a_command_awaiting_approval_answers_its_ids_and_job_wait_follows_it(
    policy_server: LiveServer,
) -> None:
    with anyio.fail_after(25):
        async with mcp_client(policy_server) as client:
            held = await client.call_tool("bash", {"command": "echo needs-approval", "async": True})
            pending = structured(held)
            with policy_server.client(APPROVER) as approver:
                response = approver.post(f"/v1/approvals/{pending['approval_id']}/approve")
                assert response.status_code == 200, response.text
            waited = await client.call_tool("job_wait", {"id": pending["id"], "seconds": 20})
    assert held.is_error is False
    assert pending["state"] == "awaiting_approval"
    assert pending["approval_id"].startswith("ap_")
    assert pending["approval_id"] in text_of(held)
    assert f"Call job_wait with id {pending['id']}" in text_of(held)
    assert structured(waited)["state"] == "completed"
    assert text_of(waited).startswith("needs-approval\n")


@pytest.mark.anyio
async def test_an_approver_cannot_run_bash(server: LiveServer) -> None:
    result = await call(server, "bash", {"command": "echo no"}, token=APPROVER)
    assert result.is_error is True
    assert text_of(result) == "this action needs the role agent or admin"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {AGENT}"}],
    ids=["no-token", "bad-token", "not-bearer"],
)
def test_the_endpoint_refuses_a_caller_without_a_valid_token(
    server: LiveServer, headers: dict[str, str]
) -> None:
    response = httpx.post(
        f"{server.base_url}/mcp", json=INITIALIZE, headers=MCP_HEADERS | headers, timeout=10
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "unauthenticated"


def test_an_mcp_session_belongs_to_the_token_that_opened_it(server: LiveServer) -> None:
    url = f"{server.base_url}/mcp"
    with httpx.Client(timeout=10) as http:
        opened = http.post(
            url, json=INITIALIZE, headers=MCP_HEADERS | {"Authorization": f"Bearer {AGENT}"}
        )
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        stranger = http.post(
            url,
            json=listing,
            headers=MCP_HEADERS | {"Authorization": f"Bearer {AGENT2}", "mcp-session-id": session},
        )
        http.delete(url, headers={"Authorization": f"Bearer {AGENT}", "mcp-session-id": session})
    assert stranger.status_code == 404


def test_the_mcp_route_is_not_in_the_openapi_schema(server: LiveServer) -> None:
    paths = httpx.get(f"{server.base_url}/openapi.json", timeout=10).json()["paths"]
    assert not any(path.startswith("/mcp") for path in paths)


@pytest.mark.anyio
async def test_a_prompted_call_holds_for_the_decision_and_answers_the_run(
    policy_server: LiveServer,
) -> None:
    command = "echo needs-approval-held"

    def approve_when_asked() -> None:
        with policy_server.client(APPROVER) as approver:
            approval = pending_approval_for(approver, command, within=20)
            response = approver.post(f"/v1/approvals/{approval['id']}/approve")
            assert response.status_code == 200, response.text

    with anyio.fail_after(30):
        async with mcp_client(policy_server) as client, anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, approve_when_asked)
            result = await client.call_tool("bash", {"command": command, "approval_wait": 25})
    assert result.is_error is False
    assert structured(result)["state"] == "completed"
    assert text_of(result).startswith("needs-approval-held\n")


@pytest.mark.anyio
async def test_a_prompted_call_answers_its_ids_once_approval_wait_runs_out(
    policy_server: LiveServer,
) -> None:
    with anyio.fail_after(25):
        async with mcp_client(policy_server) as client:
            held = await client.call_tool(
                "bash", {"command": "echo needs-approval-late", "approval_wait": 0.3}
            )
            pending = structured(held)
            withdrawn = await client.call_tool("job_cancel", {"id": pending["id"]})
    assert held.is_error is False
    assert pending["state"] == "awaiting_approval"
    assert pending["approval_id"].startswith("ap_")
    assert f"Call job_wait with id {pending['id']}" in text_of(held)
    assert structured(withdrawn)["state"] == "cancelled"


@pytest.mark.anyio
async def test_an_omitted_timeout_under_a_lower_ceiling_is_the_ceiling_without_a_notice(
    tmp_path: Path, database: Any
) -> None:
    # SHELLGATE_MAX_TIMEOUT 60: nobody asked for 300 s, so no call says "requested 300s".
    with serve(make_settings(tmp_path, database, max_timeout=60)) as live:
        over_mcp = await call(live, "bash", {"command": "echo default-timeout"})
        assert "clamped" not in text_of(over_mcp)
        with live.client(AGENT) as rest:
            record = rest.get(f"/v1/executions/{structured(over_mcp)['id']}").json()
            assert (record["timeout_seconds"], record["notices"]) == (60, [])
            assert record["requested_timeout_seconds"] is None
            omitted = rest.post("/v1/executions", json={"command": "true"}).json()
            assert (omitted["timeout_seconds"], omitted["notices"]) == (60, [])
            # One that asks for more than the ceiling is still told.
            asked = rest.post("/v1/executions", json={"command": "true", "timeout": 300}).json()
            assert asked["timeout_seconds"] == 60
            assert "Timeout clamped to 60s (requested 300s" in asked["text"]
        explicit = await call(live, "bash", {"command": "true", "timeout": 300})
        assert "Timeout clamped to 60s (requested 300s" in text_of(explicit)


@pytest.mark.anyio
async def test_an_argument_no_tool_has_is_refused_and_nothing_runs(
    server: LiveServer, tmp_path: Path
) -> None:
    # As REST refuses an unknown field: a misspelt `cwd` must not run in the workspace root.
    marker = tmp_path / "must-not-exist"
    result = await call(server, "bash", {"command": f"touch {marker}", "workdir": str(tmp_path)})
    assert result.is_error
    assert "workdir" in text_of(result) and "Extra inputs are not permitted" in text_of(result)
    assert not marker.exists()
    with anyio.fail_after(20):
        async with mcp_client(server) as client:
            listed = await client.list_tools()
    assert {tool.input_schema.get("additionalProperties") for tool in listed.tools} == {False}
    # The alias `async` is an argument of `bash`, not an unknown one.
    started = await call(server, "bash", {"command": "true", "async": True})
    assert not started.is_error, text_of(started)
