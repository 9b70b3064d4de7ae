"""`shellgate attach ID`: this terminal becomes the terminal of a PTY execution.

The local terminal goes into raw mode, so every key (Ctrl-C, arrows, Tab) reaches the remote
program as typed; the remote screen is replayed from the start of its log, then followed live.
A window resize (SIGWINCH) is sent to the server, which resizes the remote PTY. Ctrl-]
detaches and leaves the execution running. When the execution ends, `attach` exits with its
exit code (128 + N for a death by signal N; 1 when it ended without one). The terminal's
settings are restored on every way out: the end, a detach, an error, SIGTERM, SIGHUP or SIGINT
from outside (then the exit status is 128 + that signal). With piped input, the end of the
input stops the typing, not the attachment. A dropped connection is resumed at the last offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Iterator
from dataclasses import dataclass

import typer

from app.cli.connection import (
    EXIT_NOT_FINISHED,
    EXIT_REFUSED,
    execution_id_argument,
    fail,
    server,
)
from shellgate import AsyncAttachment, ExitFrame, OutputFrame

DETACH_KEY = b"\x1d"  # Ctrl-], as telnet has it: rare in programs, easy to type
_READ_BYTES = 65536
# Sent to this process from outside (in raw mode Ctrl-C is a key for the remote program).
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@dataclass(frozen=True)
class Outcome:
    exit: ExitFrame | None = None
    detached: bool = False
    stopped_by: int | None = None  # a signal this process received

    def status(self) -> int:
        if self.stopped_by is not None:
            return 128 + self.stopped_by
        if self.exit is None:
            return 0
        if self.exit.exit_code is not None:
            return self.exit.exit_code
        if self.exit.signal is not None:
            return 128 + self.exit.signal
        return EXIT_NOT_FINISHED


def attach(
    ctx: typer.Context,
    execution_id: str = execution_id_argument(),
    replay: bool = typer.Option(
        True, "--replay/--no-replay", help="Replay the screen from the log's start first."
    ),
) -> None:
    """Attach this terminal to a PTY execution (raw mode; Ctrl-] detaches, it keeps running).

    Exits with the execution's exit code when it ends."""
    with server(ctx) as client:
        execution = client.get(execution_id)
        if not execution.pty:
            fail(
                f"execution {execution_id} has no terminal (it was not started with pty); "
                f"follow it with `shellgate logs --follow {execution_id}`",
                EXIT_REFUSED,
            )
        offset = 0 if replay else execution.total_bytes
        attachment = AsyncAttachment(
            client.base_url, client.token, execution_id, offset=offset, reconnects=client.reconnects
        )
        if sys.stdin.isatty():
            typer.echo(f"[attached to {execution_id}; Ctrl-] detaches]", err=True)
        outcome = asyncio.run(_attach_terminal(attachment))
    if outcome.detached:
        typer.echo(
            f"\n[detached; {execution_id} keeps running: `shellgate attach {execution_id}`]",
            err=True,
        )
    raise typer.Exit(outcome.status())


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Raw mode on `fd` for the block's duration; the saved settings are put back however the
    block ends. Not a terminal (piped input): nothing to change."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _window_size(fd: int) -> tuple[int, int] | None:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    return size.lines, size.columns


def _read_file(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, _READ_BYTES):
        parts.append(chunk)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


async def _attach_terminal(attachment: AsyncAttachment) -> Outcome:
    return await _TerminalLink(attachment).run()


class _TerminalLink:
    """This process's terminal joined to one attachment: keys and window sizes go out in the
    order they happened (one sending task), the remote screen comes in (one showing task)."""

    def __init__(self, attachment: AsyncAttachment) -> None:
        self.attachment = attachment
        self.loop = asyncio.get_running_loop()
        self.stdin_fd, self.stdout_fd = sys.stdin.fileno(), sys.stdout.fileno()
        self.finished: asyncio.Future[Outcome] = self.loop.create_future()
        self.outgoing: asyncio.Queue[bytes | tuple[int, int]] = asyncio.Queue()

    async def run(self) -> Outcome:
        # The handlers come before raw mode and go after it is undone: a stop signal at any
        # moment in between ends the attachment through `finish`, never by the default
        # action, which would leave the terminal raw.
        self.loop.add_signal_handler(signal.SIGWINCH, self.on_resize)
        for number in _STOP_SIGNALS:
            self.loop.add_signal_handler(number, self.finish, Outcome(stopped_by=number))
        try:
            async with self.attachment:
                with raw_terminal(self.stdin_fd):
                    return await self._until_finished()
        finally:
            for number in (signal.SIGWINCH, *_STOP_SIGNALS):
                self.loop.remove_signal_handler(number)

    async def _until_finished(self) -> Outcome:
        tasks = [asyncio.create_task(self.show_all()), asyncio.create_task(self.send_all())]
        for task in tasks:
            task.add_done_callback(self.on_task_done)
        try:
            self.loop.add_reader(self.stdin_fd, self.on_keys)
        except PermissionError:  # a regular file (`< file`) cannot be polled: type it all
            self.outgoing.put_nowait(_read_file(self.stdin_fd))
        try:
            if os.isatty(self.stdin_fd):
                self.on_resize()  # the remote PTY takes this window's size from the start
            return await self.finished
        finally:
            self.loop.remove_reader(self.stdin_fd)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def finish(self, outcome: Outcome) -> None:
        if not self.finished.done():
            self.finished.set_result(outcome)

    def on_task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self.finished.done():
            return
        if (error := task.exception()) is not None:
            self.finished.set_exception(error)

    def on_keys(self) -> None:
        try:
            data = os.read(self.stdin_fd, _READ_BYTES)
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(self.stdin_fd)
            if os.isatty(self.stdin_fd):  # the terminal hung up: leave the run going
                self.finish(Outcome(detached=True))
            # Piped input ran out: nothing more to type; follow the output to the end.
            return
        typed, escape, _ = data.partition(DETACH_KEY)
        if typed:
            self.outgoing.put_nowait(typed)
        if escape:
            self.finish(Outcome(detached=True))

    def on_resize(self) -> None:
        size = _window_size(self.stdin_fd)
        if size is not None:
            self.outgoing.put_nowait(size)

    async def send_all(self) -> None:
        while True:
            item = await self.outgoing.get()
            if isinstance(item, bytes):
                await self.attachment.send(item)
            else:
                await self.attachment.resize(*item)

    async def show_all(self) -> None:
        async for frame in self.attachment:
            if isinstance(frame, OutputFrame):
                _write_all(self.stdout_fd, frame.data)
            elif isinstance(frame, ExitFrame):
                self.finish(Outcome(exit=frame))
                return
        self.finish(Outcome())
