"""The SDK's stream survives the connection dropping mid-stream: a real TCP proxy on loopback
between the SDK and the server is cut (every open connection reset) twice while the log
streams, and the SDK reconnects and resumes at its offset. The bytes it hands out are the log
exactly: no byte lost, none repeated (sha256 of the whole sequence), offsets contiguous."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import anyio
import pytest

from shellgate import AsyncClient, Client, ExitFrame, OutputFrame
from tests.conftest import AGENT, LiveServer
from tests.faults.cuttable_proxy import CuttableProxy
from tests.sdk.conftest import numbered_lines_bytes, numbered_lines_command
from tests.waiting import eventually

ROUNDS, LINES = 60, 400  # about 400 KB over more than half a second
CUT_AFTER = (60_000, 200_000)


def held_open(command: str, gate: Path) -> str:
    """`command`, then no exit until `gate` exists: a cut always meets a stream that is still
    running (a consumer lagging on a loaded machine could otherwise hold the whole output and
    the exit frame in its buffer already, and rightly never reconnect). At most 30 s, so a
    test that never opens the gate fails instead of hanging."""
    return (
        f"{command}; n=0; while [ ! -e {gate} ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done"
    )


def _reset(proxy: CuttableProxy) -> None:
    """Every open connection dies mid-stream; new ones are accepted again at once."""
    proxy.cut()
    proxy.start()


def test_sync_stream_resumes_exactly_after_the_socket_drops(
    client: Client, proxy: CuttableProxy, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    job = client.start(held_open(numbered_lines_command(ROUNDS, LINES), gate))
    expected = numbered_lines_bytes(ROUNDS, LINES)
    received = bytearray()
    cuts = list(CUT_AFTER)
    frames = []
    with Client(f"http://127.0.0.1:{proxy.port}", AGENT) as through_proxy:
        for frame in through_proxy.stream(job.id):
            frames.append(frame)
            if isinstance(frame, OutputFrame):
                assert frame.offset == len(received), "a hole or an overlap"
                received += frame.data
                if cuts and len(received) >= cuts[0]:
                    cuts.pop(0)
                    _reset(proxy)
                    if not cuts:
                        gate.touch()
    assert not cuts, "the stream ended before both cuts"
    assert proxy.accepted >= 3, "the SDK did not reconnect after each cut"
    assert isinstance(frames[-1], ExitFrame) and frames[-1].exit_code == 0
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(expected).hexdigest()
    assert hashlib.sha256(client.output(job.id)).hexdigest() == hashlib.sha256(expected).hexdigest()


@pytest.mark.anyio
async def test_async_stream_resumes_exactly_after_the_socket_drops(
    sdk_server: LiveServer, proxy: CuttableProxy, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    expected = numbered_lines_bytes(ROUNDS, LINES)
    received = bytearray()
    cuts = list(CUT_AFTER)
    last = None
    async with AsyncClient(sdk_server.base_url, AGENT) as direct:
        job = await direct.start(held_open(numbered_lines_command(ROUNDS, LINES), gate))
        async with AsyncClient(f"http://127.0.0.1:{proxy.port}", AGENT) as through_proxy:
            with anyio.fail_after(60):
                async for frame in through_proxy.stream(job.id):
                    last = frame
                    if isinstance(frame, OutputFrame):
                        assert frame.offset == len(received), "a hole or an overlap"
                        received += frame.data
                        if cuts and len(received) >= cuts[0]:
                            cuts.pop(0)
                            await anyio.to_thread.run_sync(_reset, proxy)
                            if not cuts:
                                gate.touch()
    assert not cuts, "the stream ended before both cuts"
    assert proxy.accepted >= 3, "the SDK did not reconnect after each cut"
    assert isinstance(last, ExitFrame) and last.exit_code == 0
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(expected).hexdigest()


def test_attach_sends_over_the_new_socket_after_a_cut(client: Client, proxy: CuttableProxy) -> None:
    """Keys typed before the first socket and after a cut reach the program, in order; the
    screen comes back whole. The typing thread waits until the SDK has reconnected through
    the proxy: a key caught in a breaking socket may be lost (docs/sdk.md), which is not what
    this checks."""
    job = client.start('while IFS= read -r line; do echo "got:$line"; done', pty=True)
    seen = bytearray()
    typist: threading.Thread | None = None
    with (
        Client(f"http://127.0.0.1:{proxy.port}", AGENT) as through_proxy,
        through_proxy.attach(job.id) as attachment,
    ):

        def type_after_reconnect() -> None:
            eventually(lambda: proxy.accepted >= 2, what="the SDK reconnecting", within=20)
            attachment.send("after\r")

        attachment.send("before\r")  # no socket yet: it waits for the first one
        for frame in attachment:
            if not isinstance(frame, OutputFrame):
                continue
            assert frame.offset == len(seen), "a hole or an overlap"
            seen += frame.data
            if b"got:before\r\n" in seen and typist is None:
                _reset(proxy)
                typist = threading.Thread(target=type_after_reconnect)
                typist.start()
            if seen.endswith(b"got:after\r\n"):
                attachment.send("again\r")  # from the reading thread, on the live socket
            if b"got:again\r\n" in seen:
                break
    assert typist is not None
    typist.join(30)
    client.cancel(job.id)
    expected = b"before\r\ngot:before\r\nafter\r\ngot:after\r\nagain\r\ngot:again\r\n"
    assert bytes(seen) == expected
    assert client.output(job.id) == expected
