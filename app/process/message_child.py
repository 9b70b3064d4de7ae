"""A helper child of the server's own, spoken to in length-prefixed messages
(`app/output/window_process.py` cleans inline windows in one). Its calls block: one caller at a
time, off the event loop.

    each way:  8-byte big-endian length, then the message

The child (`serve_messages`) answers every message with one, and exits when its stdin closes:
however the server ends, its child ends with it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable
from typing import IO, Final

from app.process.helper_children import spawn_helper, watch_helper

_LENGTH_BYTES: Final = 8


class MessageChild:
    """`python -m <module>`, which answers each message on its stdin with one on its stdout."""

    def __init__(self, module: str, *, own_session: bool = False) -> None:
        self.module = module
        self.process = spawn_helper(module, own_session=own_session)

    def ask(self, message: bytes, within: float) -> bytes:
        """Its answer to `message`; OSError or EOFError when it died first, or when it did
        not answer `within` seconds (it is killed then: a write or read waiting on it ends)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        answered = threading.Event()
        # Killed as soon as it is seen stopped, not only at `within`: the one window process
        # serves every execution's window, and a stopped one held them all (and every exit
        # behind them) for the whole deadline.
        watch_helper(self.process, answered, within)
        try:
            self.process.stdin.write(len(message).to_bytes(_LENGTH_BYTES, "big") + message)
            self.process.stdin.flush()
            return _read_message(self.process.stdout)
        finally:
            answered.set()

    def kill(self) -> None:
        """SIGKILL, by its pid (a no-op once it was reaped): a request waiting on it ends."""
        self.process.kill()

    def close(self) -> None:
        """SIGKILL it, by its pid, reap it and close its pipes. It keeps nothing worth an
        orderly exit, and one that is stopped or busy would not read an EOF for seconds."""
        self.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def serve_messages(answer: Callable[[bytes], bytes]) -> None:
    """The child's side: answer each message until the server closes our stdin."""
    # A Ctrl-C at the server's terminal reaches its whole process group: the server decides
    # when this ends (by closing the pipe), not the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            message = _read_message(requests)
        except EOFError:
            return
        reply = answer(message)
        answers.write(len(reply).to_bytes(_LENGTH_BYTES, "big") + reply)
        answers.flush()


def _read_message(stream: IO[bytes]) -> bytes:
    header = _read_exactly(stream, _LENGTH_BYTES)
    return _read_exactly(stream, int.from_bytes(header, "big"))


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) != size:
        raise EOFError("the child closed its output")
    return data
