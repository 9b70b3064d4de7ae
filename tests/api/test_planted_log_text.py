"""A text log line carries what a command or a request chose (a cwd, a path, an error's text):
it stays one line, its control characters written as escapes (real `python -m app serve`)."""

from __future__ import annotations

from pathlib import Path

from tests.databases import ServerDatabase
from tests.faults.server_process import server_env, server_process

FORGED = "2026-01-01 00:00:00,000 INFO shellgate.lifecycle [-] forged line"


def test_a_cwd_with_a_line_break_does_not_forge_a_log_line(
    tmp_path: Path, database: ServerDatabase
) -> None:
    env = server_env(tmp_path, database)
    with server_process(env, tmp_path / "server.log") as live, live.client() as agent:
        planted = f"planted\n{FORGED}\x1b[2K"
        made = agent.post(
            "/v1/executions", json={"command": 'mkdir -- "$NAME"', "env": {"NAME": planted}}
        )
        assert made.json()["exit_code"] == 0, made.text
        ran = agent.post("/v1/executions", json={"command": "true", "cwd": planted})
        assert ran.status_code == 200, ran.text
        execution_id = ran.json()["id"]
        agent.get(f"/v1/executions/{execution_id}", params={"wait": 10})
        log = live.log()
    assert not any(line.startswith(FORGED) for line in log.splitlines())
    assert "\x1b" not in log
    started = [line for line in log.splitlines() if f"execution started {execution_id}" in line]
    assert len(started) == 1
    assert started[0].endswith(f"cwd={tmp_path}/workspace/planted\\n{FORGED}\\x1b[2K")
