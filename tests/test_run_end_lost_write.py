"""A run whose terminal write lost reports nothing: when its command ends, the record may
already be terminal (the other replicas recorded it `lost` after this one was fenced, or a
cancel's record came first), and terminal states never change. The end then counts, logs and
delivers nothing in the state it had tried to write; its `run` span still ends, with no state."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.main import create_app
from app.observability.tracing import Tracing
from app.services import Services
from app.store import crud
from app.store.models import ExecutionState
from tests.conftest import make_settings
from tests.databases import ServerDatabase
from tests.end_reports import deliveries, end_reported, submit_job

RECORDED_ELSEWHERE = {
    "state": ExecutionState.lost.value,
    "notices": json.dumps(["recorded lost by another replica"]),
    "text": "lost",
}


async def _run_whose_end_loses(
    tmp_path: Path,
    database: ServerDatabase,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    exporter: InMemorySpanExporter,
) -> tuple[str, dict[str, float | None], list[str], list[str]]:
    """A job whose record turns `lost` just before its own end writes `completed`: the
    record's state, the finished counter by state, the states of the `finished` lines and the
    ids handed to delivery."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(make_settings(tmp_path, database), tracing=Tracing(provider))
    async with app.router.lifespan_context(app):
        services: Services = app.state.services
        lifecycle = services.executions._lifecycle
        delivered = deliveries(services, monkeypatch)
        own_write = lifecycle._finish_row

        def recorded_elsewhere_first(execution_id: str, values: dict[str, Any]) -> bool:
            services.db.run_in_transaction(
                crud.finish_execution,
                execution_id=execution_id,
                values={**RECORDED_ELSEWHERE, "finished_at": datetime.now(UTC)},
            )
            return own_write(execution_id, values)

        monkeypatch.setattr(lifecycle, "_finish_row", recorded_elsewhere_first)
        submitted = await submit_job(app, "sleep 0.3")
        assert submitted.status_code < 300, submitted.text
        execution_id = submitted.json()["id"]
        caplog.clear()
        live = services.registry.live[execution_id]
        await asyncio.wait_for(live.finished.wait(), 10)
        # The reports come in the same step as `finished.set()`, after it.
        await asyncio.sleep(0)
        reported = await end_reported(services, caplog, execution_id, ("lost", "completed"))
        return *reported, delivered


def test_a_run_whose_terminal_write_lost_reports_nothing(
    tmp_path: Path,
    database: ServerDatabase,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="shellgate.lifecycle")
    exporter = InMemorySpanExporter()
    state, counted, finished, delivered = asyncio.run(
        _run_whose_end_loses(tmp_path, database, monkeypatch, caplog, exporter)
    )
    assert state == ExecutionState.lost.value
    # The replicas that recorded it `lost` report it; this one claims no `completed`.
    assert counted == {"lost": None, "completed": None}, counted
    assert finished == [], finished
    assert delivered == [], delivered
    [run] = [span for span in exporter.get_finished_spans() if span.name == "run"]
    assert "shellgate.state" not in (run.attributes or {}), run.attributes
