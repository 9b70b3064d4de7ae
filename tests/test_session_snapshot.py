"""A session's snapshot is as large as what its commands export and define; installing the one
a call saved compares it with the current one a slice at a time: before, both were read whole
(a 50 MB exported variable: the server's RSS went from 87 to 180 MiB at every save)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from app.sessions.snapshot import (
    SNAPSHOT_END,
    NotOwnFile,
    copy_state_into,
    install_saved_memory,
    install_state,
)

SIZE = 20 * 1024 * 1024


def _install(saved: Path, state: Path) -> int:
    """Install `saved`; the peak of Python allocations meanwhile, in bytes."""
    tracemalloc.start()
    try:
        install_state(saved, state)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_unchanged_snapshot_is_left_as_it_is_without_reading_it_whole(tmp_path: Path) -> None:
    content = b"export BIG=" + b"a" * SIZE + b"\n" + SNAPSHOT_END
    saved, state = tmp_path / "saved", tmp_path / "state.sh"
    saved.write_bytes(content)
    state.write_bytes(content)
    inode = state.stat().st_ino
    peak = _install(saved, state)
    assert state.stat().st_ino == inode  # not replaced
    assert saved.exists()  # the caller removes it
    assert peak < 4 * 1024 * 1024, peak  # before: twice the snapshot


def test_a_changed_snapshot_replaces_the_state(tmp_path: Path) -> None:
    base = b"f() { :; }\n" * (SIZE // 11)
    cases = {
        "last byte": (base + SNAPSHOT_END, base[:-1] + b"x" + SNAPSHOT_END),
        "size": (base + SNAPSHOT_END, base + b"g() { :; }\n" + SNAPSHOT_END),
        "no state yet": (None, base + SNAPSHOT_END),
    }
    for name, (old, new) in cases.items():
        saved, state = tmp_path / f"saved-{name}", tmp_path / f"state-{name}"
        saved.write_bytes(new)
        if old is not None:
            state.write_bytes(old)
        peak = _install(saved, state)
        assert state.read_bytes() == new, name
        assert not saved.exists(), name
        assert peak < 4 * 1024 * 1024, (name, peak)


# --- names a command put in the session's directory (app/sessions/snapshot.py) ----------------


def _memory_file(content: bytes) -> int:
    fd = os.memfd_create("saved")
    os.write(fd, content)
    return fd


def test_a_state_that_is_a_link_or_a_fifo_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.env"
    secret.write_text("LEAKED=s3cr3t\n")
    state = tmp_path / "state.sh"
    state.symlink_to(secret)
    into = os.memfd_create("state")
    try:
        with pytest.raises(NotOwnFile):
            copy_state_into(state, into)
        assert os.fstat(into).st_size == 0
        state.unlink()
        os.mkfifo(state)  # opened without O_NONBLOCK, the read would wait for a writer
        with pytest.raises(NotOwnFile):
            copy_state_into(state, into)
        copy_state_into(tmp_path / "absent.sh", into)  # no state yet: nothing, no error
    finally:
        os.close(into)


def test_a_saved_snapshot_that_is_a_link_changes_nothing(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"export X=1\n" + SNAPSHOT_END)
    saved, state = tmp_path / "state.next", tmp_path / "state.sh"
    saved.symlink_to(elsewhere)
    state.write_bytes(b"export OLD=1\n" + SNAPSHOT_END)
    with pytest.raises(NotOwnFile):
        install_state(saved, state)
    assert state.read_bytes() == b"export OLD=1\n" + SNAPSHOT_END


def test_a_working_file_that_is_a_directory_leaves_the_state_as_it_was(tmp_path: Path) -> None:
    working, state = tmp_path / "state.next", tmp_path / "state.sh"
    working.mkdir()
    state.write_bytes(b"export OLD=1\n" + SNAPSHOT_END)
    saved = _memory_file(b"export NEW=1\n" + SNAPSHOT_END)
    try:
        with pytest.raises(NotOwnFile):
            install_saved_memory(saved, state, working)
    finally:
        os.close(saved)
    assert state.read_bytes() == b"export OLD=1\n" + SNAPSHOT_END


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_working_file_that_is_not_a_file_is_replaced_never_written_through(
    tmp_path: Path, kind: str
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    working, state = tmp_path / "state.next", tmp_path / "state.sh"
    if kind == "link":
        working.symlink_to(victim)
    else:
        os.mkfifo(working)
    state.symlink_to(victim)  # compared with, never read through either
    content = b"export NEW=1\n" + SNAPSHOT_END
    saved = _memory_file(content)
    try:
        install_saved_memory(saved, state, working)
    finally:
        os.close(saved)
    assert victim.read_text() == "precious\n"
    assert not state.is_symlink() and state.read_bytes() == content
    assert not working.exists()


def test_the_directory_a_call_ended_in_is_read_no_further_than_a_path(tmp_path: Path) -> None:
    """What the EXIT trap leaves (`cwd.next`, or a standby's memory file) is the command's to
    write: 64 MiB there was read whole into the server's memory."""
    from app.sessions.service import _last_directory

    huge = os.memfd_create("cwd")
    try:
        os.write(huge, str(tmp_path).encode() + b"/" * (64 * 1024 * 1024))
        tracemalloc.start()
        try:
            assert _last_directory(tmp_path / "cwd.next", huge) is None
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1024 * 1024, peak
        exact = os.memfd_create("cwd")
        os.write(exact, str(tmp_path).encode())
        assert _last_directory(tmp_path / "cwd.next", exact) == str(tmp_path)
        os.close(exact)
        (tmp_path / "cwd.next").write_text(str(tmp_path))
        assert _last_directory(tmp_path / "cwd.next", None) == str(tmp_path)
    finally:
        os.close(huge)
