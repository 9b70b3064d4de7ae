"""When a stream reconnects, and what a refused client frame means as an exception."""

from __future__ import annotations

from shellgate.errors import ApiError, ServerUnreachableError, api_error
from shellgate.frames import ErrorFrame, ExitFrame

FIRST_DELAY_SECONDS = 0.1
LONGEST_DELAY_SECONDS = 5.0
# The HTTP status each `error` frame code has on REST (docs/streaming.md#client-frames).
_FRAME_STATUS = {"forbidden": 403, "not_found": 404, "conflict": 409, "invalid_frame": 422}


class Backoff:
    """Reconnect delays that double from 0.1 s up to 5 s. A connection that delivered log
    progress resets the count, so a long stream survives any number of separate drops; only
    `attempts` failures in a row, with nothing delivered in between, give up."""

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts
        self._failures = 0

    def progressed(self) -> None:
        self._failures = 0

    def failed(self, what: str) -> float:
        """The delay before the next attempt; raises once the attempts are used up."""
        self._failures += 1
        if self._failures > self.attempts:
            raise ServerUnreachableError(f"{what} broke off {self.attempts} times in a row")
        delay: float = FIRST_DELAY_SECONDS * 2.0 ** (self._failures - 1)
        return min(LONGEST_DELAY_SECONDS, delay)


def frame_error(execution_id: str, frame: ErrorFrame | ExitFrame) -> ApiError:
    if isinstance(frame, ExitFrame):
        return api_error(409, "conflict", f"execution {execution_id} is not running")
    return api_error(_FRAME_STATUS.get(frame.code, 422), frame.code, frame.message)
