"""Long commands share a few reader children (app/policy/reader_process.py): the wait for one is
bounded from the call's arrival, a command that found none in time is refused (503
`readers_busy`), never read as allowed, and a free reader goes to the owner with the fewest
reads under way, so one agent's flood of hostile commands queues behind its own
(docs/policy.md#bounded-evaluation)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from app.core.errors import ReadersBusyError
from app.policy.reader_process import OVER_LIMIT, CommandReaders, FairSlots
from app.process.line_child import LineChild
from tests.api.test_policy_liveness import _reader_children, cut_pipeline
from tests.conftest import ADMIN, AGENT, AGENT2, LiveServer, make_settings, serve
from tests.databases import ServerDatabase


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- the slots, alone --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_freed_slot_goes_to_the_owner_holding_fewest_then_in_turn() -> None:
    slots = FairSlots(1)
    loop = asyncio.get_running_loop()
    order: list[str] = []

    async def take(owner: str, name: str) -> None:
        assert await slots.acquire(owner, loop.time() + 30)
        order.append(name)
        await asyncio.sleep(0.01)
        slots.release(owner)

    assert await slots.acquire("mallory", loop.time() + 30)  # mallory holds the one slot
    waits = [asyncio.ensure_future(take("mallory", f"mallory-{n}")) for n in range(3)]
    await asyncio.sleep(0)  # mallory's three are queued first
    waits += [asyncio.ensure_future(take("alice", "alice-0"))]
    waits += [asyncio.ensure_future(take("bob", "bob-0"))]
    waits += [asyncio.ensure_future(take("alice", "alice-1"))]
    await asyncio.sleep(0)
    slots.release("mallory")
    with anyio.fail_after(10):
        await asyncio.gather(*waits)
    # Those never served first, then whoever was served longest ago; a plain FIFO (the
    # asyncio.Semaphore this replaced) served mallory's three first.
    assert order == ["alice-0", "bob-0", "mallory-0", "alice-1", "mallory-1", "mallory-2"]


@pytest.mark.anyio
async def test_a_wait_past_its_time_or_cancelled_gives_up_its_place() -> None:
    slots = FairSlots(1)
    loop = asyncio.get_running_loop()
    assert await slots.acquire("a", loop.time() + 1)
    assert not await slots.acquire("b", loop.time() + 0.05)  # the slot is held: no slot
    assert not await slots.acquire("b", loop.time() - 1)  # already past: at once
    cancelled = asyncio.ensure_future(slots.acquire("c", loop.time() + 30))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    later = asyncio.ensure_future(slots.acquire("d", loop.time() + 30))
    await asyncio.sleep(0)
    slots.release("a")  # to d: b's and c's places are gone
    with anyio.fail_after(5):
        assert await later
    slots.release("d")
    assert await slots.acquire("e", loop.time())  # free again, at once


# --- the readers: real children ------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_command_that_finds_no_free_reader_in_time_is_refused_not_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the wait for a reader had no bound: behind a reader that takes long (here a
    child that sleeps a minute per command) the next command waited for its whole deadline,
    and behind many such commands without end."""
    monkeypatch.setattr(
        "app.policy.reader_process._start", lambda: LineChild("tests.faults.slow_reader")
    )
    readers = CommandReaders(deadline=60.0, size=1, wait=0.5)
    long_command = "echo x; " * 200
    try:
        held = asyncio.ensure_future(readers.read(long_command, readers.budget("mallory")))
        with anyio.fail_after(30):
            while not readers._children:  # noqa: ASYNC110 (a process)
                await asyncio.sleep(0.01)
        started = time.monotonic()
        with anyio.fail_after(10), pytest.raises(ReadersBusyError) as refused:
            await readers.read(long_command, readers.budget("alice"))
        waited = time.monotonic() - started
        assert refused.value.code == "readers_busy"
        assert refused.value.retry_after_seconds >= 1
        assert waited < 5, waited  # its wait (0.5 s), not the other read's 60 s
    finally:
        await readers.close()
    with anyio.fail_after(5):
        assert (await held).limit_reached == OVER_LIMIT  # the close ended it: never allowed


@pytest.mark.anyio
async def test_a_calls_texts_share_one_reading_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call reads its command and every script its env hands a program; each had the
    whole deadline, so a call's reading grew with its texts. Now they share it."""
    started: list[LineChild] = []

    def start() -> LineChild:
        started.append(LineChild("tests.faults.slow_reader"))
        return started[-1]

    monkeypatch.setattr("app.policy.reader_process._start", start)
    readers = CommandReaders(deadline=0.5, size=1)
    try:
        budget = readers.budget("alice")
        with anyio.fail_after(20):
            first = await readers.read("echo a; " * 200, budget)
            second = await readers.read("echo b; " * 200, budget)
        assert first.limit_reached == second.limit_reached == OVER_LIMIT
        assert budget.reading_left <= 0
        assert len(started) == 1, "the second was not even started: no time was left"
    finally:
        await readers.close()


# --- through a real server -----------------------------------------------------------------------


HOSTILE = 12  # alice's hostile commands at once, against one reader


@pytest.fixture
def one_slow_reader(
    tmp_path: Path, database: ServerDatabase, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveServer]:
    """A server with one reader and a 1 s deadline (so a 3 s wait), under a policy that allows
    everything it can read."""
    monkeypatch.setattr(
        "app.governance.service.CommandReaders",
        functools.partial(CommandReaders, deadline=1.0, size=1),
    )
    with serve(make_settings(tmp_path, database)) as live:
        with live.client(ADMIN) as root:
            permissive = {"default": "allow", "unreadable": "allow", "critical": "allow"}
            assert root.put("/v1/policy", json=permissive).status_code == 200
        yield live


@pytest.mark.anyio
async def test_one_agents_flood_of_hostile_commands_neither_starves_another_nor_is_allowed(
    one_slow_reader: LiveServer,
) -> None:
    """Before: the readers were a FIFO with no bound on the wait. Bob's benign long command
    was read after all of alice's hostile ones (each stopped at the deadline), and the last of
    them waited for all the others: no bound at all as more came."""
    hostile = cut_pipeline(64 * 1024)  # stopped at the 1 s deadline or the memory cap
    benign = "echo ok; " * 300  # 2.7 KB: read by a child in milliseconds
    answered: list[tuple[str, float, httpx.Response]] = []

    async def dry_run(client: httpx.AsyncClient, who: str, command: str) -> None:
        arrived = time.monotonic()
        response = await client.post("/v1/policy/evaluate", json={"command": command})
        answered.append((who, time.monotonic() - arrived, response))

    with anyio.fail_after(90):
        async with (
            one_slow_reader.async_client(AGENT) as alice,
            one_slow_reader.async_client(AGENT2) as bob,
        ):
            others = set(_reader_children())
            floods = [
                asyncio.ensure_future(dry_run(alice, "alice", hostile)) for _ in range(HOSTILE)
            ]
            while not set(_reader_children()) - others:  # noqa: ASYNC110 (a process)
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # alice's others are all waiting by now
            await dry_run(bob, "bob", benign)
            await asyncio.gather(*floods)

    (bob_answer,) = [response for who, _, response in answered if who == "bob"]
    assert bob_answer.status_code == 200, bob_answer.text
    assert bob_answer.json()["verdict"] == "allow"  # really read: it reached no limit
    assert not bob_answer.json()["unreadable_reasons"]
    # Fair: bob's took the next free reader, after the hostile read under way; a FIFO put it
    # behind all twelve.
    before_bob = answered[: [who for who, _, _ in answered].index("bob")]
    assert len([r for who, _, r in before_bob if r.status_code == 200]) <= 1, before_bob
    # Fail closed: a hostile command is a limit of the reader (prompt) or refused, never allowed.
    for who, seconds, response in answered:
        if who != "alice":
            continue
        if response.status_code == 200:
            assert response.json()["verdict"] == "prompt", response.text
            assert OVER_LIMIT in response.json()["reason"]
        else:
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == "readers_busy"
            assert int(response.headers["retry-after"]) >= 1
        # Bounded: its wait (1 s deadline + 2 s) and its reading (1 s), with room for a slow
        # machine; before, the last of twelve waited for the eleven others.
        assert seconds < 3 + 1 + 4, (who, seconds)
    assert any(r.status_code == 503 for who, _, r in answered if who == "alice")
