"""Output frames for a piece of the log (docs/streaming.md#the-execution-stream): text frames
for UTF-8, base64 frames for other bytes, at most FRAME_BYTES log bytes each, never cutting a
character, each carrying exactly the log bytes it says (`offset` + the bytes `data` encodes).
Pure: no I/O; the execution stream (`app/executions/viewer.py`) has the log follower
(`app/output/follower.py`) run it on a worker thread for large batches."""

from __future__ import annotations

import base64
import codecs
import functools
import re
from typing import Final, Literal, NotRequired, TypedDict

from app.core.utf8 import MAX_CONTINUATION, floor_boundary
from app.process import OutputStream

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

    Linear in `len(data)` whatever the bytes, and cheap on binary: the valid start is one
    strict decode; after it, whole-buffer operations in C (`_stretches_that_may_be_text`) rule
    out every place where a long valid run cannot be, and only what is left is decoded and
    searched run by run. On random bytes almost nothing is left: this runs on the event loop's
    interpreter, and splitting binary output character by character held it for ~50 ms per
    MiB (RELIABILITY.md, "Soak").
    """
    size = len(data)
    consumed = size - _incomplete_tail_length(data)
    runs: list[tuple[int, int, bool]] = []

    def add(start: int, end: int, is_text: bool) -> None:
        if end <= start:
            return
        if not is_text and runs and not runs[-1][2]:
            runs[-1] = (runs[-1][0], end, False)
        else:
            runs.append((start, end, is_text))

    view = memoryview(data)
    try:
        codecs.utf_8_decode(view[:consumed], "strict", True)
    except UnicodeDecodeError as error:
        emitted = error.start  # the first run is text however short: nothing precedes it
    else:
        emitted = consumed
    add(0, emitted, True)
    for stretch_start, stretch_end in _stretches_that_may_be_text(view, emitted, consumed):
        for run_start, run_end in _long_valid_runs(view, stretch_start, stretch_end):
            add(emitted, run_start, False)
            add(run_start, run_end, True)
            emitted = run_end
    add(emitted, consumed, False)
    if consumed < size and not hold_incomplete_tail:
        add(consumed, size, False)
        consumed = size
    return runs, consumed


def _incomplete_tail_length(data: bytes) -> int:
    """How many bytes at the end of `data` are a character begun correctly but not finished
    (0-3): what a streaming decoder would wait for."""
    for length in range(1, min(MAX_CONTINUATION, len(data)) + 1):
        lead = data[-length]
        if lead < 0xC0:
            continue  # ASCII or a continuation byte: no character starts here
        try:
            _, decoded = codecs.utf_8_decode(data[-length:], "strict", False)
        except UnicodeDecodeError:
            return 0
        return length if decoded == 0 else 0
    return 0


def _long_valid_runs(view: memoryview, start: int, end: int) -> list[tuple[int, int]]:
    """The valid runs of at least MIN_TEXT_RUN bytes in `view[start:end]`, in absolute
    offsets. The stretch begins and ends where the decoder resynchronises, so decoding it
    alone marks the same bytes invalid as decoding the whole buffer."""
    # surrogateescape turns each byte that is not part of a valid character into one lone
    # surrogate U+DC80..U+DCFF, which no valid UTF-8 decodes to.
    text, _ = codecs.utf_8_decode(view[start:end], "surrogateescape", True)
    found: list[tuple[int, int]] = []
    char_position, byte_position = 0, start
    for match in _LONG_VALID_RUN.finditer(text):
        run_start = byte_position + _utf8_size(text, char_position, match.start())
        run_end = run_start + _utf8_size(text, match.start(), match.end())
        char_position, byte_position = match.end(), run_end
        if run_end - run_start >= MIN_TEXT_RUN:
            found.append((run_start, run_end))
    return found


def _stretches_that_may_be_text(view: memoryview, start: int, end: int) -> list[tuple[int, int]]:
    """Stretches of `view[start:end]` outside which no valid run of MIN_TEXT_RUN bytes can be.

    A byte is marked when it cannot share a valid run with the byte before it: it is never
    valid (C0, C1, F5-FF), it continues an ASCII byte, it is not a continuation but follows a
    lead byte, or it is a fourth continuation in a row. A valid run has no mark after its
    first byte, so it lies inside a stretch that starts at a mark (or `start`) and has at
    least MIN_TEXT_RUN - 1 unmarked bytes. Every stretch starts and ends at a mark, where
    the decoder resynchronises, so stretches closer than MERGE_GAP are decoded as one.

    The marks are computed on the whole piece at once: one `translate` gives each byte its
    class bits, one big integer holds them (a byte per position), and a few shifts and masks
    over it, all in C, mark every position.
    """
    if end - start < MIN_TEXT_RUN:
        return []
    piece = view[start:end].tobytes()
    width = len(piece)
    classes = int.from_bytes(piece.translate(_CLASS_BITS), "big")
    ones = _repeated_byte(width)

    def flag(bit: int) -> int:
        return (classes >> bit) & ones

    # Big-endian: the byte before position i sits one byte higher, so `>> 8` moves each
    # byte's flag onto the position after it.
    continuation = flag(_CONTINUATION_BIT)
    marks = (
        flag(_NEVER_VALID_BIT)
        | (continuation & (flag(_ASCII_BIT) >> 8))
        | ((continuation ^ ones) & (flag(_LEAD_BIT) >> 8))
        | (continuation & (continuation >> 8) & (continuation >> 16) & (continuation >> 24))
    )
    marked = marks.to_bytes(width, "big")
    stretches: list[tuple[int, int]] = []
    unmarked_run = bytes(MIN_TEXT_RUN - 1)
    position = 0
    for _ in range(width // DENSE_AFTER_BYTES + 1):
        found = marked.find(unmarked_run, position)
        if found < 0:
            return stretches
        stretch_start = max(marked.rfind(1, position, found), position)
        stretch_end = marked.find(1, found + len(unmarked_run))
        if stretch_end < 0:
            stretch_end = width
        if stretches and start + stretch_start - stretches[-1][1] < MERGE_GAP:
            stretches[-1] = (stretches[-1][0], start + stretch_end)
        else:
            stretches.append((start + stretch_start, start + stretch_end))
        position = stretch_end
    # Text and bytes interleave densely (more than a stretch per DENSE_AFTER_BYTES): a round of
    # Python per stretch would cost more than decoding the rest as one.
    if position < width:
        stretches.append((start + position, end))
    return stretches


@functools.lru_cache(maxsize=8)
def _repeated_byte(width: int) -> int:
    """The integer whose `width` big-endian bytes are all 0x01."""
    return int.from_bytes(b"\x01" * width, "big")


def _class_bits() -> bytes:
    table = bytearray(256)
    for value in range(256):
        if value < 0x80:
            table[value] = 1 << _ASCII_BIT
        elif value < 0xC0:
            table[value] = 1 << _CONTINUATION_BIT
        elif 0xC2 <= value < 0xF5:
            table[value] = 1 << _LEAD_BIT
        else:
            table[value] = 1 << _NEVER_VALID_BIT
    return bytes(table)


_ASCII_BIT, _CONTINUATION_BIT, _LEAD_BIT, _NEVER_VALID_BIT = range(4)
# A translate table: each byte value to the bit of its class.
_CLASS_BITS: Final = _class_bits()
# Stretches nearer than this are decoded together: one decode of a few more bytes costs less
# than a round of Python per stretch.
MERGE_GAP: Final = 256
# Past one stretch per this many bytes on average, the rest is decoded whole (see the end of
# `_stretches_that_may_be_text`).
DENSE_AFTER_BYTES: Final = 1024
# A valid run of MIN_TEXT_RUN bytes has at least a quarter as many characters (at most four
# bytes each); shorter ones are measured in bytes by `_long_valid_runs`.
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
