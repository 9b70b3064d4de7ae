"""Cleaning costly output for the inline windows in a child process, off the server's
interpreter lock.

Turning bytes that are not ASCII into a window (`OutputSink.feed`: UTF-8 decoding with
replacement, control-sequence cleaning, the column cap) costs about 30 ms per MiB of random
bytes, all of it C calls that hold the interpreter lock, so the event loop waited for the sink
worker's thread under a binary flood (RELIABILITY.md, "Soak"). Here the sink worker
(app/output/sink_worker.py, one thread) hands the window itself — an `OutputSink` pickled: its head
and tail windows and a few held-back bytes, ~100 KiB at most — and the next bytes to one child
process (`app/process/message_child.py`), which feeds them and sends the window back. The
server's interpreter only copies bytes; the window comes back exactly as feeding it here would
leave it.

The child is a session of its own (`setsid`), as each command is. Where the kernel groups
sessions for scheduling (`sched_autogroup`, on in most distributions), a child in the server's
session is charged to the server's one group: in the soak it used more CPU than the event
loop's thread (6.2 s against 5.4 s in 36 s) while that thread waited 10.9 s for a core, and the
group, looking busy, got a core later at each wake-up. In its own group, the cleaning competes
like the commands whose output it is, and the server's group is the server's threads (A/B in
bench/README.md, "Soak"). It still ends with the server: `PR_SET_PDEATHSIG`, and EOF on stdin.

The child is started at the first costly output and lives as long as the server. When it
cannot be used (it failed to start, died or answered nonsense), the caller feeds the window
itself: the window it sent is left untouched, so nothing is lost or fed twice.
"""

from __future__ import annotations

import logging
import pickle
import threading
from typing import Final

from app.output.window import OutputSink
from app.process.message_child import MessageChild, serve_messages

logger = logging.getLogger("shellgate.output")

# After this many failures in a row, the server stops asking a child for good (and feeds every
# window itself, as before there was one): something on this host keeps it from working.
MAX_FAILURES: Final = 3
# How long the child may take to answer, by the size of the request: cleaning runs at ~30 ms per
# MiB of the costliest bytes, so this is a wide margin for a loaded machine, and a child that
# stopped (SIGSTOP, a hang) is killed and replaced instead of holding every window back.
ANSWER_SECONDS_BASE: Final = 5.0
ANSWER_SECONDS_PER_MIB: Final = 2.0


def answer_deadline(request_bytes: int) -> float:
    return ANSWER_SECONDS_BASE + ANSWER_SECONDS_PER_MIB * request_bytes / (1024 * 1024)


class WindowProcess:
    """The server's side: the sink worker's thread feeds, the server's stop closes."""

    def __init__(self, module: str = "app.output.window_process") -> None:
        self._module = module  # the child's `python -m` module (a test may name a broken one)
        self._child: MessageChild | None = None
        self._failures = 0
        # One request at a time on the pipes, and never one racing the stop's close.
        self._lock = threading.Lock()

    def feed(self, window: OutputSink, data: bytes) -> OutputSink | None:
        """`window` after `data`, fed in the child; `window` itself is not changed. None when
        the child cannot be used: the caller then feeds `window` itself."""
        try:
            request = pickle.dumps((window, data), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # a window that cannot travel (a subclass holding a lock): fed here
            return None
        with self._lock:
            child = self._running_child()
            if child is None:
                return None
            try:
                answer = pickle.loads(child.ask(request, within=answer_deadline(len(request))))
                if not isinstance(answer, OutputSink):
                    raise TypeError(f"the window process answered a {type(answer).__name__}")
            except Exception as error:  # a broken pipe, a death, a garbled answer: all alike
                self._give_up_on(child, error)
                return None
            self._failures = 0
            return answer

    def close(self) -> None:
        """End the child (the server stops); the next `feed` would start another. Killed
        first, without waiting for a request under way: a child that is stopped or busy
        would hold the stop for the answer's deadline, and the request ends with it (its
        window is then fed here)."""
        child = self._child
        if child is not None:
            child.kill()
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            child.close()

    def _running_child(self) -> MessageChild | None:
        if self._child is None and self._failures < MAX_FAILURES:
            try:
                # A session, and so a scheduling group, of its own (see the module's text).
                self._child = MessageChild(self._module, own_session=True)
            except OSError as error:
                self._failures += 1
                logger.warning("could not start the window process (%s): fed here", error)
        return self._child

    def _give_up_on(self, child: MessageChild, error: Exception) -> None:
        self._failures += 1
        self._child = None
        child.close()
        logger.warning(
            "the window process failed (%s); %s",
            error,
            "windows are fed here from now on"
            if self._failures >= MAX_FAILURES
            else "a new one starts with the next costly output",
        )


def _feed(message: bytes) -> bytes:
    window, data = pickle.loads(message)
    window.feed(data)
    return pickle.dumps(window, protocol=pickle.HIGHEST_PROTOCOL)


if __name__ == "__main__":
    serve_messages(_feed)
