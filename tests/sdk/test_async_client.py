"""The asyncio SDK against a real server: the same calls as the sync client, awaited."""

from __future__ import annotations

import hashlib

import anyio
import pytest

from shellgate import (
    AsyncClient,
    AuthenticationError,
    ConflictError,
    ExitFrame,
    InvalidRequestError,
    NotFoundError,
    OutputFrame,
    PermissionDeniedError,
    RateLimitedError,
)
from tests.conftest import AGENT, APPROVER, LiveServer
from tests.sdk.conftest import numbered_lines_bytes, numbered_lines_command

pytestmark = pytest.mark.anyio


async def test_run_start_wait_and_output(sdk_server: LiveServer) -> None:
    async with AsyncClient(sdk_server.base_url, AGENT) as client:
        result = await client.run("echo async-hello; exit 5")
        assert (result.state, result.exit_code, result.output) == ("failed", 5, "async-hello\n")
        followed = await client.run("sleep 0.8; echo followed")
        assert (followed.state, followed.mode, followed.output) == (
            "completed",
            "job",
            "followed\n",
        )

        job = await client.start(numbered_lines_command(4, 30))
        assert job.state == "running"
        done = await client.wait(job.id)
        assert done.state == "completed"
        expected = numbered_lines_bytes(4, 30)
        chunk = await client.read(job.id, offset=5, limit=9)
        assert (chunk.data, chunk.next_offset) == (expected[5:14], 14)
        whole = await client.output(job.id)
        assert hashlib.sha256(whole).digest() == hashlib.sha256(expected).digest()


async def test_stream_attach_and_signal(sdk_server: LiveServer) -> None:
    async with AsyncClient(sdk_server.base_url, AGENT) as client:
        job = await client.start("echo a; sleep 0.2; printf 'b\\xfe'; exit 6")
        frames = [frame async for frame in client.stream(job.id)]
        data = b"".join(f.data for f in frames if isinstance(f, OutputFrame))
        assert data == b"a\nb\xfe"
        assert frames[-1] == ExitFrame(state="failed", exit_code=6, signal=None)

        pty_job = await client.start("read -p 'name? ' x; echo \"hi $x\"", pty=True)
        seen = b""
        with anyio.fail_after(30):
            async with client.attach(pty_job.id) as attachment:
                async for frame in attachment:
                    if isinstance(frame, OutputFrame):
                        seen += frame.data
                        if seen.endswith(b"name? "):
                            await attachment.send("ann\r")
        assert seen == b"name? ann\r\nhi ann\r\n"
        assert attachment.exit == ExitFrame(state="completed", exit_code=0, signal=None)

        sleeper = await client.start("sleep 30")
        await client.signal(sleeper.id, "TERM")
        assert (await client.wait(sleeper.id, timeout=20)).state == "cancelled"
        with pytest.raises(ConflictError):
            await client.signal(sleeper.id, "INT")


async def test_sessions_approvals_and_policy(sdk_server: LiveServer) -> None:
    async with (
        AsyncClient(sdk_server.base_url, AGENT) as client,
        AsyncClient(sdk_server.base_url, APPROVER) as approver,
    ):
        session = await client.create_session(env={"X": "1"})
        await client.session_run(session.id, "export Y=2")
        result = await client.session_run(session.id, 'echo "$X$Y"')
        assert (result.stdout, result.exit_code) == (b"12\n", 0)
        await client.delete_session(session.id)
        with pytest.raises(NotFoundError):
            await client.get_session(session.id)

        held = await client.start("echo needs-approval async")
        assert held.approval is not None
        listed = await approver.list_approvals()
        assert held.approval.id in [item.id for item in listed.data]
        await approver.approve(held.approval.id)
        assert (await client.wait(held.id, timeout=20)).state == "completed"

        assert (await client.evaluate("rm -rf /nonexistent-x")).verdict == "deny"
        with pytest.raises(PermissionDeniedError) as denied:
            await client.run("rm -rf /nonexistent-x")
        assert denied.value.code == "policy_denied"


async def test_errors_are_the_same_exceptions(sdk_server: LiveServer) -> None:
    async with AsyncClient(sdk_server.base_url, "wrong-token") as stranger:
        with pytest.raises(AuthenticationError) as unauthenticated:
            await stranger.get("ex_whatever0123456789abc")
        assert unauthenticated.value.status == 401
    async with AsyncClient(sdk_server.base_url, AGENT) as client:
        with pytest.raises(NotFoundError):
            await client.get("ex_doesnotexist0123456789")
        with pytest.raises(NotFoundError):
            [frame async for frame in client.stream("ex_doesnotexist0123456789")]
        with pytest.raises(InvalidRequestError) as invalid:
            await client.run("true", cwd="/nonexistent-dir-x")
        assert invalid.value.message == "Working directory does not exist: /nonexistent-dir-x"


@pytest.mark.settings(max_jobs=1)
async def test_the_job_cap_raises_rate_limited(fresh_server: LiveServer) -> None:
    async with AsyncClient(fresh_server.base_url, AGENT) as client:
        running = await client.start("sleep 30")
        with pytest.raises(RateLimitedError) as limited:
            await client.start("true")
        await client.cancel(running.id)
    assert limited.value.code == "job_limit_reached"
    assert limited.value.retry_after is not None and limited.value.retry_after > 0
