"""The kernel sandbox around every command (docs/sandbox.md), tried as an attacker would: the
server runs as an operator starts it (`python -m app serve`, its tokens in its environment,
the data dir `./data` inside the workspace), and an agent's allowed command looks for the
secrets, the server's processes, a way to write outside the workspace and to the server's
port, through each way a command runs: foreground, PTY, a session call, the NDJSON runner and
the MCP `bash` tool."""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from stat import S_ISGID, S_ISSOCK, S_ISUID
from typing import Any

import pytest

from app.core.config import Settings
from app.sandbox import Sandbox, SandboxUnavailable
from app.sandbox.seccomp import host_program
from tests.api.test_mcp import call, text_of
from tests.api.test_spawn_ahead import spawns
from tests.conftest import ADMIN, AGENT, TOKENS, LiveServer, free_port, make_settings, serve
from tests.conftest import run_foreground as run
from tests.databases import Databases, ServerDatabase
from tests.pidfd_exit import kernel_keeps_exit_status
from tests.test_serve_defaults import ServerProcess, server_environment, wait_until_ready
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
# Written into the workspace by the test, run by the agent: what a command can find out.
PROBE = r"""
import json, os, socket, subprocess, sys
port, outside, data_dir, report = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
found = {"environ": [], "cmdlines": []}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as file:
                    found[name if name == "environ" else "cmdlines"].append(
                        file.read().decode("utf-8", "replace").replace("\0", "\n"))
            except OSError:
                pass
def attempt(action):
    try:
        return action()
    except OSError as error:
        return f"error: {error.strerror}"
def read(path):
    with open(path, errors="replace") as file:
        return file.read()
found["token_file"] = attempt(lambda: read(os.path.join(data_dir, "admin.token")))
found["data_dir"] = attempt(lambda: os.listdir(data_dir))
found["database"] = attempt(lambda: read(os.path.join(data_dir, "shellgate.db"))[:200])
def write_outside():
    with open(outside, "w") as file:
        file.write("escaped")
    return "written"
found["outside"] = attempt(write_outside)
def connect():
    with socket.create_connection(("127.0.0.1", port), timeout=3):
        return "connected"
found["network"] = attempt(connect)
found["ps"] = subprocess.run(["ps", "-e", "-ww", "-o", "pid,args"], capture_output=True,
                             text=True).stdout
with open(report, "w") as file:
    json.dump(found, file)
print("probe-done")
"""


@pytest.fixture(scope="module")
def operator(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[ServerProcess]:
    """The server as an operator starts it: tokens in its environment, `./data` inside the
    default workspace (its cwd), the sandbox at its defaults."""
    yield from _served(tmp_path_factory.mktemp("sandboxed"), module_databases.new())


@pytest.fixture(scope="module")
def network_on(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[ServerProcess]:
    yield from _served(
        tmp_path_factory.mktemp("sandboxed-net"), module_databases.new(), sandbox_network="on"
    )


def _served(
    cwd: Path, database: ServerDatabase, *, safe_path: bool = True, **settings: str
) -> Iterator[ServerProcess]:
    """`python -P -m app serve` in `cwd`, as docs/operations.md starts it; `safe_path=False`
    for a checkout's layout, where `python -m app` runs the `app` package `cwd` holds."""
    port = free_port()
    env = server_environment(tokens=TOKENS, port=str(port), **settings)
    env.update(database.environment())
    (cwd / "probe.py").write_text(PROBE, encoding="utf-8")
    stderr_path = cwd.parent / f"{cwd.name}-server.log"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, *(["-P"] if safe_path else []), "-m", "app", "serve"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    live = ServerProcess(process, f"http://127.0.0.1:{port}", cwd, stderr_path)
    try:
        wait_until_ready(live)
        # A token file as a server without SHELLGATE_TOKENS writes it (0600, in the data dir).
        token_file = cwd / "data" / "admin.token"
        token_file.write_text(ADMIN + "\n", encoding="utf-8")
        token_file.chmod(0o600)
        yield live
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


class Probe:
    """One run of the probe: its command, and what it found (read back from the workspace)."""

    def __init__(self, live: ServerProcess) -> None:
        self.tag = uuid.uuid4().hex[:12]
        self.live = live
        self.outside = REPO / f".sandbox-escape-{self.tag}"
        self.report = live.cwd / f"report-{self.tag}.json"
        port = live.base_url.rsplit(":", 1)[1]
        self.command = (
            f"python3 {live.cwd / 'probe.py'} {port} {self.outside} {live.cwd / 'data'} "
            f"{self.report}"
        )

    def found(self) -> dict[str, Any]:
        try:
            assert self.report.is_file(), "the probe could not write inside the workspace"
            found: dict[str, Any] = json.loads(self.report.read_text(encoding="utf-8"))
            return found
        finally:
            escaped = self.outside.exists()
            self.outside.unlink(missing_ok=True)
            assert not escaped, "the command wrote outside the workspace"


def assert_contained(found: dict[str, Any], *, network: str = "off") -> None:
    everything = json.dumps(found)
    for secret in (ADMIN, AGENT, "SHELLGATE_TOKENS"):
        assert secret not in everything
    names = {
        line.split("=", 1)[0]
        for environ in found["environ"]
        for line in environ.splitlines()
        if "=" in line
    }
    assert {name for name in names if name.startswith("SHELLGATE_")} <= {"SHELLGATE_EXECUTION_ID"}
    assert found["token_file"].startswith("error:")
    # An empty, read-only cover; a session call sees its own state directory's mount point.
    assert found["data_dir"] in ([], ["sessions"])
    assert found["database"].startswith("error:")
    assert found["outside"] == "error: Read-only file system"
    # The server (python -m app serve) and its other commands are not in sight.
    assert "app serve" not in everything
    assert all(
        "probe.py" in line
        or "ps -e" in line
        or "bwrap" in line
        or "bash" in line
        or line.strip() in ("", "PID COMMAND")
        for line in found["ps"].splitlines()[1:]
    ), found["ps"]
    if network == "off":
        assert found["network"].startswith("error:"), found["network"]
    else:
        assert found["network"] == "connected"


def test_a_foreground_command_is_contained(operator: ServerProcess) -> None:
    probe = Probe(operator)
    with operator.client() as agent:
        record = agent.post("/v1/executions", json={"command": probe.command}).json()
    assert record["exit_code"] == 0, record
    assert_contained(probe.found())
    assert record["sandbox"]["network"] == "off"
    assert record["sandbox"]["write"] == [str(operator.cwd)]
    assert str(operator.cwd / "data") in record["sandbox"]["hidden"]
    assert record["sandbox"]["escalated"] is False


def test_a_pty_command_is_contained(operator: ServerProcess) -> None:
    probe = Probe(operator)
    with operator.client() as agent:
        record = agent.post("/v1/executions", json={"command": probe.command, "pty": True}).json()
    assert record["exit_code"] == 0, record
    assert_contained(probe.found())


def test_a_session_call_is_contained(operator: ServerProcess) -> None:
    probe = Probe(operator)
    with operator.client() as agent:
        session = agent.post("/v1/sessions", json={}).json()
        assert session["sandbox"]["network"] == "off"
        # The session keeps its state across calls: its own state directory is written.
        assert (
            agent.post(
                "/v1/executions", json={"command": "export KEPT=yes", "session": session["id"]}
            ).json()["exit_code"]
            == 0
        )
        record = agent.post(
            "/v1/executions",
            json={"command": f'echo "kept=$KEPT"; {probe.command}', "session": session["id"]},
        ).json()
    assert record["exit_code"] == 0, record
    assert "kept=yes" in record["output"]
    assert_contained(probe.found())


def test_a_runner_call_is_contained(operator: ServerProcess) -> None:
    probe = Probe(operator)
    with operator.client() as agent:
        session = agent.post("/v1/sessions", json={}).json()["id"]
        with agent.stream(
            "POST", f"/v1/sessions/{session}/run", json={"command": probe.command}
        ) as response:
            assert response.status_code == 200
            items = [json.loads(line) for line in response.iter_lines() if line]
    assert items[-1]["exit_code"] == 0, items
    assert_contained(probe.found())


@pytest.mark.anyio
async def test_the_mcp_bash_tool_is_contained(operator: ServerProcess) -> None:
    probe = Probe(operator)
    live = LiveServer(operator.base_url, Settings(_env_file=None), operator.cwd / "data")  # type: ignore[call-arg]
    result = await call(live, "bash", {"command": probe.command})
    assert "probe-done" in text_of(result)
    assert_contained(probe.found())


def test_with_network_on_the_servers_port_is_reached(network_on: ServerProcess) -> None:
    probe = Probe(network_on)
    with network_on.client() as agent:
        record = agent.post("/v1/executions", json={"command": probe.command}).json()
    assert record["exit_code"] == 0, record
    assert record["sandbox"]["network"] == "on"
    assert_contained(probe.found(), network="on")


def test_info_says_the_sandbox_is_enforced(operator: ServerProcess) -> None:
    with operator.client() as agent:
        info = agent.get("/v1/info").json()
    assert info["sandbox"]["enforced"] is True
    assert "bubblewrap" in info["sandbox"]["mechanisms"]


def test_a_write_inside_the_workspace_lands_and_tmp_is_private(operator: ServerProcess) -> None:
    tag = uuid.uuid4().hex[:12]
    host_tmp = Path("/tmp") / f"shellgate-sandbox-{tag}"
    with operator.client() as agent:
        record = agent.post(
            "/v1/executions",
            json={"command": f"echo in > inside-{tag} && echo t > {host_tmp} && cat {host_tmp}"},
        ).json()
    assert record["exit_code"] == 0, record
    assert (operator.cwd / f"inside-{tag}").read_text() == "in\n"
    assert not host_tmp.exists()  # the command's /tmp is its own


@pytest.fixture
def host_tmp_socket() -> Iterator[Path]:
    """A directory in the host's /tmp with a file and a listening Unix socket, as a tmux server
    keeps (`/tmp/tmux-<uid>/default`, which takes keystrokes for the operator's shell)."""
    directory = Path(tempfile.mkdtemp(prefix="shellgate-host-tmp-", dir="/tmp"))
    (directory / "notes.txt").write_text("the host's\n")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(directory / "default"))
    listener.listen()
    try:
        yield directory
    finally:
        listener.close()
        shutil.rmtree(directory)


CONNECT = (
    "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"default\")' "
    "2>/dev/null && echo connected"
)


def test_a_cwd_in_the_hosts_tmp_starts_in_an_empty_private_directory(
    operator: ServerProcess, host_tmp_socket: Path
) -> None:
    """Before, the host's directory was bound in read-only: the command listed its files and
    connected to its socket."""
    command = f"pwd; ls -A; {CONNECT}; touch mine && echo wrote"
    with operator.client() as agent:
        record = agent.post(
            "/v1/executions", json={"command": command, "cwd": str(host_tmp_socket)}
        ).json()
    assert record["exit_code"] == 0, record
    assert record["output"] == f"{host_tmp_socket}\nwrote\n", record["output"]
    assert sorted(os.listdir(host_tmp_socket)) == ["default", "notes.txt"]


def test_a_session_that_moved_to_tmp_never_sees_the_hosts(
    operator: ServerProcess, host_tmp_socket: Path
) -> None:
    """A `keep_cwd` session's `cd /tmp` made the next call's cwd the host's /tmp, bound in
    whole: every host program's sockets and files in sight."""
    looks = (
        f"pwd; ls -A | grep -c shellgate-host-tmp; test -S {host_tmp_socket}/default && echo seen"
    )
    with operator.client() as agent:
        session = agent.post("/v1/sessions", json={"keep_cwd": True}).json()["id"]
        moved = agent.post("/v1/executions", json={"command": "cd /tmp", "session": session})
        assert moved.json()["exit_code"] == 0, moved.text
        record = agent.post("/v1/executions", json={"command": looks, "session": session}).json()
    assert record["output"] == "/tmp\n0\n", record["output"]


def test_a_hidden_file_replaced_on_the_host_stays_hidden_from_the_next_command(
    operator: ServerProcess,
) -> None:
    """The operator saves the `.env` (an editor writes a new file and renames it over the old),
    while standbys wait in sandboxes built before: the kernel detaches a cover whose path is
    replaced from another namespace, so those sandboxes showed the new file. A standby whose
    hidden files changed is not used."""
    settings_file = operator.cwd / ".env"
    if not settings_file.exists():
        settings_file.write_text("")
    with operator.client() as agent:
        agent.post("/v1/executions", json={"command": "true"})  # standbys built from now on
        time.sleep(1.5)  # are ready, with the file as it is covered
        saved = operator.cwd / ".env.saving"
        saved.write_text("SECRET_IN_ENV=s3cr3t\n")
        os.replace(saved, settings_file)
        try:
            records = [
                agent.post("/v1/executions", json={"command": "cat .env"}).json() for _ in range(3)
            ]
        finally:
            settings_file.unlink()
    for record in records:
        assert "s3cr3t" not in record["output"], record["output"]
        assert "Permission denied" in record["output"], record["output"]


# Where hosts keep sockets that take a peer for the user it runs as and reach past the sandbox
# (a database's socket login, a container runtime, the service manager, a user's own buses),
# whatever the default list says: the test's own list, so that a default that misses one fails.
PEER_SOCKET_PLACES = (
    "/run/docker.sock",
    "/run/containerd",
    "/run/podman",
    "/run/crio",
    "/run/k3s",
    "/run/libvirt",
    "/run/snapd.socket",
    "/run/postgresql",
    "/run/mysqld",
    "/run/redis",
    "/run/dbus",
    "/run/systemd/private",
    *(
        f"/run/user/{name}"
        for name in (os.listdir("/run/user") if os.path.isdir("/run/user") else ())
    ),
)


def _peer_sockets_on_this_machine() -> list[str]:
    """The Unix sockets this machine has at (or directly in) those places."""
    found = []
    for path in PEER_SOCKET_PLACES:
        try:
            names = [os.path.join(path, name) for name in os.listdir(path)]
        except NotADirectoryError:
            names = [path]
        except OSError:
            continue
        found += [
            name for name in names if os.path.exists(name) and S_ISSOCK(os.lstat(name).st_mode)
        ]
    return found


def test_the_hosts_sockets_in_the_default_list_take_no_connection(operator: ServerProcess) -> None:
    """A Unix socket's path is reachable whatever the network namespace, and the peer uid
    the kernel reports is the server's: MariaDB's socket logged a sandboxed command in as
    `root@localhost` (`unix_socket` authentication) while only PostgreSQL's was hidden."""
    sockets = _peer_sockets_on_this_machine()
    if not sockets:
        pytest.skip("none of those sockets on this machine")
    attempt = (
        "import socket, sys\n"
        "for path in sys.argv[1:]:\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n"
        "        s.connect(path)\n"
        "        print('connected', path)\n"
        "    except OSError as error:\n"
        "        print('refused', path, error.errno)\n"
    )
    (operator.cwd / "attempt.py").write_text(attempt)
    with operator.client() as agent:
        record = agent.post(
            "/v1/executions", json={"command": f"python3 attempt.py {' '.join(sockets)}"}
        ).json()
    assert record["exit_code"] == 0, record
    assert "connected" not in record["output"], record["output"]
    assert record["output"].count("refused") == len(sockets), record["output"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as root only where its tests do")
def test_a_server_run_as_root_warns_that_its_commands_read_what_root_owns(
    operator: ServerProcess,
) -> None:
    """The namespaces keep the host's uid for files: a root server's commands read what root
    owns, however private. Not a boundary the sandbox can draw, so the start says it. With
    every capability dropped, another user's private file stays closed to them."""
    warnings = [line for line in operator.log_lines() if "the server runs as root" in line]
    assert len(warnings) == 1, operator.log_lines()
    assert "run shellgate as an unprivileged user" in warnings[0]
    roots, nobodys = operator.cwd / "only-root-reads", operator.cwd / "only-nobody-reads"
    for path in (roots, nobodys):
        path.write_text("private\n", encoding="utf-8")
        path.chmod(0o600)
    os.chown(nobodys, 65534, 65534)
    with operator.client() as agent:
        record = agent.post(
            "/v1/executions", json={"command": f"cat {roots}; cat {nobodys}"}
        ).json()
    assert record["output"].startswith("private\n"), record  # what the warning is about
    assert "Permission denied" in record["output"], record


@pytest.fixture(scope="module")
def registry_in_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The registry a SQLite file the operator put in the workspace, outside the data dir."""
    cwd = tmp_path_factory.mktemp("registry-in-workspace")
    yield from _served(cwd, ServerDatabase("sqlite", f"sqlite:///{cwd / 'registry.db'}"))


def test_a_sqlite_registry_outside_the_data_dir_is_hidden_too(
    registry_in_workspace: ServerProcess,
) -> None:
    """Its policy versions, approvals and decisions were a file the workspace's commands could
    read and write: a command could have approved its own prompts in it."""
    registry = registry_in_workspace.cwd / "registry.db"
    assert registry.exists()
    command = "head -c 15 registry.db; echo; ls -la registry.db*; echo x >> registry.db"
    with registry_in_workspace.client() as agent:
        record = agent.post("/v1/executions", json={"command": command}).json()
        assert "SQLite format" not in record["output"], record["output"]
        assert "Permission denied" in record["output"], record["output"]
        assert agent.get("/v1/executions", params={"limit": 1}).status_code == 200
    assert str(registry) in record["sandbox"]["hidden"]
    assert registry.read_bytes().startswith(b"SQLite format 3")


def test_a_refused_write_gets_a_notice_naming_the_profile(operator: ServerProcess) -> None:
    target = REPO / f".sandbox-refused-{uuid.uuid4().hex[:12]}"
    with operator.client() as agent:
        record = agent.post("/v1/executions", json={"command": f"touch {target}"}).json()
    assert record["exit_code"] != 0
    assert not target.exists()
    assert any("sandbox" in notice and "write" in notice for notice in record["notices"]), record


def test_a_term_reaches_the_command_which_ends_in_its_own_time(operator: ServerProcess) -> None:
    with operator.client() as agent:
        job = agent.post(
            "/v1/executions",
            json={
                "command": "trap 'echo cleaning; sleep 0.2; echo cleaned; exit 7' TERM; "
                "echo ready; sleep 30 & wait",
                "async": True,
            },
        ).json()
        # The TERM must find the trap set: a cancel sent before "ready" is printed would
        # end bash before its trap exists (the output route does not wait for bytes).
        eventually(
            lambda: "ready" in agent.get(f"/v1/executions/{job['id']}").json()["output"],
            what="the job's trap",
            within=30,
        )
        assert agent.post(f"/v1/executions/{job['id']}/cancel").status_code in (200, 202)
        ended = agent.get(f"/v1/executions/{job['id']}", params={"wait": 20}).json()
    assert "cleaned" in ended["output"], ended


def test_a_command_that_kills_itself_is_recorded_with_its_signal(operator: ServerProcess) -> None:
    """bwrap passes a death by signal N on as exit status 128 + N; the record still says the
    signal, read from a pidfd of the command itself (Linux 6.15+), and an `exit 139` stays an
    exit status. Warm-up calls first, so that the calls measured take a standby."""
    if not kernel_keeps_exit_status():
        pytest.skip("this kernel keeps no exit status on a pidfd (before Linux 6.15)")
    with operator.client() as agent:
        for _ in range(3):
            run(agent, "true")
        killed = run(agent, "kill -SEGV $$")
        exited = run(agent, "exit 139")
    assert (killed["exit_code"], killed["signal"], killed["state"]) == (139, 11, "failed")
    assert (exited["exit_code"], exited["signal"], exited["state"]) == (139, None, "failed")


@pytest.mark.parametrize(
    "fields",
    [{"limits": {"processes": 100}}, {"pty": True}],
    ids=["limits-of-its-own", "pty"],
)
def test_a_command_spawned_without_a_standby_is_recorded_with_its_signal(
    operator: ServerProcess, fields: dict[str, object]
) -> None:
    """The same for a command no standby runs (limits other than the server's, a terminal):
    its process says its word from inside the sandbox before its exec, and the kernel hands
    the server a pidfd of it with the word. Before, such a spawn recorded `signal: null`."""
    if not kernel_keeps_exit_status():
        pytest.skip("this kernel keeps no exit status on a pidfd (before Linux 6.15)")
    spawned_before = spawns(operator, "spawn")
    with operator.client() as agent:
        killed = run(agent, "kill -SEGV $$", **fields)
        exited = run(agent, "exit 139", **fields)
        fine = run(agent, "echo fine", **fields)
    assert spawns(operator, "spawn") == spawned_before + 3  # none ran in a standby
    assert (killed["exit_code"], killed["signal"], killed["state"]) == (139, 11, "failed")
    assert (exited["exit_code"], exited["signal"], exited["state"]) == (139, None, "failed")
    assert (fine["exit_code"], fine["signal"], fine["output"].strip()) == (0, None, "fine")


def test_a_limits_signal_is_read_from_the_command_not_from_bwraps_exit_status(
    operator: ServerProcess,
) -> None:
    """bwrap passes a death by SIGXFSZ on as exit status 153, which a command may also exit
    with itself. With the command's own status read (Linux 6.15+), only the real death is the
    file size limit's."""
    if not kernel_keeps_exit_status():
        pytest.skip("this kernel keeps no exit status on a pidfd (before Linux 6.15)")
    limits = {"file_size_mb": 10}
    with operator.client() as agent:
        own = run(agent, "exit 153", limits=limits)
        # `exec`: the writer's death is the command's own end (bash would report it, and its
        # report is evidence of its own).
        hit = run(agent, "exec head -c 30000000 /dev/zero > file-size-probe.bin", limits=limits)
        run(agent, "rm -f file-size-probe.bin")
    assert (own["exit_code"], own["signal"], own["notices"]) == (153, None, [])
    assert (hit["exit_code"], hit["signal"]) == (153, signal.SIGXFSZ)
    assert hit["notices"] == ["File size limit of 10 MB reached"]


IO_URING_SETUP = (
    "python3 -I -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True);"
    " print(libc.syscall(425, 1, 0), ctypes.get_errno())'"
)


@pytest.mark.parametrize(
    "fields",
    [{}, {"limits": {"processes": 100}}, {"pty": True}],
    ids=["standby", "spawned-without-one", "pty"],
)
def test_io_uring_answers_enosys_in_the_sandbox(
    operator: ServerProcess, fields: dict[str, object]
) -> None:
    """The seccomp filter bwrap installs, whichever way the command was spawned (a standby for
    the warm calls' limits, a spawn of its own for other limits, a terminal)."""
    if host_program() is None:
        pytest.skip(f"no seccomp filter for {platform.machine()}")
    with operator.client() as agent:
        assert "seccomp" in agent.get("/v1/info").json()["sandbox"]["mechanisms"]
        for _ in range(2):
            run(agent, "true")
        probe = run(agent, IO_URING_SETUP, **fields)
    assert probe["exit_code"] == 0, probe
    assert probe["output"].split() == ["-1", str(errno.ENOSYS)], probe["output"]


@pytest.mark.parametrize(
    "fields",
    [{}, {"limits": {"processes": 100}}, {"pty": True}],
    ids=["standby", "spawned-without-one", "pty"],
)
def test_no_command_leaves_a_set_user_id_program_in_the_workspace(
    operator: ServerProcess, fields: dict[str, object]
) -> None:
    """Inside the sandbox a command has the server's uid: a set-user-ID copy of a program it
    left in the workspace would run as the server (as root, for a root server) for any local
    user who runs it, outside the sandbox. The filter refuses the mode."""
    if host_program() is None:
        pytest.skip(f"no seccomp filter for {platform.machine()}")
    name = f"setuid-{uuid.uuid4().hex[:8]}"
    with operator.client() as agent:
        for _ in range(2):
            run(agent, "true")
        tried = run(agent, f"cp /bin/true {name} && chmod u+s,g+s {name}", **fields)
        host_mode = (operator.cwd / name).stat().st_mode
        run(agent, f"rm -f {name}")
    assert tried["exit_code"] == 1, tried
    assert "Operation not permitted" in tried["output"], tried["output"]
    assert host_mode & (S_ISUID | S_ISGID) == 0, oct(host_mode)


def test_a_command_reads_its_owners_artifact_inside_the_hidden_data_dir(
    operator: ServerProcess,
) -> None:
    with operator.client() as agent:
        first = agent.post("/v1/executions", json={"command": "echo first-output"}).json()
        again = agent.post(
            "/v1/executions", json={"command": f"cat artifact://{first['id']}"}
        ).json()
    assert again["exit_code"] == 0, again
    assert again["output"] == "first-output\n"


def test_the_files_api_cannot_reach_what_commands_cannot_see(operator: ServerProcess) -> None:
    with operator.client(ADMIN) as admin:
        for path in ("data/admin.token", "data/shellgate.db", str(Path.home() / ".ssh/id_rsa")):
            response = admin.get("/v1/files", params={"path": path})
            assert response.status_code == 403, (path, response.text)
            assert "hidden by the sandbox" in response.json()["error"]["message"]


# --- off, and a host that cannot build it -------------------------------------------------------


@pytest.fixture(scope="module")
def unsandboxed(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("unsandboxed"), module_databases.new(), sandbox="off"
    )
    with serve(settings) as live:
        yield live


def test_off_records_null_and_info_says_unsandboxed(unsandboxed: LiveServer) -> None:
    with unsandboxed.client() as agent:
        record = agent.post("/v1/executions", json={"command": "echo hi"}).json()
        info = agent.get("/v1/info").json()
        session = agent.post("/v1/sessions", json={}).json()
    assert record["output"] == "hi\n"
    assert record["sandbox"] is None
    assert session["sandbox"] is None
    assert info["sandbox"]["enforced"] is False
    assert info["sandbox"]["mechanisms"] == []


def test_the_server_refuses_to_start_when_bwrap_cannot_build_it(tmp_path: Path) -> None:
    env = server_environment(
        tokens=TOKENS, port=str(free_port()), sandbox_bwrap="/nonexistent/bwrap"
    )
    done = subprocess.run(
        [sys.executable, "-P", "-m", "app", "serve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "bubblewrap" in done.stderr and "SHELLGATE_SANDBOX=off" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bwrap_that_fails_is_refused_with_its_reason(tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path / "data", workspace=tmp_path, sandbox_bwrap="/bin/false"
    )
    with pytest.raises(SandboxUnavailable, match="cannot build the sandbox"):
        Sandbox(settings).check()


def test_a_sandbox_built_once_is_not_probed_again_in_the_same_process(tmp_path: Path) -> None:
    """`shellgate serve` checks the sandbox before building the app and the lifespan checks
    it again: the second check starts no bwrap. A probe that failed is not remembered."""
    probes = tmp_path / "probes"
    counting = tmp_path / "counting-bwrap"
    counting.write_text(f'#!/bin/sh\necho probe >> {probes}\nexec /usr/bin/bwrap "$@"\n')
    counting.chmod(0o755)
    failing = tmp_path / "failing-bwrap"
    failing.write_text(f"#!/bin/sh\necho probe >> {probes}\nexit 1\n")
    failing.chmod(0o755)

    def settings(bwrap: Path) -> Settings:
        return Settings(  # type: ignore[call-arg]
            _env_file=None, data_dir=tmp_path / "data", workspace=tmp_path, sandbox_bwrap=str(bwrap)
        )

    Sandbox(settings(counting)).check()
    Sandbox(settings(counting)).check()
    assert probes.read_text().split() == ["probe"]
    for _ in range(2):
        with pytest.raises(SandboxUnavailable, match="cannot build the sandbox"):
            Sandbox(settings(failing)).check()
    assert probes.read_text().split() == ["probe"] * 3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
