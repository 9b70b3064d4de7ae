"""The execution stream over a real WebSocket (docs/streaming.md#the-execution-stream): replay
from an
offset, live frames, exact resume, several viewers, a stalled viewer, UTF-8 framing, auth."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from app.output.artifact_log import OutputStream
from app.output.framing import output_frames
from tests.conftest import ADMIN, AGENT, AGENT2, APPROVER, LiveServer, make_settings, serve
from tests.databases import ServerDatabase

Frame = dict[str, Any]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- helpers (test_pty.py uses them too) ------------------------------------------------------


def auth(token: str = AGENT) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def stream_url(server: LiveServer, execution_id: str, **params: object) -> str:
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return f"{server.ws_url}/v1/executions/{execution_id}/stream" + (f"?{query}" if query else "")


def payload(frame: Frame) -> bytes:
    if frame.get("encoding") == "base64":
        return base64.b64decode(frame["data"])
    data: str = frame["data"]
    return data.encode()


def output_of(frames: list[Frame], start: int = 0) -> bytes:
    """The bytes the output frames carry, checking that each starts where the last ended."""
    position, pieces = start, []
    for frame in frames:
        if frame["type"] == "gap":
            assert frame["from"] == position
            position = frame["to"]
        elif frame["type"] == "output":
            assert frame["offset"] == position, (frame["offset"], position)
            data = payload(frame)
            pieces.append(data)
            position += len(data)
    return b"".join(pieces)


async def start_job(server: LiveServer, command: str, token: str = AGENT, **fields: object) -> str:
    async with server.async_client(token) as client:
        response = await client.post(
            "/v1/executions", json={"command": command, "async": True, **fields}
        )
    assert response.status_code == 202, response.text
    execution_id: str = response.json()["id"]
    return execution_id


async def run_foreground(server: LiveServer, command: str) -> dict[str, Any]:
    async with server.async_client() as client:
        response = await client.post("/v1/executions", json={"command": command})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def read_frames(ws: ClientConnection) -> list[Frame]:
    """Every frame until the server closes; the last one must be the exit frame."""
    frames = [json.loads(message) async for message in ws]
    assert ws.close_code == 1000, (ws.close_code, ws.close_reason)
    assert frames[-1]["type"] == "exit"
    return frames


async def watch(
    server: LiveServer, execution_id: str, token: str = AGENT, **params: object
) -> list[Frame]:
    async with connect(
        stream_url(server, execution_id, **params), additional_headers=auth(token)
    ) as ws:
        return await read_frames(ws)


async def next_frame(ws: ClientConnection, kind: str) -> Frame:
    while True:
        frame: Frame = json.loads(await ws.recv())
        if frame["type"] == kind:
            return frame


async def read_until_output_contains(ws: ClientConnection, needle: bytes) -> list[Frame]:
    frames: list[Frame] = []
    seen = b""
    while needle not in seen:
        frame = json.loads(await ws.recv())
        frames.append(frame)
        assert frame["type"] != "exit", f"exited before {needle!r}: {seen!r}"
        if frame["type"] == "output":
            seen += payload(frame)
    return frames


async def close_code_of(url: str, headers: dict[str, str] | None = None) -> tuple[int | None, str]:
    async with connect(url, additional_headers=headers) as ws:
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
    return ws.close_code, ws.close_reason or ""


def digits_job(chunks: int, chunk_bytes: int, pause: float) -> tuple[str, bytes]:
    """A shell loop writing `chunks` runs of one digit each, with a pause between them."""
    command = (
        f"for i in $(seq 1 {chunks}); do head -c {chunk_bytes} /dev/zero "
        f"| tr '\\0' \"$((i%10))\"; sleep {pause}; done"
    )
    expected = b"".join(str(i % 10).encode() * chunk_bytes for i in range(1, chunks + 1))
    return command, expected


# --- replay and live ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_finished_execution_replays_its_output_then_the_exit_frame(
    server: LiveServer,
) -> None:
    done = await run_foreground(server, "echo hello; echo oops >&2; exit 3")
    frames = await watch(server, done["id"])
    assert frames[0] == {"type": "state", "state": "failed"}
    outputs = [frame for frame in frames if frame["type"] == "output"]
    assert outputs == [
        {"type": "output", "stream": "stdout", "offset": 0, "data": "hello\n"},
        {"type": "output", "stream": "stderr", "offset": 6, "data": "oops\n"},
    ]
    assert frames[-1] == {"type": "exit", "state": "failed", "exit_code": 3, "signal": None}
    assert [frame["type"] for frame in frames] == ["state", "output", "output", "exit"]


@pytest.mark.anyio
async def test_a_running_job_streams_live_frames_then_state_and_exit(server: LiveServer) -> None:
    job = await start_job(server, "echo one; sleep 1; echo two")
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth()) as ws:
            assert json.loads(await ws.recv()) == {"type": "state", "state": "running"}
            first = await next_frame(ws, "output")
            assert first == {"type": "output", "stream": "stdout", "offset": 0, "data": "one\n"}
            async with server.async_client() as client:
                # The first frame arrived while the job was still running: it is live.
                assert (await client.get(f"/v1/executions/{job}")).json()["state"] == "running"
            rest = await read_frames(ws)
    assert output_of([first, *rest]) == b"one\ntwo\n"
    assert rest[-2:] == [
        {"type": "state", "state": "completed"},
        {"type": "exit", "state": "completed", "exit_code": 0, "signal": None},
    ]


@pytest.mark.anyio
async def test_an_offset_beyond_the_output_waits_for_those_bytes(server: LiveServer) -> None:
    job = await start_job(server, "sleep 0.5; echo hello-world")
    with anyio.fail_after(20):
        frames = await watch(server, job, offset=6)
    outputs = [frame for frame in frames if frame["type"] == "output"]
    assert outputs == [{"type": "output", "stream": "stdout", "offset": 6, "data": "world\n"}]


@pytest.mark.anyio
async def test_an_offset_past_the_end_of_a_finished_log_gets_only_the_exit(
    server: LiveServer,
) -> None:
    done = await run_foreground(server, "echo short")
    frames = await watch(server, done["id"], offset=1000)
    assert frames == [
        {"type": "state", "state": "completed"},
        {"type": "exit", "state": "completed", "exit_code": 0, "signal": None},
    ]


# --- exact resume ------------------------------------------------------------------------------


async def reconnect_at_every_boundary(
    server: LiveServer, execution_id: str, step: int
) -> tuple[bytes, list[str]]:
    """Read each stream only up to the next `step` boundary, drop the socket there, reconnect
    at the boundary. Returns the bytes and the state each connection started in."""
    received = bytearray()
    states: list[str] = []
    while True:
        boundary = len(received) + step
        exited = False
        async with connect(
            stream_url(server, execution_id, offset=len(received)),
            additional_headers=auth(),
            max_queue=1,  # do not fetch far beyond the boundary
        ) as ws:
            states.append(json.loads(await ws.recv())["state"])  # the first frame is the state
            async for message in ws:
                frame = json.loads(message)
                if frame["type"] == "output":
                    assert frame["offset"] == len(received), "a byte was lost or repeated"
                    received += payload(frame)
                    if len(received) >= boundary:
                        ws.transport.abort()  # a dropped connection, not a goodbye
                        break
                elif frame["type"] == "exit":
                    exited = True
                    break
        if exited:
            return bytes(received), states
        del received[boundary:]  # what the client had processed when its socket dropped


async def download(server: LiveServer, execution_id: str) -> bytes:
    async with server.async_client() as client:
        response = await client.get(
            f"/v1/executions/{execution_id}/output", params={"limit": 16 * 1024 * 1024}
        )
    assert response.headers["X-Complete"] == "true"
    return response.content


@pytest.mark.anyio
async def test_reconnecting_at_every_4k_boundary_loses_and_repeats_nothing(
    server: LiveServer,
) -> None:
    command, expected = digits_job(chunks=50, chunk_bytes=100_000, pause=0.04)
    job = await start_job(server, command)
    with anyio.fail_after(60):
        received, states = await reconnect_at_every_boundary(server, job, 4096)
    assert len(states) == len(expected) // 4096 + 1
    # The pass began while the job was producing and went on after it had finished.
    assert states[0] == "running" and states[-1] == "completed"
    digest = hashlib.sha256(expected).hexdigest()
    assert hashlib.sha256(received).hexdigest() == digest
    assert hashlib.sha256(await download(server, job)).hexdigest() == digest


@pytest.mark.anyio
async def test_two_viewers_see_the_same_frames(server: LiveServer) -> None:
    job = await start_job(
        server, "for i in $(seq 1 30); do seq 1 2000; echo err-$i >&2; sleep 0.01; done"
    )
    with anyio.fail_after(30):
        first, second = await asyncio.gather(watch(server, job), watch(server, job))
    # Live, a frame holds what was written when that viewer read, so boundaries may differ;
    # the labelled bytes and the end may not.
    assert labelled_bytes(first) == labelled_bytes(second)
    assert (
        first[-1]
        == second[-1]
        == {
            "type": "exit",
            "state": "completed",
            "exit_code": 0,
            "signal": None,
        }
    )
    # Replayed after the end, both get the very same frame sequence.
    replay_one, replay_two = await asyncio.gather(watch(server, job), watch(server, job))
    assert replay_one == replay_two
    assert labelled_bytes(replay_one) == labelled_bytes(first)


def labelled_bytes(frames: list[Frame]) -> list[tuple[str, bytes]]:
    merged: list[tuple[str, bytes]] = []
    for frame in frames:
        if frame["type"] != "output":
            continue
        if merged and merged[-1][0] == frame["stream"]:
            merged[-1] = (frame["stream"], merged[-1][1] + payload(frame))
        else:
            merged.append((frame["stream"], payload(frame)))
    return merged


@pytest.mark.anyio
async def test_a_stalled_viewer_slows_neither_the_process_nor_another_viewer(
    server: LiveServer,
) -> None:
    size = 30_000_000
    job = await start_job(server, f"head -c {size} /dev/zero | tr '\\0' x")
    expected = hashlib.sha256(b"x" * size).hexdigest()
    stall = 5.0
    with anyio.fail_after(60):
        async with (
            connect(stream_url(server, job), additional_headers=auth(), max_queue=1) as slow,
            connect(stream_url(server, job), additional_headers=auth()) as fast,
        ):
            slow_frames = [json.loads(await slow.recv())]
            stall_ends = time.monotonic() + stall
            fast_frames = await read_frames(fast)
            fast_done = time.monotonic()
            async with server.async_client() as client:
                record = (await client.get(f"/v1/executions/{job}")).json()
            checked = time.monotonic()
            assert checked < stall_ends, "the fast viewer waited for the stalled one"
            assert record["state"] == "completed"
            assert record["total_bytes"] == size
            assert hashlib.sha256(output_of(fast_frames)).hexdigest() == expected
            await asyncio.sleep(stall_ends - checked)  # the stall itself is what is tested
            slow_frames += await read_frames(slow)
    assert fast_done < stall_ends
    assert hashlib.sha256(output_of(slow_frames)).hexdigest() == expected
    # …and a stalled viewer that drops can resume from any offset it reached.
    resumed = await watch(server, job, offset=size - 12_345)
    assert output_of(resumed, start=size - 12_345) == b"x" * 12_345


# --- UTF-8 framing -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_invalid_utf8_goes_out_base64_and_decodes_exactly(server: LiveServer) -> None:
    done = await run_foreground(server, r"printf 'ok\xff\xfe'; printf 'abc' >&2")
    frames = await watch(server, done["id"])
    outputs = [frame for frame in frames if frame["type"] == "output"]
    assert outputs == [
        {"type": "output", "stream": "stdout", "offset": 0, "data": "ok"},
        {"type": "output", "stream": "stdout", "offset": 2, "data": "//4=", "encoding": "base64"},
        {"type": "output", "stream": "stderr", "offset": 4, "data": "abc"},
    ]
    assert output_of(frames) == b"ok\xff\xfeabc"


@pytest.mark.anyio
async def test_a_character_split_across_writes_arrives_whole(server: LiveServer) -> None:
    job = await start_job(server, r"printf 'price: \xe2\x82'; sleep 0.3; printf '\xac!'")
    with anyio.fail_after(20):
        frames = await watch(server, job)
    assert output_of(frames) == "price: €!".encode()
    outputs = [frame for frame in frames if frame["type"] == "output"]
    assert all("encoding" not in frame for frame in outputs)
    assert "".join(frame["data"] for frame in outputs) == "price: €!"


@pytest.mark.anyio
async def test_binary_output_is_exact_over_the_stream(server: LiveServer) -> None:
    done = await run_foreground(server, "head -c 300000 /dev/urandom > blob; cat blob")
    frames = await watch(server, done["id"])
    assert output_of(frames) == await download(server, done["id"])
    assert len(output_of(frames)) == 300_000


# --- the binary format (docs/streaming.md#binary-output-frames) ------------------------------

STREAM_CODES = {0: "stdout", 1: "stderr", 2: "pty"}


async def watch_binary(
    server: LiveServer,
    execution_id: str,
    after_first_frame: Callable[[], object] = lambda: None,
    **params: object,
) -> tuple[list[tuple[str, int, bytes]], list[Frame]]:
    """`?format=binary`: the output messages as (stream, offset, bytes), and the JSON frames."""
    outputs: list[tuple[str, int, bytes]] = []
    frames: list[Frame] = []
    url = stream_url(server, execution_id, format="binary", **params)
    async with connect(url, additional_headers=auth()) as ws:
        frames.append(json.loads(await ws.recv()))
        after_first_frame()
        async for message in ws:
            if isinstance(message, bytes):
                code, offset = struct.unpack(">BQ", message[:9])
                outputs.append((STREAM_CODES[code], offset, message[9:]))
            else:
                frames.append(json.loads(message))
    assert ws.close_code == 1000, (ws.close_code, ws.close_reason)
    assert frames[-1]["type"] == "exit"
    return outputs, frames


def contiguous(outputs: list[tuple[str, int, bytes]], start: int = 0) -> bytes:
    position = start
    for _, offset, data in outputs:
        assert offset == position, (offset, position)
        assert 0 < len(data) <= 256 * 1024
        position += len(data)
    return b"".join(data for _, _, data in outputs)


@pytest.mark.anyio
async def test_the_binary_format_sends_the_log_bytes_as_they_are(server: LiveServer) -> None:
    done = await run_foreground(
        server,
        "printf 'caf\\303\\251 \\377\\376'; printf 'err\\n' >&2; "
        "head -c 600000 /dev/urandom > blob; cat blob",
    )
    outputs, frames = await watch_binary(server, done["id"])
    # Output as binary messages, with the offsets of the JSON frames; the rest stays JSON text.
    assert [frame["type"] for frame in frames] == ["state", "exit"]
    assert contiguous(outputs) == await download(server, done["id"])
    # Each stream's bytes as they are (no UTF-8 repair). Where the messages split them is the
    # server's reads': a loaded one read `café` and the blob's start in one (CI, once), so
    # "err" then came after.
    stdout = b"".join(data for stream, _, data in outputs if stream == "stdout")
    stderr = b"".join(data for stream, _, data in outputs if stream == "stderr")
    assert stdout[:8] == "café ".encode() + b"\xff\xfe"
    assert len(stdout) == 8 + 600_000
    assert stderr == b"err\n"


@pytest.mark.anyio
async def test_the_binary_format_follows_a_live_run_from_an_offset(server: LiveServer) -> None:
    # The run writes 100,000 bytes, waits for the test's gate, then writes 400,000 more: the
    # viewer joins while it runs whatever the machine's load (a fixed pause was outrun once, on
    # a loaded CI, and the viewer met a finished run), and its offset lies in the part to come.
    gate = server.settings.workspace / f"binary-gate-{time.monotonic_ns()}"
    command = (
        "head -c 100000 /dev/zero | tr '\\0' 1; "
        f"for i in $(seq 1 600); do [ -e {gate} ] && break; sleep 0.05; done; "
        "head -c 400000 /dev/zero | tr '\\0' 2"
    )
    expected = b"1" * 100_000 + b"2" * 400_000
    job = await start_job(server, command)
    with anyio.fail_after(60):
        outputs, frames = await watch_binary(server, job, gate.touch, offset=123_457)
    assert contiguous(outputs, start=123_457) == expected[123_457:]
    assert frames[0] == {"type": "state", "state": "running"}
    assert frames[-1] == {"type": "exit", "state": "completed", "exit_code": 0, "signal": None}


@pytest.mark.anyio
async def test_an_unknown_format_closes_4422(server: LiveServer) -> None:
    done = await run_foreground(server, "true")
    code, reason = await close_code_of(stream_url(server, done["id"], format="msgpack"), auth())
    assert code == 4422
    assert "format" in reason


@pytest.mark.anyio
async def test_an_evicted_middle_is_announced_with_a_gap_frame(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with serve(make_settings(tmp_path, database, artifact_max_bytes=1024)) as server:
        done = await run_foreground(server, "head -c 5000 /dev/zero | tr '\\0' a")
        frames = await watch(server, done["id"])
        from_inside = await watch(server, done["id"], offset=1000)
    assert [frame["type"] for frame in frames] == ["state", "output", "gap", "output", "exit"]
    assert frames[2] == {"type": "gap", "from": 512, "to": 4488}
    assert output_of(frames) == b"a" * 1024
    assert from_inside[1] == {"type": "gap", "from": 1000, "to": 4488}
    assert output_of(from_inside, start=1000) == b"a" * 512


# --- client frames, keepalive --------------------------------------------------------------------


@pytest.mark.anyio
async def test_bad_client_frames_get_error_frames_and_the_stream_goes_on(
    server: LiveServer,
) -> None:
    job = await start_job(server, "sleep 1; echo after")
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth()) as ws:
            await ws.send("not json")
            invalid = await next_frame(ws, "error")
            await ws.send(json.dumps({"type": "teleport"}))
            unknown = await next_frame(ws, "error")
            await ws.send(json.dumps({"type": "resize", "rows": "many", "cols": 80}))
            bad_field = await next_frame(ws, "error")
            await ws.send(json.dumps({"type": "input", "data": "x"}))
            not_pty = await next_frame(ws, "error")
            await ws.send(json.dumps({"type": "input", "data": "%%", "encoding": "base64"}))
            not_base64 = await next_frame(ws, "error")
            await ws.send(b"\x00binary")
            binary = await next_frame(ws, "error")
            await ws.send(json.dumps({"type": "ping"}))
            pong = await next_frame(ws, "pong")
            frames = await read_frames(ws)
    assert invalid == {
        "type": "error",
        "code": "invalid_frame",
        "message": "frames must be JSON objects",
    }
    assert unknown["code"] == "invalid_frame" and "unknown frame type" in unknown["message"]
    assert bad_field["code"] == "invalid_frame" and "rows" in bad_field["message"]
    assert not_pty["code"] == "conflict" and "PTY" in not_pty["message"]
    assert not_base64["code"] == "invalid_request" and "base64" in not_base64["message"]
    assert binary["code"] == "invalid_frame"
    assert pong == {"type": "pong"}
    assert output_of(frames) == b"after\n"


@pytest.mark.anyio
async def test_an_idle_stream_sends_ping_frames(tmp_path: Path, database: ServerDatabase) -> None:
    # The command stays silent until the test has seen two pings (not for a fixed time: a
    # slow connect on a loaded machine would eat into it), then prints and ends.
    go = tmp_path / "go"
    silent_until_go = f"while [ ! -e {go} ]; do sleep 0.05; done; echo done"
    with serve(make_settings(tmp_path, database, ws_ping_seconds=0.3)) as server:
        job = await start_job(server, silent_until_go)
        with anyio.fail_after(30):
            async with connect(stream_url(server, job), additional_headers=auth()) as ws:
                frames: list[Frame] = []
                while [frame["type"] for frame in frames].count("ping") < 2:
                    frames.append(json.loads(await ws.recv()))
                go.touch()
                frames += await read_frames(ws)
    kinds = [frame["type"] for frame in frames]
    assert kinds.count("ping") >= 2
    assert kinds.index("ping") < kinds.index("output")
    assert output_of(frames) == b"done\n"


@pytest.mark.anyio
async def test_a_stream_waits_through_an_approval_and_follows_the_run(
    tmp_path: Path, database: ServerDatabase
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"match": "echo needs-*", "approval": "prompt"}]}))
    with serve(make_settings(tmp_path, database, policy_file=policy)) as server:
        async with server.async_client() as alice, server.async_client(APPROVER) as carol:
            pending = (
                await alice.post("/v1/executions", json={"command": "echo needs-ok", "async": True})
            ).json()
            assert pending["state"] == "awaiting_approval"
            with anyio.fail_after(20):
                async with connect(
                    stream_url(server, pending["id"]), additional_headers=auth()
                ) as ws:
                    assert json.loads(await ws.recv()) == {
                        "type": "state",
                        "state": "awaiting_approval",
                    }
                    approve = await carol.post(f"/v1/approvals/{pending['approval']['id']}/approve")
                    assert approve.status_code == 200
                    frames = await read_frames(ws)
            assert frames[0] == {"type": "state", "state": "running"}
            assert output_of(frames) == b"needs-ok\n"
            assert frames[-2:] == [
                {"type": "state", "state": "completed"},
                {"type": "exit", "state": "completed", "exit_code": 0, "signal": None},
            ]

            denied = (
                await alice.post("/v1/executions", json={"command": "echo needs-no", "async": True})
            ).json()
            with anyio.fail_after(20):
                async with connect(
                    stream_url(server, denied["id"]), additional_headers=auth()
                ) as ws:
                    assert json.loads(await ws.recv())["state"] == "awaiting_approval"
                    await carol.post(f"/v1/approvals/{denied['approval']['id']}/deny")
                    frames = await read_frames(ws)
            assert frames == [
                {"type": "state", "state": "rejected"},
                {"type": "exit", "state": "rejected", "exit_code": None, "signal": None},
            ]


# --- access --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_ticket_opens_one_stream_and_only_one(server: LiveServer) -> None:
    done = await run_foreground(server, "echo via-ticket")
    async with server.async_client() as client:
        response = await client.post("/v1/ws-tickets")
    assert response.status_code == 201
    ticket = response.json()
    assert ticket["ticket"].startswith("wst_") and ticket["expires_at"]
    async with connect(stream_url(server, done["id"], ticket=ticket["ticket"])) as ws:
        frames = await read_frames(ws)
    assert output_of(frames) == b"via-ticket\n"
    code, reason = await close_code_of(stream_url(server, done["id"], ticket=ticket["ticket"]))
    assert code == 4401
    assert "ticket" in reason


@pytest.mark.anyio
async def test_a_ticket_carries_its_holder_s_rights(server: LiveServer) -> None:
    done = await run_foreground(server, "echo alice-only")
    async with server.async_client(AGENT2) as bob:
        ticket = (await bob.post("/v1/ws-tickets")).json()["ticket"]
    code, _ = await close_code_of(stream_url(server, done["id"], ticket=ticket))
    assert code == 4404


@pytest.mark.anyio
async def test_tickets_need_a_token(server: LiveServer) -> None:
    async with server.async_client(None) as anonymous:
        response = await anonymous.post("/v1/ws-tickets")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "headers",
    [None, auth("not-a-real-token-at-all"), {"Authorization": f"Basic {AGENT}"}],
    ids=["no-token", "wrong-token", "not-bearer"],
)
async def test_a_stream_without_valid_credentials_closes_4401(
    server: LiveServer, headers: dict[str, str] | None
) -> None:
    done = await run_foreground(server, "true")
    code, reason = await close_code_of(stream_url(server, done["id"]), headers)
    assert code == 4401
    assert reason


@pytest.mark.anyio
async def test_another_agent_s_execution_or_an_unknown_id_closes_4404(server: LiveServer) -> None:
    done = await run_foreground(server, "echo private")
    assert (await close_code_of(stream_url(server, done["id"]), auth(AGENT2)))[0] == 4404
    assert (await close_code_of(stream_url(server, "ex_doesnotexist00000000"), auth()))[0] == 4404


@pytest.mark.anyio
# 5000 digits are beyond `int()`: that raised out of the handshake, closing with no frame.
@pytest.mark.parametrize("offset", ["-1", "abc", "1.5", "1e3", "9" * 5000])
async def test_a_bad_offset_closes_4422(server: LiveServer, offset: str) -> None:
    done = await run_foreground(server, "true")
    code, reason = await close_code_of(stream_url(server, done["id"], offset=offset), auth())
    assert code == 4422
    assert "offset" in reason


@pytest.mark.anyio
async def test_approvers_and_admins_may_watch_any_execution(server: LiveServer) -> None:
    done = await run_foreground(server, "echo watched")
    for token in (APPROVER, ADMIN):
        assert output_of(await watch(server, done["id"], token=token)) == b"watched\n"


@pytest.mark.anyio
async def test_an_approver_may_watch_but_not_drive(server: LiveServer) -> None:
    job = await start_job(server, 'read x; echo "got $x"', pty=True)
    with anyio.fail_after(20):
        async with connect(stream_url(server, job), additional_headers=auth(APPROVER)) as ws:
            assert (await next_frame(ws, "state"))["state"] == "running"
            for frame in (
                {"type": "input", "data": "hijack\r"},
                {"type": "resize", "rows": 10, "cols": 40},
                {"type": "signal", "signal": "KILL"},
            ):
                await ws.send(json.dumps(frame))
                refused = await next_frame(ws, "error")
                assert refused["code"] == "forbidden"
            async with server.async_client() as alice:
                typed = await alice.post(f"/v1/executions/{job}/input", json={"data": "owner\r"})
                assert typed.status_code == 204
            frames = await read_frames(ws)
    assert b"got owner" in output_of(frames)
    assert frames[-1]["state"] == "completed"


# --- frame building (pure) -------------------------------------------------------------------


@given(
    data=st.binary(max_size=600)
    | st.text(max_size=200).map(str.encode)
    | st.lists(st.sampled_from([b"a", "€".encode(), b"\xff", b"\n", "😀".encode()])).map(b"".join),
    more_may_follow=st.booleans(),
    frame_bytes=st.integers(min_value=4, max_value=64),
)
def test_output_frames_carry_exactly_the_log_bytes(
    data: bytes, more_may_follow: bool, frame_bytes: int
) -> None:
    frames, end = output_frames(
        [(1000, OutputStream.stdout, data)],
        more_may_follow=more_may_follow,
        frame_bytes=frame_bytes,
    )
    carried = output_of(list(frames), start=1000)  # also checks that offsets are contiguous
    consumed = (end or 1000) - 1000
    assert carried == data[:consumed]
    if more_may_follow:
        assert len(data) - consumed <= 3  # at most an incomplete last character is held
    else:
        assert consumed == len(data)
    for frame in frames:
        assert len(payload(dict(frame))) <= frame_bytes
        if "encoding" not in frame:
            assert frame["data"].encode() == payload(dict(frame))


def test_a_multibyte_character_is_never_cut_at_a_frame_boundary() -> None:
    data = "ab€€€€".encode()  # 2 + 4 x 3 bytes
    frames, _ = output_frames([(0, OutputStream.pty, data)], more_may_follow=False, frame_bytes=4)
    assert [frame["data"] for frame in frames] == ["ab", "€", "€", "€", "€"]
    assert all("encoding" not in frame for frame in frames)


def test_an_incomplete_character_before_a_stream_switch_goes_out_as_bytes() -> None:
    pieces = [(0, OutputStream.stdout, b"ok\xe2\x82"), (4, OutputStream.stderr, b"err")]
    frames, end = output_frames(pieces, more_may_follow=True)
    assert end == 7
    assert [dict(frame) for frame in frames] == [
        {"type": "output", "stream": "stdout", "offset": 0, "data": "ok"},
        {"type": "output", "stream": "stdout", "offset": 2, "data": "4oI=", "encoding": "base64"},
        {"type": "output", "stream": "stderr", "offset": 4, "data": "err"},
    ]


def test_short_text_between_invalid_bytes_rides_in_one_base64_frame() -> None:
    data = b"head text\xff\xfeab\xfdcd" + b"t" * 40
    frames, _ = output_frames([(0, OutputStream.stdout, data)], more_may_follow=False)
    assert [(frame["offset"], "encoding" in frame) for frame in frames] == [
        (0, False),
        (9, True),
        (14, False),
    ]
    assert output_of([dict(frame) for frame in frames]) == data
