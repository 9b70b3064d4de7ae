"""An execution that ran but whose log is no longer on disk (deleted from the data directory,
lost with a disk) is an error on every way of reading it, never an empty, complete log that a
client would take for "the command printed nothing" (docs/streaming.md, "Reading raw output").
An execution that never ran still reads as an empty, complete log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anyio
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from app.output.artifact_log import shard_directory
from tests.api.test_mcp import call, structured, text_of
from tests.conftest import AGENT, LiveServer, make_settings, run_foreground, serve
from tests.databases import ServerDatabase

GATED_POLICY = {"rules": [{"match": "echo gated*", "approval": "prompt"}]}


def _ran_and_lost_its_log(server: LiveServer) -> str:
    with server.client() as agent:
        record = run_foreground(agent, "printf 'printed before the disk was lost'")
    assert record["state"] == "completed" and record["total_bytes"] > 0
    execution_id = str(record["id"])
    shard = shard_directory(server.settings.artifacts_dir, execution_id)
    removed = list(shard.glob(f"{execution_id}.*"))
    assert removed, "the test expects the log files in the artifacts directory"
    for path in removed:
        path.unlink()
    return execution_id


def test_a_read_of_a_deleted_log_is_410_output_gone(fresh_server: LiveServer) -> None:
    execution_id = _ran_and_lost_its_log(fresh_server)
    with fresh_server.client() as agent:
        page = agent.get(f"/v1/executions/{execution_id}/output")
        record = agent.get(f"/v1/executions/{execution_id}").json()
    assert page.status_code == 410, page.text
    error = page.json()["error"]
    assert error["code"] == "output_gone"
    assert execution_id in error["message"] and "no longer" in error["message"]
    # The record, with its inline output, is still there to read.
    assert record["output"] == "printed before the disk was lost"


def test_a_stream_of_a_deleted_log_closes_with_4410(fresh_server: LiveServer) -> None:
    execution_id = _ran_and_lost_its_log(fresh_server)
    url = f"{fresh_server.ws_url}/v1/executions/{execution_id}/stream"

    async def watch() -> tuple[list[dict[str, object]], int | None, str]:
        frames: list[dict[str, object]] = []
        async with connect(url, additional_headers={"Authorization": f"Bearer {AGENT}"}) as ws:
            try:
                while True:
                    frames.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
            except ConnectionClosed:
                pass
            return frames, ws.close_code, ws.close_reason

    frames, code, reason = asyncio.run(watch())
    assert code == 4410, (code, reason, frames)
    assert "no longer" in reason
    assert not [frame for frame in frames if frame["type"] in ("output", "exit")], frames


def test_mcp_read_output_of_a_deleted_log_is_a_tool_error(fresh_server: LiveServer) -> None:
    execution_id = _ran_and_lost_its_log(fresh_server)
    result = anyio.run(call, fresh_server, "read_output", {"id": execution_id})
    assert result.is_error, result
    assert "no longer" in text_of(result)


def test_an_execution_that_never_ran_still_reads_as_an_empty_complete_log(
    tmp_path: Path, database: ServerDatabase
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(GATED_POLICY))
    with serve(make_settings(tmp_path, database, policy_file=policy)) as server:
        _read_a_withdrawn_execution(server)


def _read_a_withdrawn_execution(server: LiveServer) -> None:
    with server.client() as agent:
        held = agent.post("/v1/executions", json={"command": "echo gated", "async": True})
        assert held.status_code == 202, held.text
        execution_id = held.json()["id"]
        cancelled = agent.post(f"/v1/executions/{execution_id}/cancel")
        assert cancelled.json()["state"] == "cancelled", cancelled.text
        page = agent.get(f"/v1/executions/{execution_id}/output")
    assert page.status_code == 200, page.text
    assert page.content == b""
    assert page.headers["X-Complete"] == "true" and page.headers["X-Total-Bytes"] == "0"
    result = anyio.run(call, server, "read_output", {"id": execution_id})
    assert not result.is_error, text_of(result)
    assert structured(result)["complete"] is True and structured(result)["total_bytes"] == 0
