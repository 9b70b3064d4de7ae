"""The latest output kept in memory for viewers at the live edge (app/output/live_edge.py): from any
offset it keeps, it gives exactly what the log gives (bytes, offsets, stream labels), never
reaches back further than the log keeps, and stays bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.output.artifact_log import ArtifactLog
from app.output.live_edge import MAX_CHUNKS, RecentOutput
from app.process import OutputStream

CHUNKS = st.lists(
    st.tuples(st.sampled_from(list(OutputStream)), st.binary(min_size=1, max_size=300)),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    chunks=CHUNKS,
    limit=st.sampled_from([0, 1, 7, 100, 1000, 100_000]),
    max_bytes=st.sampled_from([64, 600, 10_000_000]),
    read_limit=st.sampled_from([1, 5, 256, 100_000]),
    data=st.data(),
)
def test_memory_gives_what_the_log_gives_from_every_offset_it_keeps(
    tmp_path_factory: pytest.TempPathFactory,
    chunks: list[tuple[OutputStream, bytes]],
    limit: int,
    max_bytes: int,
    read_limit: int,
    data: st.DataObject,
) -> None:
    directory = tmp_path_factory.mktemp("logs")
    log = ArtifactLog.create(directory, "run", max_bytes=max_bytes)
    recent = RecentOutput(min(limit, log.kept_tail_bytes))
    recent.follow(log.total_bytes)
    for stream, chunk in chunks:
        total = log.append(chunk, stream)
        recent.remember(total - len(chunk), stream, chunk)
        assert recent.start >= total - log.kept_tail_bytes or not log.truncated
        cursor = data.draw(st.integers(recent.start, total + 2), label="cursor")
        pieces = recent.since(cursor, read_limit)
        assert pieces is not None
        assert log.next_available(cursor) == cursor  # nothing kept is evicted from the log
        assert pieces == log.read_labelled(cursor, read_limit)
        assert recent.since(recent.start - 1, read_limit) is None or recent.start == 0
    assert recent.start <= log.total_bytes
    log.finish()


def test_a_stream_of_tiny_writes_keeps_a_bounded_number_of_chunks() -> None:
    recent = RecentOutput(1 << 20)
    recent.follow(0)
    for offset in range(10 * MAX_CHUNKS):
        recent.remember(offset, OutputStream.pty, b"k")
    assert recent.start == 10 * MAX_CHUNKS - MAX_CHUNKS
    assert recent.since(recent.start - 1, 100) is None
    pieces = recent.since(recent.start, 1 << 20)
    assert pieces == [(recent.start, OutputStream.pty, b"k" * MAX_CHUNKS)]


def test_nothing_is_kept_while_nobody_follows() -> None:
    recent = RecentOutput(1000)
    recent.remember(0, OutputStream.stdout, b"before anyone follows")
    assert recent.since(0, 100) is None
    recent.follow(21)
    recent.remember(21, OutputStream.stdout, b"seen")
    assert recent.since(21, 100) == [(21, OutputStream.stdout, b"seen")]
    assert recent.since(0, 100) is None  # older than what is kept: read the log
    recent.unfollow()
    assert recent.since(21, 100) is None
