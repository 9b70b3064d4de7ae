"""A command cannot outlive its server (docs/operations.md, "When a replica dies"): `kill -9`
of this test's own server, by its pid, while jobs run that left their process group every way
a shell can. With the sandbox on, every process of those jobs is gone within seconds, before
any restart (bwrap's PID namespace dies with the server); with it off too (the fence watcher
kills them). Either way the restart records the jobs `lost`."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.databases import ServerDatabase
from tests.faults.fenced_jobs import FencedJobs, states
from tests.faults.server_process import server_env, server_process
from tests.waiting import eventually

BWRAP = Path("/usr/bin/bwrap")

# How long after the kill the last process may live: no node timeout on one server, so the
# acceptance bound (node timeout + 10 s) is its 10 s.
GONE_WITHIN = 10


@pytest.mark.skipif(not BWRAP.exists(), reason="bubblewrap is not installed")
def test_every_process_of_a_sandboxed_job_dies_with_its_server(
    tmp_path: Path, database: ServerDatabase
) -> None:
    env = server_env(tmp_path, database, sandbox="on")
    jobs = FencedJobs()
    with server_process(env, tmp_path / "first.log") as first, first.client() as client:
        ids = jobs.start(client)
        # The other spawn paths: a PTY (ptyprocess's fork) and a session's call.
        escape = "setsid {} & {}"
        ids += jobs.start(client, [escape.format(jobs.sleep(), jobs.sleep())], pty=True)
        session = client.post("/v1/sessions", json={})
        assert session.status_code == 201, session.text
        ids += jobs.start(
            client, [escape.format(jobs.sleep(), jobs.sleep())], session=session.json()["id"]
        )
        eventually(jobs.all_running, what="every sleep of the jobs running", within=30)
        assert set(states(client, ids)) == {"running"}
        first.process.send_signal(signal.SIGKILL)  # this test's own server, by its pid
        killed_at = time.monotonic()
        first.process.wait(30)
        eventually(
            lambda: not jobs.survivors(),
            what="every process of the jobs gone",
            within=GONE_WITHIN,
            interval=0.005,
        )
        # Read with `pytest -s`: the figure docs/operations.md quotes.
        print(f"\nfencing: last process gone {time.monotonic() - killed_at:.3f} s after kill -9")

    with server_process(env, tmp_path / "second.log") as second, second.client() as client:
        assert states(client, ids) == ["lost"] * len(ids)


def test_without_the_sandbox_every_process_of_a_job_dies_with_its_server_too(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """No PID namespace to take them: the fence watcher (app/process/fence_watch.py) sees the
    server's pipe close and kills every process of its unsandboxed commands, before any
    restart."""
    env = server_env(tmp_path, database, sandbox="off")
    jobs = FencedJobs()
    with server_process(env, tmp_path / "first.log") as first, first.client() as client:
        ids = jobs.start(client)
        escape = "setsid {} & {}"
        ids += jobs.start(client, [escape.format(jobs.sleep(), jobs.sleep())], pty=True)
        eventually(jobs.all_running, what="every sleep of the jobs running", within=30)
        first.process.send_signal(signal.SIGKILL)  # this test's own server, by its pid
        killed_at = time.monotonic()
        first.process.wait(30)
        eventually(
            lambda: not jobs.survivors(),
            what="every process of the jobs gone",
            within=GONE_WITHIN,
            interval=0.005,
        )
        print(
            f"\nfencing, sandbox off: last of {len(jobs.found)} processes gone "
            f"{time.monotonic() - killed_at:.3f} s after kill -9"
        )

    with server_process(env, tmp_path / "second.log") as second, second.client() as client:
        assert states(client, ids) == ["lost"] * len(ids)
