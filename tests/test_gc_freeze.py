"""Once started, the server freezes what it loaded (the framework, SQLAlchemy, the policy
engine, the app) out of the cyclic collector's reach: a full collection then walks only what
the work made, instead of stalling the event loop for every object of the process
(`bench/README.md`, "Soak": 56 ms per full collection of an idle server before)."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import uvicorn

from app.main import create_app
from app.server.serving import GracefulServer
from tests.conftest import free_port, make_settings
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
