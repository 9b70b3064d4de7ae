"""The one wait loop (app/executions/changes.py, `StateChanges.wait_until`): a wait holds an
entry for its execution id only while it waits. Waits that end without a `notify` (timed out,
cancelled, failed, or following another replica's record, whose changes are never notified
here) must not leave their ids behind, and one `notify` still wakes every wait on its id.

What is left behind cannot be seen from outside but as memory that grows with every such wait,
so these tests look at the private `_events` (the ids some wait is registered on)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from app.executions.changes import StateChanges
from app.store.models import Execution, ExecutionState

pytestmark = pytest.mark.anyio

WAIT = 10  # bounds every await that should end at once: a hang fails instead of blocking
WAITS = 50


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def records(state: list[ExecutionState]) -> Callable[[], Awaitable[Execution]]:
    """A read of a record whose state is whatever `state[0]` says now."""

    async def read() -> Execution:
        return Execution(id="run", owner="alice", command="true", state=state[0])

    return read


def ended(record: Execution) -> bool:
    return record.state != ExecutionState.running


async def test_waits_that_time_out_unnotified_leave_nothing_behind() -> None:
    changes = StateChanges()
    running = records([ExecutionState.running])
    await asyncio.gather(
        *(changes.wait_until(f"run-{n}", running, ended, 0.01) for n in range(WAITS)),
        # Another replica's record: each poll leaves and takes the entry again.
        *(
            changes.wait_until(f"elsewhere-{n}", running, ended, 0.05, poll=0.01)
            for n in range(WAITS)
        ),
    )
    assert changes._events == {}
    assert changes.waiting == 0


async def test_cancelled_and_failed_waits_leave_nothing_behind() -> None:
    changes = StateChanges()
    running = records([ExecutionState.running])
    waits = [
        asyncio.ensure_future(changes.wait_until(f"run-{n}", running, ended, 600))
        for n in range(WAITS)
    ]
    await asyncio.sleep(0)
    assert len(changes._events) == WAITS
    for wait in waits:
        wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    assert changes._events == {}

    async def unreadable() -> Execution:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        await changes.wait_until("run", unreadable, ended, 600)
    assert changes._events == {}
    assert changes.waiting == 0


async def test_one_notify_wakes_every_wait_on_its_id_and_leaves_nothing_behind() -> None:
    changes = StateChanges()
    state = [ExecutionState.running]
    read = records(state)
    waits = [asyncio.ensure_future(changes.wait_until("run", read, ended, 600)) for _ in range(5)]
    # One wait on the same id that gives up first must not take the others' entry with it.
    await changes.wait_until("run", read, ended, 0.01)
    await asyncio.sleep(0)
    assert list(changes._events) == ["run"]

    state[0] = ExecutionState.completed
    changes.notify("run")
    woken = await asyncio.wait_for(asyncio.gather(*waits), WAIT)
    assert [record.state for record in woken] == [ExecutionState.completed] * 5
    assert changes._events == {}
