"""PTY runs driven live over the WebSocket (docs/streaming.md#pty-runs): prompts
answered from input frames, resize, Ctrl-C, a real terminal, and a PTY nobody reads."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.api.test_stream import (
    auth,
    next_frame,
    output_of,
    read_frames,
    read_until_output_contains,
    start_job,
    stream_url,
    watch,
)
from tests.conftest import LiveServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_pty_prompt_is_answered_from_an_input_frame(server: LiveServer) -> None:
    job = await start_job(
        server, "read -p 'name? ' x; read -p 'again? ' y; echo \"hi $x/$y\"", pty=True
    )
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth()) as ws:
            before = await read_until_output_contains(ws, b"name? ")
            await ws.send(json.dumps({"type": "input", "data": "bob\r"}))
            before += await read_until_output_contains(ws, b"again? ")
            encoded = base64.b64encode(b"caf\xc3\xa9\r").decode()
            await ws.send(json.dumps({"type": "input", "data": encoded, "encoding": "base64"}))
            frames = before + await read_frames(ws)
    assert all(frame["stream"] == "pty" for frame in frames if frame["type"] == "output")
    output = output_of(frames)
    # PTY output is raw terminal bytes: the echo of what was typed, and \r\n line ends.
    assert "name? bob\r\nagain? café\r\nhi bob/café\r\n".encode() == output
    assert frames[-1] == {"type": "exit", "state": "completed", "exit_code": 0, "signal": None}
    async with server.async_client() as client:
        record = (await client.get(f"/v1/executions/{job}")).json()
    # The inline output normalises the terminal's \r\n to \n.
    assert record["output"] == "name? bob\nagain? café\nhi bob/café\n"


@pytest.mark.anyio
async def test_stty_size_follows_a_resize_frame(server: LiveServer) -> None:
    job = await start_job(server, "stty size; read _; stty size", pty=True, rows=24, cols=80)
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth()) as ws:
            await read_until_output_contains(ws, b"24 80\r\n")
            await ws.send(json.dumps({"type": "resize", "rows": 33, "cols": 101}))
            await ws.send(json.dumps({"type": "input", "data": "\r"}))
            frames = await read_frames(ws)
    assert output_of(frames, start=frames[0]["offset"]).endswith(b"33 101\r\n")
    assert frames[-1]["state"] == "completed"


@pytest.mark.anyio
async def test_a_resize_is_clamped_to_the_allowed_range(server: LiveServer) -> None:
    job = await start_job(server, "read _; stty size", pty=True)
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth()) as ws:
            await next_frame(ws, "state")
            await ws.send(json.dumps({"type": "resize", "rows": 1, "cols": 10_000}))
            await ws.send(json.dumps({"type": "input", "data": "\r"}))
            frames = await read_frames(ws)
    assert output_of(frames).endswith(b"5 400\r\n")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "interrupt",
    [{"type": "signal", "signal": "INT"}, {"type": "input", "data": "\x03"}],
    ids=["signal-frame", "ctrl-c-keystroke"],
)
async def test_an_interrupt_stops_sleep_and_the_exit_frame_says_so(
    server: LiveServer, interrupt: dict[str, str]
) -> None:
    job = await start_job(server, "echo ready; sleep 100", pty=True)
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth()) as ws:
            await read_until_output_contains(ws, b"ready")
            await ws.send(json.dumps(interrupt))
            frames = await read_frames(ws)
    # Killed by SIGINT: the foundation records signal 2 and the shell's 128+2.
    assert frames[-2:] == [
        {"type": "state", "state": "failed"},
        {"type": "exit", "state": "failed", "exit_code": 130, "signal": 2},
    ]


@pytest.mark.anyio
async def test_a_term_signal_frame_cancels_the_run(server: LiveServer) -> None:
    job = await start_job(server, "echo ready; sleep 100", pty=True)
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth()) as ws:
            await read_until_output_contains(ws, b"ready")
            await ws.send(json.dumps({"type": "signal", "signal": "TERM"}))
            frames = await read_frames(ws)
    assert frames[-1] == {"type": "exit", "state": "cancelled", "exit_code": None, "signal": 15}


@pytest.mark.anyio
async def test_a_pty_run_has_a_real_terminal(server: LiveServer) -> None:
    job = await start_job(
        server, 'tty; echo "TERM=$TERM"; test -t 0 && echo stdin-is-a-tty', pty=True
    )
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth()) as ws:
            frames = await read_frames(ws)
    output = output_of(frames).decode()
    assert re.match(r"/dev/pts/\d+\r\n", output), output
    assert "TERM=xterm-256color\r\n" in output
    assert "stdin-is-a-tty\r\n" in output


@pytest.mark.anyio
async def test_input_over_rest_reaches_a_pty(server: LiveServer) -> None:
    job = await start_job(server, 'read x; echo "got $x"', pty=True)
    async with server.async_client() as client:
        response = await client.post(f"/v1/executions/{job}/input", json={"data": "abc\r"})
        assert response.status_code == 204
        record = (await client.get(f"/v1/executions/{job}", params={"wait": 20})).json()
    assert record["state"] == "completed"
    assert record["output"] == "abc\ngot abc\n"


@pytest.mark.anyio
async def test_a_pty_nobody_reads_never_blocks_its_child(server: LiveServer) -> None:
    job = await start_job(
        server, "yes 2>/dev/null | head -c 5000000 > /dev/null; seq 1 200000", pty=True
    )
    async with server.async_client() as client:
        record = (await client.get(f"/v1/executions/{job}", params={"wait": 60})).json()
        assert record["state"] == "completed"
        log = (
            await client.get(f"/v1/executions/{job}/output", params={"limit": 4 * 1024 * 1024})
        ).content
    # Far more than a PTY buffer (about 64 KiB), with the terminal's \r\n line ends.
    expected = "".join(f"{n}\r\n" for n in range(1, 200_001)).encode()
    assert record["total_bytes"] == len(expected) == 1_488_895
    assert hashlib.sha256(log).hexdigest() == hashlib.sha256(expected).hexdigest()


@pytest.mark.anyio
async def test_a_pty_pipeline_ends_quietly_when_its_reader_stops(server: LiveServer) -> None:
    job = await start_job(server, "yes | head -c 10", pty=True)
    with anyio.fail_after(20):
        frames = await watch(server, job)
    # SIGPIPE ends `yes` silently, as in any terminal; no "Broken pipe" complaint.
    assert output_of(frames) == b"y\r\n" * 5
