"""What an execution's end reported, for the tests of a terminal write that lost: a job
submitted in-process (`submit_job`), the ids handed to notification delivery (`deliveries`),
then the record's state, the finished counter by state and the states of the `finished` lines
(`end_reported`)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from app.services import Services
from app.store import crud
from tests.conftest import AGENT


async def submit_job(app: FastAPI, command: str) -> httpx.Response:
    """`command` submitted as a job (`async`) by the agent, to `app` in this process."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.post(
            "/v1/executions",
            json={"command": command, "async": True},
            headers={"Authorization": f"Bearer {AGENT}"},
        )


def deliveries(services: Services, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the ids of the executions handed to delivery (none is delivered)."""
    delivered: list[str] = []
    monkeypatch.setattr(
        services.executions._lifecycle._completion,
        "ended",
        lambda execution_id, url: delivered.append(execution_id),
    )
    return delivered


async def end_reported(
    services: Services,
    caplog: pytest.LogCaptureFixture,
    execution_id: str,
    states: tuple[str, ...],
) -> tuple[str, dict[str, float | None], list[str]]:
    """The record's state, the finished counter for each of `states`, and the states of the
    `finished` lines in `caplog`."""
    finished = [
        str(getattr(line, "state", None))
        for line in caplog.records
        if getattr(line, "event", None) == "finished"
    ]
    ended = await services.db.call(crud.get_execution, execution_id=execution_id)
    assert ended is not None
    counted = {
        state: services.metrics.registry.get_sample_value(
            "shellgate_executions_finished_total", {"state": state}
        )
        for state in states
    }
    return ended.state, counted, finished
