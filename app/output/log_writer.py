"""Threads that write large chunks of output to their logs, off the event loop.

A write to the page cache is a copy into fresh pages, and on this VM that copy runs at
≈ 400 MB/s: 0.65 ms of a 256 KiB read (`perf`: 80 % in `copy_folio_from_iter_atomic`), up to
tens of ms when the machine is loaded. On the loop, every request waited for it: in the soak
(16 jobs writing, 64 clients) `ArtifactLog.append` was in 17 % of the loop's stalled samples
(bench/PROFILE.md, "The soak's tail"). `os.pwrite` drops the interpreter lock, so on a thread
the copy overlaps the loop's own work: the framing and sending of the previous chunk.

Shared by every execution; each execution has at most one write here at a time, so its log
stays in order (`LiveExecution.accept_output`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Final

# Chunks from this size on are written here; smaller ones (a keystroke's echo, a line) on the
# loop, where a hand-off would cost more than the copy.
OFFLOADED_BYTES: Final = 64 * 1024
# What one execution may have waiting for the writer before its reader pauses, and the level
# at which it reads again.
QUEUED_MAX_BYTES: Final = 2 * 1024 * 1024
QUEUED_RESUME_BYTES: Final = 512 * 1024

# Two: one execution's write does not hold back another's. Threads that live as long as the
# server (no start per burst on the loop).
LOG_WRITER: Final = ThreadPoolExecutor(max_workers=2, thread_name_prefix="shellgate-log")
