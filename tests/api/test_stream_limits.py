"""A client frame is parsed on the event loop, and uvicorn holds up to 32 of them per
connection while the app is busy, so its size and shape are bounded before any parsing
(RELIABILITY.md, "One request against all the others"): a frame larger than a JSON request
body may be is closed with 1009 (before: uvicorn's 16 MiB default, and 16 MiB of `[[],…]` took
3.4 s of the loop and 270 MiB), and a frame of more than 16 arrays, objects or members gets an
error frame without being parsed, the stream going on."""

from __future__ import annotations

import json

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from app.core.strict_json import json_body_limit
from app.executions.viewer import MAX_FRAME_VALUES
from tests.api.test_stream import auth, next_frame, start_job, stream_url
from tests.conftest import LiveServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_frame_larger_than_a_request_body_closes_the_stream_1009(
    server: LiveServer,
) -> None:
    limit = json_body_limit(server.settings.max_command_bytes)
    job = await start_job(server, "sleep 30", pty=True)
    frame = json.dumps({"type": "input", "data": "x" * limit})
    with anyio.fail_after(30):
        async with connect(stream_url(server, job), additional_headers=auth(), max_size=None) as ws:
            await ws.send(json.dumps({"type": "ping"}))
            await next_frame(ws, "pong")
            # The server may close as soon as it reads the frame's length: while it is still
            # being sent.
            with pytest.raises(ConnectionClosed):
                await ws.send(frame)
                while True:
                    await ws.recv()
    assert ws.close_code == 1009
    async with server.async_client() as client:
        await client.post(f"/v1/executions/{job}/cancel")


@pytest.mark.anyio
async def test_a_frame_of_many_values_is_refused_unparsed_and_the_stream_goes_on(
    server: LiveServer,
) -> None:
    job = await start_job(server, "sleep 30", pty=True)
    lists = '{"type": "input", "data": "x", "junk": [' + ",".join(["[]"] * 100_000) + "]}"
    members = '{"type": "input", "data": "x", ' + ",".join(f'"k{i}": 0' for i in range(17)) + "}"
    # Brackets and colons in the data are text: such a frame is as good as any.
    typed = json.dumps({"type": "input", "data": "{[:" * 1000 + "\r"})
    with anyio.fail_after(30):
        async with connect(stream_url(server, job), additional_headers=auth(), max_size=None) as ws:
            await ws.send(lists)
            too_many = await next_frame(ws, "error")
            await ws.send(members)
            too_many_members = await next_frame(ws, "error")
            await ws.send(typed)
            await ws.send(json.dumps({"type": "ping"}))
            kinds = []
            while not kinds or kinds[-1] != "pong":
                kinds.append(json.loads(await ws.recv())["type"])
    async with server.async_client() as client:
        await client.post(f"/v1/executions/{job}/cancel")
    assert too_many == {
        "type": "error",
        "code": "invalid_frame",
        "message": "frames must be small JSON objects: "
        f"more than {MAX_FRAME_VALUES} arrays and objects",
    }
    assert too_many_members["message"] == (
        f"frames must be small JSON objects: more than {MAX_FRAME_VALUES} object members"
    )
    assert "error" not in kinds  # the typed frame went to the terminal
