"""What a killed test server leaves in the cgroup tree is removed by the session's end
(tests/cgroup_leftovers.py): its units, their processes, its base."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest

from app.confinement.cgroups import instance_name
from app.confinement.choice import choose_backend
from app.confinement.units import Backend
from tests.cgroup_leftovers import own_cgroup_directories, remove_test_servers_cgroups
from tests.databases import ServerDatabase
from tests.faults.server_process import server_env, server_process
from tests.waiting import eventually


def _bases(data_dir: Path) -> list[Path]:
    instance = instance_name(data_dir)
    return [base for own in own_cgroup_directories() if (base := own / instance).is_dir()]


def _members(base: Path) -> set[int]:
    members: set[int] = set()
    for directory, _, files in os.walk(base):
        if "cgroup.procs" in files:
            text = Path(directory, "cgroup.procs").read_text()
            members.update(int(line) for line in text.split())
    return members


@pytest.mark.sqlite_only("the cgroups do not depend on the database")
def test_a_killed_servers_cgroups_and_standbys_are_removed(
    tmp_path: Path, database: ServerDatabase
) -> None:
    probe = choose_backend(tmp_path / "probe")
    if type(probe.backend) is Backend:
        pytest.skip(f"no cgroup backend here: {probe.reasons}")
    probe.backend.close()
    env = server_env(tmp_path, database)
    with server_process(env, tmp_path / "server.log") as server, server.client() as client:
        assert client.post("/v1/executions", json={"command": "echo hi"}).status_code == 200
        data_dir = Path(env["SHELLGATE_DATA_DIR"])
        eventually(lambda: _members(_bases(data_dir)[0]), what="a standby in its unit")
        server.process.send_signal(signal.SIGKILL)  # this test's own server, by its pid
        server.process.wait(30)
    bases = _bases(data_dir)
    assert bases, "a killed server leaves its cgroups"
    assert all(any(entry.is_dir() for entry in base.iterdir()) for base in bases), "and units"
    # Its standby shells see their stdin close and end by themselves, sooner or later: those
    # still there are killed by the removal.
    orphans = set().union(*map(_members, bases))

    removed = remove_test_servers_cgroups(tmp_path)

    assert removed == [instance_name(data_dir)]
    assert _bases(data_dir) == []
    for pid in orphans:
        eventually(lambda pid=pid: not os.path.exists(f"/proc/{pid}"), what=f"{pid} ended")


def test_a_data_directory_whose_name_is_not_utf8_has_an_instance_name(tmp_path: Path) -> None:
    """The cgroups' name hashes the path's bytes: a name that is not UTF-8 has one too (it raised
    `UnicodeEncodeError`), and a UTF-8 one keeps the name it had (`str(path).encode()`)."""
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/\xffdata"))
    assert instance_name(odd).startswith("shellgate-")
    plain = tmp_path / "data"
    expected = hashlib.sha256(str(plain.resolve()).encode()).hexdigest()[:12]
    assert instance_name(plain) == f"shellgate-{expected}"
