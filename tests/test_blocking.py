"""app/core/blocking.py: the work runs in the caller's context, its exception reaches the caller,
and a cancelled caller gets the cancel only once the work has ended."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from pathlib import Path

import pytest
from sqlmodel import Session

from app.core.blocking import WorkerThreads, run_blocking
from app.store.db import Database, make_engine

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


def test_the_work_sees_the_callers_context_and_runs_off_the_loop() -> None:
    async def main() -> tuple[str, bool]:
        REQUEST_ID.set("req-1")
        loop_thread = threading.get_ident()
        return await run_blocking(lambda: (REQUEST_ID.get(), threading.get_ident() != loop_thread))

    assert asyncio.run(main()) == ("req-1", True)


def test_the_works_exception_reaches_the_caller() -> None:
    def fail() -> None:
        raise OSError("refused")

    with pytest.raises(OSError, match="refused"):
        asyncio.run(run_blocking(fail))


def test_a_cancelled_caller_waits_for_the_work_to_end_even_when_cancelled_twice() -> None:
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def work() -> None:
        started.set()
        release.wait(10)
        ended.set()

    async def main() -> bool:
        task = asyncio.create_task(run_blocking(work))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.sleep(0.05)
        still_waiting = not task.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return still_waiting and ended.is_set()

    assert asyncio.run(main())


def test_database_calls_run_on_the_database_threads(tmp_path: Path) -> None:
    """Not on anyio's worker threads, which end after 10 s idle (each new one made the event
    loop wait for its start)."""
    database = Database(make_engine(f"sqlite:///{tmp_path / 'registry.db'}"))

    def thread_name(_session: Session) -> str:
        return threading.current_thread().name

    async def burst() -> list[str]:
        return await asyncio.gather(*(database.call(thread_name) for _ in range(6)))

    try:
        names = asyncio.run(burst())
    finally:
        database.dispose()
    assert all(name.startswith("shellgate-db") for name in names)


def test_a_pool_keeps_its_threads_and_a_second_burst_starts_none() -> None:
    """A pool of its own (the process's shared ones serve other tests' servers meanwhile),
    filled to its cap by a burst whose works wait for each other: a second such burst runs on
    the very threads the first one made, and none of them has ended meanwhile.

    Filled to the cap because below it the pool may start a thread for a call that comes in
    while an idle thread has not yet told it that it is idle (CI saw that, once)."""
    workers = 4
    pool = WorkerThreads("test-pool", workers)

    def pool_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("test-pool")}

    async def burst() -> set[threading.Thread]:
        together = threading.Barrier(workers, timeout=10)

        def held() -> threading.Thread:
            together.wait()  # each work needs the others running: one thread apiece
            return threading.current_thread()

        return set(await asyncio.gather(*(pool.run(held) for _ in range(workers))))

    first = asyncio.run(burst())
    second = asyncio.run(burst())
    assert len(first) == workers
    assert second == first
    assert pool_threads() == first
    assert all(thread.is_alive() for thread in first)
