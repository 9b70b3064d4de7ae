"""Reading a command's output after it exits is bounded by the data, not the clock: every byte
written before the exit is kept, even with every core busy, and a writer that is not waited
for (a background process left running, a daemon that left the group) ends the reading with a
notice that says so."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect

from app.executions.result_text import OUTPUT_CUT_NOTICES
from tests.api.test_stream import auth as ws_auth
from tests.api.test_stream import output_of, read_frames, stream_url
from tests.conftest import LiveServer, make_settings, serve
from tests.conftest import run_foreground as run
from tests.databases import ServerDatabase
from tests.waiting import eventually

BACKGROUND_NOTICE = OUTPUT_CUT_NOTICES["background"]
ESCAPED_NOTICE = OUTPUT_CUT_NOTICES["escaped"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def end_sleep(pid: int, seconds: str) -> None:
    """End the `sleep <seconds>` this test started (through the command), checking it is that."""
    expected = f"sleep\0{seconds}\0".encode()

    def exec_done() -> bytes | None:
        try:  # between fork and exec it is still a copy of bash
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return b"gone"
        return cmdline if cmdline == expected else None

    if eventually(exec_done, what=f"{pid} becoming our sleep", within=5) == expected:
        os.kill(pid, 9)


def pid_in(output: object) -> int:
    return int(str(output).split("pid ")[1].split()[0])


def test_a_command_that_leaves_nothing_behind_ends_without_a_notice(fg: httpx.Client) -> None:
    result = run(fg, "echo one; (echo two) & wait; echo three >&2")
    assert result["output"] == "one\ntwo\nthree\n"
    assert result["notices"] == []


def test_a_background_process_holding_the_output_ends_the_run_with_a_notice(
    fg: httpx.Client,
) -> None:
    started = time.monotonic()
    result = run(fg, "sleep 1031 & echo pid $!; echo after")
    try:
        assert time.monotonic() - started < 10  # the exit ends the run, not the sleep
        assert result["state"] == "completed"
        assert result["output"] == f"pid {pid_in(result['output'])}\nafter\n"
        assert result["notices"] == [BACKGROUND_NOTICE]
        assert BACKGROUND_NOTICE in str(result["text"])
    finally:
        end_sleep(pid_in(result["output"]), "1031")


def test_a_daemon_that_left_the_group_ends_the_run_with_its_own_notice(fg: httpx.Client) -> None:
    result = run(fg, "setsid sleep 1032 > /dev/stdout & echo pid $!; echo after")
    try:
        assert result["state"] == "completed"
        assert str(result["output"]).endswith("after\n")
        assert result["notices"] == [ESCAPED_NOTICE]
    finally:
        end_sleep(pid_in(result["output"]), "1032")


def test_a_background_process_that_closes_its_output_leaves_no_notice(fg: httpx.Client) -> None:
    result = run(fg, "sleep 1033 >/dev/null 2>&1 & echo pid $!")
    try:
        assert result["notices"] == []
    finally:
        end_sleep(pid_in(result["output"]), "1033")


def test_a_timed_out_group_is_read_to_its_end_without_a_cut_notice(fg: httpx.Client) -> None:
    """The group is killed: its members' bytes end with them, so reading goes on to EOF."""
    result = run(fg, "head -c 300000 /dev/zero | tr '\\0' x; echo; sleep 30 & wait", timeout=1)
    assert result["state"] == "timed_out"
    assert result["total_bytes"] == 300_001
    assert not any(notice in OUTPUT_CUT_NOTICES.values() for notice in result["notices"])  # type: ignore[attr-defined]


# --- every byte, with every core busy ----------------------------------------------------------

RUNS = 20
RUN_BYTES = 2 * 1024 * 1024
ROUNDS = int(os.environ.get("SHELLGATE_TEST_DRAIN_ROUNDS", "2"))
# Random bytes, then their digest (on stdout too: two pipes are merged in the order they are
# read, not written): the last bytes are written just before the shell exits, the ones a pump
# stopping on a timer loses.
DIGESTED_RANDOM = (
    f"f=$(mktemp); head -c {RUN_BYTES} /dev/urandom > $f; cat $f; "
    "sha256sum < $f | cut -d' ' -f1; rm -f $f"
)


@pytest.fixture
def busy_cores() -> Iterator[None]:
    """A busy loop per core, so the pumps compete for CPU with it (and the server)."""
    loops = [
        subprocess.Popen(["bash", "-c", "while :; do :; done"]) for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def check_digested(log: bytes) -> None:
    data, digest_line = log[:RUN_BYTES], log[RUN_BYTES:]
    assert len(log) == RUN_BYTES + 65, f"{len(log)} bytes"
    assert digest_line == hashlib.sha256(data).hexdigest().encode() + b"\n"


@pytest.mark.anyio
@pytest.mark.usefixtures("busy_cores")
async def test_twenty_runs_under_cpu_starvation_keep_every_byte(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with serve(make_settings(tmp_path, database)) as server:
        async with server.async_client(timeout=120) as client:
            for _ in range(ROUNDS):
                ids = []
                for _ in range(RUNS):
                    started = await client.post(
                        "/v1/executions", json={"command": DIGESTED_RANDOM, "async": True}
                    )
                    assert started.status_code == 202, started.text
                    ids.append(started.json()["id"])
                with anyio.fail_after(300):
                    # A live viewer of one run competes for the interpreter too.
                    viewer = asyncio.create_task(watch_bytes(server, ids[0]))
                    for execution_id in ids:
                        done = await client.get(f"/v1/executions/{execution_id}?wait=120")
                        record = done.json()
                        assert record["state"] == "completed", record
                        assert record["notices"] == []
                        log = await client.get(
                            f"/v1/executions/{execution_id}/output",
                            params={"limit": 2 * RUN_BYTES},
                        )
                        check_digested(log.content)
                        assert record["total_bytes"] == len(log.content)
                    check_digested(await viewer)


async def watch_bytes(server: LiveServer, execution_id: str) -> bytes:
    async with connect(
        stream_url(server, execution_id), additional_headers=ws_auth(), max_size=None
    ) as ws:
        return output_of(await read_frames(ws))
