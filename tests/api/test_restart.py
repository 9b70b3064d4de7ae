"""A server killed with SIGKILL while jobs run: after restart they are `lost`, their process
groups are gone, the database is intact and their logs are readable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import insert, select, text

from app.store.models import Execution
from tests.conftest import AGENT, TOKENS, free_port
from tests.databases import ServerDatabase
from tests.faults.fenced_jobs import fence_watcher_of
from tests.waiting import eventually


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class ServerProcess:
    def __init__(
        self,
        data_dir: Path,
        workspace: Path,
        database: ServerDatabase,
        extra_env: dict[str, str] | None = None,
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
            # These restarts look at the host's pids and at daemons a run left: unsandboxed,
            # as the in-process servers (tests/conftest.py); tests/api/test_sandbox.py runs it on.
            "SHELLGATE_SANDBOX": "off",
            **database.environment(),
            **(extra_env or {}),
        }
        # Its own session: SIGKILLing it must not touch the test runner's group.
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "app", "serve"], env=env, start_new_session=True
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

    def kill_leaving_commands(self) -> None:
        """SIGKILL of the server and of its fence watcher first (as when both die at once): the
        unsandboxed commands outlive it, and what ends them is the next start's sweep."""
        watcher = fence_watcher_of(self.process.pid)
        if watcher is not None:
            os.kill(watcher, signal.SIGKILL)  # this test's server's own helper, by its pid
        self.stop(signal.SIGKILL)


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    yield tmp_path / "data", workspace


def test_jobs_of_a_killed_server_are_lost_and_their_groups_killed(
    dirs: tuple[Path, Path], database: ServerDatabase
) -> None:
    data_dir, workspace = dirs
    first = ServerProcess(data_dir, workspace, database)
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
        engine = database.engine(data_dir)
        with engine.connect() as connection:
            pgids = list(connection.scalars(select(Execution.pgid)))
        engine.dispose()
        assert len(pgids) == 3
        assert all(group_alive(pgid) for pgid in pgids)
    finally:
        first.kill_leaving_commands()

    # The jobs outlive the SIGKILLed server (their own sessions) until the restart finds them.
    assert all(group_alive(pgid) for pgid in pgids)
    second = ServerProcess(data_dir, workspace, database)
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
    if database.kind == "sqlite":
        engine = database.engine(data_dir)
        with engine.connect() as connection:
            assert connection.scalar(text("PRAGMA integrity_check")) == "ok"
        engine.dispose()


def test_recovery_never_kills_an_unrelated_group_that_reused_the_pgid(
    dirs: tuple[Path, Path], database: ServerDatabase
) -> None:
    data_dir, workspace = dirs
    first = ServerProcess(data_dir, workspace, database)
    first.stop()
    # An unrelated process group (ours), recorded as if a lost execution had owned its id.
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        engine = database.engine(data_dir)
        with engine.begin() as connection:
            connection.execute(
                insert(Execution).values(
                    id="ex_fake000000000000000",
                    owner="alice",
                    command="sleep 60",
                    original_command="sleep 60",
                    cwd="/",
                    state="running",
                    mode="job",
                    pty=False,
                    timed_out=False,
                    pid=bystander.pid,
                    pgid=bystander.pid,
                    proc_start_ticks=1,
                    boot_id=boot,
                    timeout_disabled=False,
                    notices="[]",
                    total_bytes=0,
                    total_lines=0,
                    output_bytes=0,
                    output_lines=0,
                    elided_bytes=0,
                    truncated=False,
                    artifact_path="/nonexistent-artifact",
                    created_at=datetime(2026, 1, 1, tzinfo=UTC),
                )
            )
        engine.dispose()
        second = ServerProcess(data_dir, workspace, database)
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


def test_a_job_that_renamed_itself_in_non_utf8_does_not_stop_the_restart(
    dirs: tuple[Path, Path], database: ServerDatabase
) -> None:
    # A command may name itself with any bytes (`/proc/self/comm`). Recovery reads the
    # leftover group's `/proc/<pid>/stat`: it raised UnicodeDecodeError there, and the server
    # never came up again while that process lived.
    data_dir, workspace = dirs
    command = r"printf '\377\376odd' > /proc/$BASHPID/comm; echo renamed; while :; do sleep 1; done"
    first = ServerProcess(data_dir, workspace, database)
    try:
        with first.client() as client:
            job = client.post("/v1/executions", json={"command": command, "async": True}).json()
            eventually(
                lambda: client.get(f"/v1/executions/{job['id']}").json()["output"] == "renamed\n",
                what="the job's rename",
            )
        engine = database.engine(data_dir)
        with engine.connect() as connection:
            pgid = connection.scalar(select(Execution.pgid).where(Execution.id == job["id"]))
        engine.dispose()
        assert pgid is not None and group_alive(pgid)
        with open(f"/proc/{pgid}/stat", "rb") as stat:
            assert b"\xff\xfe" in stat.read()  # the leader carries the name recovery reads
    finally:
        first.kill_leaving_commands()

    second = ServerProcess(data_dir, workspace, database)
    try:
        with second.client() as client:
            assert client.get(f"/v1/executions/{job['id']}").json()["state"] == "lost"
        eventually(lambda: not group_alive(pgid), what="the renamed group's end", within=5)
    finally:
        second.stop()
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
