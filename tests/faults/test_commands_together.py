"""All commands together under one ceiling (app/confinement/shared_ceiling.py,
docs/operations.md#confinement).

A real server is started inside a cgroup of the test's own (below the test process's, as
systemd's `TasksMax` or a container's limit would give it one): the commands together meet
their shared limit, the server keeps its reserve, each record names the limit the kernel
enforced and no other, and a server the kernel refuses a process answers 503 and nothing else.
The cgroup v1 hierarchies are the ones this machine delegates; elsewhere these skip.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.confinement.cgroups import CGROUP_ROOT, instance_name, own_cgroups
from app.confinement.limits import FORK_REFUSED_NOTICE
from tests.databases import ServerDatabase
from tests.faults.server_process import ServerProcess, server_env, server_process

# 40 sleeps held by one job, 100 tried by another: under 160 for the server's cgroup, whose
# commands together may hold 80 (the server keeps 256, at most half).
CGROUP_PROCESSES = 160
SHARED_PROCESSES = 80
HOLD = "for i in $(seq 40); do sleep 60 & done; wait"
FORK_100 = "for i in $(seq 100); do sleep 60 & done; wait"
FORK_200 = "for i in $(seq 200); do sleep 60 & done; wait"


@contextlib.contextmanager
def cgroup_of_the_test(controller: str) -> Iterator[Path]:
    """A cgroup of the v1 `controller` hierarchy below this process's, removed with whatever
    is left in it (processes of the test's own server, killed by pid)."""
    own = own_cgroups()
    mount = CGROUP_ROOT / controller
    if controller not in own or not (mount / "cgroup.procs").exists():
        pytest.skip(f"no cgroup-v1 {controller} hierarchy here")
    directory = mount / own[controller].lstrip("/") / f"sgtest-{uuid.uuid4().hex[:8]}"
    try:
        directory.mkdir()
    except OSError as error:
        pytest.skip(f"cannot create a {controller} cgroup here: {error}")
    try:
        yield directory
    finally:
        for root, _, _ in os.walk(directory, topdown=False):
            _empty_and_remove(Path(root))


def _empty_and_remove(directory: Path) -> None:
    for attempt in range(100):
        with contextlib.suppress(OSError):
            for word in (directory / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(word), signal.SIGKILL)
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError(f"could not remove {directory}")


def stop(server: ServerProcess) -> None:
    """A graceful stop: the server removes its own cgroups before the test's go."""
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(30)


def wait_for(predicate: Callable[[], bool], within: float = 15) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def finished(client: httpx.Client, execution_id: str) -> dict[str, object]:
    record: dict[str, object] = {}

    def ended() -> bool:
        nonlocal record
        record = client.get(f"/v1/executions/{execution_id}").json()
        return record["state"] not in ("running", "awaiting_approval")

    wait_for(ended, 30)
    return record


def metric(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"/metrics has no {name}")


def log_files(directory: Path) -> list[Path]:
    """The files below `directory` (its shard folders are shared, and stay)."""
    return sorted(path for path in directory.rglob("*") if path.is_file())


def unit_processes(cgroup: Path, data_dir: Path, execution_id: str) -> int:
    current = cgroup / instance_name(data_dir) / execution_id / "pids.current"
    return int(current.read_text()) if current.exists() else 0


@pytest.mark.parametrize("sandbox", ["off", "on"], ids=["unsandboxed", "sandboxed"])
def test_commands_meet_their_shared_limit_and_the_server_never_its_own(
    tmp_path: Path, database: ServerDatabase, sandbox: str
) -> None:
    with cgroup_of_the_test("pids") as cgroup:
        (cgroup / "pids.max").write_text(str(CGROUP_PROCESSES))
        # No shell started ahead: every call below is a fork of the server's own.
        env = server_env(tmp_path, database, spawn_ahead="false", sandbox=sandbox)
        with (
            server_process(env, tmp_path / "server.log", cgroups=(cgroup,)) as server,
            server.client() as client,
        ):
            info = client.get("/v1/info").json()
            assert info["total_limits"]["processes"] == SHARED_PROCESSES, info
            # One execution cannot have more than all of them together.
            assert info["execution_limits"]["processes"] == SHARED_PROCESSES, info

            holder = client.post("/v1/executions", json={"command": HOLD, "async": True}).json()
            data_dir = tmp_path / "data"
            wait_for(lambda: unit_processes(cgroup, data_dir, holder["id"]) >= 41)
            # What operators watch: the commands' processes now, beside their limit.
            assert metric(client, "shellgate_commands_processes") >= 41
            assert metric(client, "shellgate_commands_processes_limit") == SHARED_PROCESSES
            forker = client.post("/v1/executions", json={"command": FORK_100, "timeout": 60}).json()
            assert forker["state"] == "failed", forker
            notice = f"Process limit of {SHARED_PROCESSES} for all commands together reached"
            assert forker["notices"] == [notice], forker
            # The one that holds its processes and forks no more runs on.
            assert client.get(f"/v1/executions/{holder['id']}").json()["state"] == "running"

            echo = client.post("/v1/executions", json={"command": "echo still"}).json()
            assert (echo["exit_code"], echo["output"]) == (0, "still\n"), echo
            # v1 counts a refused fork in the forking cgroup: the server's never had one.
            assert (cgroup / "pids.events").read_text().split() == ["max", "0"]
            client.post(f"/v1/executions/{holder['id']}/cancel")
            finished(client, holder["id"])
            stop(server)


def test_a_fork_refused_above_the_servers_limits_is_not_called_the_commands_own(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with cgroup_of_the_test("pids") as cgroup:
        (cgroup / "pids.max").write_text(str(CGROUP_PROCESSES))
        env = server_env(tmp_path, database, spawn_ahead="false", limit_total_processes="0")
        with (
            server_process(env, tmp_path / "server.log", cgroups=(cgroup,)) as server,
            server.client() as client,
        ):
            info = client.get("/v1/info").json()
            assert info["total_limits"]["processes"] is None, info
            assert info["execution_limits"]["processes"] == 512, info
            forker = client.post("/v1/executions", json={"command": FORK_200, "timeout": 60}).json()
            # The server's cgroup refused it, long before the execution's own 512.
            assert forker["state"] == "failed", forker
            assert forker["notices"] == [FORK_REFUSED_NOTICE], forker
            stop(server)


# Cold: the first call, which needs a worker thread the kernel refuses. Warm: a thread waits
# from an earlier call, and the fork itself is refused.
@pytest.mark.parametrize("warm", [False, True], ids=["thread-refused", "fork-refused"])
def test_a_server_refused_a_process_answers_503_and_serves_again(
    tmp_path: Path, database: ServerDatabase, warm: bool
) -> None:
    with cgroup_of_the_test("pids") as cgroup:
        env = server_env(tmp_path, database, spawn_ahead="false", limit_total_processes="0")
        with (
            server_process(env, tmp_path / "server.log", cgroups=(cgroup,)) as server,
            server.client() as client,
        ):
            if warm:
                assert client.post("/v1/executions", json={"command": "true"}).status_code == 200
            before = client.get("/v1/executions").json()["data"]
            logs = tmp_path / "data" / "artifacts"
            files_before = log_files(logs)
            # What the commands left the server when nothing bounded them together.
            (cgroup / "pids.max").write_text("1")
            try:
                refused = client.post("/v1/executions", json={"command": "echo refused"})
            finally:
                (cgroup / "pids.max").write_text("max")
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["code"] == "processes_exhausted", error
            assert "could not start a process" in error["message"], error
            assert refused.headers["Retry-After"].isdigit()
            assert client.get("/v1/executions").json()["data"] == before
            assert log_files(logs) == files_before  # no log left for no record

            echo = client.post("/v1/executions", json={"command": "echo served"}).json()
            assert (echo["exit_code"], echo["output"]) == (0, "served\n"), echo
            # The refused call's work, queued before its thread failed, never ran later.
            time.sleep(0.5)
            commands = [item["command"] for item in client.get("/v1/executions").json()["data"]]
            assert commands == ["echo served"] + [item["command"] for item in before]
            stop(server)
            assert "Traceback" not in server.log()


def test_a_memory_kill_at_the_shared_limit_names_it(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with cgroup_of_the_test("memory") as cgroup:
        # 1 GiB for the server's cgroup: 768 MB for its commands together.
        (cgroup / "memory.limit_in_bytes").write_text(str(1 << 30))
        env = server_env(tmp_path, database)
        python = sys.executable
        hold = f"{python} -c 'import time; b = bytes([1]) * (300 << 20); time.sleep(60)'"
        grow = f"{python} -c 'b = bytes([1]) * (600 << 20)'"
        with (
            server_process(env, tmp_path / "server.log", cgroups=(cgroup,)) as server,
            server.client() as client,
        ):
            info = client.get("/v1/info").json()
            assert info["total_limits"]["memory_mb"] == 768, info
            assert info["execution_limits"]["memory_mb"] == 768, info
            holder = client.post("/v1/executions", json={"command": hold, "async": True}).json()
            memory = cgroup / instance_name(tmp_path / "data") / holder["id"]
            wait_for(lambda: int((memory / "memory.usage_in_bytes").read_text()) > 300 << 20)
            grower = client.post("/v1/executions", json={"command": grow, "timeout": 60}).json()
            # The kernel killed the largest of the commands: the one that grew, at 768 MB
            # together, never at its own 768.
            assert grower["state"] == "failed", grower
            assert grower["notices"] == ["Memory limit of 768 MB for all commands together reached"]
            assert client.get(f"/v1/executions/{holder['id']}").json()["state"] == "running"
            client.post(f"/v1/executions/{holder['id']}/cancel")
            finished(client, holder["id"])
            stop(server)
