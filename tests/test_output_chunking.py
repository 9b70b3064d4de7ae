"""The inline window does not depend on how reads split the stream: the same bytes fed in any
chunking give the same summary as one feed (counters, windows, text). Reads split escape
sequences, CR/LF pairs and characters anywhere, so any difference would make `total_lines`,
`elided_bytes` and the shown text depend on pipe timing."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from app.output.window import _MAX_ESCAPE_CARRY, OutputSink, OutputSummary

LONG = _MAX_ESCAPE_CARRY + 37  # past the carry cap, so the carry is shortened
PIECES = [
    b"a",
    b"word ",
    b"\n",
    b"\r",
    b"\r\n",
    b"\t",
    b"\x00",
    b"\x07",
    b"\x1b",
    b"\x1b\\",
    b"\x1b[",
    b"\x1b[31m",
    b"\x1b[1;2",
    b"\x1b[?25l",
    b"\x1b[1 q",
    b"\x1b]0;title\x07",
    b"\x1b]8;;https://example.com\x1b\\",
    b"\x1b]",
    b"\x1bP",
    b"\x1b_Gf=100;",
    b"\x1b(B",
    b"\x1b ",
    b"\x1b7",
    b"\x1bZ",
    "é".encode(),
    "€".encode(),
    "😀".encode(),
    "😀".encode()[:2],
    b"\xc2\x9b",
    b"\xc2",
    b"\xff",
    b"\x80",
    b"1" * LONG,  # CSI parameters
    b" " * LONG,  # CSI or nF intermediates
    b"A" * LONG,  # an OSC/DCS body, or text
    "é".encode() * (LONG // 2),
]
STREAMS = st.lists(st.sampled_from(PIECES), max_size=24).map(b"".join) | st.binary(max_size=300)


@st.composite
def chunkings(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    data = draw(STREAMS)
    cuts = sorted(draw(st.sets(st.integers(0, len(data)), max_size=12)))
    edges = [0, *cuts, len(data)]
    return data, [data[start:end] for start, end in itertools.pairwise(edges)]


def summary_of(chunks: list[bytes], **windows: int) -> OutputSummary:
    sink = OutputSink(**windows)
    for chunk in chunks:
        sink.feed(chunk)
    sink.flush()
    return sink.summary()


WINDOWS = st.fixed_dictionaries(
    {
        "head_bytes": st.sampled_from([0, 1, 7, 64, 4096]),
        "tail_bytes": st.sampled_from([1, 5, 64, 4096]),
        "max_columns": st.sampled_from([0, 4, 9, 80, 768]),
    }
)


@settings(max_examples=600, deadline=None)
@given(stream=chunkings(), windows=WINDOWS)
def test_any_chunking_gives_the_one_feed_summary(
    stream: tuple[bytes, list[bytes]], windows: dict[str, int]
) -> None:
    data, chunks = stream
    assert summary_of(chunks, **windows) == summary_of([data], **windows)


@settings(max_examples=100, deadline=None)
@given(data=STREAMS, windows=WINDOWS)
def test_byte_by_byte_gives_the_one_feed_summary(data: bytes, windows: dict[str, int]) -> None:
    one_byte_chunks = [data[i : i + 1] for i in range(len(data))]
    assert summary_of(one_byte_chunks, **windows) == summary_of([data], **windows)


def test_a_string_cancelled_by_another_escape_shows_none_of_its_body() -> None:
    # A terminal drops an OSC body at any ESC; keeping it visible would make the text depend
    # on whether the body outgrew the carry before the cancelling ESC arrived.
    data = b"a\x1b]" + b"B" * (2 * _MAX_ESCAPE_CARRY) + b"\x1b[1mc\n"
    for chunks in ([data], [data[:5], data[5:]], [data[:-6], data[-6:]]):
        assert summary_of(chunks).output == "ac\n"


def test_a_broken_control_sequence_loses_its_parameter_bytes() -> None:
    data = b"a\x1b[" + b"1" * (2 * _MAX_ESCAPE_CARRY) + b"\nb"
    for chunks in ([data], [data[:-2], data[-2:]]):
        summary = summary_of(chunks)
        assert (summary.output, summary.total_lines) == ("a\nb", 2)
