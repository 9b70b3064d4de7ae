"""An ended execution is freed by reference counting alone: nothing it holds (its windows,
buffers, process and pipe objects) waits for the cyclic collector. Its process's callbacks
used to keep a cycle with it, so under load every ended execution stayed in memory until the
next full collection (RSS 35-70 % over its baseline after bench/soak.py, and back down only
whenever a full collection happened to run)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app.executions.registry import LiveExecution
from app.process import RunningProcess
from tests.conftest import LiveServer, run_foreground

COMMAND = "head -c 100000 /dev/zero | tr '\\0' x"


@pytest.fixture
def cyclic_garbage() -> Iterator[list[object]]:
    """What the collector finds unreachable, kept for the test to look at."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.parametrize("fields", [{}, {"pty": True}, {"async": True}], ids=["pipe", "pty", "job"])
def test_no_ended_execution_is_left_to_the_cyclic_collector(
    fresh_server: LiveServer, cyclic_garbage: list[object], fields: dict[str, object]
) -> None:
    ids: set[str] = set()
    with fresh_server.client() as client:
        for _ in range(6):
            response = client.post("/v1/executions", json={"command": COMMAND, **fields})
            assert response.status_code in (200, 202), response.text
            execution_id = response.json()["id"]
            record = client.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
            assert record["state"] == "completed", record
            ids.add(execution_id)
        assert run_foreground(client, "echo still")["output"] == "still\n"
    gc.collect()
    left = [o for o in cyclic_garbage if isinstance(o, LiveExecution) and o.id in ids]
    processes = [o for o in cyclic_garbage if isinstance(o, RunningProcess)]
    assert left == [] and processes == []
