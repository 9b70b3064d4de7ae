"""A replica with running jobs is killed (SIGKILL of this test's own replica, by its pid): its
jobs' processes end with it, the other replica records them `lost` once the node timeout runs
out, and a burst of new jobs through the live replica never has more than the cap running —
counted as real processes on the host, not as records (docs/operations.md, "When a replica
dies")."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import make_url

from app.executions.result_text import LOST_NOTICE, LOST_ON_SILENT_NODE
from tests.cluster.replicas import fresh_database, replica
from tests.faults.cuttable_proxy import CuttableProxy
from tests.faults.fenced_jobs import FencedJobs, states
from tests.waiting import eventually

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="no bubblewrap"),
]

NODE_TIMEOUT = 3
CAP = 3


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_a_killed_replicas_jobs_end_and_free_the_cap_for_real(
    tmp_path: Path, database: str, sandbox: str
) -> None:
    """`on`: bwrap's PID namespace dies with the replica; `off`: its fence watcher kills them."""
    jobs = FencedJobs()
    settings = {"node_timeout": NODE_TIMEOUT, "max_jobs": CAP, "sandbox": sandbox}
    with replica(tmp_path, "node-b", database, **settings) as b:
        with replica(tmp_path, "node-a", database, **settings) as a, a.client() as agent_a:
            # One process per job, each out of its job's group (`setsid`): the cap full.
            held = jobs.start(agent_a, [f"setsid {jobs.sleep()} & wait" for _ in range(CAP)])
            eventually(jobs.all_running, what="A's jobs running", within=30)
            a.process.send_signal(signal.SIGKILL)  # this test's own replica, by its pid
            a.process.wait(30)
            # The processes end with the replica, not with the node timeout.
            eventually(lambda: not jobs.survivors(), what="A's processes gone", within=10)

        with b.client() as agent_b:
            eventually(
                lambda: states(agent_b, held) == ["lost"] * CAP,
                what="B recording A's jobs lost",
                within=NODE_TIMEOUT + 10,
            )
            # The record says what happened: B killed nothing, A's lease ran out, and what
            # ended the processes (the bound above held it true).
            notices = agent_b.get(f"/v1/executions/{held[0]}").json()["notices"]
            assert LOST_NOTICE not in notices, notices
            ended_by = {"on": "the sandbox's PID namespace", "off": "fence watcher"}[sandbox]
            assert [
                notice
                for notice in notices
                if notice.startswith(f"Replica node-a {LOST_ON_SILENT_NODE} ({NODE_TIMEOUT} s")
                and "replica node-b recorded this command lost and killed nothing" in notice
                and ended_by in notice
            ], notices
            burst = [jobs.sleep() for _ in range(2 * CAP)]

            def submit(command: str) -> int:
                return agent_b.post(
                    "/v1/executions", json={"command": command, "async": True}
                ).status_code

            with ThreadPoolExecutor(len(burst)) as pool:
                answers = list(pool.map(submit, burst))
            assert sorted(set(answers)) == [202, 429], answers
            assert answers.count(202) == CAP, answers
            eventually(
                lambda: jobs.running_count() == CAP, what="the burst's jobs running", within=30
            )
            # Every sleep of this test, A's and the burst's: exactly the cap, no more.
            assert jobs.running_count() == CAP


@pytest.mark.parametrize("outage", ["cut", "freeze"])
def test_a_replica_cut_off_from_the_database_ends_its_jobs_before_they_are_recorded_lost(
    tmp_path: Path, database: str, outage: str
) -> None:
    """Alive but unable to heartbeat (its link to PostgreSQL cut, the others' intact), a replica
    ends its commands itself once `fence_after` runs out, before another replica sees the node
    timeout run out and records them `lost`: no process runs under a record that says killed.
    With the sandbox off, where no parent-death signal would end them. `cut`: its connections
    are reset; `freeze`: they stay open and nothing answers (a partition), so a beat hangs in
    its database call and the fence must not wait for it."""
    url = make_url(database)
    proxy = CuttableProxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.start()
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    jobs = FencedJobs()
    settings = {"node_timeout": 6, "kill_grace_seconds": 1, "sandbox": "off"}
    try:
        with (
            replica(tmp_path, "node-b", database, **settings) as b,
            b.client() as agent_b,
            replica(tmp_path, "node-a", proxied, **settings) as a,
            a.client() as agent_a,
        ):
            held = jobs.start(agent_a, [f"setsid {jobs.sleep()} & wait", jobs.sleep()])
            eventually(jobs.all_running, what="A's jobs running", within=30)
            getattr(proxy, outage)()
            cut_at = time.monotonic()
            gone_at: float | None = None
            while states(agent_b, held) != ["lost"] * len(held):
                if gone_at is None and not jobs.survivors():
                    gone_at = time.monotonic()
                assert time.monotonic() - cut_at < 30, "B never recorded A's jobs lost"
                time.sleep(0.05)
            lost_at = time.monotonic()
            assert gone_at is not None, (
                f"A's processes still ran when B recorded them lost: {jobs.survivors()}"
            )
            print(
                f"\nfenced: processes gone {gone_at - cut_at:.2f} s after the cut, "
                f"recorded lost at {lost_at - cut_at:.2f} s"
            )
            assert (agent_a.get("/healthz").status_code, a.process.poll()) == (200, None)
            proxy.cut()  # A's calls stuck in a frozen connection fail now: it can stop
    finally:
        proxy.cut()
