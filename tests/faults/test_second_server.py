"""A second `shellgate serve` started on a data directory a live server is serving (`make run`
twice, a port already taken): it must refuse before it touches anything, since its start
removes the cgroups and marks `lost` the executions an earlier server left."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port
from tests.databases import ServerDatabase
from tests.faults.server_process import ROOT, server_env, server_process


def test_a_second_server_on_the_same_data_dir_refuses_and_leaves_the_first_working(
    tmp_path: Path, database: ServerDatabase
) -> None:
    env = server_env(tmp_path, database)
    with server_process(env, tmp_path / "first.log") as first, first.client() as client:
        job = client.post("/v1/executions", json={"command": "sleep 30", "async": True})
        assert job.status_code == 202, job.text
        second = subprocess.run(
            [sys.executable, "-P", "-m", "app", "serve", "--port", str(free_port())],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=60,
        )
        assert second.returncode == 3, second.stderr
        message = second.stderr.decode()
        assert f"another shellgate server (pid {first.process.pid})" in message
        assert "Traceback" not in message
        # The first server's job still runs and it still starts commands.
        record = client.get(f"/v1/executions/{job.json()['id']}").json()
        assert record["state"] == "running"
        ran = client.post("/v1/executions", json={"command": "echo still-serving"})
        assert ran.status_code == 200, ran.text
        assert ran.json()["output"] == "still-serving\n"
        client.post(f"/v1/executions/{job.json()['id']}/cancel")
