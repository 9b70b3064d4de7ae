"""The loop's reader never waits for the sink worker: while the worker feeds a slice of costly
output to the inline window, the next chunk still goes to the log and the backlog at once.
Before, both shared one lock, so the loop (and every request on it) stood still for each slice
the worker fed (≈ 1 ms per 32 KiB of random bytes; a tenth of the loop's samples in the soak)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from app.executions.registry import INLINE_FEED_BYTES, LiveExecution
from app.output.artifact_log import ArtifactLog
from app.output.window import OutputSink
from app.process import ExitStatus, OutputStream

pytestmark = pytest.mark.anyio

GATE_OPENS_AFTER_SECONDS = 3.0


class GatedSink(OutputSink):
    """A real window whose first feed on the sink worker's thread waits for `gate`."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def feed(self, chunk: bytes) -> None:
        if threading.current_thread().name == "output-sink" and not self.entered.is_set():
            self.entered.set()
            self.gate.wait(30)
        super().feed(chunk)


async def test_the_reader_appends_while_the_worker_feeds_a_slice(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "run", max_bytes=10_000_000)
    sink = GatedSink()
    live = LiveExecution("run", owner="alice", log=log, sink=sink, loop=asyncio.get_running_loop())
    # Not ASCII and over the inline size: the worker's. Lines, so none hits the column cap.
    binary = (bytes(range(0x80, 0x100)) + b"\n") * (2 * INLINE_FEED_BYTES // 128)
    live.accept_output(binary, OutputStream.stdout)
    assert await asyncio.to_thread(sink.entered.wait, 10), "the worker never took the backlog"

    opener = threading.Timer(GATE_OPENS_AFTER_SECONDS, sink.gate.set)
    opener.start()
    try:
        live.accept_output(b"after the binary\n", OutputStream.stdout)
        # Returned while the worker still held its slice: the loop did not wait for it.
        assert not sink.gate.is_set()
        assert log.total_bytes == len(binary) + len(b"after the binary\n")
    finally:
        opener.cancel()
        sink.gate.set()

    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    await asyncio.wait_for(asyncio.shield(live.exited), 10)
    output = live.summary().output
    # The window saw the stream in order: the binary (as replacement characters), then the text.
    assert output.rstrip("\n").endswith("after the binary")
    assert output.index("\ufffd") < output.index("after the binary")
