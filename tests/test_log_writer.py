"""Large chunks of output go to the log on the log writer's threads (app/output/log_writer.py):
the event loop does not wait for the copy into the page cache, the log stays in order, the
exit is settled only once every chunk is in it, and a full disk still leaves an exact prefix."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from app.executions.registry import LiveExecution
from app.executions.result_text import OUTPUT_LOG_FAILED_NOTICE
from app.output.artifact_log import ArtifactLog
from app.output.log_writer import OFFLOADED_BYTES
from app.output.window import OutputSink
from app.process import ExitStatus, OutputStream

pytestmark = pytest.mark.anyio

LARGE = OFFLOADED_BYTES


class GatedLog(ArtifactLog):
    """A real log whose appends on the log writer's threads wait for `gate`; with `full_after`,
    the append that would pass that many bytes fails as a full disk would (or with `failure`)."""

    gate: threading.Event
    entered: threading.Event
    full_after: int | None = None
    failure: int = errno.ENOSPC  # what the append past `full_after` fails with

    def append(self, data: bytes, stream: OutputStream) -> int:
        if threading.current_thread().name.startswith("shellgate-log"):
            self.entered.set()
            self.gate.wait(30)
        if self.full_after is not None and self.total_bytes + len(data) > self.full_after:
            raise OSError(self.failure, os.strerror(self.failure))
        return super().append(data, stream)


def gated_log(directory: Path) -> GatedLog:
    log = ArtifactLog.create(directory, "run", max_bytes=10_000_000)
    log.__class__ = GatedLog
    assert isinstance(log, GatedLog)
    log.gate, log.entered = threading.Event(), threading.Event()
    return log


def live_on(log: ArtifactLog) -> LiveExecution:
    return LiveExecution(
        "run", owner="alice", log=log, sink=OutputSink(), loop=asyncio.get_running_loop()
    )


async def test_the_loop_does_not_wait_for_a_large_write_and_the_exit_waits_for_it(
    tmp_path: Path,
) -> None:
    log = gated_log(tmp_path)
    live = live_on(log)
    small, large, after = b"first line\n", b"x" * LARGE + b"\n", b"after the large one\n"

    live.accept_output(small, OutputStream.stdout)  # small: written on the loop
    assert log.total_bytes == len(small)
    live.accept_output(large, OutputStream.stdout)
    assert await asyncio.to_thread(log.entered.wait, 10), "the writer never took the chunk"
    # Queued behind the large one, though small: the log stays in order.
    live.accept_output(after, OutputStream.stderr)
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    await asyncio.sleep(0.2)
    # The write is held: the loop went on, and the exit waits for the log.
    assert log.total_bytes == len(small)
    assert not live.exited.done()

    log.gate.set()
    await asyncio.wait_for(asyncio.shield(live.exited), 10)
    assert log.total_bytes == len(small) + len(large) + len(after)
    assert log.read(0, log.total_bytes) == small + large + after
    labelled = log.read_labelled(0, log.total_bytes)
    assert [stream for _, stream, _ in labelled] == [OutputStream.stdout, OutputStream.stderr]
    assert live.summary().output.endswith("after the large one\n")


async def test_a_full_disk_on_the_writer_keeps_an_exact_prefix_and_says_so(
    tmp_path: Path,
) -> None:
    log = gated_log(tmp_path)
    log.gate.set()
    first, second = b"a" * LARGE, b"b" * LARGE
    log.full_after = len(first)
    live = live_on(log)

    live.accept_output(first, OutputStream.stdout)
    live.accept_output(second, OutputStream.stdout)
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    await asyncio.wait_for(asyncio.shield(live.exited), 10)

    assert live.storage_full
    assert "Output storage full" in live.notices
    assert log.read(0, log.total_bytes) == first
    live.accept_output(b"later\n", OutputStream.stdout)  # dropped: never a hole in the log
    assert log.total_bytes == len(first)


@pytest.mark.parametrize("large", [True, False], ids=["on the writer", "on the loop"])
async def test_a_failed_write_keeps_an_exact_prefix_and_the_record_says_so(
    tmp_path: Path, large: bool
) -> None:
    """An I/O error other than a full disk: later output is dropped, never written after a
    hole, and the execution's notices say its output stopped being recorded."""
    log = gated_log(tmp_path)
    log.gate.set()
    size = LARGE if large else 1024
    first, second = b"a" * size, b"b" * size
    log.full_after, log.failure = size, errno.EIO
    live = live_on(log)

    live.accept_output(first, OutputStream.stdout)
    live.accept_output(second, OutputStream.stdout)
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    await asyncio.wait_for(asyncio.shield(live.exited), 10)

    assert not live.storage_full
    assert live.notices == [OUTPUT_LOG_FAILED_NOTICE]
    assert log.read(0, log.total_bytes) == first
    live.accept_output(b"later\n", OutputStream.stdout)
    assert log.total_bytes == len(first)


class HeldAfterAppendLog(ArtifactLog):
    """A real log whose appends on the log writer's threads, once written, wait for `gate`
    before returning: the log holds the bytes, the loop has not been handed them yet."""

    gate: threading.Event
    appended: threading.Event

    def append(self, data: bytes, stream: OutputStream) -> int:
        total = super().append(data, stream)
        if threading.current_thread().name.startswith("shellgate-log"):
            self.appended.set()
            self.gate.wait(30)
        return total


async def test_waiters_see_a_large_chunk_only_once_it_was_handed_on(tmp_path: Path) -> None:
    """A follower at the live edge reads from the recent output, which gets a written chunk
    only when it comes back to the loop. Woken by the log's own total before that, it found
    nothing new in memory and asked again at once, and the loop spun: the chunk's hand-back,
    queued on that loop, never ran (a viewer's keepalive timed out in tests/api/test_stream.py)."""
    log = ArtifactLog.create(tmp_path, "run", max_bytes=10_000_000)
    log.__class__ = HeldAfterAppendLog
    assert isinstance(log, HeldAfterAppendLog)
    log.gate, log.appended = threading.Event(), threading.Event()
    live = live_on(log)
    try:
        live.accept_output(b"y" * LARGE, OutputStream.stdout)
        assert await asyncio.to_thread(log.appended.wait, 10)
        assert log.total_bytes == LARGE
        assert live.total_bytes == 0
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(live.wait_for_bytes_after(0), 0.3)
    finally:
        log.gate.set()
    await asyncio.wait_for(live.wait_for_bytes_after(0), 10)
    assert live.total_bytes == LARGE
