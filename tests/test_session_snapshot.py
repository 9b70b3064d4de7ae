"""A session's snapshot is as large as what its commands export and define; installing the one
a call saved compares it with the current one a slice at a time: before, both were read whole
(a 50 MB exported variable: the server's RSS went from 87 to 180 MiB at every save)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from app.sessions.snapshot import SNAPSHOT_END, install_state

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
