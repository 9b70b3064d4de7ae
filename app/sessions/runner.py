"""The streaming runner of `POST /v1/sessions/{id}/run` (docs/streaming.md#the-ndjson-runner):
the checks a call passes before anything runs, its MCP tool object, and the NDJSON items of
its output. No FastAPI here.

Items are `{stdout, stderr, exit_code, signal, truncated}`. A data item carries one non-empty
chunk of one stream (at most `ITEM_BYTES` bytes) and no status; the last item carries the status
and no data. Chunks come from the execution's artifact log, whose stream labels keep stdout and
stderr apart (a PTY's merged output goes to `stdout`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from app.core.errors import InvalidRequestError, PolicyDeniedError
from app.core.utf8 import incomplete_tail
from app.executions.registry import LiveExecution
from app.output.artifact_log import ArtifactLog
from app.output.follower import Gap, Piece, follow_log
from app.output.frame_json import one_line
from app.policy.critical_patterns import first_runner_critical_match
from app.process import OutputStream
from app.schemas import SESSION_MAX_TIMEOUT_MS

TOOL_NAME: Final = "bash_run"
# Runner clients expect chunks of at most 4096 bytes (one pipe read); an item never carries more.
ITEM_BYTES: Final = 4096
# The runner's sentinel for "the deadline fired" (not a real signal number).
TIMEOUT_SIGNAL: Final = -1
READ_BLOCK: Final = 256 * 1024
FINISH_WAIT_SECONDS: Final = 30.0

ABSOLUTE_COMMAND_MESSAGE: Final = "absolute command not allowed, use relative path"


# --- before anything runs ---------------------------------------------------------------------


def check_run(command: str, timeout_ms: int | None, configured_ms: int) -> int:
    """The runner's checks, in their documented order (docs/streaming.md#the-ndjson-runner);
    returns the call's deadline in milliseconds."""
    if timeout_ms is not None:
        if timeout_ms <= configured_ms:
            raise InvalidRequestError(
                f"timeout_ms must be strictly greater than the configured timeout "
                f"({configured_ms} ms); the per-call argument can only raise the timeout, "
                "never lower it"
            )
        if timeout_ms > SESSION_MAX_TIMEOUT_MS:
            raise InvalidRequestError(
                f"timeout_ms must be at most {SESSION_MAX_TIMEOUT_MS} (24 hours)"
            )
    # `Path(command).is_absolute()` on the whole string: only a leading `/` counts.
    if command.startswith("/"):
        raise InvalidRequestError(ABSOLUTE_COMMAND_MESSAGE)
    pattern = first_runner_critical_match(command)
    if pattern is not None:
        raise PolicyDeniedError(f"Pattern match found: {pattern}", details={"pattern": pattern})
    return timeout_ms if timeout_ms is not None else configured_ms


def runner_tool(timeout_ms: int, *, pty: bool = False) -> dict[str, Any]:
    """The MCP tool object `bash_run`, rebuilt from the session's timeout (and mode) each
    time."""
    minutes = timeout_ms // 60_000
    streams = (
        "the command runs in a terminal, so its stdout and stderr arrive together in `stdout` "
        "(lines end in \\r\\n) and `stderr` stays empty"
        if pty
        else "stdout and stderr arrive apart"
    )
    description = (
        "Run a bash command in this session and stream its output as NDJSON items "
        f"{{stdout, stderr, exit_code, signal, truncated}}: {streams}; output comes in "
        "chunks of at most 4096 bytes, and the last item carries the exit status "
        "(signal -1 means the command timed out). "
        "Exported variables, functions and aliases persist from one call to the next; the "
        "working directory is reset to the session's cwd on every call. "
        "The complete output stays readable in parts as artifact://<id> through "
        "`GET /v1/executions/{id}/output?offset=&limit=` (the id is in the X-Execution-Id "
        "header). Environment variables and PTY mode are session configuration, not call "
        "arguments. "
        f"The default timeout is {timeout_ms} milliseconds ({minutes} minutes). To extend it "
        f"for one call, pass `timeout_ms` with an integer strictly greater than {timeout_ms}; "
        "values at or below the default are rejected: the argument can only raise the "
        "timeout, never lower it. "
        "The command must not start with an absolute path and must not match a dangerous "
        "pattern; the server's policy may deny it or wait for a human approval."
    )
    return {
        "name": TOOL_NAME,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The bash command. Not an absolute path (no leading `/`), "
                    "and not matching a dangerous security pattern.",
                },
                "timeout_ms": {
                    "type": "integer",
                    "description": "Optional: a longer timeout for this call only, in "
                    f"milliseconds; must be strictly greater than {timeout_ms}.",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    }


# --- items ------------------------------------------------------------------------------------


def data_item(stream: str, chunk: bytes, truncated: bool) -> dict[str, Any]:
    """`truncated` means "the read filled the buffer": more may follow."""
    encoding = None
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(chunk).decode("ascii"), "base64"
    item: dict[str, Any] = {
        "stdout": text if stream == "stdout" else "",
        "stderr": text if stream == "stderr" else "",
        "exit_code": None,
        "signal": None,
        "truncated": truncated,
    }
    if encoding is not None:
        item["encoding"] = encoding
    return item


def status_item(*, exit_code: int | None, signal: int | None, timed_out: bool) -> dict[str, Any]:
    """The last item: a timeout reads `signal -1`; a signal death has no exit code (the
    registry's 128+N is bash's convention, not the runner's)."""
    if timed_out:
        exit_code, signal = None, TIMEOUT_SIGNAL
    elif signal is not None:
        exit_code = None
    return {
        "stdout": "",
        "stderr": "",
        "exit_code": exit_code,
        "signal": signal,
        "truncated": False,
    }


@dataclass
class ItemEncoder:
    """Cuts each stream into items of at most ITEM_BYTES, holding back a character split across
    reads until the rest of it arrives on the same stream (pure; no I/O)."""

    _pending: dict[str, bytes] = field(default_factory=dict)

    def feed(self, stream: OutputStream, data: bytes) -> list[dict[str, Any]]:
        name = "stderr" if stream is OutputStream.stderr else "stdout"
        buffer = self._pending.pop(name, b"") + data
        items: list[dict[str, Any]] = []
        while buffer:
            window = buffer[:ITEM_BYTES]
            # A character cut by the item size moves to the next item; one cut by the end of
            # what has arrived waits for the next read of the same stream.
            cut = len(window) - incomplete_tail(window)
            if cut == 0:
                break
            full = len(window) == ITEM_BYTES
            items.append(data_item(name, window[:cut], full))
            buffer = buffer[cut:]
            if not full:
                break
        if buffer:
            self._pending[name] = buffer
        return items

    def flush(self) -> list[dict[str, Any]]:
        """What is still held back once the stream ended (an unfinished character)."""
        items = [data_item(name, rest, False) for name, rest in self._pending.items() if rest]
        self._pending.clear()
        return items


def ndjson_line(item: dict[str, Any]) -> bytes:
    # One line per item, whatever the output holds (\u2028 is a line break to splitlines()).
    return (one_line(json.dumps(item, ensure_ascii=False, separators=(",", ":"))) + "\n").encode()


# --- streaming an execution -------------------------------------------------------------------


@dataclass(frozen=True)
class RunStatus:
    exit_code: int | None
    signal: int | None
    timed_out: bool


class RunSource(Protocol):
    """Where a call's output comes from: its live execution, or the log of a finished one."""

    log: ArtifactLog

    @property
    def live(self) -> LiveExecution | None:
        """None: it ended before its caller got to stream it."""

    async def status(self) -> RunStatus: ...


class LiveSource:
    def __init__(self, live: LiveExecution) -> None:
        self.live = live
        self.log = live.log

    async def status(self) -> RunStatus:
        # The record (and the session's saved state) are final once `finished` is set: a client
        # that calls again as soon as it reads the status finds both.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.live.finished.wait(), FINISH_WAIT_SECONDS)
        exit_status = self.live.exited.result()
        return RunStatus(exit_status.exit_code, exit_status.signal, self.live.timed_out)


class FinishedSource:
    """An approved call that ended before its caller got to stream it."""

    def __init__(self, log: ArtifactLog, status: RunStatus) -> None:
        self.log = log
        self.live = None
        self._status = status

    async def status(self) -> RunStatus:
        return self._status


def _whole_pieces(pieces: list[Piece], more_may_follow: bool) -> tuple[list[Piece], int | None]:
    """The runner takes each read whole: `ItemEncoder` holds back a split character itself
    (across the reads of its stream), so the next read starts after the last byte read."""
    if not pieces:
        return pieces, None
    last_offset, _, last_data = pieces[-1]
    return pieces, last_offset + len(last_data)


async def ndjson_items(source: RunSource) -> AsyncIterator[bytes]:
    """The NDJSON lines of one call, from its first byte to its status item. An evicted middle
    of a truncated log is skipped without an item (app/output/follower.py)."""
    encoder = ItemEncoder()
    reads = follow_log(source.log, 0, source.live, _whole_pieces, read_bytes=READ_BLOCK)
    async with contextlib.aclosing(reads):
        async for read in reads:
            if isinstance(read, Gap):
                continue
            for _, stream, data in read:
                for item in encoder.feed(stream, data):
                    yield ndjson_line(item)
    for item in encoder.flush():
        yield ndjson_line(item)
    status = await source.status()
    yield ndjson_line(
        status_item(exit_code=status.exit_code, signal=status.signal, timed_out=status.timed_out)
    )
