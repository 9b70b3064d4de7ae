"""The idle memory trim (app/server/memory_trim.py): once per busy-to-idle change of the running
executions, off the loop; and the trim really gives freed heap memory back."""

from __future__ import annotations

import asyncio
import platform
import subprocess
import sys
import threading

import pytest

from app.server.memory_trim import trim_free_memory, trim_memory_when_idle


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_trims_once_when_the_last_execution_ends() -> None:
    live: dict[str, object] = {}
    trims: list[int] = []
    loop_thread = threading.get_ident()

    def trim() -> bool:
        trims.append(threading.get_ident())
        return trim_free_memory()

    watcher = asyncio.create_task(trim_memory_when_idle(live, check_every=0.01, trim=trim))
    try:
        await asyncio.sleep(0.1)
        assert trims == [], "idle from the start: nothing to give back"
        live["ex_1"] = object()
        await asyncio.sleep(0.1)
        assert trims == [], "never while an execution runs"
        del live["ex_1"]
        for _ in range(200):
            if trims:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
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
