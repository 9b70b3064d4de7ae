"""Once started, the server freezes what it loaded (the framework, SQLAlchemy, the policy
engine, the app) out of the cyclic collector's reach: a full collection then walks only what
the work made, instead of stalling the event loop for every object of the process
(`bench/README.md`, "Soak": 56 ms per full collection of an idle server before)."""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from app.main import create_app
from app.server.serving import GracefulServer
from tests.conftest import AGENT, TOKENS, free_port, make_settings
from tests.databases import SQLITE
from tests.waiting import eventually


def test_the_started_server_has_frozen_what_it_loaded(tmp_path: Path) -> None:
    config = uvicorn.Config(
        create_app(make_settings(tmp_path, SQLITE)),
        host="127.0.0.1",
        port=free_port(),
        log_level="warning",
    )
    server = GracefulServer(config, on_stop=lambda: None, grace=5)
    gc.unfreeze()
    thread = threading.Thread(target=server.run, daemon=True)
    try:
        thread.start()
        eventually(lambda: server.started or not thread.is_alive(), what="the server's start")
        assert server.started
        # The test process's own modules and the app's objects: far more than any request
        # leaves behind.
        assert gc.get_freeze_count() > 50_000
    finally:
        server.should_exit = True
        thread.join(30)
        gc.unfreeze()  # the rest of the suite makes and drops many apps: let them be collected


# `shellgate serve` with a hook on the collector: one line per collection, saying whether it
# came before the start's freeze (nothing frozen yet) or after it, the generation it collected
# and the threshold of full collections at the time.
SERVE_WATCHING_COLLECTIONS = """
import gc, sys
report = open(sys.argv[1], "a", buffering=1)
def seen(phase, info):
    if phase == "start":
        when = "after" if gc.get_freeze_count() else "before"
        report.write(f"{when}:{info['generation']}:{gc.get_threshold()[2]}\\n")
from app.entry import main
gc.callbacks.append(seen)
sys.argv = ["shellgate", "serve"]
main()
"""


def collections(report: Path) -> list[tuple[str, int, int]]:
    return [
        (when, int(generation), int(threshold))
        for when, generation, threshold in (line.split(":") for line in report.read_text().split())
    ]


def test_serve_makes_no_full_collection_before_listening(tmp_path: Path) -> None:
    """The start (imports, the app, the lifespan; a fresh data directory, so the migration
    child too) collects only the young generations; once it listens, full collections resume
    at the interpreter's own threshold."""
    port = free_port()
    report = tmp_path / "collections"
    env = {key: value for key, value in os.environ.items() if not key.startswith("SHELLGATE_")}
    env.update(
        SHELLGATE_PORT=str(port),
        SHELLGATE_DATA_DIR=str(tmp_path / "data"),
        SHELLGATE_WORKSPACE=str(tmp_path),
        SHELLGATE_TOKENS=TOKENS,
        SHELLGATE_LOG_LEVEL="warning",
    )
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE_WATCHING_COLLECTIONS, str(report)], cwd=tmp_path, env=env
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "no /healthz 200 within 60 s"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.05)  # polling a starting process: nothing to await
        started = collections(report)
        assert [when for when, _, _ in started].count("before") > 10  # the young ones ran
        assert not [seen for seen in started if seen[0] == "before" and seen[1] == 2]
        headers = {"Authorization": f"Bearer {AGENT}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            # Work makes garbage: the collector runs on what the work made.
            for _ in range(20):
                ran = client.post("/v1/executions", json={"command": "echo collected"})
                assert ran.status_code == 200, ran.text
                if any(when == "after" for when, _, _ in collections(report)):
                    break
        after = [threshold for when, _, threshold in collections(report) if when == "after"]
        assert after and set(after) == {gc.get_threshold()[2]}
    finally:
        process.terminate()
        process.wait(30)
