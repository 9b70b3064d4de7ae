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

from app.cli_connection import EXIT_NOT_FINISHED, EXIT_REFUSED, fail, server
from app.client import AsyncAttachment, ExitFrame, OutputFrame

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
    execution_id: str = typer.Argument(..., metavar="ID"),
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
    loop = asyncio.get_running_loop()
    stdin_fd, stdout_fd = sys.stdin.fileno(), sys.stdout.fileno()
    finished: asyncio.Future[Outcome] = loop.create_future()
    # Keystrokes and resizes in the order they happened, sent by one task.
    outgoing: asyncio.Queue[bytes | tuple[int, int]] = asyncio.Queue()

    def finish(outcome: Outcome) -> None:
        if not finished.done():
            finished.set_result(outcome)

    def on_keys() -> None:
        try:
            data = os.read(stdin_fd, _READ_BYTES)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(stdin_fd)
            if os.isatty(stdin_fd):  # the terminal hung up: leave the run going
                finish(Outcome(detached=True))
            # Piped input ran out: nothing more to type; follow the output to the end.
            return
        typed, escape, _ = data.partition(DETACH_KEY)
        if typed:
            outgoing.put_nowait(typed)
        if escape:
            finish(Outcome(detached=True))

    def on_resize() -> None:
        size = _window_size(stdin_fd)
        if size is not None:
            outgoing.put_nowait(size)

    async def send_all() -> None:
        while True:
            item = await outgoing.get()
            if isinstance(item, bytes):
                await attachment.send(item)
            else:
                await attachment.resize(*item)

    async def show_all() -> None:
        async for frame in attachment:
            if isinstance(frame, OutputFrame):
                _write_all(stdout_fd, frame.data)
            elif isinstance(frame, ExitFrame):
                finish(Outcome(exit=frame))
                return
        finish(Outcome())

    def failed(task: asyncio.Task[None]) -> None:
        if task.cancelled() or finished.done():
            return
        if (error := task.exception()) is not None:
            finished.set_exception(error)

    async with attachment:
        with raw_terminal(stdin_fd):
            tasks = [asyncio.create_task(show_all()), asyncio.create_task(send_all())]
            for task in tasks:
                task.add_done_callback(failed)
            try:
                loop.add_reader(stdin_fd, on_keys)
            except PermissionError:  # a regular file (`< file`) cannot be polled: type it all
                outgoing.put_nowait(_read_file(stdin_fd))
            loop.add_signal_handler(signal.SIGWINCH, on_resize)
            for number in _STOP_SIGNALS:
                loop.add_signal_handler(number, finish, Outcome(stopped_by=number))
            try:
                if os.isatty(stdin_fd):
                    on_resize()  # the remote PTY takes this window's size from the start
                return await finished
            finally:
                loop.remove_reader(stdin_fd)
                for number in (signal.SIGWINCH, *_STOP_SIGNALS):
                    loop.remove_signal_handler(number)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
