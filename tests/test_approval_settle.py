"""A decision heard twice at once settles its execution once, and neither hearer returns before
it is settled: an approver's deny and the replicas' polling fallback both hear it, and the
deny's 200 must not come while the execution still says `awaiting_approval`. A cancel's own
withdrawal of the approval, heard before the cancel has written its record, leaves the
execution and its waiting caller to the cancel. Of two terminal writes, the one that lost
reports nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.cluster import store
from app.main import create_app
from app.services import Services
from app.store import crud
from app.store.models import Approval, ApprovalState, Execution, ExecutionState
from tests.cluster.replicas import fresh_database
from tests.conftest import AGENT, APPROVER, make_settings
from tests.databases import SQLITE, ServerDatabase
from tests.end_reports import deliveries, end_reported, submit_job

POLICY = {"critical": "prompt", "rules": [{"match": "*", "approval": "allow"}]}


ROUNDS = 8


async def _hear(services: Services, approval: Approval, database: Path) -> str:
    """Hear `approval`'s decision; its execution's state when the hearing returns."""
    await services.approvals.settle_subject(approval)
    # Read without yielding to the loop, so the other hearer cannot finish between this one's
    # return and the reading.
    with contextlib.closing(sqlite3.connect(database)) as connection:
        (state,) = connection.execute(
            "SELECT state FROM executions WHERE id = ?", (approval.execution_id,)
        ).fetchone()
    return str(state)


async def _denies_heard_twice(tmp_path: Path) -> list[list[str]]:
    """For each of ROUNDS denied executions, its state as each of two simultaneous hearers saw
    it when it returned. Which hearer reaches the settling first varies from round to round
    (each reads the database before it decides who settles), hence the rounds."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    app = create_app(make_settings(tmp_path, SQLITE, policy_file=policy))
    database = tmp_path / "data" / "shellgate.db"
    seen: list[list[str]] = []
    async with app.router.lifespan_context(app):
        services = app.state.services
        for _ in range(ROUNDS):
            submitted = await submit_job(app, "rm -rf /nonexistent-x")
            assert submitted.status_code == 202, submitted.text
            body = submitted.json()
            assert body["state"] == "awaiting_approval", body
            # The approver's conditional UPDATE has committed; then two hearers settle at once.
            approval_id = body["approval"]["id"]
            await services.db.call(
                crud.decide_approval,
                approval_id=approval_id,
                state=ApprovalState.denied,
                decided_by="carol",
                decision_reason=None,
                decided_at=datetime.now(UTC),
            )
            approval = await services.db.call(crud.get_approval, approval_id=approval_id)
            hearers = [_hear(services, approval, database) for _ in range(2)]
            seen.append(list(await asyncio.gather(*hearers)))
    return seen


def test_neither_hearer_of_a_decision_returns_before_it_is_settled(tmp_path: Path) -> None:
    seen = asyncio.run(_denies_heard_twice(tmp_path))
    settled = [ExecutionState.rejected.value] * 2
    early = [states for states in seen if states != settled]
    assert not early, f"a hearer answered while its execution still said {early}"


async def _cancel_heard_early(
    tmp_path: Path,
    database: ServerDatabase,
    patch: Callable[[object, str, Any], None],
    *,
    elsewhere: bool = False,
) -> tuple[httpx.Response, httpx.Response, str]:
    """A foreground call awaits approval; its cancel withdraws the approval and is held just
    before it writes the `cancelled` record, while the withdrawal's settlement (what the
    polling fallback hears) runs. `elsewhere`: the execution is a dead replica's, its cancel
    served by replica b and its settlement heard by replica c. Returns the cancel's answer,
    the waiting caller's answer and the record's state."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))

    def replica(name: str) -> FastAPI:
        settings = make_settings(
            tmp_path / name, database, policy_file=policy, node_id=name if elsewhere else ""
        )
        return create_app(settings)

    async with contextlib.AsyncExitStack() as replicas:
        app = replica("b")
        await replicas.enter_async_context(app.router.lifespan_context(app))
        services: Services = app.state.services
        hearer = services
        if elsewhere:
            other = replica("c")
            await replicas.enter_async_context(other.router.lifespan_context(other))
            hearer = other.state.services
        lifecycle = services.executions._lifecycle
        finish = lifecycle.finish_without_process
        cancel_holds, cancel_goes_on = asyncio.Event(), asyncio.Event()

        async def held_before_cancelled_record(
            record: Execution, state: ExecutionState, *, notice: str | None = None
        ) -> None:
            if state is ExecutionState.cancelled:
                cancel_holds.set()
                await cancel_goes_on.wait()
            await finish(record, state, notice=notice)

        patch(lifecycle, "finish_without_process", held_before_cancelled_record)
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {AGENT}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as client:
            requests = services.approvals.subscribe()
            waiting = asyncio.ensure_future(
                client.post("/v1/executions", json={"command": "rm -rf /nonexistent-x"})
            )
            await asyncio.wait_for(requests.get(), 10)
            (approval,) = await services.db.call(crud.pending_approvals)
            assert approval.execution_id is not None
            if elsewhere:
                # The record of a replica that is gone (no node row): any replica may claim it.
                moved = await services.db.call(
                    store.claim_awaiting,
                    execution_id=approval.execution_id,
                    from_node="b",
                    to_node="a-gone",
                )
                assert moved
            cancelling = asyncio.ensure_future(
                client.post(f"/v1/executions/{approval.execution_id}/cancel")
            )
            await asyncio.wait_for(cancel_holds.wait(), 10)
            withdrawn = await services.db.call(crud.get_approval, approval_id=approval.id)
            assert withdrawn is not None and withdrawn.state == ApprovalState.expired
            await hearer.approvals.settle_subject(withdrawn)
            cancel_goes_on.set()
            cancelled, answered = await asyncio.wait_for(asyncio.gather(cancelling, waiting), 10)
        record = await services.db.call(crud.get_execution, execution_id=approval.execution_id)
        assert record is not None
        return cancelled, answered, record.state


def _assert_cancelled(cancelled: httpx.Response, answered: httpx.Response, state: str) -> None:
    assert state == ExecutionState.cancelled.value
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    assert answered.status_code == 200, answered.text
    assert answered.json()["state"] == "cancelled"
    assert answered.json()["is_error"] is True


def test_a_cancels_own_withdrawal_heard_first_leaves_the_execution_cancelled(
    tmp_path: Path, database: ServerDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    _assert_cancelled(*asyncio.run(_cancel_heard_early(tmp_path, database, monkeypatch.setattr)))


@pytest.mark.postgres
def test_a_withdrawal_heard_first_on_another_replica_leaves_the_execution_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead replica's execution is cancelled on b; c hears the withdrawal (its notification
    or its polling fallback) before b has written the record. The `_cancelling` guard is b's
    alone: c, which settles a dead replica's executions, records the cancel's outcome too."""
    with fresh_database() as url:
        shared = ServerDatabase("postgres", url)
        _assert_cancelled(
            *asyncio.run(_cancel_heard_early(tmp_path, shared, monkeypatch.setattr, elsewhere=True))
        )


async def _ended_twice(
    tmp_path: Path,
    database: ServerDatabase,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> tuple[str, dict[str, float | None], list[str], list[str]]:
    """An execution awaiting approval ends `cancelled` (a cancel's record), then a `rejected`
    write comes second (a deny's settlement heard late, on this replica or another): the
    record's state, the finished counter by state, the states of the `finished` lines and the
    ids handed to delivery."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    app = create_app(make_settings(tmp_path, database, policy_file=policy))
    async with app.router.lifespan_context(app):
        services: Services = app.state.services
        lifecycle = services.executions._lifecycle
        delivered = deliveries(services, monkeypatch)
        submitted = await submit_job(app, "rm -rf /nonexistent-x")
        assert submitted.json()["state"] == "awaiting_approval", submitted.text
        execution_id = submitted.json()["id"]
        record = await services.db.call(crud.get_execution, execution_id=execution_id)
        assert record is not None
        caplog.clear()
        await lifecycle.finish_without_process(record, ExecutionState.cancelled)
        await lifecycle.finish_without_process(record, ExecutionState.rejected, notice="late")
        reported = await end_reported(services, caplog, execution_id, ("cancelled", "rejected"))
        return *reported, delivered


def test_a_terminal_write_that_lost_reports_nothing(
    tmp_path: Path,
    database: ServerDatabase,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first terminal record stays (terminal states never change); the one that came
    second counts, logs and delivers nothing, so the execution is reported once, as recorded."""
    caplog.set_level(logging.INFO, logger="shellgate.lifecycle")
    state, counted, finished, delivered = asyncio.run(
        _ended_twice(tmp_path, database, monkeypatch, caplog)
    )
    assert state == ExecutionState.cancelled.value
    assert counted == {"cancelled": 1.0, "rejected": None}, counted
    assert finished == ["cancelled"], finished
    assert len(delivered) == 1, delivered


async def _polled_while_deciding(
    tmp_path: Path, database: ServerDatabase, patch: Callable[[object, str, Any], None]
) -> tuple[str, httpx.Response, httpx.Response]:
    """A foreground call awaits approval; the approve request is held right after it wrote the
    decision, before it hands it to the execution, while the replicas' polling fallback runs
    (it reads the committed decision). Returns the record's state after the poll, then the
    approver's and the caller's answers."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    app = create_app(make_settings(tmp_path, database, policy_file=policy))
    async with app.router.lifespan_context(app):
        services: Services = app.state.services
        approvals = services.approvals
        settle = approvals.settle_subject
        written, goes_on = asyncio.Event(), asyncio.Event()

        async def held_once_written(approval: Approval) -> None:
            if not written.is_set():  # the approve request's own hand-over
                written.set()
                await goes_on.wait()
            await settle(approval)

        patch(approvals, "settle_subject", held_once_written)
        transport = httpx.ASGITransport(app=app)

        def client(token: str) -> httpx.AsyncClient:
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers)

        async with client(AGENT) as agent, client(APPROVER) as approver:
            requests = approvals.subscribe()
            waiting = asyncio.ensure_future(
                agent.post(
                    "/v1/executions", json={"command": "rm -rf /nonexistent-x", "approval_wait": 20}
                )
            )
            await asyncio.wait_for(requests.get(), 10)
            (approval,) = await services.db.call(crud.pending_approvals)
            assert approval.execution_id is not None
            approving = asyncio.ensure_future(approver.post(f"/v1/approvals/{approval.id}/approve"))
            await asyncio.wait_for(written.wait(), 10)
            await services.relay.poll_once(approvals, datetime.now(UTC) - timedelta(minutes=1))
            for _ in range(50):  # whatever the poll started has its turns
                await asyncio.sleep(0.01)
            record = await services.db.call(crud.get_execution, execution_id=approval.execution_id)
            assert record is not None
            goes_on.set()
            approved, answered = await asyncio.wait_for(asyncio.gather(approving, waiting), 20)
    return record.state, approved, answered


def test_the_polling_fallback_leaves_a_decision_to_the_request_writing_it(
    tmp_path: Path, database: ServerDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command starts in the approver's request, as designed, not in a task of the poll's
    that read the decision between its write and its hand-over (the command's trace then had
    no request for a parent: CI saw `test_an_approval_wait_is_a_child_span` fail so)."""
    state, approved, answered = asyncio.run(
        _polled_while_deciding(tmp_path, database, monkeypatch.setattr)
    )
    assert state == ExecutionState.awaiting_approval.value  # the poll started nothing
    assert approved.status_code == 200, approved.text
    assert answered.status_code == 200, answered.text
    assert answered.json()["state"] == "completed"
