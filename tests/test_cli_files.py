"""`shellgate files get|put` against a real uvicorn on loopback: byte-exact both ways with a
sha256 check, modes, a prompt that says how to come back, refusals as one line and exit 2."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from app.cli.connection import EXIT_NOT_FINISHED, EXIT_REFUSED
from tests.conftest import AGENT, APPROVER, LiveServer
from tests.test_cli import shellgate


def test_put_then_get_round_trips_bytes_exactly(server: LiveServer, tmp_path: Path) -> None:
    data = os.urandom(2 * 1024 * 1024 + 3)
    local = tmp_path / "upload.bin"
    local.write_bytes(data)
    put = shellgate(
        server.base_url, AGENT, "files", "put", str(local), "cli/up.bin", "--mode", "0640"
    )
    assert put.exit_code == EXIT_REFUSED  # the remote directory does not exist yet
    assert "does not exist" in put.output
    (server.settings.workspace / "cli").mkdir(exist_ok=True)
    put = shellgate(
        server.base_url, AGENT, "files", "put", str(local), "cli/up.bin", "--mode", "0640"
    )
    assert put.exit_code == 0, put.output
    remote = server.settings.workspace / "cli" / "up.bin"
    assert f"-> {remote} ({len(data)} bytes, mode 0640)" in put.stdout
    assert remote.read_bytes() == data
    assert remote.stat().st_mode & 0o777 == 0o640

    into = tmp_path / "downloads"
    into.mkdir()
    got = shellgate(server.base_url, AGENT, "files", "get", "cli/up.bin", str(into))
    assert got.exit_code == 0, got.output
    assert hashlib.sha256((into / "up.bin").read_bytes()).digest() == hashlib.sha256(data).digest()
    assert [p.name for p in into.iterdir()] == ["up.bin"]  # no temporary file left


def test_put_with_parents_makes_the_remote_directories(server: LiveServer, tmp_path: Path) -> None:
    local = tmp_path / "deep.txt"
    local.write_bytes(b"deep\n")
    put = shellgate(
        server.base_url, AGENT, "files", "put", "--parents", str(local), "cli-deep/a/b/"
    )
    assert put.exit_code == 0, put.output
    assert (server.settings.workspace / "cli-deep/a/b/deep.txt").read_bytes() == b"deep\n"


def test_put_into_a_remote_directory_ending_with_a_slash_keeps_the_local_name(
    server: LiveServer, tmp_path: Path
) -> None:
    local = tmp_path / "named.txt"
    local.write_bytes(b"into a directory\n")
    (server.settings.workspace / "cli-into").mkdir(exist_ok=True)
    put = shellgate(server.base_url, AGENT, "files", "put", str(local), "cli-into/")
    assert put.exit_code == 0, put.output
    assert (server.settings.workspace / "cli-into" / "named.txt").read_bytes() == local.read_bytes()
    # A directory that is not there is a 404, never a file called `cli-missing`.
    missing = shellgate(server.base_url, AGENT, "files", "put", str(local), "cli-missing/")
    assert missing.exit_code == EXIT_REFUSED
    assert not (server.settings.workspace / "cli-missing").exists()


def test_get_to_stdout_and_an_empty_file(server: LiveServer, tmp_path: Path) -> None:
    (server.settings.workspace / "empty.txt").write_bytes(b"")
    (server.settings.workspace / "hello.txt").write_bytes(b"hello\n")
    out = shellgate(server.base_url, AGENT, "files", "get", "hello.txt", "-")
    assert out.exit_code == 0 and out.stdout == "hello\n"
    empty = shellgate(server.base_url, AGENT, "files", "get", "empty.txt", str(tmp_path / "e"))
    assert empty.exit_code == 0 and (tmp_path / "e").read_bytes() == b""
    missing = shellgate(server.base_url, AGENT, "files", "get", "nope.txt", str(tmp_path / "n"))
    assert missing.exit_code == EXIT_REFUSED
    assert "no such file" in missing.output and "HTTP 404" in missing.output
    assert not (tmp_path / "n").exists()


def test_a_prompted_put_says_how_to_come_back(server: LiveServer, tmp_path: Path) -> None:
    local = tmp_path / "src.txt"
    local.write_text("outside")
    target = tmp_path / "outside-target.txt"  # outside the workspace: prompt by default
    asked = shellgate(
        server.base_url, AGENT, "files", "put", str(local), str(target), "--approval-wait", "0"
    )
    assert asked.exit_code == EXIT_NOT_FINISHED
    approval_id = asked.output.split("--approval-id ")[1].split()[0]
    assert approval_id.startswith("ap_")
    assert shellgate(server.base_url, APPROVER, "approve", approval_id).exit_code == 0
    done = shellgate(
        server.base_url,
        AGENT,
        "files",
        "put",
        str(local),
        str(target),
        "--approval-id",
        approval_id,
    )
    assert done.exit_code == 0, done.output
    assert target.read_text() == "outside"


def test_a_prompted_put_can_be_cancelled_and_its_approval_id_then_fails(
    server: LiveServer, tmp_path: Path
) -> None:
    local = tmp_path / "src.txt"
    local.write_text("never")
    target = tmp_path / "cancelled-target.txt"  # outside the workspace: prompt by default
    asked = shellgate(
        server.base_url, AGENT, "files", "put", str(local), str(target), "--approval-wait", "0"
    )
    assert asked.exit_code == EXIT_NOT_FINISHED
    approval_id = asked.output.split("--approval-id ")[1].split()[0]
    operation_id = asked.output.split("shellgate files cancel ")[1].split(")")[0]
    assert operation_id.startswith("fo_")
    cancelled = shellgate(server.base_url, AGENT, "files", "cancel", operation_id)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.output.startswith(f"{operation_id} rejected: Approval expired by alice")
    retry = shellgate(
        server.base_url,
        AGENT,
        "files",
        "put",
        str(local),
        str(target),
        "--approval-id",
        approval_id,
    )
    assert retry.exit_code != 0 and "cancelled by its requester" in retry.output
    assert not target.exists()
