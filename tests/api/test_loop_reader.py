"""The event loop reads every execution's output and sees its exit (no thread per execution):
threads do not grow with concurrent runs, a fast writer does not starve the loop, and output
cleaned on the shared sink worker gives the same inline window as cleaning it in one go."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from pathlib import Path

import anyio
import pytest

from app.output.window import OutputSink
from tests.api.test_binary_stream_liveness import health_latencies
from tests.conftest import LiveServer, make_settings, serve
from tests.databases import ServerDatabase
from tests.waiting import eventually

CONCURRENT_RUNS = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_concurrent_runs_add_no_thread_each(tmp_path: Path, database: ServerDatabase) -> None:
    with serve(make_settings(tmp_path, database)) as server, server.client() as client:
        # Warm up what is shared (the database's and anyio's worker threads), one call at a
        # time so that the pool does not grow for concurrency the test does not measure.
        for command in ("true", "head -c 300000 /dev/urandom", "sleep 0.1"):
            assert client.post("/v1/executions", json={"command": command}).status_code == 200
        baseline = threading.active_count()
        ids = []
        for _ in range(CONCURRENT_RUNS):
            started = client.post("/v1/executions", json={"command": "sleep 30", "async": True})
            assert started.status_code == 202, started.text
            ids.append(started.json()["id"])
        try:
            for execution_id in ids:
                assert client.get(f"/v1/executions/{execution_id}").json()["state"] == "running"
            during = threading.active_count()
            # A thread per run would be baseline + 20; allow for a pool worker or two.
            assert during <= baseline + 3, (baseline, during)
        finally:
            for execution_id in ids:
                client.post(f"/v1/executions/{execution_id}/cancel")
        for execution_id in ids:
            record = client.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
            assert record["state"] == "cancelled", record


@pytest.mark.anyio
async def test_fast_writers_do_not_starve_healthz(server: LiveServer) -> None:
    """A text flood and a binary flood at once (the binary one through the sink worker, its
    reader paused when that falls behind) leave `/healthz` within a ratio of its idle speed."""
    async with server.async_client(timeout=120) as client:
        idle_done = asyncio.Event()
        idle_done.set()
        idle = await health_latencies(server, idle_done, at_least=40)
        ids = []
        for command in ("yes | head -c 300000000", "head -c 40000000 /dev/urandom"):
            started = await client.post("/v1/executions", json={"command": command, "async": True})
            assert started.status_code == 202, started.text
            ids.append(started.json()["id"])
        flooding = asyncio.Event()
        with anyio.fail_after(240):
            probe = asyncio.create_task(health_latencies(server, flooding, at_least=30))
            records = [
                (await client.get(f"/v1/executions/{i}", params={"wait": 200})).json() for i in ids
            ]
            flooding.set()
            busy = await probe
    assert [r["total_bytes"] for r in records] == [300_000_000, 40_000_000], records
    assert all(r["state"] == "completed" for r in records), records
    idle_median, busy_median = statistics.median(idle), statistics.median(busy)
    figures = (
        f"healthz median {idle_median * 1e3:.1f} ms idle, {busy_median * 1e3:.1f} ms during "
        f"the floods ({len(busy)} probes)"
    )
    print(figures)
    # Each loop wake-up reads at most 64 KiB per descriptor, and costly cleaning is on the
    # worker: a probe waits for a few reads, not for a flood. Generous for a loaded machine.
    assert busy_median < 30 * idle_median + 0.05, figures


def test_the_window_of_binary_output_is_exact_through_the_sink_worker(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """Random bytes (cleaned on the worker, in slices, across loop reads) end in the same
    inline output and counters as the whole log fed to one sink at once."""
    with serve(make_settings(tmp_path, database)) as server, server.client(timeout=120) as client:
        # Without ESC: an unterminated escape sequence longer than the sink's carry (1 KiB)
        # makes its result depend on where chunks are cut (so in any feeding, not only the
        # worker's); everything else in random bytes — invalid UTF-8, C1 controls, CR runs,
        # overlong lines — is here.
        command = "head -c 3000000 /dev/urandom | tr -d '\\033'; printf 'tail\\r\\nend'"
        record = client.post("/v1/executions", json={"command": command}).json()
        assert record["state"] == "completed", record
        log = client.get(f"/v1/executions/{record['id']}/output", params={"limit": 4_000_000})
        assert len(log.content) == record["total_bytes"] > 2_900_000
        sink = OutputSink()
        sink.feed(log.content)
        sink.flush()
        expected = sink.summary().record_fields()
        for field, value in expected.items():
            if field != "output":
                assert record[field] == value, (field, record[field], value)
        assert expected["output"] in record["output"]


INPUT_BYTES = 300_000  # past what a terminal buffers: the write must wait for room


def test_keystrokes_reach_a_terminal_that_does_not_read_yet(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """More input than the terminal holds, typed before the program reads: the non-blocking
    write waits for room instead of failing or dropping, and every byte arrives."""
    with serve(make_settings(tmp_path, database)) as server, server.client(timeout=60) as client:
        command = f"stty -echo -icanon; echo ready; sleep 1; head -c {INPUT_BYTES} | wc -c"
        started = client.post(
            "/v1/executions", json={"command": command, "async": True, "pty": True}
        )
        assert started.status_code == 202, started.text
        execution_id = started.json()["id"]
        # Raw mode first: a canonical terminal would drop what a line cannot hold.
        eventually(
            lambda: b"ready" in client.get(f"/v1/executions/{execution_id}/output").content,
            what="the terminal in raw mode",
        )
        sent = client.post(f"/v1/executions/{execution_id}/input", json={"data": "x" * INPUT_BYTES})
        assert sent.status_code == 204, sent.text
        record = client.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
    assert record["state"] == "completed", record
    assert str(INPUT_BYTES) in record["output"], record["output"]


def test_an_input_sent_while_an_earlier_one_waits_for_room_arrives_after_it(
    tmp_path: Path, database: ServerDatabase
) -> None:
    """Two inputs, the second sent while the first still waits for the terminal to take more:
    the terminal gets all of the first, then the second, never interleaved."""
    with serve(make_settings(tmp_path, database)) as server, server.client(timeout=60) as client:
        command = f"stty -echo -icanon; echo ready; sleep 1; head -c {INPUT_BYTES + 10} | tr -s ab"
        started = client.post(
            "/v1/executions", json={"command": command, "async": True, "pty": True}
        )
        assert started.status_code == 202, started.text
        execution_id = started.json()["id"]
        eventually(
            lambda: b"ready" in client.get(f"/v1/executions/{execution_id}/output").content,
            what="the terminal in raw mode",
        )
        url = f"/v1/executions/{execution_id}/input"
        answers: list[int] = []

        def send_first() -> None:
            with server.client(timeout=60) as first_client:
                answers.append(first_client.post(url, json={"data": "a" * INPUT_BYTES}).status_code)

        first = threading.Thread(target=send_first)
        first.start()
        try:
            time.sleep(0.3)  # the program sleeps 1 s before reading: the first input waits
            second = client.post(url, json={"data": "b" * 10})
        finally:
            first.join(60)
        assert second.status_code == 204, second.text
        assert answers == [204]
        record = client.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
    assert record["state"] == "completed", record
    assert record["output"].split("ready", 1)[1].strip() == "ab", record["output"]
