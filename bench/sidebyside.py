"""`make bench`: shellgate side by side with its peers and the floors, in alternating rounds.

    .venv/bin/python -m bench [--rounds 5] [--quick]

Peers (installed into their own virtualenv, `bench/.peers-venv`, pinned in
`bench/peers-requirements.txt`): SWE-ReX's `swerex-remote`, terminado, and the minimal app
(`bench/yardstick.py` on `uvicorn --loop asyncio --http h11`). Floors, measured in this process:
a raw pipe read, a raw PTY read, a persistent bash. Every round starts every server afresh (the
start-up and idle-RSS rows), runs each measure with the subjects interleaved call by call or in
rotating order, and stops the servers by pid. Ratios are the median of the per-round ratios.
Writes `bench/results/<stamp>.md` and `.json`, refreshes the table in `bench/README.md` and
prints which targets hold. Loopback only; every loop is bounded by a count or a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import fcntl
import json
import math
import os
import select
import statistics
import string
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from ptyprocess import PtyProcess
from websockets.asyncio.client import ClientConnection, connect

from bench import over_cap, registry_rows, servers
from bench.programs import ECHO_PROGRAM, pipe_program, random_bytes_program, stream_program
from bench.table import Row, Target, percentile, render

T = TypeVar("T")
RESULTS = servers.BENCH_DIR / "results"
README = servers.BENCH_DIR / "README.md"
KEYS = string.ascii_letters + string.digits
# The pump's pipe and read sizes, so the pipe floor is not flattered by a better pipe.
PIPE_SIZE = 1 << 20
READ_SIZE = 256 << 10
# A binary output message (`?format=binary`, docs/streaming.md): stream, offset, then the bytes.
BINARY_HEADER_BYTES = 9


@dataclass(frozen=True)
class Sizes:
    # Calls per block and blocks per round and subject (foreground), calls per round and
    # subject of the call-by-call interleave, calls per block in a session.
    foreground_calls: int
    foreground_blocks: int
    interleaved_calls: int
    session_calls: int
    load_seconds: float
    pipe_bytes: int
    pty_bytes: int
    keystrokes: int
    registry_rows: int
    # Output of the over-the-cap row, and the cap it is measured against.
    over_cap_bytes: int
    cap_bytes: int


FULL = Sizes(
    40, 2, 40, 40, 3.0, 200_000_000, 20_000_000, 150, registry_rows.ROWS, over_cap.GIGABYTE, 0
)
QUICK = Sizes(
    20, 1, 10, 10, 1.0, 20_000_000, 5_000_000, 30, registry_rows.QUICK_ROWS, 100_000_000, 16 << 20
)


class Subjects:
    """The servers a round started, by name; a measure asks only for those it declared."""

    def __init__(self, started: dict[str, servers.Server]) -> None:
        self.started = started

    def _get(self, name: str) -> servers.Server:
        if name not in self.started:
            raise RuntimeError(f"{name} was not started for this measure")
        return self.started[name]

    @property
    def shellgate(self) -> servers.Server:
        return self._get("shellgate")

    @property
    def swerex(self) -> servers.Server:
        return self._get("SWE-ReX")

    @property
    def terminado(self) -> servers.Server:
        return self._get("terminado")

    @property
    def minimal(self) -> servers.Server:
        return self._get("minimal app")


SERVER_ORDER = ("shellgate", "SWE-ReX", "terminado", "minimal app")


@contextlib.contextmanager
def start_servers(peers_bin: Path, names: set[str]) -> Iterator[Subjects]:
    """The servers named, one after another, so each start-up is timed with the others idle."""
    starters: dict[str, Callable[[], contextlib.AbstractContextManager[servers.Server]]] = {
        "shellgate": lambda: servers.shellgate(auto_background_ms="30000", max_jobs="64"),
        "SWE-ReX": lambda: servers.swerex(peers_bin),
        "terminado": lambda: servers.terminado(peers_bin),
        "minimal app": servers.yardstick,
    }
    with contextlib.ExitStack() as stack:
        started = {
            name: stack.enter_context(starters[name]()) for name in SERVER_ORDER if name in names
        }
        yield Subjects(started)


def ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


# ---- foreground calls -------------------------------------------------------------------


def foreground_calls() -> dict[str, Callable[[httpx.Client], bool]]:
    def ours(client: httpx.Client) -> bool:
        return succeeded(client.post("/v1/executions", json={"command": "echo hi"}))

    def swerex(client: httpx.Client) -> bool:
        return succeeded(client.post("/execute", json={"command": "echo hi", "shell": True}))

    def minimal(client: httpx.Client) -> bool:
        return succeeded(client.post("/run", json={"command": "echo hi"}))

    return {"shellgate": ours, "SWE-ReX": swerex, "minimal app": minimal}


def foreground_clients(subjects: Subjects) -> dict[str, tuple[servers.Server, httpx.Client]]:
    by_name = {"shellgate": subjects.shellgate, "SWE-ReX": subjects.swerex}
    by_name["minimal app"] = subjects.minimal
    return {
        name: (server, httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30))
        for name, server in by_name.items()
    }


def settled_tree_cpu(server: servers.Server) -> float:
    """The tree's CPU once the work a call leaves behind (shellgate's next standby shell) has
    had a moment to finish, so a block is charged for all it caused and nothing of the next."""
    time.sleep(0.3)
    return server.tree_cpu_seconds()


def foreground_blocks(
    subjects: Subjects, calls: int, blocks: int, index: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Round-trip samples (ms) per subject, `blocks` blocks of `calls` back-to-back calls per
    subject, the subjects' order rotated by block and round, and the CPU of each server's whole
    process tree per call (ms) over its blocks. In a block nothing else runs: work one server
    leaves after its answer (shellgate's standby) is charged to its own next call, not to a
    peer's turn, as the call-by-call interleave did."""
    subject = foreground_clients(subjects)
    functions = foreground_calls()
    names = list(functions)
    samples: dict[str, list[float]] = {name: [] for name in names}
    cpu_s = dict.fromkeys(names, 0.0)
    try:
        for name in names:
            for _ in range(10):  # warm up: connection pools, imports, database pages
                functions[name](subject[name][1])
        for block in range(blocks):
            shift = (index + block) % len(names)
            for name in names[shift:] + names[:shift]:
                server, client = subject[name]
                before = settled_tree_cpu(server)
                for _ in range(calls):
                    started = time.perf_counter()
                    if not functions[name](client):
                        raise RuntimeError(f"{name}: a foreground `echo hi` failed")
                    samples[name].append(ms_since(started))
                cpu_s[name] += settled_tree_cpu(server) - before
    finally:
        for _, client in subject.values():
            client.close()
    return samples, {name: cpu_s[name] * 1000 / (calls * blocks) for name in names}


def foreground_interleaved(subjects: Subjects, calls: int) -> dict[str, list[float]]:
    """The old row, kept labelled: subjects interleaved call by call. It flatters shellgate:
    its standby shell starts after each answer while the peer's call is timed."""
    subject = foreground_clients(subjects)
    functions = foreground_calls()
    samples: dict[str, list[float]] = {name: [] for name in functions}
    try:
        for _ in range(calls):
            for name, call in functions.items():
                started = time.perf_counter()
                if not call(subject[name][1]):
                    raise RuntimeError(f"{name}: a foreground `echo hi` failed")
                samples[name].append(ms_since(started))
    finally:
        for _, client in subject.values():
            client.close()
    return samples


# ---- 32 clients x sleep 0.1, /healthz under load -----------------------------------------


async def load(
    server: servers.Server, path: str, body: dict[str, Any], seconds: float, clients: int = 32
) -> tuple[float, list[float], int]:
    """Commands per second over `seconds` with `clients` callers in a loop, the /healthz
    latencies (ms) meanwhile (probed every 20 ms from a process of its own, `bench.probe`), and
    the count of failed calls."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    done = failed = 0
    probe = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bench.probe", f"{server.base_url}/healthz", str(seconds)),
        stdout=asyncio.subprocess.PIPE,
    )
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=30, limits=limits
    ) as client:
        deadline = time.monotonic() + seconds

        async def caller() -> None:
            nonlocal done, failed
            while time.monotonic() < deadline:
                response = await client.post(path, json=body)
                ok = response.status_code == 200 and response.json().get("exit_code") == 0
                done += ok
                failed += not ok

        started = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(clients)))
        elapsed = time.monotonic() - started
    output, _ = await asyncio.wait_for(probe.communicate(), 60)
    if probe.returncode != 0:
        raise RuntimeError(f"the /healthz prober failed ({probe.returncode})")
    return done / elapsed, json.loads(output), failed


# ---- a command in a session -------------------------------------------------------------


class PersistentBash:
    """The floor: one bash kept running, a command written to its stdin, read back up to a
    marker line."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )

    def run(self, command: str) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{command}; echo __done__$?\n".encode())
        self.process.stdin.flush()
        deadline = time.monotonic() + 10
        while not self.process.stdout.readline().startswith(b"__done__"):
            if time.monotonic() > deadline:
                raise TimeoutError("persistent bash did not answer")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def succeeded(response: httpx.Response) -> bool:
    """A call that answered 200 with exit code 0; anything else is counted as a failure (and
    left out of the latencies) rather than ending the run: SWE-ReX's session sometimes cannot
    parse its own exit-code marker under load."""
    if response.status_code == 200 and response.json().get("exit_code") == 0:
        return True
    print(f"failed call: {response.status_code} {response.text[:200]}", file=sys.stderr)
    return False


def session_commands(
    subjects: Subjects, calls: int, index: int
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """`echo hi` in a session: a block of `calls` per subject, the order rotated by round."""
    ours = httpx.Client(
        base_url=subjects.shellgate.base_url, headers=subjects.shellgate.headers, timeout=30
    )
    swerex = httpx.Client(
        base_url=subjects.swerex.base_url, headers=subjects.swerex.headers, timeout=30
    )
    floor = PersistentBash()
    try:
        session_id = ours.post("/v1/sessions", json={}).json()["id"]
        response = swerex.post("/create_session", json={"session": "bench", "session_type": "bash"})
        assert response.status_code == 200, response.text

        def in_ours() -> bool:
            body = {"command": "echo hi", "session": session_id}
            return succeeded(ours.post("/v1/executions", json=body))

        def in_swerex() -> bool:
            body = {"command": "echo hi", "session": "bench", "action_type": "bash"}
            try:
                return succeeded(swerex.post("/run_in_session", json=body))
            except httpx.TransportError as error:  # its server drops the connection after a
                print(f"failed call: SWE-ReX {error!r}", file=sys.stderr)  # session timeout
                return False

        def in_floor() -> bool:
            floor.run("echo hi")
            return True

        functions = {"shellgate": in_ours, "SWE-ReX": in_swerex, "persistent bash": in_floor}
        names = list(functions)
        samples: dict[str, list[float]] = {name: [] for name in functions}
        failures = dict.fromkeys(functions, 0)
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            call = functions[name]
            for _ in range(3):
                call()
            for _ in range(calls):
                started = time.perf_counter()
                if call():
                    samples[name].append(ms_since(started))
                else:
                    failures[name] += 1
    finally:
        floor.close()
        ours.close()
        swerex.close()
    return samples, failures


# ---- live stream throughput -------------------------------------------------------------


def pipe_floor(size: int) -> float:
    """MB/s reading the producer's stdout from a pipe, nothing done to the bytes."""
    started = time.perf_counter()
    process = subprocess.Popen(["bash", "-c", pipe_program(size)], stdout=subprocess.PIPE)
    assert process.stdout is not None
    fd = process.stdout.fileno()
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    total = 0
    while chunk := os.read(fd, READ_SIZE):
        total += len(chunk)
    process.wait(30)
    return total / (time.perf_counter() - started) / 1e6


async def asyncio_pipe_floor(size: int) -> float:
    """MB/s reading the producer's stdout the way an asyncio server would: a subprocess pipe
    read by the event loop in 256 KiB reads, nothing done to the bytes."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", pipe_program(size), stdout=asyncio.subprocess.PIPE, limit=READ_SIZE
    )
    assert process.stdout is not None
    total = 0
    while chunk := await process.stdout.read(READ_SIZE):
        total += len(chunk)
    await process.wait()
    return total / (time.perf_counter() - started) / 1e6


def pty_floor(size: int) -> float:
    """MB/s reading the generator's output from a PTY this process drives."""
    started = time.perf_counter()
    pty = PtyProcess.spawn(["bash", "-c", stream_program(size)], dimensions=(40, 120))
    total = 0
    try:
        while True:
            try:
                chunk = os.read(pty.fd, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            total += len(chunk)
    finally:
        pty.close(force=True)
    return total / (time.perf_counter() - started) / 1e6


async def shellgate_stream(
    server: servers.Server, size: int, pty: bool, binary: bool = False
) -> float:
    """MB/s from the `async` submit to the exit frame, a viewer connected at offset 0; with
    `binary`, in `?format=binary` (output as binary messages: a 9-byte header, then the bytes)."""
    program = stream_program(size) if pty else pipe_program(size)
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=120
    ) as client:
        started = time.perf_counter()
        body = {"command": program, "async": True, "pty": pty}
        execution_id = (await client.post("/v1/executions", json=body)).json()["id"]
        url = f"{server.base_url.replace('http://', 'ws://')}/v1/executions/{execution_id}/stream"
        url += "?offset=0" + ("&format=binary" if binary else "")
        total = 0
        async with connect(
            url, additional_headers=server.headers, max_size=None, compression=None
        ) as ws:
            async for message in ws:
                if isinstance(message, bytes):
                    total += len(message) - BINARY_HEADER_BYTES
                    continue
                frame = json.loads(message)
                if frame["type"] == "output":
                    data = frame["data"]
                    encoded = frame.get("encoding") == "base64"
                    total += len(base64.b64decode(data)) if encoded else len(data.encode())
                elif frame["type"] == "exit":
                    assert frame["state"] == "completed", frame
                    return total / (time.perf_counter() - started) / 1e6
    raise RuntimeError("the stream ended without an exit frame")


async def terminado_stream(server: servers.Server, size: int) -> float:
    """MB/s from opening the socket (which starts the program) to its disconnect message."""
    url = f"{server.base_url.replace('http://', 'ws://')}/stream/{size}"
    started = time.perf_counter()
    total = 0
    async with connect(url, max_size=None, compression=None) as ws:
        async for message in ws:
            kind, *rest = json.loads(message)
            if kind == "stdout":
                total += len(rest[0].encode())
            elif kind == "disconnect":
                return total / (time.perf_counter() - started) / 1e6
    raise RuntimeError("terminado closed without a disconnect message")


# ---- /healthz under many viewers --------------------------------------------------------

# 50 viewers: 10 on each of 5 commands writing 64 KiB of random bytes every 50 ms.
VIEWED_COMMANDS = 5
VIEWERS_PER_COMMAND = 10
VIEWERS_PROBE_SECONDS = 5.0


async def _viewer(
    url: str, headers: dict[str, str], stop: asyncio.Event, connected: asyncio.Queue[None]
) -> int:
    """Bytes of frames received until the exit frame or `stop`; the frames are not decoded
    (the client's own work stays small: it shares the cores with the server)."""
    received = 0
    async with connect(url, additional_headers=headers, max_size=None, compression=None) as ws:
        received += len(await asyncio.wait_for(ws.recv(), 30))  # the state frame
        connected.put_nowait(None)
        while not stop.is_set():
            try:
                message = await asyncio.wait_for(ws.recv(), 1)
            except TimeoutError:
                continue
            received += len(message)
            if isinstance(message, str) and message.startswith('{"type":"exit"'):
                break
    return received


async def viewers_healthz(
    server: servers.Server, minimal: servers.Server, binary: bool = True
) -> tuple[list[float], list[float]]:
    """`/healthz` latencies (ms) of `server` while 50 WebSocket viewers follow commands that
    write random bytes (binary messages, or base64 frames without `binary`), and of the
    minimal app probed in the same seconds, each from a process of its own (`bench.probe`)."""
    writes = int(VIEWERS_PROBE_SECONDS / 0.05) + 60
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=60
    ) as client:
        ids = []
        for _ in range(VIEWED_COMMANDS):
            body = {"command": random_bytes_program(writes), "async": True}
            response = await client.post("/v1/executions", json=body)
            ids.append(response.json()["id"])
        ws_base = server.base_url.replace("http://", "ws://")
        stop = asyncio.Event()
        connected: asyncio.Queue[None] = asyncio.Queue()
        viewers = [
            asyncio.create_task(
                _viewer(
                    f"{ws_base}/v1/executions/{execution_id}/stream"
                    + ("?format=binary" if binary else ""),
                    server.headers,
                    stop,
                    connected,
                )
            )
            for execution_id in ids
            for _ in range(VIEWERS_PER_COMMAND)
        ]
        for _ in viewers:  # every viewer connected (its first frame came) before probing
            await asyncio.wait_for(connected.get(), 60)
        probes = [
            await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "bench.probe", f"{url}/healthz"),
                str(VIEWERS_PROBE_SECONDS),
                stdout=asyncio.subprocess.PIPE,
            )
            for url in (server.base_url, minimal.base_url)
        ]
        outputs = [await asyncio.wait_for(probe.communicate(), 60) for probe in probes]
        stop.set()
        for execution_id in ids:
            await client.post(f"/v1/executions/{execution_id}/cancel")
        received = await asyncio.gather(*viewers, return_exceptions=True)
    failed = [error for error in received if isinstance(error, BaseException)]
    if failed or any(probe.returncode != 0 for probe in probes):
        raise RuntimeError(f"viewers or probes failed: {failed[:3]}")
    ours, theirs = (json.loads(output) for output, _ in outputs)
    return ours, theirs


# ---- PTY keystroke echo -----------------------------------------------------------------


class DirectPty:
    """The floor: the echo program on a PTY this process drives itself."""

    def __init__(self) -> None:
        self.pty = PtyProcess.spawn(["bash", "-c", ECHO_PROGRAM], dimensions=(40, 120))
        self.read_until(b"READY")

    def read_until(self, needle: bytes) -> None:
        seen = b""
        deadline = time.monotonic() + 10
        while needle not in seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {needle!r} from the direct PTY")
            ready, _, _ = select.select([self.pty.fd], [], [], 1)
            if ready:
                seen += os.read(self.pty.fd, 4096)

    def close(self) -> None:
        self.pty.terminate(force=True)


async def frames_until(ws: ClientConnection, needle: str, decode: Callable[[Any], str]) -> None:
    seen = ""
    deadline = time.monotonic() + 10
    while needle not in seen:
        seen += decode(json.loads(await asyncio.wait_for(ws.recv(), 10)))
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {needle!r} on the stream")


def shellgate_text(frame: dict[str, Any]) -> str:
    if frame["type"] in ("exit", "error"):
        raise RuntimeError(f"unexpected frame {frame}")
    return str(frame.get("data", "")) if frame["type"] == "output" else ""


def terminado_text(message: list[Any]) -> str:
    if message[0] == "disconnect":
        raise RuntimeError("terminado's terminal ended")
    return str(message[1]) if message[0] == "stdout" else ""


async def keystroke_echo(subjects: Subjects, keystrokes: int) -> dict[str, list[float]]:
    ours = subjects.shellgate
    async with httpx.AsyncClient(base_url=ours.base_url, headers=ours.headers) as client:
        body = {"command": ECHO_PROGRAM, "pty": True, "async": True}
        execution_id = (await client.post("/v1/executions", json=body)).json()["id"]
        ws_base = ours.base_url.replace("http://", "ws://")
        url = f"{ws_base}/v1/executions/{execution_id}/stream"
        terminado_url = f"{subjects.terminado.base_url.replace('http://', 'ws://')}/echo"
        direct = DirectPty()
        samples: dict[str, list[float]] = {"shellgate": [], "terminado": [], "PTY floor": []}
        try:
            async with (
                connect(url, additional_headers=ours.headers) as sg,
                connect(terminado_url) as term,
            ):
                await frames_until(sg, "READY", shellgate_text)
                await frames_until(term, "READY", terminado_text)
                for index in range(keystrokes + 10):
                    key = KEYS[index % len(KEYS)]
                    started = time.perf_counter()
                    await sg.send(json.dumps({"type": "input", "data": key}))
                    await frames_until(sg, key, shellgate_text)
                    ours_ms = ms_since(started)
                    started = time.perf_counter()
                    await term.send(json.dumps(["stdin", key]))
                    await frames_until(term, key, terminado_text)
                    terminado_ms = ms_since(started)
                    started = time.perf_counter()
                    os.write(direct.pty.fd, key.encode())
                    direct.read_until(key.encode())
                    floor_ms = ms_since(started)
                    if index >= 10:  # the first ones warm every path up
                        samples["shellgate"].append(ours_ms)
                        samples["terminado"].append(terminado_ms)
                        samples["PTY floor"].append(floor_ms)
                await sg.send(json.dumps({"type": "signal", "signal": "TERM"}))
        finally:
            direct.close()
    return samples


# ---- the rounds -------------------------------------------------------------------------


@dataclass
class Collected:
    """Per measure, per subject: one figure per round, and every sample for the p99s."""

    per_round: dict[str, dict[str, list[float]]]
    samples: dict[str, dict[str, list[float]]]
    # How a figure was taken where the machine decides (e.g. the tree CPU's cgroup or /proc).
    methods: dict[str, str] = field(default_factory=dict)

    def add_round(self, measure: str, subject: str, value: float) -> None:
        self.per_round.setdefault(measure, {}).setdefault(subject, []).append(value)

    def add_samples(self, measure: str, subject: str, values: list[float]) -> None:
        self.samples.setdefault(measure, {}).setdefault(subject, []).extend(values)
        # NaN: every call failed this round; the table leaves the round out of the ratios.
        self.add_round(measure, subject, statistics.median(values) if values else math.nan)


def bounded(stream: Coroutine[Any, Any, T], seconds: float = 120) -> T:
    """A stream measure with a deadline, so a stream that never ends cannot hang the run."""
    return asyncio.run(asyncio.wait_for(stream, seconds))


def measure_startup(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    for name, server in subjects.started.items():
        out.add_round("startup_s", name, server.startup_s)
        out.add_round("idle_rss_mib", name, servers.rss_kib(server.pid) / 1024)


def measure_foreground(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    samples, cpu_ms = foreground_blocks(
        subjects, sizes.foreground_calls, sizes.foreground_blocks, index
    )
    for name, values in samples.items():
        out.add_samples("foreground_ms", name, values)
        out.add_round("cpu_ms_per_call", name, cpu_ms[name])
    out.methods["tree CPU"] = subjects.shellgate.tree.method
    for name, values in foreground_interleaved(subjects, sizes.interleaved_calls).items():
        out.add_samples("interleaved_ms", name, values)


def measure_load(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    loads = [
        ("shellgate", subjects.shellgate, "/v1/executions"),
        ("minimal app", subjects.minimal, "/run"),
    ]
    for name, server, path in loads[index % 2 :] + loads[: index % 2]:  # rotate who is first
        rate, health_ms, failed = asyncio.run(
            load(server, path, {"command": "sleep 0.1"}, sizes.load_seconds)
        )
        out.add_round("load_cmd_s", name, rate)
        out.add_round("load_failed", name, failed)
        out.samples.setdefault("healthz_ms", {}).setdefault(name, []).extend(health_ms)
        out.add_round("healthz_p99_ms", name, percentile(health_ms, 0.99))


def measure_session(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    samples, failures = session_commands(subjects, sizes.session_calls, index)
    for name, values in samples.items():
        out.add_samples("session_ms", name, values)
        out.add_round("session_failed", name, failures[name])


def measure_pipe(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    takes: list[tuple[str, Callable[[], float]]] = [
        ("asyncio read floor", lambda: bounded(asyncio_pipe_floor(sizes.pipe_bytes))),
        ("raw read floor", lambda: pipe_floor(sizes.pipe_bytes)),
        (
            "shellgate",
            lambda: bounded(shellgate_stream(subjects.shellgate, sizes.pipe_bytes, pty=False)),
        ),
        (
            "shellgate binary",
            lambda: bounded(
                shellgate_stream(subjects.shellgate, sizes.pipe_bytes, pty=False, binary=True)
            ),
        ),
    ]
    shift = index % len(takes)
    for name, take in takes[shift:] + takes[:shift]:
        out.add_round("pipe_mb_s", name, take())


def measure_viewers(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    ours, minimal = bounded(viewers_healthz(subjects.shellgate, subjects.minimal), 180)
    out.add_samples("viewers_healthz_ms", "shellgate", ours)
    out.add_samples("viewers_healthz_ms", "minimal app", minimal)


def measure_pty(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    out.add_round("pty_mb_s", "PTY floor", pty_floor(sizes.pty_bytes))
    rate = bounded(shellgate_stream(subjects.shellgate, sizes.pty_bytes, pty=True))
    out.add_round("pty_mb_s", "shellgate", rate)
    rate = bounded(terminado_stream(subjects.terminado, sizes.pty_bytes))
    out.add_round("pty_mb_s", "terminado", rate)


def measure_echo(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    for name, values in asyncio.run(keystroke_echo(subjects, sizes.keystrokes)).items():
        out.add_samples("echo_ms", name, values)


_SEEDED: dict[int, Path] = {}


def measure_registry(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    if sizes.registry_rows not in _SEEDED:
        _SEEDED[sizes.registry_rows] = registry_rows.seeded_data_dir(sizes.registry_rows)
    sides: list[tuple[str, Path | None]] = [
        ("full", _SEEDED[sizes.registry_rows]),
        ("empty", None),
    ]
    shift = index % 2
    for name, data_dir in sides[shift:] + sides[:shift]:
        cpu_ms, list_ms = registry_rows.one_server(data_dir, sizes.foreground_calls)
        out.add_round("registry_cpu_ms", name, cpu_ms)
        out.add_round("registry_list_ms", name, list_ms)


def measure_over_cap(subjects: Subjects, sizes: Sizes, index: int, out: Collected) -> None:
    # The quick run lowers the cap with the size; the full run keeps the default (0: unset).
    cap = sizes.cap_bytes or None
    sides: list[tuple[str, int | None]] = [
        ("over the cap", cap),
        ("uncapped", 2 * sizes.over_cap_bytes),
    ]
    shift = index % 2
    for name, side_cap in sides[shift:] + sides[:shift]:
        seconds, cpu = over_cap.one_call(sizes.over_cap_bytes, side_cap)
        out.add_round("cap_s", name, seconds)
        out.add_round("cap_cpu_s", name, cpu)


@dataclass(frozen=True)
class Measure:
    # The servers a round must start for it (a measure that starts its own names none).
    needs: frozenset[str]
    run: Callable[[Subjects, Sizes, int, Collected], None]


MEASURES: dict[str, Measure] = {
    "startup": Measure(frozenset(SERVER_ORDER), measure_startup),
    "foreground": Measure(frozenset({"shellgate", "SWE-ReX", "minimal app"}), measure_foreground),
    "load": Measure(frozenset({"shellgate", "minimal app"}), measure_load),
    "session": Measure(frozenset({"shellgate", "SWE-ReX"}), measure_session),
    "pipe": Measure(frozenset({"shellgate"}), measure_pipe),
    "viewers": Measure(frozenset({"shellgate", "minimal app"}), measure_viewers),
    "pty": Measure(frozenset({"shellgate", "terminado"}), measure_pty),
    "echo": Measure(frozenset({"shellgate", "terminado"}), measure_echo),
    "registry": Measure(frozenset(), measure_registry),
    "cap": Measure(frozenset(), measure_over_cap),
}


def one_round(index: int, peers_bin: Path, sizes: Sizes, out: Collected, chosen: list[str]) -> None:
    needed: set[str] = set().union(*(MEASURES[name].needs for name in chosen))
    with start_servers(peers_bin, needed) as subjects:
        for name in chosen:
            MEASURES[name].run(subjects, sizes, index, out)


def p99_note(out: Collected, measure: str, subject: str) -> str:
    samples = out.samples[measure][subject]
    return f"p99 {percentile(samples, 0.99):.2f}" if samples else "no successful call"


def pooled_p99(out: Collected, measure: str, subject: str) -> list[float]:
    samples = out.samples[measure][subject]
    return [percentile(samples, 0.99) if samples else math.nan]


def rows(out: Collected) -> list[Row]:
    """The table's rows, for every measure that ran."""
    r = out.per_round
    found: list[Row] = []

    def peers(measure: str, *names: str) -> dict[str, list[float]]:
        return {name: r[measure][name] for name in names}

    if "startup_s" in r:
        found += [
            Row(
                "start to first 200 (`/healthz`; SWE-ReX `/is_alive`)",
                "s",
                r["startup_s"]["shellgate"],
                peers("startup_s", "SWE-ReX", "terminado", "minimal app"),
                "SWE-ReX",
                Target("ratio_le", 1.5),
            ),
            Row(
                "idle RSS",
                "MiB",
                r["idle_rss_mib"]["shellgate"],
                peers("idle_rss_mib", "SWE-ReX", "terminado", "minimal app"),
                "SWE-ReX",
                Target("abs_le", 64),
            ),
        ]
    if "foreground_ms" in r:
        fg_notes = {name: p99_note(out, "foreground_ms", name) for name in r["foreground_ms"]}
        found += [
            Row(
                "foreground `echo hi`, median, blocks of back-to-back calls",
                "ms",
                r["foreground_ms"]["shellgate"],
                peers("foreground_ms", "SWE-ReX", "minimal app"),
                "SWE-ReX",
                Target("ratio_le", 1.5),
                fg_notes,
            ),
            Row(
                "foreground `echo hi`, p99 (blocks, all rounds pooled)",
                "ms",
                pooled_p99(out, "foreground_ms", "shellgate"),
                {
                    name: pooled_p99(out, "foreground_ms", name)
                    for name in ("SWE-ReX", "minimal app")
                },
                "SWE-ReX",
            ),
            Row(
                "CPU per foreground call, whole process tree",
                "ms",
                r["cpu_ms_per_call"]["shellgate"],
                peers("cpu_ms_per_call", "SWE-ReX", "minimal app"),
                "SWE-ReX",
                Target("ratio_le", 1.8),
            ),
            Row(
                "foreground `echo hi`, median, interleaved call by call (flatters shellgate)",
                "ms",
                r["interleaved_ms"]["shellgate"],
                peers("interleaved_ms", "SWE-ReX", "minimal app"),
                "SWE-ReX",
            ),
        ]
    if "load_cmd_s" in r:
        found += [
            Row(
                "32 clients × `sleep 0.1`, cmd/s (ideal 320)",
                "cmd/s",
                r["load_cmd_s"]["shellgate"],
                peers("load_cmd_s", "minimal app"),
                "minimal app",
                Target("ratio_ge", 1.0),
                {
                    name: f"{int(sum(r['load_failed'][name]))} failed"
                    for name in r["load_failed"]
                    if sum(r["load_failed"][name])
                },
            ),
            Row(
                "`/healthz` p99 during that load",
                "ms",
                r["healthz_p99_ms"]["shellgate"],
                peers("healthz_p99_ms", "minimal app"),
                "minimal app",
                Target("abs_le", 20),
            ),
        ]
    if "session_ms" in r:
        session_notes = {
            name: p99_note(out, "session_ms", name)
            + (f", {failed:.0f} failed" if (failed := sum(r["session_failed"][name])) else "")
            for name in r["session_ms"]
        }
        found.append(
            Row(
                "`echo hi` in a session, median",
                "ms",
                r["session_ms"]["shellgate"],
                peers("session_ms", "SWE-ReX", "persistent bash"),
                "SWE-ReX",
                Target("ratio_le", 0.1),
                session_notes,
            )
        )
    if "pipe_mb_s" in r:
        found.append(
            Row(
                "live WebSocket stream, pipe (`head -c N /dev/zero | base64 -w 0`)",
                "MB/s",
                r["pipe_mb_s"]["shellgate"],
                peers("pipe_mb_s", "asyncio read floor", "raw read floor"),
                "asyncio read floor",
                Target("ratio_ge", 0.4),
            )
        )
        found.append(
            Row(
                "live WebSocket stream, pipe, `?format=binary` (same producer)",
                "MB/s",
                r["pipe_mb_s"]["shellgate binary"],
                peers("pipe_mb_s", "asyncio read floor", "raw read floor"),
                "asyncio read floor",
                Target("ratio_ge", 0.4),
            )
        )
    if "viewers_healthz_ms" in r:
        found.append(
            Row(
                "`/healthz` p50 under 50 binary WebSocket viewers of random bytes",
                "ms",
                r["viewers_healthz_ms"]["shellgate"],
                peers("viewers_healthz_ms", "minimal app"),
                "minimal app",
                Target("ratio_le", 3.0),
                {
                    name: p99_note(out, "viewers_healthz_ms", name)
                    for name in r["viewers_healthz_ms"]
                },
            )
        )
    if "pty_mb_s" in r:
        found.append(
            Row(
                "live WebSocket stream, PTY",
                "MB/s",
                r["pty_mb_s"]["shellgate"],
                peers("pty_mb_s", "PTY floor", "terminado"),
                "PTY floor",
                Target("ratio_ge", 0.48),
            )
        )
    if "echo_ms" in r:
        found.append(
            Row(
                "PTY keystroke echo, median",
                "ms",
                r["echo_ms"]["shellgate"],
                peers("echo_ms", "terminado", "PTY floor"),
                "terminado",
                Target("ratio_le", 1.0),
                {name: p99_note(out, "echo_ms", name) for name in r["echo_ms"]},
            )
        )
    if "registry_cpu_ms" in r:
        rows_note = {"shellgate": f"{len(_SEEDED) and next(iter(_SEEDED)):,} rows"}
        found += [
            Row(
                "CPU per foreground call, whole tree, registry of N rows vs empty",
                "ms",
                r["registry_cpu_ms"]["full"],
                peers("registry_cpu_ms", "empty"),
                "empty",
                Target("ratio_le", 1.05),
                rows_note,
            ),
            Row(
                "`GET /v1/executions?limit=50` median, registry of N rows vs empty",
                "ms",
                r["registry_list_ms"]["full"],
                peers("registry_list_ms", "empty"),
                "empty",
                Target("ratio_le", 1.05),
                rows_note,
            ),
        ]
    if "cap_s" in r:
        found += [
            Row(
                "output over the artifact cap, time to the answer",
                "s",
                r["cap_s"]["over the cap"],
                peers("cap_s", "uncapped"),
                "uncapped",
                Target("ratio_le", 1.1),
            ),
            Row(
                "output over the artifact cap, whole-tree CPU",
                "s",
                r["cap_cpu_s"]["over the cap"],
                peers("cap_cpu_s", "uncapped"),
                "uncapped",
            ),
        ]
    return found


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def refresh_readme(table: str, header: str) -> None:
    """Replace the text between the README's markers with the latest table."""
    start, end = "<!-- latest-bench -->", "<!-- /latest-bench -->"
    text = README.read_text()
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        README.write_text(f"{before}{start}\n{header}\n\n{table}{end}{after}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a ~1-minute smoke run")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(MEASURES),
        help="run only this row's measure (repeatable); the README is refreshed only by a full run",
    )
    args = parser.parse_args()
    chosen = [name for name in MEASURES if not args.only or name in args.only]
    sizes = QUICK if args.quick else FULL
    rounds = 2 if args.quick else args.rounds
    peers_bin = servers.ensure_peers_venv()
    load_before = uptime()
    started = time.monotonic()
    out = Collected({}, {})
    for index in range(rounds):
        print(f"round {index + 1}/{rounds}", flush=True)
        one_round(index, peers_bin, sizes, out, chosen)
    table = render(rows(out))
    partial = bool(args.only)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%MZ")
    methods = "".join(f" {what}: {how}." for what, how in out.methods.items())
    header = (
        f"Run {stamp}{' (--quick)' if args.quick else ''}"
        f"{' (--only ' + ', '.join(chosen) + ')' if partial else ''}: {rounds} rounds in "
        f"{time.monotonic() - started:.0f} s. Load before: `{load_before}`; "
        f"after: `{uptime()}`. Ratios are the median of per-round ratios, in brackets the "
        f"lowest and highest round's.{methods}"
    )
    RESULTS.mkdir(exist_ok=True)
    name = stamp + ("-quick" if args.quick else "")  # a smoke run never passes for a result
    name += f"-only-{'-'.join(chosen)}" if partial else ""
    (RESULTS / f"{name}.md").write_text(f"# Side-by-side benchmark\n\n{header}\n\n{table}")
    report = {
        "stamp": stamp,
        "quick": args.quick,
        "only": chosen if partial else None,
        "methods": out.methods,
        "rounds": rounds,
        "sizes": sizes.__dict__,
        "load_before": load_before,
        "rows": [row.as_json() for row in rows(out)],
        "per_round": out.per_round,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    if not args.quick and not partial:
        refresh_readme(table, header)
    print(header)
    print(table)
    for row in rows(out):
        if (holds := row.holds()) is not None:
            print(f"{'HOLDS' if holds else 'misses'}: {row.work}")
    print(f"written: {RESULTS / name}.md / .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
