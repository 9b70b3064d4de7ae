"""What the sandbox's approvals and profiles mean to the kernel (docs/sandbox.md), with the
sandbox on: tests/api/test_sandbox_escalation.py proves the decisions over HTTP on a server
that runs commands unsandboxed; here each decision is followed to the write it allows or
refuses on the host's disk — an approved escalation really writes, a denied one never ran, a
session's fixed profile holds for real, each execution's /tmp is its own, and the hidden data
directory inside the writable workspace stays untouched."""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.waiting import eventually, pending_approval_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kernel(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """A server with the sandbox on and its data directory inside its workspace, as the
    defaults lay them out (`./data` inside the cwd)."""
    tmp = tmp_path_factory.mktemp("kernel")
    settings = make_settings(
        tmp, module_databases.new(), sandbox="on", data_dir=tmp / "workspace" / "data"
    )
    with serve(settings) as live:
        yield live


@pytest.fixture
def admin(kernel: LiveServer) -> Iterator[httpx.Client]:
    with kernel.client(ADMIN) as client:
        yield client


@pytest.fixture
def alice(kernel: LiveServer) -> Iterator[httpx.Client]:
    with kernel.client(AGENT) as client:
        yield client


@pytest.fixture
def carol(kernel: LiveServer) -> Iterator[httpx.Client]:
    with kernel.client(APPROVER) as client:
        yield client


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the workspace that a command sees (read-only) without an
    escalation: one in the repository's checkout. (One under the host's /tmp would not even be
    in sight: the sandbox's /tmp is its own, so a write there fails on a missing directory, not
    on the kernel's refusal.)"""
    directory = REPO / f".sandbox-outside-{uuid.uuid4().hex[:12]}"
    directory.mkdir()
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


@pytest.fixture
def outside_in_host_tmp(tmp_path: Path) -> Path:
    """A directory under the host's /tmp, outside the workspace: hidden by the private /tmp
    unless a profile binds it."""
    directory = tmp_path / "outside"
    directory.mkdir()
    return directory


def install(admin: httpx.Client, policy: dict[str, Any]) -> None:
    response = admin.put("/v1/policy", json=policy)
    assert response.status_code == 200, response.text


def run(client: httpx.Client, command: str, **fields: Any) -> dict[str, Any]:
    response = client.post("/v1/executions", json={"command": command, **fields})
    assert response.status_code == 200, response.text
    record: dict[str, Any] = response.json()
    return record


def ask_to_write(alice: httpx.Client, target: Path, command: str) -> str:
    """The id of an execution held for its escalation to write `target`."""
    response = alice.post(
        "/v1/executions",
        json={"command": command, "sandbox": {"write": [str(target)]}, "approval_wait": 0},
    )
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "awaiting_approval"
    execution_id: str = response.json()["id"]
    return execution_id


def assert_refused_write(record: dict[str, Any]) -> None:
    assert record["exit_code"] != 0, record
    assert "Read-only file system" in record["output"], record["output"]


# --- escalation, followed to the disk -----------------------------------------------------------


@pytest.mark.parametrize("where", ["outside", "outside_in_host_tmp"])
def test_an_approved_escalation_really_writes_outside_the_workspace(
    admin: httpx.Client,
    alice: httpx.Client,
    carol: httpx.Client,
    where: str,
    request: pytest.FixtureRequest,
) -> None:
    target: Path = request.getfixturevalue(where)
    install(admin, {})
    command = f"echo approved-{where} > {target}/report && echo wrote"
    execution_id = ask_to_write(alice, target, command)
    approval = pending_approval_for(carol, command)
    assert approval["kind"] == "sandbox"
    assert not (target / "report").exists()  # nothing ran while it waited
    assert carol.post(f"/v1/approvals/{approval['id']}/approve").status_code == 200
    record = alice.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
    assert record["state"] == "completed", record
    assert record["output"] == "wrote\n"
    assert record["sandbox"]["escalated"] is True
    assert str(target) in record["sandbox"]["write"]
    assert (target / "report").read_text() == f"approved-{where}\n"


def test_a_remembered_escalation_really_writes_without_a_prompt_and_no_further(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    """Approve and remember an escalation: the owner's like call asking the same writes there
    at once, with the record naming the rule; the profile stays the call's own, so a path the
    remembered rule does not cover is still read-only to the kernel."""
    install(admin, {})
    (outside / "within").mkdir()
    execution_id = ask_to_write(alice, outside / "within", f"touch {outside}/within/first")
    approval = pending_approval_for(carol, f"touch {outside}/within/first")
    decided = carol.post(
        f"/v1/approvals/{approval['id']}/approve",
        json={"remember": {"scope": "owner", "for_seconds": 600}},
    )
    assert decided.status_code == 200, decided.text
    rule_id = decided.json()["remembered_rule"]
    alice.get(f"/v1/executions/{execution_id}", params={"wait": 30})

    record = run(alice, f"touch {outside}/within/second", sandbox={"write": [f"{outside}/within"]})
    assert (record["state"], record["exit_code"]) == ("completed", 0), record
    assert record["remembered_rule"] == rule_id
    assert record["sandbox"]["escalated"] is True
    assert (outside / "within" / "second").exists()
    # Not asked: not granted, remembered or not.
    assert_refused_write(run(alice, f"touch {outside}/beside"))
    install(admin, {})


def test_a_denied_escalation_never_ran_and_says_denied(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    command = f"echo denied > {outside}/never"
    execution_id = ask_to_write(alice, outside, command)
    approval = pending_approval_for(carol, command)
    decided = carol.post(f"/v1/approvals/{approval['id']}/deny", json={"reason": "not there"})
    assert decided.status_code == 200, decided.text
    record = alice.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
    assert record["state"] == "rejected"
    assert record["started_at"] is None
    assert carol.get(f"/v1/approvals/{approval['id']}").json()["state"] == "denied"
    assert not (outside / "never").exists()


def test_without_an_escalation_the_kernel_refuses_the_same_write(
    admin: httpx.Client, alice: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    record = run(alice, f"echo unasked > {outside}/report")
    assert_refused_write(record)
    assert record["sandbox"]["escalated"] is False
    assert not (outside / "report").exists()


# --- the private /tmp ---------------------------------------------------------------------------


def test_a_file_in_tmp_is_the_executions_own(alice: httpx.Client, kernel: LiveServer) -> None:
    name = f"/tmp/shellgate-private-{uuid.uuid4().hex}"
    written = run(alice, f"echo mine > {name} && cat {name} && ls -A /tmp")
    assert written["exit_code"] == 0, written
    mine, *listing = written["output"].splitlines()
    assert mine == "mine"
    # Empty when it started: besides the command's file, only the way to the workspace, which
    # the tests keep under the host's /tmp (a write path there is bound in at its own path).
    workspace = kernel.settings.workspace.resolve()
    way_in = {workspace.parts[2]} if workspace.parts[1] == "tmp" else set()
    assert set(listing) == {Path(name).name} | way_in, listing
    assert not Path(name).exists()  # not on the host's /tmp
    later = run(alice, f"test -e {name} && echo seen || echo absent")
    assert later["output"] == "absent\n"


def test_a_running_jobs_tmp_is_not_seen_by_another_execution(alice: httpx.Client) -> None:
    name = f"/tmp/shellgate-job-{uuid.uuid4().hex}"
    response = alice.post(
        "/v1/executions",
        json={"command": f"echo job > {name} && echo written && sleep 60", "async": True},
    )
    assert response.status_code in (200, 202), response.text
    job = response.json()["id"]
    try:
        eventually(
            lambda: "written" in alice.get(f"/v1/executions/{job}").json()["output"],
            what="the job's write to its /tmp",
            within=30,
        )
        other = run(alice, f"test -e {name} && echo seen || echo absent")
        assert other["output"] == "absent\n"
        assert not Path(name).exists()
    finally:
        alice.post(f"/v1/executions/{job}/cancel")
        alice.get(f"/v1/executions/{job}", params={"wait": 30})


def test_a_sessions_calls_each_get_a_fresh_tmp(alice: httpx.Client) -> None:
    """What docs/sandbox.md says: the shell state carries over, /tmp does not (files meant to
    last between calls go in the workspace)."""
    name = f"/tmp/shellgate-session-{uuid.uuid4().hex}"
    session = alice.post("/v1/sessions", json={}).json()["id"]
    try:
        first = run(alice, f"echo kept > {name} && export KEPT=yes", session=session)
        assert first["exit_code"] == 0, first
        second = run(
            alice, f'echo "$KEPT"; test -e {name} && echo seen || echo absent', session=session
        )
        assert second["output"] == "yes\nabsent\n"
        assert not Path(name).exists()
    finally:
        alice.delete(f"/v1/sessions/{session}")


# --- a session's fixed profile, for real ---------------------------------------------------------


def test_a_sessions_profile_holds_in_the_kernel(
    admin: httpx.Client, alice: httpx.Client, outside: Path, outside_in_host_tmp: Path
) -> None:
    given, other = outside, outside_in_host_tmp
    install(admin, {"sandbox": {"write": [str(given)]}})
    created = alice.post("/v1/sessions", json={"sandbox": {"write": [str(given)]}})
    assert created.status_code == 201, created.text
    session = created.json()["id"]
    assert str(given) in created.json()["sandbox"]["write"]
    # Later policies do not move a session's profile: it was fixed when it was made.
    install(admin, {})
    try:
        within = run(alice, f"echo in-profile > {given}/made", session=session)
        assert within["exit_code"] == 0, within
        assert (given / "made").read_text() == "in-profile\n"

        beyond = alice.post(
            "/v1/executions",
            json={
                "command": f"echo more > {other}/made",
                "session": session,
                "sandbox": {"write": [str(other)]},
            },
        )
        assert beyond.status_code == 409, beyond.text
        message = beyond.json()["error"]["message"]
        assert f"asks more than its session's sandbox profile (write {other})" in message
        assert "fixed when it is created" in message

        # Asked for nothing, the same write reaches the kernel, which refuses it; and so does
        # one to a place the command can see (read-only) but was never given.
        unasked = run(alice, f"echo more > {other}/made", session=session)
        assert unasked["exit_code"] != 0, unasked
        assert not (other / "made").exists()
        visible = REPO / f".sandbox-session-{uuid.uuid4().hex[:12]}"
        refused = run(alice, f"echo more > {visible}", session=session)
        assert_refused_write(refused)
        assert not visible.exists()
    finally:
        alice.delete(f"/v1/sessions/{session}")


# --- hidden wins over writable ------------------------------------------------------------------


def _fingerprint(path: Path) -> tuple[int, str] | None:
    if not path.exists():
        return None
    return path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_data_dir_inside_the_writable_workspace_cannot_be_written(
    alice: httpx.Client, kernel: LiveServer
) -> None:
    data = kernel.settings.data_dir
    workspace = kernel.settings.workspace
    assert data.parent == workspace
    registry = data / "shellgate.db"  # SQLite's; on PostgreSQL there is none to find
    before = _fingerprint(registry)
    listing = sorted(path.name for path in data.iterdir())
    record = run(
        alice,
        'echo "entries=$(ls -A data | wc -l)"; echo x >> data/shellgate.db; touch data/planted; '
        "mkdir data/made",
    )
    assert record["exit_code"] != 0, record
    lines = record["output"].splitlines()
    assert lines[0] == "entries=0"  # an empty cover, not the registry's directory
    assert sum("Read-only file system" in line for line in lines[1:]) == 3, record["output"]
    assert _fingerprint(registry) == before
    assert not (data / "planted").exists() and not (data / "made").exists()
    assert sorted(path.name for path in data.iterdir()) == listing
    # The workspace around it was writable all along.
    assert run(alice, "echo ok > beside-data && cat beside-data")["output"] == "ok\n"


# --- hard links (docs/policy.md#hard-links) ------------------------------------------------------


def test_a_command_cannot_hard_link_a_file_from_outside_its_writable_paths(
    alice: httpx.Client, kernel: LiveServer, outside: Path
) -> None:
    """The workspace is a mount of its own in the sandbox, and link(2) never crosses mounts,
    even of one file system: no command makes a second name in the workspace for a file the
    files rules protect elsewhere (a copy it can make is a new file, judged as such)."""
    (outside / "secret").write_text("outside secret")
    name = f"link-{uuid.uuid4().hex[:8]}"
    record = run(alice, f"ln {outside}/secret {name}")
    assert record["exit_code"] != 0, record
    assert "Invalid cross-device link" in record["output"], record["output"]
    assert not (kernel.settings.workspace / name).exists()
    assert (outside / "secret").stat().st_nlink == 1
    inside = run(alice, f"echo x > {name}-a && ln {name}-a {name}-b && stat -c %h {name}-a")
    assert inside["output"] == "2\n", inside  # inside the workspace, links work as ever


def test_a_hidden_file_hard_linked_into_the_workspace_by_the_host_is_readable(
    alice: httpx.Client, kernel: LiveServer
) -> None:
    """The sandbox covers hidden paths, not files: a second name made outside any sandbox (by
    a person, or a command run with the sandbox off) is in sight under that name."""
    hidden = kernel.settings.data_dir / f"host-made-{uuid.uuid4().hex[:8]}"
    hidden.write_text("under a hidden path")
    name = kernel.settings.workspace / f"host-link-{uuid.uuid4().hex[:8]}"
    try:
        os.link(hidden, name)
        record = run(alice, f"cat {name.name}; cat {hidden}")
        assert record["output"].startswith("under a hidden path"), record["output"]
        assert "No such file or directory" in record["output"]  # the hidden path itself
    finally:
        name.unlink(missing_ok=True)
        hidden.unlink()


# --- signals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pty", [False, True])
def test_the_command_starts_with_no_signal_ignored(alice: httpx.Client, pty: bool) -> None:
    """bwrap runs with the terminating signals ignored (so a TERM to the group leaves the
    command its grace, test_sandbox.py); the command inside must not inherit that."""
    record = run(alice, "grep SigIgn /proc/self/status", pty=pty)
    assert record["exit_code"] == 0, record
    assert record["output"].split() == ["SigIgn:", "0000000000000000"]
