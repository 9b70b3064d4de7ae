"""A server killed with SIGKILL while jobs run: after restart they are `lost`, their process
groups are gone, the database is intact and their logs are readable."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import AGENT, TOKENS, free_port
from tests.waiting import eventually


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class ServerProcess:
    def __init__(
        self, data_dir: Path, workspace: Path, extra_env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "SHELLGATE_DATA_DIR": str(data_dir),
            "SHELLGATE_WORKSPACE": str(workspace),
            "SHELLGATE_TOKENS": TOKENS,
            "SHELLGATE_PORT": str(self.port),
            "SHELLGATE_LOG_LEVEL": "warning",
            **(extra_env or {}),
        }
        # Its own session: SIGKILLing it must not touch the test runner's group.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve"], env=env, start_new_session=True
        )
        try:
            eventually(self._ready, what="the server's readiness", within=30, interval=0.1)
        except AssertionError:
            self.process.kill()
            self.process.wait(30)
            raise

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {AGENT}"}, timeout=30
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(30)


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    yield tmp_path / "data", workspace


def test_jobs_of_a_killed_server_are_lost_and_their_groups_killed(
    dirs: tuple[Path, Path],
) -> None:
    data_dir, workspace = dirs
    first = ServerProcess(data_dir, workspace)
    try:
        with first.client() as client:
            jobs = [
                client.post(
                    "/v1/executions",
                    json={"command": f"echo job-{i}; sleep 300", "async": True},
                ).json()
                for i in range(3)
            ]
            eventually(
                lambda: all(
                    client.get(f"/v1/executions/{job['id']}").json()["output"] for job in jobs
                ),
                what="every job's first output",
            )
        db = sqlite3.connect(data_dir / "shellgate.db")
        pgids = [row[0] for row in db.execute("SELECT pgid FROM executions")]
        db.close()
        assert len(pgids) == 3
        assert all(group_alive(pgid) for pgid in pgids)
    finally:
        first.stop(signal.SIGKILL)

    # The jobs outlive the SIGKILLed server (their own sessions) until the restart finds them.
    assert all(group_alive(pgid) for pgid in pgids)
    second = ServerProcess(data_dir, workspace)
    try:
        with second.client() as client:
            for i, job in enumerate(jobs):
                record = client.get(f"/v1/executions/{job['id']}").json()
                assert record["state"] == "lost"
                assert record["is_error"] is True
                assert record["finished_at"] is not None
                assert record["output"] == f"job-{i}\n"
                log = client.get(f"/v1/executions/{job['id']}/output")
                assert log.content == f"job-{i}\n".encode()
                assert log.headers["X-Complete"] == "true"
            eventually(
                lambda: not any(group_alive(pgid) for pgid in pgids),
                what="the recovered groups' end",
                within=5,
            )
            assert (
                client.post("/v1/executions", json={"command": "echo alive"}).json()["output"]
                == "alive\n"
            )
    finally:
        second.stop()
    db = sqlite3.connect(data_dir / "shellgate.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


def test_recovery_never_kills_an_unrelated_group_that_reused_the_pgid(
    dirs: tuple[Path, Path],
) -> None:
    data_dir, workspace = dirs
    first = ServerProcess(data_dir, workspace)
    first.stop()
    # An unrelated process group (ours), recorded as if a lost execution had owned its id.
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        db = sqlite3.connect(data_dir / "shellgate.db")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        db.execute(
            "INSERT INTO executions (id, owner, command, original_command, cwd, state, mode, pty,"
            " timed_out, pid, pgid, proc_start_ticks, boot_id, timeout_disabled, notices,"
            " total_bytes, total_lines, output_bytes, output_lines, elided_bytes, truncated,"
            " artifact_path, created_at) VALUES ('ex_fake000000000000000', 'alice', 'sleep 60',"
            " 'sleep 60', '/', 'running', 'job', 0, 0, ?, ?, 1, ?, 0, '[]', 0, 0, 0, 0, 0, 0,"
            " '/nonexistent-artifact', '2026-01-01 00:00:00')",
            (bystander.pid, bystander.pid, boot),
        )
        db.commit()
        db.close()
        second = ServerProcess(data_dir, workspace)
        try:
            with second.client() as client:
                record = client.get("/v1/executions/ex_fake000000000000000").json()
                assert record["state"] == "lost"
            assert bystander.poll() is None  # start time and marker differ: left alone
        finally:
            second.stop()
    finally:
        bystander.kill()
        bystander.wait()
