"""A call in a session is exec'd by a standby shell like any other command (app/process/
standby.py): its sandbox was built before anyone knew the session, so the session's state
travels through the standby's memory files instead of the session's directory. Before, a
session call could not take a standby (its directory had to be bound into the sandbox) and
built bwrap and joined its cgroups on the request's path: ~2× a foreground call's time.

What must hold: the state (variables, functions, aliases, a `keep_cwd` session's directory)
carries from call to call through standbys; a shell killed before its EXIT trap finished
saving leaves the state it had, on either path; a command outside a session is handed none of
those files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_spawn_ahead import sandboxed_standbys, spawns
from tests.conftest import LiveServer, make_settings, serve
from tests.conftest import run_foreground as run
from tests.databases import SQLITE
from tests.waiting import eventually

pytestmark = pytest.mark.sqlite_only("which process runs a call matters, not the database")


def standbys_ready() -> None:
    """Both standbys wait, in their sandboxes (rlimit backend: no cgroup is needed)."""
    eventually(lambda: len(sandboxed_standbys()) == 2, what="2 standbys", within=15)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The server's workspace (`make_settings` makes it), with a directory to `cd` into."""
    (tmp_path / "workspace" / "sub").mkdir(parents=True)
    return tmp_path / "workspace"


def serving(tmp_path: Path, spawn_ahead: bool) -> Iterator[LiveServer]:
    settings = make_settings(
        tmp_path,
        SQLITE,
        confinement="rlimit",
        sandbox="on",
        auto_background_ms=0,
        spawn_ahead=spawn_ahead,
    )
    with serve(settings) as live:
        yield live


@pytest.fixture
def server(tmp_path: Path, workspace: Path) -> Iterator[LiveServer]:
    yield from serving(tmp_path, spawn_ahead=True)


def session_call(client: httpx.Client, session_id: str, command: str) -> dict[str, object]:
    result = client.post("/v1/executions", json={"command": command, "session": session_id})
    assert result.status_code == 200, result.text
    return dict(result.json())


def test_a_session_keeps_its_state_through_standby_shells(
    server: LiveServer, workspace: Path
) -> None:
    with server.client() as client:
        session_id = client.post("/v1/sessions", json={"keep_cwd": True}).json()["id"]
        standbys_ready()
        before = (spawns(server, "standby"), spawns(server, "spawn"))
        saved = session_call(
            client, session_id, "export A=1; f() { echo fn; }; alias g='echo al'; cd sub"
        )
        assert saved["exit_code"] == 0, saved
        standbys_ready()
        used = session_call(client, session_id, 'echo "$A"; f; g; pwd')
        assert used["output"] == f"1\nfn\nal\n{workspace / 'sub'}\n", used
        after = (spawns(server, "standby"), spawns(server, "spawn"))
        # Both calls exec'd by a standby, none spawned on the request's path.
        assert after == (before[0] + 2, before[1]), (before, after)


@pytest.mark.parametrize("spawn_ahead", [True, False], ids=["standby", "spawned"])
def test_a_shell_killed_before_it_saved_leaves_the_state_it_had(
    tmp_path: Path, workspace: Path, spawn_ahead: bool
) -> None:
    for live in serving(tmp_path, spawn_ahead):
        with live.client() as client:
            session_id = client.post("/v1/sessions", json={}).json()["id"]
            assert session_call(client, session_id, "export A=1")["exit_code"] == 0
            assert session_call(client, session_id, "export A=2")["exit_code"] == 0
            # A call that changes nothing: the saved copy stays beside the state, emptied.
            assert session_call(client, session_id, "true")["exit_code"] == 0
            killed = session_call(client, session_id, "export A=3; kill -9 $$")
            assert killed["state"] == "failed", killed  # killed: bwrap reports 128 + 9
            assert session_call(client, session_id, 'echo "[$A]"')["output"] == "[2]\n"


def test_a_command_outside_a_session_is_handed_no_memory_file(server: LiveServer) -> None:
    with server.client() as client:
        standbys_ready()
        before = spawns(server, "standby")
        # The shell's own descriptors (the last command would be exec'd in its place).
        result = run(client, "ls /proc/$$/fd; true")
        assert spawns(server, "standby") == before + 1
        assert str(result["output"]).split() == ["0", "1", "2"], result
