"""The server's open-files limit (app/process/descriptor_limit.py, docs/operations.md#open-files):
raised for the server at its start and never for its commands; and a server that runs out
anyway answers 503 `descriptors_exhausted` (never a 500, never a log said to be gone), then
serves again once descriptors are free, without a restart."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from tests.databases import ServerDatabase
from tests.faults.server_process import server_env, server_process

SOFT, HARD = 512, 4096


def _limits_of(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line")


@pytest.mark.parametrize("command_limit", ["65536", "0"], ids=["own-limit", "no-limit"])
def test_the_server_raises_its_limit_and_its_commands_keep_the_one_it_was_given(
    tmp_path: Path, database: ServerDatabase, command_limit: str
) -> None:
    env = server_env(tmp_path, database, limit_open_files=command_limit)
    with (
        server_process(env, tmp_path / "server.log", open_files=(SOFT, HARD)) as server,
        server.client() as client,
    ):
        assert _limits_of(server.process.pid) == (HARD, HARD)
        for pty in (False, True):
            record = client.post(
                "/v1/executions",
                json={"command": "echo $(ulimit -Sn) $(ulimit -Hn)", "pty": pty},
            ).json()
            assert record["exit_code"] == 0, record
            # A command may still raise its own soft limit up to the hard one.
            assert record["output"].split() == [str(SOFT), str(HARD)], (pty, record)
        raised = client.post("/v1/executions", json={"command": f"ulimit -n {HARD}; ulimit -Sn"})
        assert raised.json()["output"].strip() == str(HARD)


def test_a_server_out_of_descriptors_answers_503_and_recovers(
    tmp_path: Path, database: ServerDatabase
) -> None:
    limit = 120
    env = server_env(tmp_path, database, head_timeout_seconds="60")
    with (
        server_process(env, tmp_path / "server.log", open_files=(limit, limit)) as server,
        server.client() as client,
    ):
        earlier = client.post("/v1/executions", json={"command": "echo earlier"}).json()
        assert earlier["exit_code"] == 0
        (tmp_path / "workspace" / "kept.txt").write_text("kept\n")
        assert client.get("/v1/files", params={"path": "kept.txt"}).text == "kept\n"
        # Idle connections until the server holds every descriptor it may (its accept fails
        # then; the kernel keeps the rest waiting).
        port = int(server.base_url.rsplit(":", 1)[1])
        fd_dir = f"/proc/{server.process.pid}/fd"
        held: list[socket.socket] = []
        try:
            deadline = time.monotonic() + 20
            while len(os.listdir(fd_dir)) < limit:
                assert time.monotonic() < deadline, len(os.listdir(fd_dir))
                if len(held) < 2 * limit:
                    held.append(socket.create_connection(("127.0.0.1", port)))
                time.sleep(0.01)

            submitted = client.post("/v1/executions", json={"command": "echo refused"})
            assert submitted.status_code == 503, submitted.text
            assert submitted.json()["error"]["code"] == "descriptors_exhausted"
            assert "open-files limit" in submitted.json()["error"]["message"]
            assert submitted.headers["Retry-After"] == "5"
            output = client.get(f"/v1/executions/{earlier['id']}/output")
            assert output.status_code == 503, output.text  # not 410: the log is still there
            assert output.json()["error"]["code"] == "descriptors_exhausted"
            download = client.get("/v1/files", params={"path": "kept.txt"})
            assert download.status_code == 503, download.text  # not 409 "conflict"
            assert download.json()["error"]["code"] == "descriptors_exhausted"
        finally:
            for connection in held:
                connection.close()

        deadline = time.monotonic() + 20
        while len(os.listdir(fd_dir)) > limit - 10:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        again = client.post("/v1/executions", json={"command": "echo again"}).json()
        assert again["output"] == "again\n", again
        assert client.get(f"/v1/executions/{earlier['id']}/output").text == "earlier\n"
        assert client.get("/v1/files", params={"path": "kept.txt"}).text == "kept\n"
        listed = client.get("/v1/executions", params={"limit": 10}).json()["data"]
        assert "echo refused" not in [item["command"] for item in listed]
    assert "Traceback" not in server.log()
