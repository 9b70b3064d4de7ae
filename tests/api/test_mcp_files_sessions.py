"""The MCP file and session tools through the official MCP SDK client over streamable HTTP:
byte-exact files as text and base64, the files policy (deny, and a prompt that holds for the
decision and says how to come back), and a session whose state carries across calls."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.api.test_mcp import call, mcp_client, structured, text_of
from tests.conftest import ADMIN, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.waiting import eventually


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    with serve(
        make_settings(tmp_path_factory.mktemp("mcp-files"), module_databases.new())
    ) as server:
        with server.client(ADMIN) as admin:
            policy = {"files": {"rules": [{"match": "*.lock", "approval": "deny"}]}}
            assert admin.put("/v1/policy", json=policy).status_code == 200
        yield server


@pytest.mark.anyio
async def test_file_write_then_read_in_text_and_base64(live: LiveServer) -> None:
    workspace = live.settings.workspace
    written = await call(live, "file_write", {"path": "notes.txt", "content": "héllo\nworld\n"})
    assert written.is_error is False, text_of(written)
    assert (workspace / "notes.txt").read_text() == "héllo\nworld\n"
    assert structured(written)["sha256"] == hashlib.sha256("héllo\nworld\n".encode()).hexdigest()

    read = await call(live, "file_read", {"path": "notes.txt"})
    assert text_of(read) == "héllo\nworld\n"
    assert structured(read)["eof"] is True

    # A window that would cut the é in two stops before it; the next starts on it.
    first = await call(live, "file_read", {"path": "notes.txt", "limit": 2})
    assert text_of(first) == "h" and structured(first)["next_offset"] == 1
    second = await call(live, "file_read", {"path": "notes.txt", "offset": 1, "limit": 2})
    assert text_of(second) == "é"

    data = os.urandom(200_000)
    binary = await call(
        live,
        "file_write",
        {
            "path": "blob.bin",
            "content": base64.b64encode(data).decode(),
            "encoding": "base64",
            "mode": "0600",
        },
    )
    assert binary.is_error is False, text_of(binary)
    assert (workspace / "blob.bin").read_bytes() == data
    assert (workspace / "blob.bin").stat().st_mode & 0o777 == 0o600
    back = await call(
        live, "file_read", {"path": "blob.bin", "encoding": "base64", "limit": 1024 * 1024}
    )
    assert base64.b64decode(text_of(back)) == data

    stat = await call(live, "file_stat", {"path": "blob.bin", "sha256": True})
    assert structured(stat)["sha256"] == hashlib.sha256(data).hexdigest()
    assert structured(stat)["mode"] == "0600"


@pytest.mark.anyio
async def test_file_errors_are_tool_errors_with_the_api_message(live: LiveServer) -> None:
    denied = await call(live, "file_write", {"path": "x.lock", "content": "no"})
    assert denied.is_error is True
    assert "file rule *.lock" in text_of(denied)
    assert not (live.settings.workspace / "x.lock").exists()
    missing = await call(live, "file_read", {"path": "does-not-exist"})
    assert missing.is_error is True and "no such file" in text_of(missing)
    bad = await call(live, "file_write", {"path": "b.bin", "content": "%%%", "encoding": "base64"})
    assert bad.is_error is True and "base64" in text_of(bad)


@pytest.mark.anyio
async def test_a_prompted_write_holds_for_the_decision(live: LiveServer, tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"  # outside the workspace: prompt by default

    def approve_when_asked() -> None:
        with live.client(APPROVER) as approver:

            def pending() -> str | None:
                items = approver.get("/v1/approvals", params={"state": "pending"}).json()["data"]
                return next((a["id"] for a in items if str(target) in a["command"]), None)

            approval_id = eventually(pending, what="the file approval", within=20)
            assert approver.post(f"/v1/approvals/{approval_id}/approve").status_code == 200

    with anyio.fail_after(30):
        async with mcp_client(live) as client, anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, approve_when_asked)
            result = await client.call_tool(
                "file_write", {"path": str(target), "content": "approved", "approval_wait": 25}
            )
    assert result.is_error is False, text_of(result)
    assert target.read_text() == "approved"


@pytest.mark.anyio
async def test_an_undecided_prompt_says_how_to_come_back(live: LiveServer, tmp_path: Path) -> None:
    target = tmp_path / "later.txt"
    target.write_text("later")
    held = await call(live, "file_read", {"path": str(target), "approval_wait": 0})
    assert held.is_error is False
    approval_id = structured(held)["approval_id"]
    assert f'approval_id "{approval_id}"' in text_of(held)
    assert "Call file_read again" in text_of(held)
    with live.client(APPROVER) as approver:
        assert approver.post(f"/v1/approvals/{approval_id}/approve").status_code == 200
    again = await call(live, "file_read", {"path": str(target), "approval_id": approval_id})
    assert text_of(again) == "later"


@pytest.mark.anyio
async def test_a_session_keeps_its_state_across_session_run_calls(live: LiveServer) -> None:
    with anyio.fail_after(40):
        async with mcp_client(live) as client:
            started = await client.call_tool("session_start", {"env": {"GREETING": "hi"}})
            session = structured(started)["id"]
            first = await client.call_tool(
                "session_run",
                {"session": session, "command": 'export N=42 && f() { echo "f:$1"; }'},
            )
            second = await client.call_tool(
                "session_run", {"session": session, "command": 'echo "$GREETING $N $(f x) $(pwd)"'}
            )
            closed = await client.call_tool("session_close", {"session": session})
            after = await client.call_tool("session_run", {"session": session, "command": "true"})
    assert first.is_error is False, text_of(first)
    # Variables and functions carry over; the directory is the session's again.
    assert text_of(second).startswith(f"hi 42 f:x {live.settings.workspace}\n")
    assert closed.is_error is False
    assert after.is_error is True
