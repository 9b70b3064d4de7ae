"""The execution stream's frames (docs/streaming.md#server-frames) and the bookkeeping that
makes a resumed stream exact: a `StreamCursor` remembers the offset after the last byte handed
out, so frames replayed after a reconnect are dropped or trimmed and no byte is lost or
repeated. Shared by the sync and async clients; no I/O here."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Final

from shellgate.errors import ApiError, api_error
from shellgate.paths import segment

# Close codes 4400..4599 are refusals: 4000 + the HTTP status the same problem gets on REST.
_REFUSAL_CODES = range(4400, 4600)
SIGNAL_NAMES: Final = frozenset({"INT", "TERM", "KILL", "HUP", "QUIT"})


@dataclass(frozen=True)
class OutputFrame:
    """Log bytes `[offset, offset + len(data))`; `stream` is stdout, stderr or pty."""

    offset: int
    data: bytes
    stream: str

    @property
    def next_offset(self) -> int:
        return self.offset + len(self.data)


@dataclass(frozen=True)
class StateFrame:
    state: str


@dataclass(frozen=True)
class GapFrame:
    """The bytes `[start, end)` were evicted from a log over the size cap."""

    start: int
    end: int


@dataclass(frozen=True)
class ExitFrame:
    """The last frame: the execution is over."""

    state: str
    exit_code: int | None
    signal: int | None


@dataclass(frozen=True)
class ErrorFrame:
    """The server refused a client frame (input, resize, signal); the stream goes on."""

    code: str
    message: str


Frame = OutputFrame | StateFrame | GapFrame | ExitFrame | ErrorFrame


def parse_frame(message: str | bytes) -> Frame | None:
    """A server frame, or None for keepalives and frame types this SDK does not know."""
    body: dict[str, Any] = json.loads(message)
    kind = body.get("type")
    if kind == "output":
        text = body["data"]
        data = base64.b64decode(text) if body.get("encoding") == "base64" else text.encode()
        return OutputFrame(int(body["offset"]), data, str(body.get("stream", "stdout")))
    if kind == "state":
        return StateFrame(str(body["state"]))
    if kind == "gap":
        return GapFrame(int(body["from"]), int(body["to"]))
    if kind == "exit":
        return ExitFrame(str(body["state"]), body.get("exit_code"), body.get("signal"))
    if kind == "error":
        return ErrorFrame(str(body.get("code", "error")), str(body.get("message", "")))
    return None


class StreamCursor:
    """What a (re)connected stream has already delivered. `accept` passes each frame once."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self._state: str | None = None

    def accept(self, frame: Frame) -> Frame | None:
        if isinstance(frame, OutputFrame):
            if frame.next_offset <= self.offset:
                return None  # replayed after a reconnect: already delivered
            if frame.offset < self.offset:
                frame = OutputFrame(
                    self.offset, frame.data[self.offset - frame.offset :], frame.stream
                )
            self.offset = frame.next_offset
            return frame
        if isinstance(frame, GapFrame):
            if frame.end <= self.offset:
                return None
            self.offset = frame.end
            return frame
        if isinstance(frame, StateFrame):
            # Every connect starts with the state at that moment: pass on changes only.
            if frame.state == self._state:
                return None
            self._state = frame.state
        return frame

    def accept_message(self, message: str | bytes) -> Frame | None:
        """`accept` for a raw WebSocket message; keepalives and unknown frames give None."""
        frame = parse_frame(message)
        return None if frame is None else self.accept(frame)


def stream_url(base_url: str, execution_id: str, offset: int) -> str:
    scheme, _, rest = base_url.partition("://")
    ws_scheme = "wss" if scheme == "https" else "ws"
    return f"{ws_scheme}://{rest}/v1/executions/{segment(execution_id)}/stream?offset={offset}"


def refusal(code: int, reason: str) -> ApiError | None:
    """The error a 44xx/45xx close code stands for; None for a close worth reconnecting."""
    if code in _REFUSAL_CODES:
        return api_error(code - 4000, "stream_refused", reason or f"stream refused ({code})")
    return None


def input_frame(data: str | bytes) -> str:
    if isinstance(data, str):
        return json.dumps({"type": "input", "data": data})
    try:
        return json.dumps({"type": "input", "data": data.decode()})
    except UnicodeDecodeError:
        encoded = base64.b64encode(data).decode()
        return json.dumps({"type": "input", "data": encoded, "encoding": "base64"})


def resize_frame(rows: int, cols: int) -> str:
    return json.dumps({"type": "resize", "rows": rows, "cols": cols})


def signal_frame(name: str) -> str:
    upper = name.upper().removeprefix("SIG")
    if upper not in SIGNAL_NAMES:
        raise ValueError(f"signal must be one of {', '.join(sorted(SIGNAL_NAMES))}: {name!r}")
    return json.dumps({"type": "signal", "signal": upper})


PING_FRAME: Final = json.dumps({"type": "ping"})


def is_pong(message: str | bytes) -> bool:
    try:
        return bool(json.loads(message).get("type") == "pong")
    except (ValueError, AttributeError):
        return False
