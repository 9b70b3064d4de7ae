"""Output frames for a piece of the log (docs/streaming.md#the-execution-stream): text frames
for UTF-8, base64 frames for other bytes, at most FRAME_BYTES log bytes each, never cutting a
character, each carrying exactly the log bytes it says (`offset` + the bytes `data` encodes).
Pure: no I/O; `app/streaming.py` runs it on a worker thread for large batches."""

from __future__ import annotations

import base64
import codecs
import re
from typing import Final, Literal, NotRequired, TypedDict

from app.process import OutputStream
from app.utf8 import MAX_CONTINUATION, floor_boundary

# The most log bytes one output frame carries: backpressure acts at this grain.
FRAME_BYTES: Final = 64 * 1024
# Inside bytes that are not UTF-8, a valid run shorter than this rides along in the base64
# frame rather than making a text frame of its own (binary output would otherwise become a
# storm of tiny frames).
MIN_TEXT_RUN: Final = 32


class OutputFrame(TypedDict):
    type: Literal["output"]
    stream: str
    offset: int
    data: str
    encoding: NotRequired[Literal["base64"]]


def utf8_runs(
    data: bytes, *, hold_incomplete_tail: bool
) -> tuple[list[tuple[int, int, bool]], int]:
    """Split `data` into `(start, end, is_text)` runs; returns them and where they end.

    Text runs are strict UTF-8. A trailing incomplete character (1-3 bytes) is left out when
    `hold_incomplete_tail` — its continuation may be the next bytes written — and otherwise
    goes out as bytes. Invalid bytes, with short valid runs between them, go out as bytes.

    Linear in `len(data)`, whatever the bytes: one decode marks every invalid byte, and a
    regex finds the valid runs long enough to be text (one exception per invalid byte, the
    obvious way, costs a copy of the rest of the data each, which is quadratic).
    """
    size = len(data)
    # surrogateescape turns each byte that is not part of a valid character into one lone
    # surrogate U+DC80..U+DCFF, which no valid UTF-8 decodes to; final=False stops before an
    # incomplete last character instead of escaping it.
    text, consumed = codecs.utf_8_decode(data, "surrogateescape", False)
    runs: list[tuple[int, int, bool]] = []

    def add(start: int, end: int, is_text: bool) -> None:
        if end <= start:
            return
        if not is_text and runs and not runs[-1][2]:
            runs[-1] = (runs[-1][0], end, False)
        else:
            runs.append((start, end, is_text))

    emitted = 0  # bytes before this are in `runs`
    # Where the scan is, in characters of `text` and in bytes of `data`: each piece of text is
    # measured once.
    char_position = byte_position = 0
    leading = _VALID_RUN.match(text)
    if leading is not None:  # the first run is text however short: nothing precedes it
        char_position = leading.end()
        byte_position = emitted = _utf8_size(text, 0, char_position)
        add(0, emitted, True)
    for match in _LONG_VALID_RUN.finditer(text, char_position):
        run_start = byte_position + _utf8_size(text, char_position, match.start())
        run_end = run_start + _utf8_size(text, match.start(), match.end())
        char_position, byte_position = match.end(), run_end
        if run_end - run_start >= MIN_TEXT_RUN:
            add(emitted, run_start, False)
            add(run_start, run_end, True)
            emitted = run_end
    add(emitted, consumed, False)
    if consumed < size and not hold_incomplete_tail:
        add(consumed, size, False)
        consumed = size
    return runs, consumed


# A valid run of MIN_TEXT_RUN bytes has at least a quarter as many characters (at most four
# bytes each); shorter ones are measured in bytes by `utf8_runs`.
_VALID_RUN: Final = re.compile("[^\udc80-\udcff]+")
_LONG_VALID_RUN: Final = re.compile(f"[^\udc80-\udcff]{{{-(-MIN_TEXT_RUN // 4)},}}")


def _utf8_size(text: str, start: int, end: int) -> int:
    """The number of bytes `text[start:end]` (decoded with surrogateescape) came from."""
    return len(text[start:end].encode("utf-8", "surrogateescape"))


def output_frames(
    pieces: list[tuple[int, OutputStream, bytes]],
    *,
    more_may_follow: bool,
    frame_bytes: int = FRAME_BYTES,
) -> tuple[list[OutputFrame], int | None]:
    """Frames of at most `frame_bytes` log bytes for labelled log pieces, and the offset after
    the last byte they carry (None for no pieces). Only the last piece may hold back an
    incomplete character: after a stream switch nothing can complete the one before it."""
    frames: list[OutputFrame] = []
    end: int | None = None
    for index, (offset, stream, data) in enumerate(pieces):
        hold = more_may_follow and index == len(pieces) - 1
        view = memoryview(data)
        if data.isascii():
            # The common case, decoded once: every byte is a character, so byte cuts are
            # string cuts.
            ascii_text = data.decode("ascii")
            runs, consumed = [(0, len(data), True)], len(data)
        else:
            ascii_text = None
            runs, consumed = utf8_runs(data, hold_incomplete_tail=hold)
        for run_start, run_stop, is_text in runs:
            for start, stop in _frame_cuts(data, run_start, run_stop, frame_bytes):
                if is_text:
                    if ascii_text is not None:
                        text = ascii_text[start:stop]
                    else:
                        text, _ = codecs.utf_8_decode(view[start:stop], "strict", True)
                    frames.append(
                        {
                            "type": "output",
                            "stream": stream.value,
                            "offset": offset + start,
                            "data": text,
                        }
                    )
                else:
                    frames.append(
                        {
                            "type": "output",
                            "stream": stream.value,
                            "offset": offset + start,
                            "data": base64.b64encode(view[start:stop]).decode("ascii"),
                            "encoding": "base64",
                        }
                    )
        end = offset + consumed
    return frames, end


def _frame_cuts(data: bytes, start: int, stop: int, frame_bytes: int) -> list[tuple[int, int]]:
    """`[start, stop)` in pieces of at most `frame_bytes`, each cut moved back (by at most 3
    bytes) to the start of a character, so that the text pieces stay whole characters."""
    cuts: list[tuple[int, int]] = []
    while stop - start > frame_bytes:
        cut = start + frame_bytes
        cut = floor_boundary(data, cut, lowest=max(start + 1, cut - MAX_CONTINUATION))
        cuts.append((start, cut))
        start = cut
    cuts.append((start, stop))
    return cuts
