"""Splitting log bytes into text and binary runs, and framing them: linear time on any bytes,
characters never cut at read edges, and frames that carry exactly the log."""

from __future__ import annotations

import base64
import codecs
import os
import random

from hypothesis import given
from hypothesis import strategies as st

from app.output.framing import MIN_TEXT_RUN, output_frames, utf8_runs
from app.process import OutputStream

PIECES = [b"a", b"\n", "é".encode(), "€".encode(), "😀".encode(), b"\xff", b"\xe2\x82", b"\xc3"]
MIXED = (
    st.binary(max_size=400)
    | st.text(max_size=120).map(str.encode)
    | st.lists(st.sampled_from([*PIECES, b"t" * MIN_TEXT_RUN])).map(b"".join)
)


def runs_one_error_at_a_time(
    data: bytes, *, hold_incomplete_tail: bool
) -> tuple[list[tuple[int, int, bool]], int]:
    """The obvious definition (quadratic: every error copies the rest): the oracle."""
    size, runs, position = len(data), [], 0

    def add(start: int, end: int, is_text: bool) -> None:
        if end <= start:
            return
        if not is_text and runs and not runs[-1][2]:
            runs[-1] = (runs[-1][0], end, False)
        else:
            runs.append((start, end, is_text))

    while position < size:
        try:
            _, consumed = codecs.utf_8_decode(data[position:], "strict", False)
        except UnicodeDecodeError as error:
            valid_end, invalid_end = position + error.start, position + error.end
        else:
            valid_end, invalid_end = position + consumed, None
        add(position, valid_end, position == 0 or valid_end - position >= MIN_TEXT_RUN)
        if invalid_end is None:
            if valid_end < size and not hold_incomplete_tail:
                add(valid_end, size, False)
                valid_end = size
            return runs, valid_end
        add(valid_end, invalid_end, False)
        position = invalid_end
    return runs, size


@given(data=MIXED, hold=st.booleans())
def test_utf8_runs_agree_with_the_one_error_at_a_time_definition(data: bytes, hold: bool) -> None:
    assert utf8_runs(data, hold_incomplete_tail=hold) == runs_one_error_at_a_time(
        data, hold_incomplete_tail=hold
    )


@given(data=MIXED, hold=st.booleans())
def test_utf8_runs_cover_the_bytes_and_text_runs_are_strict_utf8(data: bytes, hold: bool) -> None:
    runs, end = utf8_runs(data, hold_incomplete_tail=hold)
    position = 0
    for start, stop, is_text in runs:
        assert start == position and stop > start
        if is_text:
            data[start:stop].decode("utf-8")  # raises if not strict UTF-8
        position = stop
    assert position == end
    assert end == len(data) if not hold else len(data) - end <= 3


def test_utf8_runs_on_random_bytes_match_the_definition() -> None:
    generator = random.Random(8)
    for size in (1, 7, 64, 1000, 65_536):
        data = generator.randbytes(size)
        for hold in (False, True):
            assert utf8_runs(data, hold_incomplete_tail=hold) == runs_one_error_at_a_time(
                data, hold_incomplete_tail=hold
            )


SEGMENTS = st.one_of(
    st.binary(min_size=1, max_size=90),
    st.text(min_size=1, max_size=50).map(str.encode),
    st.sampled_from(
        [
            b"t" * (MIN_TEXT_RUN - 1),
            b"t" * MIN_TEXT_RUN,
            "é".encode() * (MIN_TEXT_RUN // 2),
            "😀".encode() * (MIN_TEXT_RUN // 4 - 1) + b"abc",
            b"\xf0\x90\x80\x80\x80" * 8,  # four continuations in a row
            b"\xed\xa0\x80" * 12,  # encoded surrogates: never valid
            b"\xe0\x80\x80" * 12,  # overlong
        ]
    ),
)


@given(segments=st.lists(SEGMENTS, max_size=80), hold=st.booleans())
def test_long_interleavings_of_text_and_bytes_agree_with_the_definition(
    segments: list[bytes], hold: bool
) -> None:
    """Long enough for the pre-scan to find, merge and give up on stretches."""
    data = b"".join(segments)
    assert utf8_runs(data, hold_incomplete_tail=hold) == runs_one_error_at_a_time(
        data, hold_incomplete_tail=hold
    )


def test_sparse_and_dense_text_in_binary_match_the_definition() -> None:
    generator = random.Random(21)
    for gap in (40, 300, 5000):
        pieces = []
        while sum(map(len, pieces)) < 65_536:
            pieces.append(generator.randbytes(generator.randrange(1, gap)))
            line = "".join(generator.choice("ab é€😀\n") for _ in range(generator.randrange(5, 60)))
            pieces.append(line.encode())
        data = b"".join(pieces)
        for hold in (False, True):
            assert utf8_runs(data, hold_incomplete_tail=hold) == runs_one_error_at_a_time(
                data, hold_incomplete_tail=hold
            )


def test_a_character_split_at_a_read_edge_is_held_then_sent_whole() -> None:
    data = "ab€".encode()  # the euro sign is 3 bytes
    for cut in (3, 4):
        first, first_end = output_frames(
            [(0, OutputStream.stdout, data[:cut])], more_may_follow=True
        )
        assert first_end == 2
        assert [frame["data"] for frame in first] == ["ab"]
        second, second_end = output_frames(
            [(2, OutputStream.stdout, data[2:])], more_may_follow=False
        )
        assert second_end == len(data)
        assert [(frame["offset"], frame["data"]) for frame in second] == [(2, "€")]


def frame_bytes_of(frame: dict[str, object]) -> bytes:
    data = str(frame["data"])
    return base64.b64decode(data) if frame.get("encoding") == "base64" else data.encode()


@given(
    data=MIXED,
    cuts=st.lists(st.integers(min_value=1, max_value=64), max_size=20),
    frame_bytes=st.integers(min_value=4, max_value=64),
)
def test_frames_over_reads_of_any_size_carry_exactly_the_log(
    data: bytes, cuts: list[int], frame_bytes: int
) -> None:
    """What a viewer does: read from its cursor, frame, move the cursor to the end of what
    the frames carried; the log is still being written until the last read."""
    carried = bytearray()
    cursor = 0
    for size in cuts:
        piece = data[cursor : cursor + size]
        if not piece:
            break
        frames, end = output_frames(
            [(cursor, OutputStream.stdout, piece)], more_may_follow=True, frame_bytes=frame_bytes
        )
        for frame in frames:
            assert frame["offset"] == len(carried)
            carried += frame_bytes_of(dict(frame))
        cursor = end if end is not None else cursor
        assert len(carried) == cursor
    frames, _ = output_frames(
        [(cursor, OutputStream.stdout, data[cursor:])],
        more_may_follow=False,
        frame_bytes=frame_bytes,
    )
    for frame in frames:
        assert frame["offset"] == len(carried)
        carried += frame_bytes_of(dict(frame))
    assert bytes(carried) == data


def test_frames_of_a_random_binary_log_read_in_chunks_concatenate_to_the_log() -> None:
    data = os.urandom(1024 * 1024) + "tail ✓\n".encode()
    carried = bytearray()
    cursor = 0
    generator = random.Random(1)
    while cursor < len(data):
        size = generator.choice((1, 3, 1000, 65_536, 256 * 1024))
        more = cursor + size < len(data)
        frames, end = output_frames(
            [(cursor, OutputStream.stdout, data[cursor : cursor + size])], more_may_follow=more
        )
        for frame in frames:
            assert frame["offset"] == len(carried)
            carried += frame_bytes_of(dict(frame))
        assert end is not None
        cursor = end
    assert bytes(carried) == data
