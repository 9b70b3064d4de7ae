"""A viewer following an execution whose log could not be finished (the disk filled before the
`.done` marker was written) still ends, with every byte: once the process has exited and the
finish was attempted (or, for a run whose window had nothing queued, at once), nothing more can
be appended, whether the marker exists or not. Before,
such a viewer looped on worker-thread reads for as long as it stayed connected."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.executions.registry import LiveExecution
from app.executions.viewer import follow_output
from app.output.artifact_log import ArtifactLog
from app.output.window import OutputSink
from app.process import ExitStatus, OutputStream
from app.store.storage import OUTPUT_STORAGE_FULL_NOTICE
from tests.faults.tmpfs import small_tmpfs

pytestmark = pytest.mark.anyio


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", 4) as mountpoint:
        yield mountpoint


def _fill_completely(directory: Path) -> None:
    stats = os.statvfs(directory)
    with (directory / "filler").open("wb") as file:
        os.posix_fallocate(file.fileno(), 0, stats.f_bavail * stats.f_frsize)


async def test_a_viewer_ends_when_the_log_could_not_be_finished(small_disk: Path) -> None:
    log = ArtifactLog.create(small_disk, "run", max_bytes=10_000_000)
    live = LiveExecution(
        "run", owner="alice", log=log, sink=OutputSink(), loop=asyncio.get_running_loop()
    )
    live.accept_output(b"kept before the disk filled\n", OutputStream.stdout)

    at_the_live_edge = asyncio.Event()

    async def view() -> bytes:
        frames = []
        async for frame in follow_output(log, 0, live):
            frames.append(frame)
            at_the_live_edge.set()  # every byte so far is in that one frame: next, it waits
        return "".join(str(frame) for frame in frames).encode()

    viewer = asyncio.ensure_future(view())
    await asyncio.wait_for(at_the_live_edge.wait(), 10)
    _fill_completely(small_disk)
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    await asyncio.wait_for(asyncio.shield(live.exited), 10)
    # The run's end finishes the log on a worker thread (the lifecycle's end hop).
    await asyncio.to_thread(live.finish_log)
    assert not log.complete  # the `.done` marker could not be written
    assert OUTPUT_STORAGE_FULL_NOTICE in live.notices

    seen = await asyncio.wait_for(viewer, 5)
    assert b"kept before the disk filled" in seen
