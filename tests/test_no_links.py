"""Acting on a judged path without following a link (app/files/no_links.py), on a real file
tree: a link in any part of the path, the last included, is refused as `LinkOnPath`, never
followed; a path without one opens, stats and takes new directories as the plain calls do."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from app.core.errors import ConflictError
from app.files.no_links import (
    LinkOnPath,
    open_directory,
    open_without_links,
    stat_without_links,
)
from app.files.paths import locate, make_directories, os_error
from app.files.transfer import Upload, describe, open_regular
from app.sandbox.hidden import HiddenPaths


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/a/b/file.txt, and tmp/secret/file.txt: what a link would lead to."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "file.txt").write_text("judged")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "file.txt").write_text("secret")
    return tmp_path


def swap_for_link(directory: Path, target: Path) -> None:
    directory.rename(directory.with_name(directory.name + ".aside"))
    directory.symlink_to(target)


def read(fd: int) -> bytes:
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def test_a_path_without_links_opens_and_stats(tree: Path) -> None:
    path = str(tree / "a" / "b" / "file.txt")
    assert read(open_without_links(path, os.O_RDONLY)) == b"judged"
    assert stat_without_links(path).st_size == len("judged")
    assert stat_without_links("/").st_ino == os.stat("/").st_ino
    os.close(open_directory("/"))


@pytest.mark.parametrize("part", ["a", "a/b"])
def test_a_directory_on_the_path_that_became_a_link_is_refused(tree: Path, part: str) -> None:
    path = str(tree / "a" / "b" / "file.txt")
    (tree / "secret" / "b").mkdir()
    (tree / "secret" / "b" / "file.txt").write_text("secret")
    swap_for_link(tree / part, tree / "secret")
    assert Path(path).read_text() == "secret"  # what following it would give
    with pytest.raises(LinkOnPath) as raised:
        open_without_links(path, os.O_RDONLY)
    assert raised.value.part == str(tree / part)
    assert raised.value.errno == errno.ELOOP
    with pytest.raises(LinkOnPath):
        stat_without_links(path)


def test_a_last_part_that_became_a_link_is_refused(tree: Path) -> None:
    path = tree / "a" / "b" / "file.txt"
    path.unlink()
    path.symlink_to(tree / "secret" / "file.txt")
    with pytest.raises(LinkOnPath) as raised:
        open_without_links(str(path), os.O_RDONLY)
    assert raised.value.part == str(path)
    with pytest.raises(LinkOnPath):
        stat_without_links(str(path))


def test_other_failures_are_the_kernels_own(tree: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_without_links(str(tree / "a" / "missing" / "file.txt"), os.O_RDONLY)
    with pytest.raises(NotADirectoryError):
        open_without_links(str(tree / "a" / "b" / "file.txt" / "under"), os.O_RDONLY)
    with pytest.raises(ValueError, match="not an absolute path"):
        open_directory("a/b")


def test_the_files_api_answers_a_link_on_the_path_with_a_409_that_says_so(tree: Path) -> None:
    error = os_error(LinkOnPath("/w/d"), "/w/d/file.txt")
    assert isinstance(error, ConflictError)
    assert error.message.startswith("/w/d/file.txt changed after it was judged: /w/d is a")


def test_a_read_judged_then_swapped_reads_nothing(tree: Path) -> None:
    """The allowed read's race: judged (`locate`), then the directory swapped for a link
    before the read opens it."""
    located = locate("a/b/file.txt", str(tree))
    assert located.resolved == str(tree / "a" / "b" / "file.txt")
    swap_for_link(tree / "a", tree / "secret")
    (tree / "secret" / "b").mkdir()
    (tree / "secret" / "b" / "file.txt").write_text("secret")
    with pytest.raises(ConflictError, match="changed after it was judged"):
        open_regular(located)
    for with_sha256 in (False, True):
        with pytest.raises(ConflictError, match="changed after it was judged"):
            describe(located, with_sha256=with_sha256, hidden=HiddenPaths(()))


def test_an_upload_judged_then_swapped_writes_nothing_anywhere(tree: Path) -> None:
    located = locate("a/b/new.txt", str(tree))
    swap_for_link(tree / "a" / "b", tree / "secret")
    upload = Upload(located, None)
    with pytest.raises(ConflictError, match="changed after it was judged"):
        upload.open()
    upload.abort()
    assert sorted(os.listdir(tree / "secret")) == ["file.txt"]
    assert sorted(os.listdir(tree / "a" / "b.aside")) == ["file.txt"]


def test_an_upload_over_a_file_that_became_a_link_replaces_nothing_it_leads_to(
    tree: Path,
) -> None:
    located = locate("a/b/file.txt", str(tree))
    target = tree / "a" / "b" / "file.txt"
    target.unlink()
    target.symlink_to(tree / "secret" / "file.txt")
    upload = Upload(located, None)
    with pytest.raises(ConflictError, match="changed after it was judged"):
        upload.open()
    upload.abort()
    assert (tree / "secret" / "file.txt").read_text() == "secret"
    assert target.is_symlink()


def test_an_upload_keeps_to_the_directory_it_opened(tree: Path) -> None:
    """Once open, the upload's temporary file and its rename are in the directory it opened:
    swapping the path for a link before the commit changes nothing of where it lands."""
    located = locate("a/b/new.txt", str(tree))
    upload = Upload(located, None)
    upload.open()
    upload.write(b"landed")
    swap_for_link(tree / "a" / "b", tree / "secret")
    upload.commit()
    assert (tree / "a" / "b.aside" / "new.txt").read_bytes() == b"landed"
    assert sorted(os.listdir(tree / "secret")) == ["file.txt"]
    assert [name for name in os.listdir(tree / "a" / "b.aside") if "shellgate" in name] == []


def test_directories_made_for_parents_are_made_where_judged_or_not_at_all(tree: Path) -> None:
    located = locate("a/b/new/deeper/file.txt", str(tree))
    swap_for_link(tree / "a" / "b", tree / "secret")
    with pytest.raises(ConflictError, match="changed after it was judged"):
        make_directories([str(tree / "a/b/new"), str(tree / "a/b/new/deeper")], located.path)
    assert sorted(os.listdir(tree / "secret")) == ["file.txt"]
    make_directories([str(tree / "a/b.aside/new"), str(tree / "a/b.aside/new/x")], "shown")
    assert (tree / "a" / "b.aside" / "new" / "x").is_dir()


def test_an_upload_whose_temporary_file_was_replaced_is_not_recorded_as_landed(
    tree: Path,
) -> None:
    """A command in the directory can rename a file of its own over the upload's temporary
    file, by its name, before the commit renames that name over the target."""
    located = locate("a/b/new.txt", str(tree))
    upload = Upload(located, None)
    upload.open()
    upload.write(b"sent")
    (temporary,) = [name for name in os.listdir(tree / "a" / "b") if "shellgate" in name]
    (tree / "a" / "b" / "theirs").write_bytes(b"theirs")
    os.replace(tree / "a" / "b" / "theirs", tree / "a" / "b" / temporary)
    with pytest.raises(ConflictError, match="the upload did not land"):
        upload.commit()
    upload.abort()
    assert (tree / "a" / "b" / "new.txt").read_bytes() == b"theirs"
