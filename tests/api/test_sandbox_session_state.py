"""A session's files are the server's, in its hidden data dir, yet a sandboxed call spawned
without a standby (a PTY call here) has the session's directory bound in to save its state:
its command can put a symbolic link there by any of the files' names. Tried as an attacker
would, on a real sandboxed server (`python -m app serve`, the sandbox at its defaults): the
server must never read or write through such a link. Before, it read `state.sh` through it
into the next call's shell (a hidden `.env`'s secret in the agent's hands), and wrote
`state.next` and truncated `scratch.names` through it (any file the server may write)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_sandbox import _served
from tests.databases import Databases
from tests.test_serve_defaults import ServerProcess

# Calls after the link was made, each a second apart, so that standbys (whose calls get the
# state from the server, in memory files) are ready for them.
CALLS_AFTER = 6
# What each later call runs: it says whether a standby ran it (its memory files are open) and
# kills its own shell, so that its EXIT trap never saves over the link: the link stays for the
# next call, as an attacker would keep it.
PROBE = 'echo "got:$LEAKED"; echo "standby:$(ls -l /proc/$$/fd | grep -c memfd)"; kill -9 $$'


@pytest.fixture(scope="module")
def operator(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[ServerProcess]:
    cwd = tmp_path_factory.mktemp("session-files")
    # An operator's `.env` beside the workspace's data dir: hidden from every command. Made
    # before the server starts, so that its standbys are built with it covered.
    (cwd / ".env").write_text("LEAKED=s3cr3t\n")
    yield from _served(cwd, module_databases.new())


def poisoned_session(agent: httpx.Client, live: ServerProcess, links: dict[str, Path]) -> str:
    """A session whose directory holds `links` (name → target), made by a PTY call's command
    (spawned directly, with the directory bound in), which then kills its own shell."""
    session: str = agent.post("/v1/sessions", json={}).json()["id"]
    made = "; ".join(f"ln -sfn {target} {name}" for name, target in links.items())
    record = agent.post(
        "/v1/executions",
        json={
            "command": f"cd {live.cwd}/data/sessions/{session} && {made} && ls -l; kill -9 $$",
            "session": session,
            "pty": True,
        },
    ).json()
    assert all(f"{name} -> {target}" in record["output"] for name, target in links.items()), record[
        "output"
    ]
    return session


def calls_after(agent: httpx.Client, session: str) -> list[dict[str, Any]]:
    records = []
    for _ in range(CALLS_AFTER):
        time.sleep(1)
        body = {"command": PROBE, "session": session}
        records.append(agent.post("/v1/executions", json=body).json())
    return records


def standby_ran_a_call_at_that_pace(agent: httpx.Client) -> bool:
    """What the leak took: a standby (whose call gets the state from the server) ready for a
    call a second after the last. A session of nothing but its own files shows it."""
    session = agent.post("/v1/sessions", json={}).json()["id"]
    time.sleep(1)
    record = agent.post("/v1/executions", json={"command": PROBE, "session": session}).json()
    return "standby:4" in record["output"]


def test_a_state_file_made_a_link_is_never_read_through(operator: ServerProcess) -> None:
    with operator.client() as agent:
        session = poisoned_session(agent, operator, {"state.sh": operator.cwd / ".env"})
        records = calls_after(agent, session)
        assert standby_ran_a_call_at_that_pace(agent)
    for record in records:
        assert "s3cr3t" not in record["output"], record["output"]


def test_working_files_made_links_are_never_written_through(operator: ServerProcess) -> None:
    """`state.next` is where a standby-run call's snapshot is copied to before it becomes the
    state; `scratch.names` and `state.next` are emptied after a directly spawned call."""
    victim = operator.cwd.parent / f"victim-{uuid.uuid4().hex[:8]}"
    victim.write_text("precious\n")  # outside the workspace: read-only to every command
    names = ("state.next", "scratch.names")
    with operator.client() as agent:
        session = poisoned_session(agent, operator, dict.fromkeys(names, victim))
        assert victim.read_text() == "precious\n"
        agent.post(
            "/v1/executions", json={"command": "export CHANGED=1", "session": session}
        ).raise_for_status()
        calls_after(agent, session)
    assert victim.read_text() == "precious\n"
