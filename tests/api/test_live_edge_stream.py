"""A viewer at the live edge takes the latest output from memory (app/output/live_edge.py): over a
real WebSocket its frames still carry exactly the log's bytes, each labelled with its stream."""

from __future__ import annotations

import anyio
import pytest

from tests.api.test_stream import download, output_of, payload, start_job, watch
from tests.conftest import LiveServer

WRITES = 40


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_small_live_writes_on_two_streams_arrive_exact_and_labelled(
    server: LiveServer,
) -> None:
    command = (
        f"for i in $(seq 1 {WRITES}); do printf 'out %d \\xe2\\x82' $i; sleep 0.01; "
        "printf '\\xac\\n'; printf 'err %d\\n' $i >&2; done; printf '\\xff\\xfe'"
    )
    job = await start_job(server, command)
    with anyio.fail_after(60):
        frames = await watch(server, job)
    outputs = [frame for frame in frames if frame["type"] == "output"]
    by_stream = {
        name: b"".join(payload(frame) for frame in outputs if frame["stream"] == name)
        for name in ("stdout", "stderr")
    }
    expected_out = b"".join(b"out %d \xe2\x82\xac\n" % i for i in range(1, WRITES + 1))
    assert by_stream["stdout"] == expected_out + b"\xff\xfe"
    assert by_stream["stderr"] == b"".join(b"err %d\n" % i for i in range(1, WRITES + 1))
    assert output_of(frames) == await download(server, job)
