"""The loop's lock-keeping reads (app/process/loop_read.py) behave as `os.read` on a real
non-blocking pipe and terminal: bytes, EOF, nothing to read, errors."""

from __future__ import annotations

import contextlib
import errno
import os
import pty

import pytest

from app.process.loop_read import BUFFER_SIZE, LoopReader


@pytest.fixture
def pipe():
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):  # a test may have closed it
            os.close(fd)


def test_reads_what_the_pipe_holds_and_appends_across_reads(pipe):
    read_end, write_end = pipe
    reader = LoopReader()
    os.write(write_end, b"first ")
    assert reader.read_into(read_end, 100) == 6
    os.write(write_end, b"second\x00\xff")
    assert reader.read_into(read_end, 4) == 4
    assert reader.read_into(read_end, 100) == 4
    assert reader.take() == b"first second\x00\xff"
    assert reader.take() == b""


def test_an_empty_pipe_is_blocking_io_and_a_closed_one_is_eof(pipe):
    read_end, write_end = pipe
    reader = LoopReader()
    with pytest.raises(BlockingIOError):
        reader.read_into(read_end, 10)
    os.write(write_end, b"last")
    os.close(write_end)
    assert reader.read_into(read_end, 10) == 4
    assert reader.read_into(read_end, 10) == 0
    assert reader.take() == b"last"


def test_a_large_read_is_whole(pipe):
    read_end, write_end = pipe
    data = os.urandom(60_000)
    os.write(write_end, data)
    reader = LoopReader()
    assert reader.read_into(read_end, 128 * 1024) == len(data)
    assert reader.take() == data


def test_errors_carry_their_errno():
    read_end, write_end = os.pipe()
    os.close(read_end)
    os.close(write_end)
    with pytest.raises(OSError) as raised:
        LoopReader().read_into(read_end, 10)
    assert raised.value.errno == errno.EBADF


def test_a_terminal_whose_slave_is_closed_reads_eio():
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    try:
        os.write(slave, b"hello\n")
        os.close(slave)
        reader = LoopReader()
        assert reader.read_into(master, 100) > 0
        assert reader.take().startswith(b"hello")
        with pytest.raises(OSError) as raised:
            reader.read_into(master, 100)
        assert raised.value.errno == errno.EIO
    finally:
        os.close(master)


def test_a_read_past_the_buffer_is_refused(pipe):
    read_end, _ = pipe
    with pytest.raises(ValueError):
        LoopReader().read_into(read_end, BUFFER_SIZE + 1)
