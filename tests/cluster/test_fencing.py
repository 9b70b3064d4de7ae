"""A replica with running jobs is killed (SIGKILL of this test's own replica, by its pid): its
jobs' processes end with it, the other replica records them `lost` once the node timeout runs
out, and a burst of new jobs through the live replica never has more than the cap running —
counted as real processes on the host, not as records (docs/operations.md, "When a replica
dies")."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cluster.replicas import fresh_database, replica
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


def test_a_killed_replicas_jobs_end_and_free_the_cap_for_real(
    tmp_path: Path, database: str
) -> None:
    jobs = FencedJobs()
    settings = {"node_timeout": NODE_TIMEOUT, "max_jobs": CAP, "sandbox": "on"}
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
