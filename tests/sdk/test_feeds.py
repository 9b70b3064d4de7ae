"""The SDK's live feeds against a real server: an execution's Server-Sent Events (each state
once, the end last), resumed with `Last-Event-ID` after a real TCP proxy cuts the socket, and
the approvals WebSocket (snapshot, request, decision), which starts again with a snapshot
after a cut."""

from __future__ import annotations

import anyio
import pytest

from shellgate import AsyncClient, AuthenticationError, Client
from tests.conftest import AGENT, APPROVER, LiveServer
from tests.faults.cuttable_proxy import CuttableProxy


def test_events_resume_after_the_socket_is_cut(client: Client, proxy: CuttableProxy) -> None:
    job = client.start("sleep 1.5; echo finished")
    seen = []
    with Client(f"http://127.0.0.1:{proxy.port}", AGENT) as through_proxy:
        for event in through_proxy.events(job.id):
            seen.append((event.id, event.event, event.execution.state))
            if event.event == "state":
                proxy.cut()  # mid-run: the end is still to come
                proxy.start()
    assert seen == [(2, "state", "running"), (3, "end", "completed")]
    assert proxy.accepted >= 2, "the events stream did not reconnect"
    final = client.get(job.id)
    assert final.exit_code == 0 and "finished" in final.output
    # Resuming after the end: nothing more, at once.
    assert list(client.events(job.id, last_event_id=3)) == []


def test_events_of_a_prompted_run_and_the_approvals_feed(client: Client, approver: Client) -> None:
    feed = approver.approval_events()
    snapshot = next(feed)
    assert snapshot.type == "snapshot"
    job = client.start("echo needs-approval-feed")
    assert job.state == "awaiting_approval" and job.approval is not None
    requested = next(event for event in feed if event.type == "approval.requested")
    assert requested.approval is not None and requested.approval.execution_id == job.id
    events = client.events(job.id)
    first = next(events)
    assert (first.id, first.execution.state) == (1, "awaiting_approval")
    approver.approve(job.approval.id, reason="fine")
    decided = next(event for event in feed if event.type == "approval.decided")
    assert decided.approval is not None
    assert (decided.approval.id, decided.approval.state) == (job.approval.id, "approved")
    feed.close()
    rest = [(event.id, event.event) for event in events]
    assert rest[-1] == (3, "end") and [i for i, _ in rest] == sorted({i for i, _ in rest})
    assert client.get(job.id).output == "needs-approval-feed\n"


def test_the_approvals_feed_starts_again_with_a_snapshot_after_a_cut(
    client: Client, proxy: CuttableProxy
) -> None:
    job = client.start("echo needs-approval-reconnect")
    assert job.approval is not None
    with Client(f"http://127.0.0.1:{proxy.port}", APPROVER) as through_proxy:
        feed = through_proxy.approval_events()
        first = next(feed)
        assert first.type == "snapshot" and job.approval.id in {a.id for a in first.approvals}
        proxy.cut()
        proxy.start()
        again = next(feed)
        assert again.type == "snapshot" and job.approval.id in {a.id for a in again.approvals}
        feed.close()
    assert proxy.accepted >= 2
    client.cancel(job.id)


def test_the_approvals_feed_refuses_a_bad_token(sdk_server: LiveServer) -> None:
    with Client(sdk_server.base_url, "not-a-token") as stranger, pytest.raises(AuthenticationError):
        next(stranger.approval_events())


@pytest.mark.anyio
async def test_async_events_and_approvals_feed(
    sdk_server: LiveServer, proxy: CuttableProxy
) -> None:
    async with (
        AsyncClient(sdk_server.base_url, AGENT) as agent,
        AsyncClient(f"http://127.0.0.1:{proxy.port}", AGENT) as through_proxy,
        AsyncClient(sdk_server.base_url, APPROVER) as approver,
    ):
        job = await agent.start("sleep 1.5; echo async-finished")
        seen = []
        with anyio.fail_after(30):
            async for event in through_proxy.events(job.id):
                seen.append((event.id, event.event))
                if event.event == "state":
                    proxy.cut()
                    proxy.start()
        assert seen == [(2, "state"), (3, "end")]
        assert proxy.accepted >= 2

        feed = approver.approval_events()
        with anyio.fail_after(30):
            assert (await anext(feed)).type == "snapshot"
            prompted = await agent.start("echo needs-approval-async-feed")
            async for event in feed:
                if event.type == "approval.requested":
                    assert event.approval is not None
                    assert event.approval.execution_id == prompted.id
                    break
        await feed.aclose()
        await agent.cancel(prompted.id)
