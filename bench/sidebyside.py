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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from ptyprocess import PtyProcess
from websockets.asyncio.client import ClientConnection, connect

from bench import servers
from bench.programs import ECHO_PROGRAM, stream_program
from bench.table import Row, Target, percentile, render

RESULTS = servers.BENCH_DIR / "results"
README = servers.BENCH_DIR / "README.md"
KEYS = string.ascii_letters + string.digits
# The pump's pipe and read sizes, so the pipe floor is not flattered by a better pipe.
PIPE_SIZE = 1 << 20
READ_SIZE = 256 << 10


@dataclass(frozen=True)
class Sizes:
    foreground_calls: int
    session_calls: int
    load_seconds: float
    pipe_bytes: int
    pty_bytes: int
    keystrokes: int


FULL = Sizes(80, 40, 3.0, 100_000_000, 20_000_000, 150)
QUICK = Sizes(20, 10, 1.0, 10_000_000, 5_000_000, 30)


@dataclass
class Subjects:
    shellgate: servers.Server
    swerex: servers.Server
    terminado: servers.Server
    minimal: servers.Server


@contextlib.contextmanager
def all_servers(peers_bin: Path) -> Iterator[Subjects]:
    # One after another, so each start-up is timed with the others idle.
    with (
        servers.shellgate(auto_background_ms="30000", max_jobs="64") as ours,
        servers.swerex(peers_bin) as swerex,
        servers.terminado(peers_bin) as terminado,
        servers.yardstick() as minimal,
    ):
        yield Subjects(ours, swerex, terminado, minimal)


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


def foreground(subjects: Subjects, calls: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Round-trip samples (ms) per subject, interleaved call by call, and each server's own CPU
    per call (ms) over the block."""
    by_name = {"shellgate": subjects.shellgate, "SWE-ReX": subjects.swerex}
    by_name["minimal app"] = subjects.minimal
    functions = foreground_calls()
    clients = {
        name: httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30)
        for name, server in by_name.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in by_name}
    try:
        for _ in range(10):  # warm up: connection pools, imports, database pages
            for name, call in functions.items():
                call(clients[name])
        cpu_before = {name: servers.cpu_seconds(s.pid) for name, s in by_name.items()}
        for _ in range(calls):
            for name, call in functions.items():
                started = time.perf_counter()
                if not call(clients[name]):
                    raise RuntimeError(f"{name}: a foreground `echo hi` failed")
                samples[name].append(ms_since(started))
        cpu_ms = {
            name: (servers.cpu_seconds(s.pid) - cpu_before[name]) * 1000 / calls
            for name, s in by_name.items()
        }
    finally:
        for client in clients.values():
            client.close()
    return samples, cpu_ms


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
    subjects: Subjects, calls: int
) -> tuple[dict[str, list[float]], dict[str, int]]:
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
            body = {"command": "true", "session": session_id}
            return succeeded(ours.post("/v1/executions", json=body))

        def in_swerex() -> bool:
            body = {"command": "true", "session": "bench", "action_type": "bash"}
            try:
                return succeeded(swerex.post("/run_in_session", json=body))
            except httpx.TransportError as error:  # its server drops the connection after a
                print(f"failed call: SWE-ReX {error!r}", file=sys.stderr)  # session timeout
                return False

        def in_floor() -> bool:
            floor.run("true")
            return True

        functions = {"shellgate": in_ours, "SWE-ReX": in_swerex, "persistent bash": in_floor}
        for _ in range(3):
            for call in functions.values():
                call()
        samples: dict[str, list[float]] = {name: [] for name in functions}
        failures = dict.fromkeys(functions, 0)
        for _ in range(calls):
            for name, call in functions.items():
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
    """MB/s reading the generator's stdout from a pipe, nothing done to the bytes."""
    started = time.perf_counter()
    process = subprocess.Popen(["bash", "-c", stream_program(size)], stdout=subprocess.PIPE)
    assert process.stdout is not None
    fd = process.stdout.fileno()
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    total = 0
    while chunk := os.read(fd, READ_SIZE):
        total += len(chunk)
    process.wait(30)
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


async def shellgate_stream(server: servers.Server, size: int, pty: bool) -> float:
    """MB/s from the `async` submit to the exit frame, a viewer connected at offset 0."""
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=120
    ) as client:
        started = time.perf_counter()
        body = {"command": stream_program(size), "async": True, "pty": pty}
        execution_id = (await client.post("/v1/executions", json=body)).json()["id"]
        url = f"{server.base_url.replace('http://', 'ws://')}/v1/executions/{execution_id}/stream"
        total = 0
        async with connect(
            url + "?offset=0", additional_headers=server.headers, max_size=None, compression=None
        ) as ws:
            async for message in ws:
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

    def add_round(self, measure: str, subject: str, value: float) -> None:
        self.per_round.setdefault(measure, {}).setdefault(subject, []).append(value)

    def add_samples(self, measure: str, subject: str, values: list[float]) -> None:
        self.samples.setdefault(measure, {}).setdefault(subject, []).extend(values)
        # NaN: every call failed this round; the table leaves the round out of the ratios.
        self.add_round(measure, subject, statistics.median(values) if values else math.nan)


def bounded(stream: Coroutine[Any, Any, float], seconds: float = 120) -> float:
    """A stream measure with a deadline, so a stream that never ends cannot hang the run."""
    return asyncio.run(asyncio.wait_for(stream, seconds))


def one_round(index: int, peers_bin: Path, sizes: Sizes, out: Collected) -> None:
    with all_servers(peers_bin) as subjects:
        for name, server in (
            ("shellgate", subjects.shellgate),
            ("SWE-ReX", subjects.swerex),
            ("terminado", subjects.terminado),
            ("minimal app", subjects.minimal),
        ):
            out.add_round("startup_s", name, server.startup_s)
            out.add_round("idle_rss_mib", name, servers.rss_kib(server.pid) / 1024)

        samples, cpu_ms = foreground(subjects, sizes.foreground_calls)
        for name, values in samples.items():
            out.add_samples("foreground_ms", name, values)
            out.add_round("cpu_ms_per_call", name, cpu_ms[name])

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

        samples, failures = session_commands(subjects, sizes.session_calls)
        for name, values in samples.items():
            out.add_samples("session_ms", name, values)
            out.add_round("session_failed", name, failures[name])

        out.add_round("pipe_mb_s", "pipe floor", pipe_floor(sizes.pipe_bytes))
        rate = bounded(shellgate_stream(subjects.shellgate, sizes.pipe_bytes, pty=False))
        out.add_round("pipe_mb_s", "shellgate", rate)
        out.add_round("pty_mb_s", "PTY floor", pty_floor(sizes.pty_bytes))
        rate = bounded(shellgate_stream(subjects.shellgate, sizes.pty_bytes, pty=True))
        out.add_round("pty_mb_s", "shellgate", rate)
        rate = bounded(terminado_stream(subjects.terminado, sizes.pty_bytes))
        out.add_round("pty_mb_s", "terminado", rate)

        for name, values in asyncio.run(keystroke_echo(subjects, sizes.keystrokes)).items():
            out.add_samples("echo_ms", name, values)


def p99_note(out: Collected, measure: str, subject: str) -> str:
    samples = out.samples[measure][subject]
    return f"p99 {percentile(samples, 0.99):.2f}" if samples else "no successful call"


def rows(out: Collected) -> list[Row]:
    r = out.per_round

    def peers(measure: str, *names: str) -> dict[str, list[float]]:
        return {name: r[measure][name] for name in names}

    fg_notes = {name: p99_note(out, "foreground_ms", name) for name in r["foreground_ms"]}
    session_notes = {
        name: p99_note(out, "session_ms", name)
        + (f", {failed:.0f} failed" if (failed := sum(r["session_failed"][name])) else "")
        for name in r["session_ms"]
    }
    return [
        Row(
            "foreground `echo hi`, median",
            "ms",
            r["foreground_ms"]["shellgate"],
            peers("foreground_ms", "SWE-ReX", "minimal app"),
            "SWE-ReX",
            Target("ratio_le", 1.0),
            fg_notes,
        ),
        Row(
            "foreground `echo hi`, p99 (all rounds pooled)",
            "ms",
            [percentile(out.samples["foreground_ms"]["shellgate"], 0.99)],
            {
                name: [percentile(out.samples["foreground_ms"][name], 0.99)]
                for name in ("SWE-ReX", "minimal app")
            },
        ),
        Row(
            "server CPU per foreground call",
            "ms",
            r["cpu_ms_per_call"]["shellgate"],
            peers("cpu_ms_per_call", "SWE-ReX", "minimal app"),
            "SWE-ReX",
            Target("abs_le", 1.5),
        ),
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
            None,
            Target("abs_le", 20),
        ),
        Row(
            "command (`true`) in a session, median",
            "ms",
            r["session_ms"]["shellgate"],
            peers("session_ms", "SWE-ReX", "persistent bash"),
            "SWE-ReX",
            Target("abs_le", 3),
            session_notes,
        ),
        Row(
            "live WebSocket stream, pipe",
            "MB/s",
            r["pipe_mb_s"]["shellgate"],
            peers("pipe_mb_s", "pipe floor"),
            "pipe floor",
            Target("ratio_ge", 0.4),
        ),
        Row(
            "live WebSocket stream, PTY",
            "MB/s",
            r["pty_mb_s"]["shellgate"],
            peers("pty_mb_s", "PTY floor", "terminado"),
            "PTY floor",
            Target("ratio_ge", 0.8),
        ),
        Row(
            "PTY keystroke echo, median",
            "ms",
            r["echo_ms"]["shellgate"],
            peers("echo_ms", "terminado", "PTY floor"),
            "terminado",
            Target("ratio_le", 1.0),
            {name: p99_note(out, "echo_ms", name) for name in r["echo_ms"]},
        ),
        Row(
            "start to `/healthz` 200",
            "s",
            r["startup_s"]["shellgate"],
            peers("startup_s", "SWE-ReX", "terminado", "minimal app"),
            "SWE-ReX",
            Target("ratio_le", 1.0),
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
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    rounds = 2 if args.quick else args.rounds
    peers_bin = servers.ensure_peers_venv()
    load_before = uptime()
    started = time.monotonic()
    out = Collected({}, {})
    for index in range(rounds):
        print(f"round {index + 1}/{rounds}", flush=True)
        one_round(index, peers_bin, sizes, out)
    table = render(rows(out))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%MZ")
    header = (
        f"Run {stamp}{' (--quick)' if args.quick else ''}: {rounds} rounds in "
        f"{time.monotonic() - started:.0f} s. Load before: `{load_before}`; "
        f"after: `{uptime()}`. Ratios are the median of per-round ratios."
    )
    RESULTS.mkdir(exist_ok=True)
    name = f"{stamp}-quick" if args.quick else stamp  # a smoke run never passes for a result
    (RESULTS / f"{name}.md").write_text(f"# Side-by-side benchmark\n\n{header}\n\n{table}")
    report = {
        "stamp": stamp,
        "quick": args.quick,
        "rounds": rounds,
        "sizes": sizes.__dict__,
        "load_before": load_before,
        "rows": [row.as_json() for row in rows(out)],
        "per_round": out.per_round,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    if not args.quick:
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
