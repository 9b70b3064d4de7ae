import hashlib
import random
import threading
from pathlib import Path

import pytest

from app.output.artifact_log import (
    ArtifactLog,
    OutputStream,
    artifact_log_path,
    existing_log_path,
    truncation_marker,
)

OUT, ERR, PTY = OutputStream.stdout, OutputStream.stderr, OutputStream.pty
# 100 bytes whose every position is recognisable: "000,001,002,…,024,"
NUMBERED = b"".join(b"%03d," % i for i in range(25))


def files_of(directory: Path) -> set[str]:
    """The names of the files below `directory`, in whichever shard they are."""
    return {path.name for path in directory.rglob("*") if path.is_file()}


def test_small_stream_is_stored_byte_exact(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_small")
    assert log.append(b"abc", OUT) == 3
    assert log.append(b"def", ERR) == 6
    log.finish()
    assert log.path == tmp_path / "ll" / "ex_small.log"  # the shard: the id's last two
    assert log.path.read_bytes() == b"abcdef"
    assert log.total_bytes == 6
    assert log.complete
    assert not log.truncated


def test_log_is_byte_exact_across_many_appends(tmp_path: Path) -> None:
    rng = random.Random(7)
    log = ArtifactLog.create(tmp_path, "ex_many")
    digest = hashlib.sha256()
    total = 0
    for _ in range(2000):
        chunk = rng.randbytes(rng.randint(1, 4096))
        digest.update(chunk)
        total = log.append(chunk, rng.choice((OUT, ERR)))
    log.finish()
    assert total == log.total_bytes == log.path.stat().st_size
    assert hashlib.sha256(log.path.read_bytes()).hexdigest() == digest.hexdigest()
    assert hashlib.sha256(log.read(0, total)).hexdigest() == digest.hexdigest()


def test_read_returns_logical_bytes_while_running(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_running")
    log.append(b"hello ", OUT)
    assert log.read(0, 100) == b"hello "
    log.append(b"world", OUT)
    assert log.read(6, 100) == b"world"
    assert log.read(2, 3) == b"llo"
    assert log.read(11, 100) == b""
    assert not log.complete


def test_read_labelled_splits_bytes_at_stream_switches(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_labels")
    log.append(b"out1", OUT)
    log.append(b"out2", OUT)
    log.append(b"err", ERR)
    log.append(b"out3", OUT)
    assert log.read_labelled(0, 100) == [
        (0, OUT, b"out1out2"),
        (8, ERR, b"err"),
        (11, OUT, b"out3"),
    ]
    assert log.read_labelled(6, 6) == [(6, OUT, b"t2"), (8, ERR, b"err"), (11, OUT, b"o")]
    assert log.read_labelled(9, 1) == [(9, ERR, b"r")]
    assert log.read_labelled(15, 10) == []


def test_index_records_only_the_stream_switches(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_index")
    for stream in (OUT, OUT, OUT, ERR, ERR, OUT):
        log.append(b"xy", stream)
    log.finish()
    index = (tmp_path / "ex" / "ex_index.idx").read_bytes()
    # Records are (offset: u64 little-endian, stream: u8) with stdout=1, stderr=2.
    switches = [(0, 1), (6, 2), (10, 1)]
    assert index == b"".join(
        offset.to_bytes(8, "little") + bytes([code]) for offset, code in switches
    )


def test_labels_of_many_switches_are_found_by_offset(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_switches")
    streams = [(OUT, ERR, PTY)[i % 3] for i in range(3000)]
    for stream in streams:
        log.append(b"ab", stream)
    pieces = log.read_labelled(4001, 5)
    assert pieces == [
        (4001, streams[2000], b"b"),
        (4002, streams[2001], b"ab"),
        (4004, streams[2002], b"ab"),
    ]


@pytest.mark.parametrize("max_bytes", [256 * 1024 * 1024, 4096])
def test_reading_while_a_writer_thread_appends_sees_only_written_bytes(
    tmp_path: Path, max_bytes: int
) -> None:
    rng = random.Random(11)
    chunks = [rng.randbytes(rng.randint(1, 700)) for _ in range(3000)]
    expected = b"".join(chunks)
    log = ArtifactLog.create(tmp_path, "ex_concurrent", max_bytes=max_bytes)
    writer_done = threading.Event()

    def write() -> None:
        for i, chunk in enumerate(chunks):
            log.append(chunk, (OUT, ERR)[i % 2])
        writer_done.set()

    writer = threading.Thread(target=write)
    writer.start()
    offset = 0
    checked = 0
    while not (writer_done.is_set() and offset >= log.total_bytes):
        offset = log.next_available(offset)
        data = log.read(offset, 1500)
        assert data == expected[offset : offset + len(data)]
        for start, _, piece in log.read_labelled(offset, 300):
            assert piece == expected[start : start + len(piece)]
        offset += len(data)
        checked += len(data)
    writer.join(timeout=10)
    assert not writer.is_alive()
    assert offset == len(expected)
    assert checked > 0
    log.finish()
    assert log.read(len(expected) - 10, 10) == expected[-10:]


def test_tiny_cap_keeps_head_and_rolling_tail_and_finish_writes_the_marker(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_capped", max_bytes=64)
    for start in range(0, len(NUMBERED), 7):
        log.append(NUMBERED[start : start + 7], OUT)
    assert log.total_bytes == 100
    assert log.truncated
    assert log.read(0, 100) == NUMBERED[:32]
    assert log.read(68, 100) == NUMBERED[68:]
    assert files_of(tmp_path) == {"ex_capped.log", "ex_capped.idx", "ex_capped.tail"}

    log.finish()
    marker = (
        b"\n[ARTIFACT TRUNCATED: kept first 32B + last 32B of 100B; 36B elided from the middle]\n"
    )
    assert truncation_marker(32, 32, 100) == marker
    assert log.path.read_bytes() == NUMBERED[:32] + marker + NUMBERED[68:]
    assert files_of(tmp_path) == {"ex_capped.log", "ex_capped.idx", "ex_capped.done"}
    assert log.total_bytes == 100
    assert log.read(0, 100) == NUMBERED[:32]
    assert log.read(70, 100) == NUMBERED[70:]


def test_evicted_middle_reads_empty_and_points_to_the_tail(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_evicted", max_bytes=64)
    log.append(NUMBERED, OUT)
    assert log.read(32, 10) == b""
    assert log.read(67, 10) == b""
    assert log.next_available(32) == 68
    assert log.next_available(67) == 68
    assert log.next_available(10) == 10
    assert log.next_available(80) == 80
    log.append(b"more", OUT)
    assert log.next_available(32) == 72
    assert log.read(72, 100) == NUMBERED[72:] + b"more"


def test_single_append_larger_than_the_cap_keeps_its_head_and_tail(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_huge", max_bytes=64)
    log.append(NUMBERED * 3, OUT)
    log.finish()
    data = NUMBERED * 3
    marker = truncation_marker(32, 32, 300)
    assert log.path.read_bytes() == data[:32] + marker + data[-32:]


def test_labels_follow_offsets_into_the_kept_tail(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_tail_labels", max_bytes=64)
    log.append(NUMBERED[:90], OUT)
    log.append(NUMBERED[90:], ERR)
    expected = [(68, OUT, NUMBERED[68:90]), (90, ERR, NUMBERED[90:])]
    assert log.read_labelled(68, 100) == expected
    log.finish()
    assert log.read_labelled(68, 100) == expected


def test_open_existing_after_finish_reads_the_same_bytes_and_labels(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_reopen")
    log.append(b"out\n", OUT)
    log.append(b"err\n", ERR)
    log.finish()
    reopened = ArtifactLog.open_existing(tmp_path, "ex_reopen")
    assert reopened.complete
    assert reopened.total_bytes == 8
    assert reopened.read(0, 100) == b"out\nerr\n"
    assert reopened.read_labelled(0, 100) == [(0, OUT, b"out\n"), (4, ERR, b"err\n")]


def test_open_existing_after_a_truncated_finish_keeps_logical_offsets(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_reopen_capped", max_bytes=64)
    log.append(NUMBERED, PTY)
    log.finish()
    reopened = ArtifactLog.open_existing(tmp_path, "ex_reopen_capped")
    assert (reopened.complete, reopened.truncated, reopened.total_bytes) == (True, True, 100)
    assert reopened.read(0, 100) == NUMBERED[:32]
    assert reopened.next_available(40) == 68
    assert reopened.read_labelled(68, 100) == [(68, PTY, NUMBERED[68:])]


def test_open_existing_of_an_unfinished_log_reads_it_and_finish_settles_it(tmp_path: Path) -> None:
    # The writer of a server that died: never finished.
    ArtifactLog.create(tmp_path, "ex_lost", max_bytes=64).append(NUMBERED, OUT)
    lost = ArtifactLog.open_existing(tmp_path, "ex_lost")
    assert not lost.complete
    assert lost.total_bytes == 100
    assert lost.read(68, 100) == NUMBERED[68:]
    lost.finish()
    assert lost.complete
    assert lost.path.read_bytes() == NUMBERED[:32] + truncation_marker(32, 32, 100) + NUMBERED[68:]
    assert ArtifactLog.open_existing(tmp_path, "ex_lost").complete


def test_open_existing_of_an_unknown_id_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ArtifactLog.open_existing(tmp_path, "ex_missing")


def test_finish_is_idempotent_and_refuses_later_appends(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_finished")
    log.append(b"x", OUT)
    log.finish()
    log.finish()
    assert log.complete
    with pytest.raises(RuntimeError):
        log.append(b"y", OUT)
    assert log.path.read_bytes() == b"x"


def test_create_refuses_to_overwrite_an_existing_log(tmp_path: Path) -> None:
    ArtifactLog.create(tmp_path, "ex_twice").finish()
    with pytest.raises(FileExistsError):
        ArtifactLog.create(tmp_path, "ex_twice")


def test_delete_removes_every_file(tmp_path: Path) -> None:
    log = ArtifactLog.create(tmp_path, "ex_gone", max_bytes=64)
    log.append(NUMBERED, OUT)
    log.delete()
    assert files_of(tmp_path) == set()
    finished = ArtifactLog.create(tmp_path, "ex_gone_done")
    finished.append(b"x", OUT)
    finished.finish()
    finished.delete()
    assert files_of(tmp_path) == set()


@pytest.mark.parametrize("execution_id", ["../etc/passwd", "a/b", "", "ex 1", "x.log"])
def test_unsafe_execution_id_is_refused(tmp_path: Path, execution_id: str) -> None:
    with pytest.raises(ValueError):
        ArtifactLog.create(tmp_path, execution_id)


def test_the_first_log_makes_its_directory_and_the_next_ones_reuse_it(tmp_path: Path) -> None:
    directory = tmp_path / "not" / "yet"
    first = ArtifactLog.create(directory, "first")
    second = ArtifactLog.create(directory, "second")
    for log, data in ((first, b"one\n"), (second, b"two\n")):
        log.append(data, OutputStream.stdout)
        log.finish()
        assert log.read(0, 100) == data
    with pytest.raises(FileExistsError):
        ArtifactLog.create(directory, "first")  # never overwrites a log


def test_a_new_log_has_no_file_until_it_is_started(tmp_path: Path) -> None:
    # The loop makes the object; the spawn's worker thread creates the files.
    log = ArtifactLog.new(tmp_path, "ex_later")
    assert not log.started
    assert files_of(tmp_path) == set()
    with pytest.raises(RuntimeError):
        log.append(b"early", OUT)
    log.start()
    assert log.started
    assert log.append(b"abc", OUT) == 3
    log.finish()
    assert log.path.read_bytes() == b"abc"
    assert ArtifactLog.open_existing(tmp_path, "ex_later").read(0, 10) == b"abc"


def test_a_log_refused_before_its_start_leaves_nothing_behind(tmp_path: Path) -> None:
    # A job refused at the cap, or a spawn refused before the log started: finish and delete
    # make no file (no `.done` for a log that never was).
    for refuse in (ArtifactLog.delete, ArtifactLog.finish):
        log = ArtifactLog.new(tmp_path, "ex_refused")
        refuse(log)
        assert files_of(tmp_path) == set()


def test_a_start_that_fails_half_way_removes_what_it_made(tmp_path: Path) -> None:
    (tmp_path / "lf").mkdir()
    (tmp_path / "lf" / "ex_half.idx").write_bytes(b"")  # the second file cannot be created
    log = ArtifactLog.new(tmp_path, "ex_half")
    with pytest.raises(FileExistsError):
        log.start()
    assert not log.started
    assert files_of(tmp_path) == {"ex_half.idx"}


def test_logs_are_sharded_by_the_ids_last_two_characters(tmp_path: Path) -> None:
    for execution_id in ("run_a1", "run_b1", "run_a2"):
        ArtifactLog.create(tmp_path, execution_id).finish()
    assert {path.name for path in tmp_path.iterdir()} == {"a1", "b1", "a2"}
    assert artifact_log_path(tmp_path, "run_b1") == tmp_path / "b1" / "run_b1.log"


def test_a_flat_log_written_before_the_shards_is_read_and_deleted(tmp_path: Path) -> None:
    written = ArtifactLog.create(tmp_path, "ex_old")
    written.append(b"legacy\n", OUT)
    written.finish()
    for path in (tmp_path / "ld").iterdir():  # where it was before the shards
        path.rename(tmp_path / path.name)
    (tmp_path / "ld").rmdir()
    assert existing_log_path(tmp_path, "ex_old") == tmp_path / "ex_old.log"
    log = ArtifactLog.open_existing(tmp_path, "ex_old")
    assert log.complete
    assert log.read(0, 100) == b"legacy\n"
    log.delete()
    assert files_of(tmp_path) == set()
    assert existing_log_path(tmp_path, "ex_old") is None
