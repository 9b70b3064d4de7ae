"""Restart after a crash with a long lost log: the server answers before that log is re-read
(docs/operations.md, "Crashes and restarts"). Asserted as an order of events, not a time:
the server's log says it started before it says the lost log was re-read; then the record gets
the log's output. The time it takes is bench/lost_log_restart.py's."""

from __future__ import annotations

import signal
from pathlib import Path

from app.output.artifact_log import artifact_log_path
from tests.databases import ServerDatabase
from tests.faults.server_process import server_env, server_process
from tests.waiting import eventually

LOG_BYTES = 64_000_000  # ~2 s to re-read on this machine: far longer than a /readyz round trip


def test_start_up_does_not_wait_on_a_long_lost_log(
    tmp_path: Path, database: ServerDatabase
) -> None:
    env = server_env(tmp_path, database)
    artifacts = tmp_path / "data" / "artifacts"
    with server_process(env, tmp_path / "first.log") as first, first.client() as client:
        job = client.post(
            "/v1/executions",
            json={"command": f"yes abcdefghi | head -c {LOG_BYTES}; sleep 60", "async": True},
        )
        assert job.status_code == 202, job.text
        execution_id = job.json()["id"]
        log = artifact_log_path(artifacts, execution_id)
        eventually(
            lambda: log.exists() and log.stat().st_size >= LOG_BYTES,
            what="the whole output in the log",
            within=60,
        )
        first.process.send_signal(signal.SIGKILL)  # this test's own server, by its pid
        first.process.wait(30)

    with server_process(env, tmp_path / "second.log") as second, second.client() as client:
        # server_process returned on the first /healthz 200. The log is usually still being
        # re-read here, but a fast machine may be done: the server's own log below holds the
        # order that proves start-up did not wait, whatever the machine's speed.
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ok"
        assert ready.json()["recovery"] in {"running", "done"}
        record = client.get(f"/v1/executions/{execution_id}").json()
        assert record["state"] == "lost"  # recorded before listening; only its output waits
        assert (
            client.post("/v1/executions", json={"command": "echo meanwhile"}).json()["output"]
            == "meanwhile\n"
        )

        eventually(
            lambda: client.get("/readyz").json().get("recovery") == "done",
            what="the lost log re-read",
            within=120,
            interval=0.1,
        )
        record = client.get(f"/v1/executions/{execution_id}").json()
        assert record["state"] == "lost"
        assert record["total_bytes"] == LOG_BYTES
        assert record["output"].startswith("abcdefghi\n")
        server_log = second.log()
        assert server_log.index("Application startup complete") < server_log.index(
            "recovery of lost logs done"
        )
