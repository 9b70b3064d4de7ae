"""The one follower of an execution's log (app/output/follower.py), behind both the execution
stream and the NDJSON runner: from an offset it hands over what the log holds, waits for more
bytes while the process runs, reports a gap where a truncated log evicted the cursor's bytes,
and ends once the process exited and every byte was handed over. Real logs on disk and a real
`LiveExecution`; the encoders here are the clients' part, kept plain so the reads show."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from app.core.utf8 import incomplete_tail
from app.executions.registry import LiveExecution
from app.output.artifact_log import ArtifactLog
from app.output.follower import Gap, Piece, follow_log
from app.output.window import OutputSink
from app.process import ExitStatus, OutputStream

pytestmark = pytest.mark.anyio

OUT, ERR = OutputStream.stdout, OutputStream.stderr
READ_BYTES = 256 * 1024
WAIT = 10  # bounds every await on the follower: a hang fails instead of blocking the suite


def whole(pieces: list[Piece], more_may_follow: bool) -> tuple[list[Piece], int | None]:
    """The runner's way: every read handed over whole."""
    return pieces, (pieces[-1][0] + len(pieces[-1][2]) if pieces else None)


def complete_characters(
    pieces: list[Piece], more_may_follow: bool
) -> tuple[list[Piece], int | None]:
    """The stream's way: a character cut by the end of a read waits for the rest of it, unless
    nothing more can come."""
    if not pieces:
        return pieces, None
    offset, stream, data = pieces[-1]
    if more_may_follow:
        data = data[: len(data) - incomplete_tail(data)]
    return [*pieces[:-1], (offset, stream, data)], offset + len(data)


def live_execution(log: ArtifactLog) -> LiveExecution:
    return LiveExecution(
        "run", owner="alice", log=log, sink=OutputSink(), loop=asyncio.get_running_loop()
    )


async def next_of(reads: AsyncGenerator[list[Piece] | Gap, None]) -> list[Piece] | Gap:
    return await asyncio.wait_for(anext(reads), WAIT)


async def rest_of(reads: AsyncGenerator[list[Piece] | Gap, None]) -> list[list[Piece] | Gap]:
    async def collect() -> list[list[Piece] | Gap]:
        return [read async for read in reads]

    return await asyncio.wait_for(collect(), WAIT)


async def blocked(task: asyncio.Task[object]) -> bool:
    """Whether `task` is still waiting once everything ready on the loop has run, a few
    worker-thread round trips included (a follower polling the file would make its own)."""
    for _ in range(3):
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.to_thread(lambda: None)
    return not task.done()


async def test_a_finished_log_is_handed_over_from_the_offset_and_then_ends(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "done")
    log.append(b"hello ", OUT)
    log.append(b"world\n", ERR)
    log.finish()

    reads = follow_log(log, 3, None, whole, read_bytes=READ_BYTES)

    assert await rest_of(reads) == [[(3, OUT, b"lo "), (6, ERR, b"world\n")]]


async def test_a_read_limit_splits_the_log_into_consecutive_reads(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "done")
    log.append(b"0123456789", OUT)
    log.finish()

    reads = follow_log(log, 0, None, whole, read_bytes=4)

    assert await rest_of(reads) == [
        [(0, OUT, b"0123")],
        [(4, OUT, b"4567")],
        [(8, OUT, b"89")],
    ]


async def test_an_offset_past_the_end_of_a_finished_log_ends_at_once(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "done")
    log.append(b"short", OUT)
    log.finish()

    assert await rest_of(follow_log(log, 99, None, whole, read_bytes=READ_BYTES)) == []


async def test_a_live_log_waits_for_more_bytes_and_ends_after_the_exit(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "run")
    live = live_execution(log)
    live.accept_output(b"first\n", OUT)
    encoded: list[list[Piece]] = []

    def recording(pieces: list[Piece], more_may_follow: bool) -> tuple[list[Piece], int | None]:
        encoded.append(pieces)
        return whole(pieces, more_may_follow)

    reads = follow_log(log, 0, live, recording, read_bytes=READ_BYTES)

    assert await next_of(reads) == [(0, OUT, b"first\n")]
    waiting = asyncio.ensure_future(next_of(reads))
    assert await blocked(waiting)  # nothing new: it waits rather than ending or spinning

    live.accept_output(b"second\n", ERR)
    assert await waiting == [(6, ERR, b"second\n")]

    waiting = asyncio.ensure_future(next_of(reads))
    assert await blocked(waiting)
    live.accept_output(b"last\n", OUT)
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    assert await waiting == [(13, OUT, b"last\n")]
    assert [] not in encoded  # while the process ran, it read only when there were new bytes
    assert await rest_of(reads) == []  # the exit ends it once every byte was handed over


async def test_an_exit_without_new_bytes_ends_a_waiting_follower(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "run")
    live = live_execution(log)
    reads = follow_log(log, 0, live, whole, read_bytes=READ_BYTES)
    ending = asyncio.ensure_future(rest_of(reads))
    assert await blocked(ending)

    live.accept_exit(ExitStatus(exit_code=1, signal=None))

    assert await ending == []


async def test_the_evicted_middle_of_a_truncated_log_is_a_gap(tmp_path: Path) -> None:
    # Past 64 bytes the log keeps the first 32 and the last 32.
    log = ArtifactLog.create(tmp_path, "big", max_bytes=64)
    log.append(bytes(range(100)), OUT)
    log.finish()

    reads = follow_log(log, 40, None, whole, read_bytes=READ_BYTES)

    assert await rest_of(reads) == [Gap(40, 68), [(68, OUT, bytes(range(68, 100)))]]


async def test_a_gap_when_the_tail_rolled_past_a_live_follower(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "big", max_bytes=64)
    live = live_execution(log)
    live.accept_output(b"a" * 40, OUT)  # head [0, 32), and the tail starts to roll
    reads = follow_log(log, 0, live, whole, read_bytes=READ_BYTES)
    assert await next_of(reads) == [(0, OUT, b"a" * 40)]
    waiting = asyncio.ensure_future(next_of(reads))
    assert await blocked(waiting)

    # 100 more bytes in one write: the tail keeps [108, 140), so [40, 108) is gone.
    live.accept_output(b"b" * 100, OUT)

    assert await waiting == Gap(40, 108)
    assert await next_of(reads) == [(108, OUT, b"b" * 32)]
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    assert await rest_of(reads) == []


async def test_a_held_back_character_is_read_again_with_the_rest_of_it(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "run")
    live = live_execution(log)
    live.accept_output(b"caf" + "é".encode()[:1], OUT)
    reads = follow_log(log, 0, live, complete_characters, read_bytes=READ_BYTES)
    assert await next_of(reads) == [(0, OUT, b"caf")]
    waiting = asyncio.ensure_future(next_of(reads))
    assert await blocked(waiting)

    live.accept_output("é".encode()[1:], OUT)

    assert await waiting == [(3, OUT, "é".encode())]
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    assert await rest_of(reads) == []


@pytest.mark.parametrize("from_memory", [False, True])
async def test_a_follower_starting_at_a_cut_character_reads_it_once_the_rest_comes(
    tmp_path: Path, from_memory: bool
) -> None:
    """A viewer reconnecting at the offset its last frame ended at, while the log ends inside
    a character: its first read takes only the cut character and holds it back. When the rest
    comes, it must read again. It used to take the kept first read (same cursor) instead, with
    nothing new in it, again and again without ever yielding to the event loop: the server
    answered nothing more, not even /healthz, until it was killed (bench/soak.py)."""
    log = ArtifactLog.create(tmp_path, "run")
    live = live_execution(log)
    live.accept_output(b"caf" + "é".encode()[:1], OUT)
    reads = follow_log(
        log,
        3,
        live,
        complete_characters,
        read_bytes=READ_BYTES,
        encodes_on_loop=(lambda _: True) if from_memory else None,
    )
    waiting = asyncio.ensure_future(next_of(reads))
    assert await blocked(waiting)  # only a cut character so far: nothing to hand over

    live.accept_output("é".encode()[1:], OUT)

    assert await waiting == [(3, OUT, "é".encode())]
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    assert await rest_of(reads) == []


async def test_a_follower_whose_wait_ran_out_reads_the_bytes_that_come_later(
    tmp_path: Path,
) -> None:
    """A command silent for longer than a wait slice (30 s in the server; a session's runner
    reads every batch from the log): the follower reads, finds nothing, waits again. When the
    output comes it must read it, not take its kept empty read again, which used to spin the
    event loop for good."""
    encoded: list[list[Piece]] = []

    def recording(pieces: list[Piece], more_may_follow: bool) -> tuple[list[Piece], int | None]:
        encoded.append(pieces)
        return whole(pieces, more_may_follow)

    log = ArtifactLog.create(tmp_path, "run")
    live = live_execution(log)
    reads = follow_log(log, 0, live, recording, read_bytes=READ_BYTES, wait_slice=0.001)
    waiting = asyncio.ensure_future(next_of(reads))
    while [] not in encoded:  # the follower's wait ran out at least once and it read nothing
        assert await blocked(waiting)

    live.accept_output(b"at last\n", OUT)

    assert await waiting == [(0, OUT, b"at last\n")]
    live.accept_exit(ExitStatus(exit_code=0, signal=None))
    assert await rest_of(reads) == []


async def test_an_unfinished_last_character_of_a_finished_log_is_handed_over(
    tmp_path: Path,
) -> None:
    log = ArtifactLog.create(tmp_path, "done")
    log.append(b"caf" + "é".encode()[:1], OUT)
    log.finish()

    reads = follow_log(log, 0, None, complete_characters, read_bytes=READ_BYTES)

    assert await rest_of(reads) == [[(0, OUT, b"caf" + "é".encode()[:1])]]


@pytest.mark.parametrize("cheap", [True, False])
async def test_the_live_edge_is_encoded_on_the_loop_only_when_the_client_says_it_is_cheap(
    tmp_path: Path, cheap: bool
) -> None:
    loop_thread = threading.get_ident()
    on_loop: list[bool] = []

    def recording(pieces: list[Piece], more_may_follow: bool) -> tuple[list[Piece], int | None]:
        on_loop.append(threading.get_ident() == loop_thread)
        return whole(pieces, more_may_follow)

    log = ArtifactLog.create(tmp_path, "run")
    live = live_execution(log)
    live.accept_output(b"before\n", OUT)
    reads = follow_log(
        log, 7, live, recording, read_bytes=READ_BYTES, encodes_on_loop=lambda pieces: cheap
    )
    waiting = asyncio.ensure_future(next_of(reads))
    assert await blocked(waiting)
    live.accept_output(b"echo\n", OUT)

    assert await waiting == [(7, OUT, b"echo\n")]
    assert on_loop == [cheap]  # from memory on the loop, or from the file on a worker thread
    await reads.aclose()
    assert live.recent.since(7, 1) is None  # a follower that left keeps nothing in memory


@pytest.mark.parametrize("cheap", [True, False])
async def test_followers_at_the_same_cursor_share_one_read_and_its_encoding(
    tmp_path: Path, cheap: bool
) -> None:
    """Ten viewers of one command: the batch they all wait for is read and encoded once, from
    memory on the loop or from the file on a worker thread, and each gets all of it."""
    encoded: list[list[Piece]] = []

    def counting(pieces: list[Piece], more_may_follow: bool) -> tuple[list[Piece], int | None]:
        encoded.append(pieces)
        return whole(pieces, more_may_follow)

    log = ArtifactLog.create(tmp_path, "run")
    live = live_execution(log)
    followers = [
        follow_log(log, 0, live, counting, read_bytes=READ_BYTES, encodes_on_loop=lambda _: cheap)
        for _ in range(10)
    ]
    waiting = [asyncio.ensure_future(next_of(reads)) for reads in followers]
    assert await blocked(waiting[-1])
    live.accept_output(b"the same bytes for everyone\n", OUT)

    assert await asyncio.gather(*waiting) == [[(0, OUT, b"the same bytes for everyone\n")]] * 10
    assert len(encoded) == 1
    for reads in followers:
        await reads.aclose()


async def test_a_follower_leaving_during_a_shared_read_leaves_the_others_reading(
    tmp_path: Path,
) -> None:
    """The follower whose worker thread is reading goes away: the one that waited for its read
    reads for itself and still gets the bytes."""
    release = threading.Event()
    first_read_began = threading.Event()
    calls: list[int] = []

    def slow(pieces: list[Piece], more_may_follow: bool) -> tuple[list[Piece], int | None]:
        calls.append(len(calls))
        if len(calls) == 1:
            first_read_began.set()
            release.wait(WAIT)
        return whole(pieces, more_may_follow)

    log = ArtifactLog.create(tmp_path, "run")
    live = live_execution(log)
    live.accept_output(b"already there\n", OUT)
    first = follow_log(log, 0, live, slow, read_bytes=READ_BYTES)
    second = follow_log(log, 0, live, slow, read_bytes=READ_BYTES)
    leaving = asyncio.ensure_future(next_of(first))
    staying = asyncio.ensure_future(next_of(second))
    # The leaving follower's read is under way in its worker thread (on a loaded machine the
    # thread may not have begun it by the time the loop has nothing else to run).
    assert await asyncio.to_thread(first_read_began.wait, WAIT)
    assert await blocked(staying)
    leaving.cancel()
    release.set()

    assert await staying == [(0, OUT, b"already there\n")]
    assert leaving.cancelled()
    assert len(calls) == 2  # the read was done again for the follower that stayed
    await second.aclose()
