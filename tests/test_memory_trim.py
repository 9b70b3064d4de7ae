"""The idle memory trim (app/server/memory_trim.py): once per busy-to-idle change of the running
executions, off the loop; and the trim really gives freed heap memory back."""

from __future__ import annotations

import asyncio
import platform
import subprocess
import sys
import threading

import anyio
import pytest

from app.server.memory_trim import trim_free_memory, trim_memory_when_idle


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class LookedAt(dict[str, object]):
    """The running executions, announcing each time the watcher looks at them."""

    def __init__(self) -> None:
        super().__init__()
        self.looked = asyncio.Event()

    def __len__(self) -> int:  # what `if live:` calls
        self.looked.set()
        return super().__len__()


async def looked_at_twice_more(live: LookedAt) -> None:
    """Returns once the watcher has looked twice since now: its first look saw the current
    state, and whatever it did about it (a trim) ended before the second."""
    with anyio.fail_after(10):
        for _ in range(2):
            live.looked.clear()
            await live.looked.wait()


@pytest.mark.anyio
async def test_trims_once_when_the_last_execution_ends() -> None:
    live = LookedAt()
    trims: list[int] = []
    loop_thread = threading.get_ident()

    def trim() -> bool:
        trims.append(threading.get_ident())
        return trim_free_memory()

    watcher = asyncio.create_task(trim_memory_when_idle(live, check_every=0.01, trim=trim))
    try:
        await looked_at_twice_more(live)
        assert trims == [], "idle from the start: nothing to give back"
        live["ex_1"] = object()
        await looked_at_twice_more(live)
        assert trims == [], "never while an execution runs"
        del live["ex_1"]
        await looked_at_twice_more(live)
        await looked_at_twice_more(live)
        assert len(trims) == 1, "once per busy-to-idle change"
        assert trims[0] != loop_thread, "the trim runs on a worker thread"
    finally:
        watcher.cancel()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_returns_freed_heap_memory() -> None:
    # In a fresh interpreter: 120 MB of blocks over pymalloc's 512 bytes (so from glibc's
    # heap), one in 64 kept: the freed ones lie between live ones, where glibc keeps them
    # until trimmed (it gives back on its own only the heap's free top).
    script = """
import sys
from app.server.memory_trim import trim_free_memory
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
blocks = [bytes(4000) + bytes([i % 256]) for i in range(30000)]
kept = blocks[::64]
del blocks
before = rss()
trim_free_memory()
print(before, rss())
"""
    output = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    before, after = map(int, output.split())
    assert before - after > 60_000, f"RSS {before} KiB -> {after} KiB after the trim"
