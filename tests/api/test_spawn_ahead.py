"""Spawn ahead (app/confinement/standby.py): with a cgroup backend, the server keeps one shell
started ahead inside a unit of its own, and a command with the server's limits is exec'd by it
instead of being spawned and moved into its cgroups on the request's path. What must hold:
the command is that shell (same pid), in cgroups named after its execution, counted in
`/metrics`; a standby that died is replaced by a spawn, not an error; none is left after the
server stops; and no standby is made when the setting is off."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.confinement import choose_backend, instance_name
from app.confinement.standby import STANDBY_PREFIX
from app.process.groups import marked_processes
from app.process.standby import STANDBY_SCRIPT
from tests.conftest import ADMIN, LiveServer, make_settings, serve
from tests.conftest import run_foreground as run
from tests.databases import SQLITE
from tests.test_serve_defaults import ServerProcess
from tests.waiting import eventually

pytestmark = pytest.mark.sqlite_only("a process and cgroup matter, not the database")


def cgroup_backend(data_dir: Path) -> str:
    for name in ("cgroup2", "cgroup1"):
        try:
            choice = choose_backend(data_dir, name)
        except OSError:
            continue
        choice.backend.close()
        return name
    pytest.skip("no cgroup backend on this machine: nothing to spawn ahead")


def standby_pids(server: LiveServer) -> list[int]:
    """The standby shells of `server` (in-process, so children of this process) that have
    joined its cgroups."""
    instance = instance_name(server.data_dir)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                arguments = cmdline.read().split(b"\0")
            with open(f"/proc/{entry.name}/cgroup") as cgroup:
                joined = f"/{instance}/{STANDBY_PREFIX}" in cgroup.read()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and os.fsencode(STANDBY_SCRIPT) in arguments and joined:
            found.append(int(entry.name))
    return found


def ready_standbys(server: LiveServer, count: int) -> list[int]:
    """The pids of `server`'s standby shells once `count` of them wait."""
    return eventually(
        lambda: pids if len(pids := standby_pids(server)) == count else None,
        what=f"{count} standby shells",
        within=15,
    )


def one_standby(server: LiveServer) -> int:
    """The standby of a server that keeps one (`spawn_ahead_shells=1`)."""
    (pid,) = ready_standbys(server, 1)
    return pid


def spawns(server: LiveServer | ServerProcess, how: str) -> float:
    with server.client(ADMIN) as client:
        text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "shellgate_spawns_total" and sample.labels == {"how": how}:
                return sample.value
    return 0.0


def standby_cgroups(server: LiveServer, backend: str) -> list[str]:
    """`server`'s cgroups named like a standby's, under the mounted hierarchies."""
    instance = instance_name(server.data_dir)
    root = Path("/sys/fs/cgroup")
    controllers = [root] if backend == "cgroup2" else [root / name for name in ("pids", "memory")]
    return [
        path
        for controller in controllers
        for path, _, _ in os.walk(controller)
        if os.path.basename(path).startswith(STANDBY_PREFIX) and f"/{instance}/" in path
    ]


@pytest.fixture
def backend(tmp_path: Path) -> str:
    return cgroup_backend(tmp_path / "probe")


@pytest.fixture
def server(tmp_path: Path, backend: str) -> Iterator[LiveServer]:
    """A server keeping one standby, so that which shell runs a command is known."""
    settings = make_settings(
        tmp_path, SQLITE, confinement=backend, auto_background_ms=0, spawn_ahead_shells=1
    )
    with serve(settings) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def test_a_command_is_the_shell_started_ahead_in_cgroups_named_after_it(
    server: LiveServer, client: httpx.Client, backend: str
) -> None:
    standby = one_standby(server)
    before = spawns(server, "standby")
    result = run(client, "echo $$; cat /proc/self/cgroup")
    assert result["exit_code"] == 0, result
    pid, *cgroups = str(result["output"]).splitlines()
    assert int(pid) == standby
    assert spawns(server, "standby") == before + 1
    if backend == "cgroup1":  # cgroup v2 cannot rename: there the unit keeps its own name
        controllers = ("pids", "memory", "freezer")
        for controller in controllers:
            (line,) = [line for line in cgroups if controller in line.split(":")[1].split(",")]
            assert line.endswith(f"/{result['id']}"), line
    # Its end makes the next one: a command later finds a new shell waiting.
    assert one_standby(server) != standby


def test_the_command_sees_only_its_own_environment(
    server: LiveServer, client: httpx.Client
) -> None:
    one_standby(server)
    result = run(client, "env | cut -d= -f1 | sort", env={"MINE": "1"})
    names = str(result["output"]).split()
    assert "MINE" in names
    assert not [name for name in names if name.startswith("__SHELLGATE") or name == "BASH_ENV"]


def test_a_standby_that_died_is_replaced_by_a_spawn(
    server: LiveServer, client: httpx.Client
) -> None:
    os.kill(one_standby(server), 9)
    spawned = spawns(server, "spawn")
    result = run(client, "echo still runs")
    assert (result["exit_code"], result["output"]) == (0, "still runs\n")
    assert spawns(server, "spawn") == spawned + 1


def test_no_standby_is_left_after_the_server_stops(tmp_path: Path, backend: str) -> None:
    settings = make_settings(tmp_path, SQLITE, confinement=backend)
    with serve(settings) as live, live.client() as client:
        run(client, "true")
        standbys = ready_standbys(live, 2)
        assert standby_cgroups(live, backend)
    for standby in standbys:
        assert not os.path.exists(f"/proc/{standby}")  # ended and reaped: not even a zombie
    assert standby_cgroups(live, backend) == []


def test_two_standbys_wait_so_calls_back_to_back_each_find_one(
    tmp_path: Path, backend: str
) -> None:
    """By default two wait (app/confinement/standby.py): the second of two calls made at once
    finds the other, where with one it would spawn on its own path."""
    settings = make_settings(tmp_path, SQLITE, confinement=backend, auto_background_ms=0)
    with serve(settings) as live, live.client() as client:
        waiting = set(ready_standbys(live, 2))
        before = (spawns(live, "standby"), spawns(live, "spawn"))
        first = run(client, "echo $$")
        second = run(client, "echo $$")
        ran_in = {int(str(first["output"])), int(str(second["output"]))}
        assert ran_in == waiting
        assert (spawns(live, "standby"), spawns(live, "spawn")) == (before[0] + 2, before[1])
        # Both are replaced once their units are released.
        assert not set(ready_standbys(live, 2)) & waiting


def test_with_the_setting_off_no_shell_is_started_ahead(tmp_path: Path, backend: str) -> None:
    settings = make_settings(tmp_path, SQLITE, confinement=backend, spawn_ahead=False)
    with serve(settings) as live, live.client() as client:
        run(client, "true")
        run(client, "true")
        assert standby_pids(live) == []
        assert spawns(live, "standby") == 0
        assert spawns(live, "spawn") == 2


def sandboxed_standbys() -> list[int]:
    """Standby shells waiting inside a sandbox, started by a server of this process: the shell
    running the standby script's text, whose ancestors include this process."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                arguments = cmdline.read().split(b"\0")
        except OSError:
            continue
        waiting = os.fsencode(STANDBY_SCRIPT) in arguments and b"-c" in arguments
        # (bwrap's own argv holds the same words: it starts that shell)
        if (
            waiting
            and not arguments[0].endswith(b"bwrap")
            and os.getpid() in ancestors(int(entry.name))
        ):
            found.append(int(entry.name))
    return found


def ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        chain.append(pid)
    return chain


def test_without_cgroups_a_sandboxed_command_takes_a_standby(tmp_path: Path) -> None:
    """Under the rlimit backend nothing joins a cgroup, but with the sandbox on the standby
    waits in a sandbox already built (bwrap costs ~6 ms a spawn): the command runs there,
    with the rlimit backend's limits, and its kill still finds its tree by the marker."""
    settings = make_settings(
        tmp_path,
        SQLITE,
        confinement="rlimit",
        sandbox="on",
        auto_background_ms=0,
        limit_open_files=1000,
        limit_memory_mb=4096,
    )
    with serve(settings) as live, live.client() as client:
        eventually(lambda: len(sandboxed_standbys()) == 2, what="2 standbys", within=15)
        before = (spawns(live, "standby"), spawns(live, "spawn"))
        result = run(client, "ulimit -n; ulimit -v; echo $SHELLGATE_EXECUTION_ID")
        assert result["exit_code"] == 0, result
        assert result["sandbox"] is not None, result
        assert str(result["output"]).split() == ["1000", str(4096 * 1024), result["id"]]
        assert (spawns(live, "standby"), spawns(live, "spawn")) == (before[0] + 1, before[1])

        job = client.post(
            "/v1/executions", json={"command": "sleep 300 & sleep 300", "async": True}
        ).json()
        marker = f"SHELLGATE_EXECUTION_ID={job['id']}".encode()
        eventually(lambda: len(marked_processes(marker)) >= 2, what="the job's tree", within=15)
        assert client.post(f"/v1/executions/{job['id']}/cancel").status_code == 200
        eventually(lambda: not marked_processes(marker), what="the tree gone", within=15)


def test_a_sandboxed_commands_tree_and_cgroups_are_gone_when_its_call_answers(
    tmp_path: Path, backend: str
) -> None:
    """bwrap's init is often still ending its namespaces when the output's EOF and the
    command's status are in; the unit's release waits for it (app/confinement/cgroups.py)
    before the record turns terminal: when the call answers, nothing of the run is left, a
    background process included, and its cgroups are removed."""
    settings = make_settings(
        tmp_path, SQLITE, confinement=backend, sandbox="on", auto_background_ms=0
    )
    with serve(settings) as live, live.client() as client:
        eventually(lambda: len(sandboxed_standbys()) == 2, what="2 standbys", within=15)
        for _ in range(5):
            result = run(client, "sleep 300 & cat /proc/self/cgroup")
            assert result["state"] == "completed", result
            assert result["sandbox"] is not None, result
            marker = f"SHELLGATE_EXECUTION_ID={result['id']}".encode()
            assert marked_processes(marker) == []
            cgroups = own_cgroup_directories(str(result["output"]), backend)
            instance = instance_name(live.data_dir)  # the unit's, in this server's folder
            assert cgroups and all(f"/{instance}/" in path for path in cgroups), cgroups
            assert [path for path in cgroups if os.path.exists(path)] == []


def own_cgroup_directories(proc_self_cgroup: str, backend: str) -> list[str]:
    """The directories of a process's `pids` and `memory` cgroups (v1) or its cgroup (v2),
    from what it read in `/proc/self/cgroup`."""
    found = []
    for line in proc_self_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if backend == "cgroup2" and controllers == "":
            found.append(f"/sys/fs/cgroup{path}")
        for name in ("pids", "memory"):
            if backend == "cgroup1" and name in controllers.split(","):
                found.append(f"/sys/fs/cgroup/{name}{path}")
    return found


def test_a_hidden_path_made_after_the_start_is_hidden_from_a_standbys_command(
    tmp_path: Path,
) -> None:
    """A standby's sandbox covers the hidden paths that existed when it was built: one made
    since (a credentials directory, a `.env`) must not be seen by the command that takes it.
    Such a standby is not used (the spawn builds its sandbox now) and its replacement covers
    the new path, so later calls take standbys again."""
    workspace = tmp_path / "workspace"
    secret = workspace / "made-later"  # in the writable workspace: hidden wins over writable
    settings = make_settings(
        tmp_path,
        SQLITE,
        confinement="rlimit",
        sandbox="on",
        auto_background_ms=0,
        sandbox_hidden=[str(secret)],
    )
    with serve(settings) as live, live.client() as client:
        eventually(lambda: len(sandboxed_standbys()) == 2, what="2 standbys", within=15)
        secret.mkdir()
        (secret / "key").write_text("the secret\n")
        for _ in range(2):  # each call meets one of the two standbys built before the secret
            result = run(client, f"cat {secret}/key")
            assert "the secret" not in str(result["output"]), result
            assert result["exit_code"] != 0, result
        eventually(lambda: len(sandboxed_standbys()) == 2, what="2 new standbys", within=15)
        taken = spawns(live, "standby")
        result = run(client, f"cat {secret}/key")
        assert "the secret" not in str(result["output"]), result
        assert spawns(live, "standby") == taken + 1
