"""Wire models of the WebSocket stream: the ticket and the client -> server frames."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.schemas.common import StrictModel


class WsTicket(BaseModel):
    ticket: str
    expires_at: datetime


class WsInputFrame(StrictModel):
    """Keystrokes for a PTY run; `encoding: base64` carries bytes that are not UTF-8."""

    type: Literal["input"]
    data: str = Field(max_length=1024 * 1024)
    encoding: Literal["utf-8", "base64"] = "utf-8"


class WsResizeFrame(StrictModel):
    type: Literal["resize"]
    rows: int = Field(description="Clamped to 5..200.")
    cols: int = Field(description="Clamped to 20..400.")


class WsSignalFrame(StrictModel):
    """A signal to the whole process group; TERM and KILL end the run as `cancelled`."""

    type: Literal["signal"]
    signal: Literal["INT", "TERM", "KILL", "HUP", "QUIT"]


class WsPingFrame(StrictModel):
    """An application-level ping; the server answers `{"type": "pong"}`."""

    type: Literal["ping"]


WsClientFrame = Annotated[
    WsInputFrame | WsResizeFrame | WsSignalFrame | WsPingFrame, Field(discriminator="type")
]
