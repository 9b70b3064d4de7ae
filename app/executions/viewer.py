"""What one viewer of an execution sees (docs/streaming.md#the-execution-stream): the log
replayed from an offset, then
followed live, then the exit. No FastAPI here: `api/routes/stream.py` carries these frames over
a WebSocket and feeds the client's frames to `handle_client_frame`.

Server → client frames (JSON objects):
- `{"type": "state", "state": s}` at connect and on each change seen (running, then terminal);
- `{"type": "output", "stream": "stdout"|"stderr"|"pty", "offset": n, "data": text}`, or with
  `"encoding": "base64"` when the bytes are not UTF-8;
- `{"type": "gap", "from": a, "to": b}`: `[a, b)` was evicted from a truncated log;
- `{"type": "exit", "state": s, "exit_code": n|null, "signal": n|null}`: the last frame; only it
  means "done" (a dropped socket means "reconnect with the next offset");
- `{"type": "ping"}` when idle, `{"type": "pong"}` answering a client ping, and
  `{"type": "error", "code": c, "message": m}` when a client frame is refused (the route).

`offset` is the logical position of the frame's first byte in the merged log, and a frame
carries exactly the bytes `data` encodes (UTF-8 of the text, or the base64 payload), so
`offset + len(bytes)` is where a reconnect resumes without losing or repeating a byte.

The log on disk is each viewer's buffer: every viewer reads at its own offset and waits for its
own sends, so a slow viewer holds back nobody, neither the process nor the other viewers.
"""

from __future__ import annotations

import base64
import contextlib
import signal
import struct
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict

from pydantic import TypeAdapter, ValidationError

from app.core.auth import Principal
from app.core.errors import AppError, InvalidRequestError, UnavailableError
from app.core.strict_json import TooManyValuesError, check_counts
from app.executions import ExecutionService
from app.executions.registry import LiveExecution
from app.output.artifact_log import ArtifactLog
from app.output.follower import Gap, Piece, follow_log
from app.output.frame_json import FRAME_ENCODER, OUTPUT_FRAME_KEYS, encode_output_frame
from app.output.framing import FRAME_BYTES, OutputFrame, output_frames
from app.process import OutputStream
from app.schemas import (
    ExecutionPublic,
    WsClientFrame,
    WsInputFrame,
    WsPingFrame,
    WsResizeFrame,
    WsSignalFrame,
)
from app.store.models import Execution, ExecutionState

# The most log bytes one read of the log takes (split into frames): each read is a hop to a
# worker thread, so a read of several frames pays that hop once. Bounds a viewer's memory.
READ_BYTES: Final = 256 * 1024
# A viewer at the live edge frames the bytes it takes from memory on the loop (no thread hop)
# when they are cheap to frame: ASCII up to LOOP_FRAMING_ASCII_BYTES (a whole read, ≈ 0.25 ms),
# anything else up to LOOP_FRAMING_BYTES (≈ 0.25 ms for random bytes). A larger batch of other
# bytes takes the worker thread, which reads the log when it runs. With 64 KiB of ASCII as the
# bound, a pipe stream hopped to the thread for every read, and waking the worker
# (`Condition.notify`) took a quarter of the interpreter's samples on the loaded 2-core VM:
# more than framing the read on the loop (bench/PROFILE.md, "The stream path").
LOOP_FRAMING_ASCII_BYTES: Final = 256 * 1024
LOOP_FRAMING_BYTES: Final = 16 * 1024
# Binary output messages (`?format=binary`, docs/streaming.md#binary-output-frames): one byte
# for the stream, the offset as 8 bytes big-endian, then at most BINARY_FRAME_BYTES log bytes
# as they are. Nothing to decode, cut at characters or escape: framing is a copy, so it is
# done on the loop whatever the bytes.
BINARY_HEADER: Final = struct.Struct(">BQ")
BINARY_STREAM_CODES: Final = {OutputStream.stdout: 0, OutputStream.stderr: 1, OutputStream.pty: 2}
BINARY_FRAME_BYTES: Final = 256 * 1024
STREAM_FORMATS: Final = ("json", "binary")
# Waiting for an approval: the decision wakes the viewer; the wait is re-armed after this long.
APPROVAL_WAIT_SLICE_SECONDS: Final = 30.0
# The process exited: how long the terminal record may take to reach the database.
FINAL_RECORD_WAIT_SECONDS: Final = 60.0

SIGNALS_BY_NAME: Final = {
    "INT": signal.SIGINT,
    "TERM": signal.SIGTERM,
    "KILL": signal.SIGKILL,
    "HUP": signal.SIGHUP,
    "QUIT": signal.SIGQUIT,
}


class StateFrame(TypedDict):
    type: Literal["state"]
    state: str


# "from" is a Python keyword, hence the functional form.
GapFrame = TypedDict("GapFrame", {"type": Literal["gap"], "from": int, "to": int})


class ExitFrame(TypedDict):
    type: Literal["exit"]
    state: str
    exit_code: int | None
    signal: int | None


class ErrorFrame(TypedDict):
    type: Literal["error"]
    code: str
    message: str


class SimpleFrame(TypedDict):
    type: Literal["ping", "pong"]


Frame = StateFrame | OutputFrame | GapFrame | ExitFrame | ErrorFrame | SimpleFrame

PING_FRAME: Final[SimpleFrame] = {"type": "ping"}
PONG_FRAME: Final[SimpleFrame] = {"type": "pong"}


def encode_frame(frame: Frame | dict[str, Any]) -> str:
    if frame.get("type") == "output" and frame.keys() <= OUTPUT_FRAME_KEYS:
        # Most of what a stream sends: built by hand, the same text (app/output/frame_json.py).
        return encode_output_frame(frame)  # type: ignore[arg-type]
    return FRAME_ENCODER.encode(frame)


def state_frame(state: ExecutionState) -> StateFrame:
    return {"type": "state", "state": state.value}


def gap_frame(start: int, end: int) -> GapFrame:
    return {"type": "gap", "from": start, "to": end}


def exit_frame(state: ExecutionState, exit_code: int | None, signal: int | None) -> ExitFrame:
    return {"type": "exit", "state": state.value, "exit_code": exit_code, "signal": signal}


def error_frame(code: str, message: str) -> ErrorFrame:
    return {"type": "error", "code": code, "message": message}


@dataclass(frozen=True)
class _FrameEncoder:
    """The stream's encoding of the bytes one read of the log took: output frames, JSON-encoded
    (on a worker thread, or on the loop for a few bytes at the live edge)."""

    frame_bytes: int

    def __call__(self, pieces: list[Piece], more_may_follow: bool) -> tuple[list[str], int | None]:
        frames, framed_end = output_frames(
            pieces, more_may_follow=more_may_follow, frame_bytes=self.frame_bytes
        )
        return [encode_frame(frame) for frame in frames], framed_end


@dataclass(frozen=True)
class _BinaryEncoder:
    """The stream's encoding in binary format: a message per at most `frame_bytes` log bytes,
    each the header and the bytes. Never holds anything back."""

    frame_bytes: int

    def __call__(
        self, pieces: list[Piece], more_may_follow: bool
    ) -> tuple[list[bytes], int | None]:
        messages: list[bytes] = []
        end: int | None = None
        for offset, stream, data in pieces:
            code = BINARY_STREAM_CODES[stream]
            view = memoryview(data)
            for start in range(0, len(data), self.frame_bytes):
                header = BINARY_HEADER.pack(code, offset + start)
                messages.append(header + view[start : start + self.frame_bytes])
            end = offset + len(data)
        return messages, end


def _always(pieces: list[Piece]) -> bool:
    return True


def _cheap_to_frame_on_loop(pieces: list[Piece]) -> bool:
    size = sum(len(data) for _, _, data in pieces)
    return size <= LOOP_FRAMING_BYTES or (
        size <= LOOP_FRAMING_ASCII_BYTES and all(data.isascii() for _, _, data in pieces)
    )


async def follow_output(
    log: ArtifactLog,
    offset: int,
    live: LiveExecution | None,
    *,
    frame_bytes: int = FRAME_BYTES,
    read_bytes: int = READ_BYTES,
    binary: bool = False,
) -> AsyncGenerator[str | bytes | GapFrame, None]:
    """Output frames (already JSON: see `encode_frame`; with `binary`, binary messages) and gap
    frames from `offset` to the end of the log; with `live`, waits for the bytes still to come
    until the process has exited and every byte was sent (app/output/follower.py)."""
    reads: AsyncGenerator[list[str] | list[bytes] | Gap, None]
    if binary:
        reads = follow_log(
            log,
            offset,
            live,
            _BinaryEncoder(BINARY_FRAME_BYTES),
            read_bytes=read_bytes,
            encodes_on_loop=_always,
            burst_bytes=BINARY_FRAME_BYTES,
        )
    else:
        reads = follow_log(
            log,
            offset,
            live,
            _FrameEncoder(frame_bytes),
            read_bytes=read_bytes,
            encodes_on_loop=_cheap_to_frame_on_loop,
            burst_bytes=frame_bytes,
        )
    async with contextlib.aclosing(reads):
        async for read in reads:
            if isinstance(read, Gap):
                yield gap_frame(read.start, read.end)
                continue
            for frame in read:
                yield frame


class ExecutionViewer:
    """One viewer of one execution, from `offset` to the exit frame."""

    def __init__(
        self,
        executions: ExecutionService,
        principal: Principal,
        record: Execution,
        offset: int,
        *,
        frame_bytes: int = FRAME_BYTES,
        binary: bool = False,
    ) -> None:
        """`record`: the execution as `authorize_read` returned it to this principal; `binary`:
        output goes out as binary messages (`?format=binary`)."""
        self._executions = executions
        self._principal = principal
        self._record = record
        self._id = record.id
        self._offset = offset
        self._frame_bytes = frame_bytes
        self._binary = binary

    async def frames(self) -> AsyncGenerator[Frame | str | bytes, None]:
        """state, output/gap…, state (terminal), exit; output frames come JSON-encoded, or as
        binary messages."""
        state = ExecutionState(self._record.state)
        yield state_frame(state)
        final: Execution | ExecutionPublic | None = self._record if state.is_terminal else None
        live = None if final else self._executions.live_for(self._principal, self._id)
        while live is None and final is None and state is ExecutionState.awaiting_approval:
            # The decision wakes this wait; a start shows in the registry before the record.
            record = await self._executions.wait_past_approval(
                self._principal, self._id, APPROVAL_WAIT_SLICE_SECONDS
            )
            live = self._executions.live_for(self._principal, self._id)
            if live is None and ExecutionState(record.state).is_terminal:
                final = record
            elif live is None and record.state != ExecutionState.awaiting_approval:
                break  # it ran and is being recorded: its log and final record follow below

        log = live.log if live is not None else await self._finished_log()
        if log is not None and state is ExecutionState.awaiting_approval:
            # It ran, however briefly: say so before its output.
            state = ExecutionState.running
            yield state_frame(state)
        if log is not None:
            # Closed at once when the viewer goes, not when collected: it unregisters from
            # the live execution's memory of recent output.
            async with contextlib.aclosing(
                follow_output(
                    log,
                    self._offset,
                    live,
                    frame_bytes=self._frame_bytes,
                    binary=self._binary,
                )
            ) as output:
                async for frame in output:
                    yield frame

        if final is None or live is not None:
            # The live entry leaves the registry only after the terminal record is written,
            # so this returns at once unless that write is being retried.
            final = await self._executions.get(
                self._principal, self._id, wait=FINAL_RECORD_WAIT_SECONDS
            )
        final_state = ExecutionState(final.state)
        if not final_state.is_terminal:
            raise UnavailableError(f"the final state of {self._id} was not recorded")
        if final_state is not state:
            yield state_frame(final_state)
        yield exit_frame(final_state, final.exit_code, final.signal)

    async def _finished_log(self) -> ArtifactLog | None:
        # None: never started (rejected, cancelled while pending) or pruned.
        return await self._executions.open_finished_log(self._id)


# --- client → server frames --------------------------------------------------------------------

_client_frames: TypeAdapter[WsClientFrame] = TypeAdapter(WsClientFrame)
# Arrays, objects and members a client frame may have (the largest has four members).
MAX_FRAME_VALUES = 16


def parse_offset(raw: str | None) -> int:
    """The `?offset=` of a stream: a non-negative integer (default 0)."""
    if raw is None or raw == "":
        return 0
    # 4300 digits and more are beyond `int()` (it raised out of the handshake, no close frame).
    if not raw.isascii() or not raw.isdigit() or len(raw) > 4000:
        raise InvalidRequestError(f"offset must be a non-negative integer, got {raw[:40]!r}")
    return int(raw)


def parse_format(raw: str | None) -> bool:
    """The `?format=` of a stream: `json` (the default) or `binary`; True for binary."""
    if raw is None or raw == "" or raw == "json":
        return False
    if raw == "binary":
        return True
    raise InvalidRequestError(f"format must be json or binary, got {raw[:40]!r}")


async def handle_client_frame(
    executions: ExecutionService, principal: Principal, execution_id: str, text: str
) -> Frame | None:
    """Act on one client frame; the reply frame, if any (an error never ends the stream)."""
    try:
        # A frame is one small object, counted before it is parsed: 16 MiB of `[[],…]` took
        # 3.4 s to parse on the loop (RELIABILITY.md, "One request against all the others").
        check_counts(text, max_containers=MAX_FRAME_VALUES, max_members=MAX_FRAME_VALUES)
        frame = _client_frames.validate_json(text)
    except TooManyValuesError as error:
        return error_frame("invalid_frame", f"frames must be small JSON objects: {error.msg}")
    except ValidationError as error:
        return error_frame("invalid_frame", _describe(error))
    try:
        if isinstance(frame, WsInputFrame):
            await executions.send_input(principal, execution_id, _input_bytes(frame))
        elif isinstance(frame, WsResizeFrame):
            await executions.resize(principal, execution_id, frame.rows, frame.cols)
        elif isinstance(frame, WsSignalFrame):
            await executions.send_signal(principal, execution_id, SIGNALS_BY_NAME[frame.signal])
        elif isinstance(frame, WsPingFrame):
            return PONG_FRAME
    except AppError as error:
        return error_frame(error.code, error.message)
    return None


def _input_bytes(frame: WsInputFrame) -> bytes:
    if frame.encoding != "base64":
        return frame.data.encode()
    try:
        return base64.b64decode(frame.data, validate=True)
    except ValueError as error:
        raise InvalidRequestError(f"input data is not valid base64: {error}") from error


def _describe(error: ValidationError) -> str:
    problems = error.errors(include_url=False, include_input=False)
    if problems and problems[0]["type"] == "json_invalid":
        return "frames must be JSON objects"
    if problems and problems[0]["type"] == "union_tag_invalid":
        return (
            "unknown frame type; expected one of: input, resize, signal, ping "
            f"({problems[0]['msg']})"
        )
    return "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or 'frame'}: {problem['msg']}"
        for problem in problems[:5]
    )
