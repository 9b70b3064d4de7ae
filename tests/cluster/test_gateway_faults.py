"""The fault suite of a cluster as users run it (docker-compose.yml's `cluster` profile): three
replicas on one PostgreSQL database behind a gateway (tests/cluster/gateway.py, a process as
nginx is), every process on loopback. It does what the measurement behind docs/operations.md,
"When a replica dies", did, bounded by short node timeouts:
- `kill -9` of a replica holding the whole job cap: within the node timeout + 10 s every
  process of its jobs is gone and their records `lost`; a burst through the gateway then runs
  exactly the cap, counted as processes on the host; its session answers 410 naming it, never
  200 from another shell;
- PostgreSQL cut under one replica: every route of it 503 (or a plain 4xx), its WebSockets
  close 1013, the gateway's clients never see a 500;
- a rolling restart (SIGTERM, start again, next) under a client's steady calls: 0 errors."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url

from tests.cluster.replicas import Replica, fresh_database, replica
from tests.cluster.test_database_down import close_code, sweep
from tests.conftest import ADMIN, AGENT, free_port
from tests.faults.cuttable_proxy import CuttableProxy
from tests.faults.fenced_jobs import FencedJobs, states
from tests.faults.server_process import ROOT
from tests.waiting import eventually

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="no bubblewrap"),
]

NODE_TIMEOUT = 3
CAP = 3
NAMES = ("node-a", "node-b", "node-c")
SETTINGS: dict[str, Any] = {
    "node_timeout": NODE_TIMEOUT,
    "max_jobs": CAP,
    "kill_grace_seconds": 1,
    "sandbox": "on",
}


@dataclass
class Cluster:
    replicas: dict[str, Replica]
    gateway_url: str
    stack: contextlib.ExitStack

    def client(self, token: str = AGENT) -> httpx.Client:
        return httpx.Client(
            base_url=self.gateway_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )


@contextlib.contextmanager
def gateway(port: int, upstreams: list[str], log: Path) -> Iterator[str]:
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.gateway", str(port), *upstreams],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(lambda: _answers(url + "/healthz"), what="the gateway answering", within=30)
        yield url
    finally:
        process.send_signal(signal.SIGKILL)  # this test's own gateway, by its pid
        process.wait(30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def cluster(tmp: Path, databases: dict[str, str]) -> Iterator[Cluster]:
    """Three replicas (`databases`: the URL each reaches PostgreSQL by) and a gateway."""
    with contextlib.ExitStack() as stack:
        replicas = {
            name: stack.enter_context(replica(tmp, name, databases[name], **SETTINGS))
            for name in NAMES
        }
        url = stack.enter_context(
            gateway(
                free_port(),
                [node.base_url for node in replicas.values()],
                tmp / "gateway.log",
            )
        )
        yield Cluster(replicas, url, stack)


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_database() as url:
        yield url


def kill(node: Replica) -> None:
    node.process.send_signal(signal.SIGKILL)  # this test's own replica, by its pid
    node.process.wait(30)


def test_kill_9_of_a_replica_ends_its_jobs_frees_the_cap_and_loses_its_session(
    tmp_path: Path, database: str
) -> None:
    jobs = FencedJobs()
    with cluster(tmp_path, dict.fromkeys(NAMES, database)) as nodes, nodes.client() as client:
        a = nodes.replicas["node-a"]
        with a.client() as agent_a:
            session = agent_a.post("/v1/sessions", json={})
            assert session.status_code == 201, session.text
            session_id = session.json()["id"]
            kept = agent_a.post(
                "/v1/executions", json={"command": "export K=kept", "session": session_id}
            )
            assert kept.status_code == 200, kept.text
            # The whole cap on A, each job's process out of its group (`setsid`).
            held = jobs.start(agent_a, [f"setsid {jobs.sleep()} & wait" for _ in range(CAP)])
        eventually(jobs.all_running, what="A's jobs running", within=30)
        assert states(client, held) == ["running"] * CAP
        kill(a)
        killed_at = time.monotonic()

        gone_at = lost_at = None
        session_answers: set[int] = set()
        while gone_at is None or lost_at is None:
            now = time.monotonic()
            assert now - killed_at < NODE_TIMEOUT + 10, (
                f"after {now - killed_at:.1f} s: survivors {jobs.survivors()}, "
                f"records {states(client, held)}"
            )
            if gone_at is None and not jobs.survivors():
                gone_at = now
            if lost_at is None and states(client, held) == ["lost"] * CAP:
                lost_at = now
            call = client.post(
                "/v1/executions", json={"command": "echo K=$K", "session": session_id}
            )
            session_answers.add(call.status_code)
            assert call.status_code in (409, 410, 503), call.text
            time.sleep(0.05)
        print(
            f"\nkill -9: processes gone {gone_at - killed_at:.2f} s, records lost "
            f"{lost_at - killed_at:.2f} s after it (node timeout {NODE_TIMEOUT} s)"
        )

        def session_lost() -> bool:
            call = client.post(
                "/v1/executions", json={"command": "echo K=$K", "session": session_id}
            )
            assert call.status_code in (409, 410, 503), call.text
            if call.status_code == 503:
                return False
            error = call.json()["error"]
            assert error["code"] == "session_lost", error
            assert "node-a" in error["message"], error
            return True

        eventually(session_lost, what="the session lost, naming its replica", within=10)

        burst = [jobs.sleep() for _ in range(2 * CAP)]

        def submit(command: str) -> int:
            return client.post(
                "/v1/executions", json={"command": command, "async": True}
            ).status_code

        with ThreadPoolExecutor(len(burst)) as pool:
            answers = list(pool.map(submit, burst))
        assert answers.count(202) == CAP and set(answers) == {202, 429}, answers
        eventually(lambda: jobs.running_count() == CAP, what="the burst running", within=30)
        # Every sleep of this test, A's and the burst's: the cap, no more.
        assert jobs.running_count() == CAP


def test_postgresql_cut_under_one_replica_is_503_or_1013_never_500(
    tmp_path: Path, database: str
) -> None:
    url = make_url(database)
    proxy = CuttableProxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.start()
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    try:
        with cluster(tmp_path, {**dict.fromkeys(NAMES, database), "node-c": proxied}) as nodes:
            c = nodes.replicas["node-c"]
            (tmp_path / "workspace" / "seen.txt").write_text("seen\n")
            with c.client(ADMIN) as admin_c, nodes.client(ADMIN) as admin:
                done = admin_c.post("/v1/executions", json={"command": "echo before"})
                assert done.status_code == 200, done.text
                job = admin_c.post("/v1/executions", json={"command": "sleep 300", "async": True})
                assert job.status_code == 202, job.text
                session = admin_c.post("/v1/sessions", json={})
                assert session.status_code == 201, session.text
                ids = {
                    "job": job.json()["id"],
                    "done": done.json()["id"],
                    "session": session.json()["id"],
                    "approval": "ap_absent",
                }

                proxy.cut()
                cut_at = time.monotonic()
                answers: dict[str, httpx.Response] = {}
                through_gateway: list[int] = []
                # Past the node timeout, so that C fences its job and the others take it over
                # meanwhile.
                while time.monotonic() - cut_at < NODE_TIMEOUT + 1:
                    sweep(admin_c, ids, answers)
                    for _ in range(3):
                        through_gateway.append(
                            admin.get(f"/v1/executions/{ids['done']}").status_code
                        )
                        through_gateway.append(
                            admin.post("/v1/executions", json={"command": "true"}).status_code
                        )
                assert 503 in {answer.status_code for answer in answers.values()}
                for stream in (f"/v1/executions/{ids['job']}/stream", "/v1/approvals/stream"):
                    assert asyncio.run(close_code(c.ws_url + stream)) == 1013, stream
                assert set(through_gateway) <= {200, 503}, through_gateway
                assert 200 in through_gateway

                proxy.start()
                eventually(
                    lambda: admin_c.get("/readyz").status_code == 200,
                    what="C ready once PostgreSQL is back",
                    within=20,
                )
                assert admin.get(f"/v1/executions/{ids['job']}").json()["state"] == "lost"
    finally:
        proxy.cut()


# Three stops and starts of a replica: a minute on a loaded 2-core machine, more at times.
@pytest.mark.timeout(300)
def test_a_rolling_restart_through_the_gateway_costs_no_client_an_error(
    tmp_path: Path, database: str
) -> None:
    with cluster(tmp_path, dict.fromkeys(NAMES, database)) as nodes:
        stop = threading.Event()
        outcomes: list[str] = []

        def calls() -> None:
            with nodes.client() as client:
                while not stop.is_set():
                    try:
                        ran = client.post("/v1/executions", json={"command": "echo rolling"})
                        outcome = f"{ran.status_code} POST {ran.text[:300]}"
                        if ran.status_code in (200, 202):
                            # 202: the replica began to stop while the call waited, and
                            # answered it with the record as it stood (docs/operations.md);
                            # the client reads the end through the gateway.
                            read = client.get(
                                f"/v1/executions/{ran.json()['id']}", params={"wait": 30}
                            )
                            outcome = f"{read.status_code} GET {read.text[:300]}"
                            if read.status_code == 200 and (
                                read.json()["state"],
                                read.json()["output"],
                            ) == ("completed", "rolling\n"):
                                outcome = "200"
                    except httpx.TransportError as error:
                        outcome = type(error).__name__
                    outcomes.append(outcome)

        caller = threading.Thread(target=calls)
        caller.start()
        try:
            for name in NAMES:
                old = nodes.replicas[name]
                port = int(old.base_url.rsplit(":", 1)[1])
                before = len(outcomes)
                old.process.send_signal(signal.SIGTERM)  # this test's own replica, by its pid
                # A graceful stop: uvicorn ends by re-raising the signal it handled.
                assert old.process.wait(30) in (0, -signal.SIGTERM), old.log()
                new = nodes.stack.enter_context(
                    replica(tmp_path, name, database, port=port, **SETTINGS)
                )
                nodes.replicas[name] = new
                eventually(
                    lambda url=new.base_url: _answers(url + "/readyz"),
                    what=f"{name} ready",
                    within=30,
                )
                eventually(
                    lambda before=before: len(outcomes) > before + 5,
                    what="calls after the restart",
                    within=30,
                )
        finally:
            stop.set()
            caller.join(60)
        errors = [outcome for outcome in outcomes if outcome != "200"]
        print(f"\nrolling restart: {len(outcomes)} calls, {len(errors)} errors")
        assert not errors, errors
        assert len(outcomes) > 3 * 5
