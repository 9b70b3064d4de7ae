"""Soak: many clients of mixed work against one server for a bounded time, checking throughout
that nothing fails, nothing stalls, no byte is lost and the server's memory does not grow with
the work, and at the end that it gave back its file descriptors.

    .venv/bin/python -m bench.soak [--seconds 120] [--clients 64] [--max-jobs 16] [--warm-up S]

Loopback only; at most 300 s of load (plus the wind-down). The server runs in its own process
(`bench.servers.shellgate`), the `/healthz` probe in another, so neither shares an interpreter
with the 64 clients. A second probe times the minimal app (`bench/yardstick.py`) in the same
minutes, for what the loaded machine itself leaves a server with nothing else to do: the
target is a ratio of the two. Client `i` does work kind `i % 6`, in a loop until the time is up:

- `foreground` / `foreground_text`: a foreground call writing random bytes (or their base64);
- `job`: an async job of random bytes, waited for with `?wait=` (a 429 at the cap is retried
  after its `Retry-After`);
- `pty`: an async PTY job writing base64 text;
- `viewer`: an async job of random bytes followed live over the WebSocket from offset 0;
- `stalled_viewer`: a job of 4 MiB with a WebSocket viewer that never reads, dropped at the end.

Every command prints, after its output, the sha256 of what it wrote; every log (and every live
viewer's bytes) is checked against it. Exits non-zero when a check fails: a 5xx or a transport
error, a log that is not byte-exact, `/healthz` p99 over ×1.5 the minimal app's in the same
minutes (50 ms when no minimal app is probed), file descriptors not back to the baseline
taken after a warm-up, or RSS that grows with the run's length: sampled every 0.5 s during the
load, the median of the load's second half may not exceed the first half's by more than ×1.10.
A leak grows with the work done and shows between the halves; what the allocator keeps of a
busy minute is there in both. RSS idle after the load against the baseline idle after the
warm-up is reported, no longer judged: healthy servers read ×0.985-1.22 there, by where the
baseline fell in the band the allocator's retention spreads it over (RELIABILITY.md, "Soak").
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from bench.servers import TOKEN, rss_kib, shellgate, yardstick

MAX_SECONDS = 300
# The target (issue 25): `/healthz` p99 during the soak at most this many times the minimal
# app's, probed in the same minutes. An absolute 50 ms cannot be met with the load generator
# on the same two cores: the idle minimal app itself misses it then.
HEALTH_P99_OVER_MINIMAL_APP_LIMIT = 1.5
# Judged only when no minimal app was probed (a `soak()` called without one).
HEALTH_P99_LIMIT_MS = 50.0
# RSS is sampled this often during the measured load; a leak grows with the work done, so the
# median of the load's second half may exceed the first half's by at most RSS_GROWTH_LIMIT.
# Medians: what runs at one moment (a 4 MiB stalled viewer's backlog, the pool's connections)
# moves single samples by more than that.
RSS_SAMPLE_SECONDS = 0.5
RSS_GROWTH_LIMIT = 1.10
# After the jobs end: the server gives the heap's free memory back once no execution runs
# (app/server/memory_trim.py looks every 0.5 s); RSS is read after this much idle time, for the
# baseline and at the end alike.
IDLE_SECONDS_BEFORE_RSS = 2.0
KINDS = ("foreground", "foreground_text", "job", "pty", "viewer", "stalled_viewer")
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
DATABASE_PREFIX = "shellgate.db"


def random_bytes_command(size: int) -> str:
    """Random bytes, then a newline-terminated hex sha256 of them, all on stdout."""
    return (
        f"f=$(mktemp); head -c {size} /dev/urandom > $f; cat $f; "
        "sha256sum < $f | cut -c1-64; rm -f $f"
    )


def base64_text_command(size: int) -> str:
    """Base64 of random bytes on one line (a terminal leaves it alone), then its sha256."""
    return (
        f'd=$(head -c {size} /dev/urandom | base64 -w0); printf %s "$d"; '
        'printf \'%s\\n\' "$(printf %s "$d" | sha256sum | cut -c1-64)"'
    )


def check_digested(log: bytes, *, pty: bool = False) -> None:
    """`log` is data + digest line; the digest must be the sha256 of the data."""
    newline = b"\r\n" if pty else b"\n"
    if not log.endswith(newline):
        raise AssertionError(f"log of {len(log)} bytes does not end with its digest line")
    body = log[: -len(newline)]
    data, digest = body[:-64], body[-64:]
    if hashlib.sha256(data).hexdigest().encode() != digest:
        raise AssertionError(f"log of {len(log)} bytes does not match the digest it printed")


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)
    verified_bytes: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        if len(self.failures) < 50:
            self.failures.append(message)


class Client:
    def __init__(self, http: httpx.AsyncClient, ws_url: str, tally: Tally, seed: int) -> None:
        self.http = http
        self.ws_url = ws_url
        self.tally = tally
        self.random = random.Random(seed)

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response = await self.http.request(method, url, **kwargs)
        self.tally.statuses[response.status_code] += 1
        if response.status_code >= 500:
            raise AssertionError(f"{method} {url}: {response.status_code} {response.text[:200]}")
        return response

    async def start_job(self, command: str, **fields: Any) -> str:
        while True:
            response = await self.request(
                "POST", "/v1/executions", json={"command": command, "async": True, **fields}
            )
            if response.status_code == 202:
                execution_id: str = response.json()["id"]
                return execution_id
            if response.status_code != 429:
                raise AssertionError(f"job refused: {response.status_code} {response.text[:200]}")
            if "retry-after" not in response.headers:
                raise AssertionError("429 without Retry-After")
            await asyncio.sleep(min(float(response.headers["retry-after"]), 1.0))

    async def finished(self, execution_id: str) -> dict[str, Any]:
        while True:
            response = await self.request("GET", f"/v1/executions/{execution_id}?wait=60")
            record: dict[str, Any] = response.json()
            if record["state"] not in ("running", "pending", "awaiting_approval"):
                return record

    async def log(self, execution_id: str) -> bytes:
        response = await self.request(
            "GET", f"/v1/executions/{execution_id}/output", params={"limit": 16 * 1024 * 1024}
        )
        return response.content

    async def verify(self, execution_id: str, record: dict[str, Any], *, pty: bool = False) -> None:
        if record["state"] != "completed" or record["notices"]:
            raise AssertionError(f"{execution_id}: {record['state']} {record['notices']}")
        log = await self.log(execution_id)
        if len(log) != record["total_bytes"]:
            raise AssertionError(f"{execution_id}: {len(log)} of {record['total_bytes']} bytes")
        check_digested(log, pty=pty)
        self.tally.verified_bytes += len(log)

    async def one(self, kind: str) -> None:
        size = self.random.randint(0, 512 * 1024)
        if kind in ("foreground", "foreground_text"):
            command = (
                random_bytes_command(size) if kind == "foreground" else (base64_text_command(size))
            )
            response = await self.request("POST", "/v1/executions", json={"command": command})
            body = response.json()
            execution_id = body["id"]
            record = body if response.status_code == 200 else await self.finished(execution_id)
            await self.verify(execution_id, record)
        elif kind == "job":
            execution_id = await self.start_job(random_bytes_command(size))
            await self.verify(execution_id, await self.finished(execution_id))
        elif kind == "pty":
            execution_id = await self.start_job(base64_text_command(size), pty=True)
            await self.verify(execution_id, await self.finished(execution_id), pty=True)
        elif kind == "viewer":
            execution_id = await self.start_job(random_bytes_command(4 * size))
            seen = await self.watch(execution_id)
            record = await self.finished(execution_id)
            await self.verify(execution_id, record)
            check_digested(seen)
        elif kind == "stalled_viewer":
            execution_id = await self.start_job(random_bytes_command(4 * 1024 * 1024))
            async with connect(
                f"{self.ws_url}/v1/executions/{execution_id}/stream",
                additional_headers=HEADERS,
                max_size=None,
                close_timeout=1,
            ):
                # Never reads: the server's sends back up; the job must not care.
                record = await self.finished(execution_id)
            await self.verify(execution_id, record)
        self.tally.runs[kind] += 1

    async def watch(self, execution_id: str) -> bytes:
        pieces: list[bytes] = []
        async with connect(
            f"{self.ws_url}/v1/executions/{execution_id}/stream",
            additional_headers=HEADERS,
            max_size=None,
        ) as ws:
            async for message in ws:
                frame = json.loads(message)
                if frame["type"] == "output":
                    data = frame["data"]
                    pieces.append(
                        base64.b64decode(data) if frame.get("encoding") else data.encode()
                    )
            if ws.close_code != 1000:
                raise AssertionError(f"stream of {execution_id} closed with {ws.close_code}")
        return b"".join(pieces)


async def client_loop(client: Client, kind: str, until: float) -> None:
    while time.monotonic() < until:
        try:
            await client.one(kind)
        # A stream the server closed abnormally (a keepalive timeout, 1011) is a failure to
        # report like the others, not an exception that ends the soak without its report.
        except (AssertionError, httpx.HTTPError, OSError, WebSocketException) as error:
            client.tally.fail(f"{kind}: {type(error).__name__}: {error}")


def open_fds(pid: int) -> int:
    """The server's open descriptors, except its database's: the connection pool keeps up to
    its size open, and SQLite parks the descriptors of closed connections for reuse while
    another connection holds a lock, so their number grows to a bound set by the pool, not by
    the work done (see `database_fds`)."""
    return sum(not target.startswith(DATABASE_PREFIX) for target in _fd_targets(pid))


def database_fds(pid: int) -> int:
    return sum(target.startswith(DATABASE_PREFIX) for target in _fd_targets(pid))


def _fd_targets(pid: int) -> list[str]:
    targets = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}").rsplit("/", 1)[-1])
    return targets


async def settle(base_url: str, pid: int, baseline_fds: int) -> None:
    """Wait (bounded) for the server to finish its jobs and close what they held. The client
    keeps no idle connection: those would be the server's open descriptors too."""
    deadline = time.monotonic() + 30
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, headers=HEADERS, limits=limits) as http:
        while time.monotonic() < deadline:
            info = (await http.get("/v1/info")).json()
            if info.get("running_jobs", 0) == 0 and open_fds(pid) <= baseline_fds:
                return
            await asyncio.sleep(0.2)


async def load(base_url: str, seconds: float, clients: int, tally: Tally, seed: int) -> float:
    """`clients` clients, each looping over its kind of work for `seconds`; the time taken."""
    ws_url = base_url.replace("http://", "ws://")
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients * 2)
    started = time.monotonic()
    until = started + seconds
    async with httpx.AsyncClient(
        base_url=base_url, headers=HEADERS, timeout=120, limits=limits
    ) as http:
        await asyncio.gather(
            *(
                client_loop(Client(http, ws_url, tally, seed + i), KINDS[i % len(KINDS)], until)
                for i in range(clients)
            )
        )
    return time.monotonic() - started


async def sample_rss(pid: int, seconds: float, samples: list[int]) -> None:
    """The server's RSS (KiB) every RSS_SAMPLE_SECONDS for `seconds`, appended to `samples`."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        samples.append(rss_kib(pid))
        await asyncio.sleep(RSS_SAMPLE_SECONDS)


def rss_trend(samples: list[int]) -> dict[str, Any]:
    """The samples of the load's two halves, by their medians (MiB); `growth` is the second
    half's over the first's (None with fewer than two samples)."""
    half = len(samples) // 2
    if half == 0:
        return {"samples": len(samples), "growth": None}
    quarters = [samples[len(samples) * i // 4 : len(samples) * (i + 1) // 4] for i in range(4)]
    first, second = statistics.median(samples[:half]), statistics.median(samples[-half:])
    return {
        "samples": len(samples),
        "quarter_medians_mib": [round(statistics.median(q) / 1024, 1) for q in quarters if q],
        "first_half_median_mib": round(first / 1024, 1),
        "second_half_median_mib": round(second / 1024, 1),
        "growth": round(second / first, 3),
        "limit": RSS_GROWTH_LIMIT,
    }


def start_probe(base_url: str, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.soak", "--probe", base_url, "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )


def probe(base_url: str, seconds: float) -> None:
    """`/healthz` every 20 ms for `seconds`; prints the latencies (ms) as JSON."""
    latencies: list[float] = []
    errors = 0
    until = time.monotonic() + seconds
    with httpx.Client(base_url=base_url, timeout=10) as http:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                ok = http.get("/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append((time.perf_counter() - started) * 1000)
            errors += not ok
            time.sleep(max(0.0, 0.02 - (time.perf_counter() - started)))
    print(json.dumps({"latencies_ms": latencies, "errors": errors}))


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency_summary(report: dict[str, Any]) -> dict[str, Any]:
    latencies = report["latencies_ms"]
    return {
        "probes": len(latencies),
        "median": round(statistics.median(latencies), 2),
        "p99": round(percentile(latencies, 0.99), 2),
        "max": round(max(latencies), 2),
        "errors": report["errors"],
    }


async def soak(
    base_url: str,
    pid: int,
    seconds: float,
    clients: int,
    warm_up_seconds: float,
    yardstick_url: str | None = None,
) -> dict[str, Any]:
    # Warm-up: the same load for a fraction of the time, so that the baseline, and the measured
    # load's first half, include what any load leaves allocated for good (thread pools,
    # allocator arenas, caches); a leak grows with the work done after it.
    warm_up = Tally()
    await load(base_url, warm_up_seconds, clients, warm_up, seed=1_000_000)
    await settle(base_url, pid, baseline_fds=10**6)
    await asyncio.sleep(IDLE_SECONDS_BEFORE_RSS)
    baseline = {"fds": open_fds(pid), "database_fds": database_fds(pid), "rss_kib": rss_kib(pid)}

    tally = Tally()
    health = start_probe(base_url, seconds)
    # The same probe against the minimal app (bench/yardstick.py) in the same minutes: what
    # the loaded machine itself leaves a server that has nothing else to do.
    yard = start_probe(yardstick_url, seconds) if yardstick_url else None
    rss_samples: list[int] = []
    sampler = asyncio.create_task(sample_rss(pid, seconds, rss_samples))
    load_seconds = await load(base_url, seconds, clients, tally, seed=0)
    await sampler
    probe_out, _ = health.communicate(timeout=60)
    yard_out = yard.communicate(timeout=60)[0] if yard else None
    await settle(base_url, pid, baseline["fds"])
    await asyncio.sleep(IDLE_SECONDS_BEFORE_RSS)
    after = {"fds": open_fds(pid), "database_fds": database_fds(pid), "rss_kib": rss_kib(pid)}
    tally.failures += [f"warm-up: {failure}" for failure in warm_up.failures]

    health_report = json.loads(probe_out)
    latencies = health_report["latencies_ms"]
    status_5xx = sum(count for status, count in tally.statuses.items() if status >= 500)
    rss = rss_trend(rss_samples)
    yardstick = latency_summary(json.loads(yard_out)) if yard_out else None
    p99 = percentile(latencies, 0.99)
    ratio = p99 / max(yardstick["p99"], 0.01) if yardstick else None
    checks = {
        "no_5xx_or_transport_error": status_5xx == 0 and not tally.failures,
        "fds_back_to_baseline": after["fds"] <= baseline["fds"],
        "rss_no_growth_with_the_run": rss["growth"] is not None
        and rss["growth"] <= RSS_GROWTH_LIMIT,
    }
    if ratio is not None:
        checks["healthz_p99_within_1.5x_minimal_app"] = (
            ratio <= HEALTH_P99_OVER_MINIMAL_APP_LIMIT and health_report["errors"] == 0
        )
    else:
        checks["healthz_p99_under_50ms"] = (
            p99 < HEALTH_P99_LIMIT_MS and health_report["errors"] == 0
        )
    return {
        "seconds": round(load_seconds, 1),
        "clients": clients,
        "runs": dict(tally.runs),
        "runs_total": sum(tally.runs.values()),
        "verified_mib": round(tally.verified_bytes / 2**20, 1),
        "statuses": {str(status): count for status, count in sorted(tally.statuses.items())},
        "healthz_ms": latency_summary(health_report),
        "minimal_app_healthz_ms": yardstick,
        # The judged figure (HEALTH_P99_OVER_MINIMAL_APP_LIMIT): how far the server is from
        # what the loaded machine allows a server with nothing else to do.
        "healthz_p99_over_minimal_app": round(ratio, 2) if ratio is not None else None,
        "baseline": baseline,
        "after": after,
        # Reported, not judged: where the idle RSS fell in the band the allocator's retention
        # spreads it over (RELIABILITY.md, "Soak").
        "rss_after_over_baseline": round(after["rss_kib"] / baseline["rss_kib"], 3),
        "rss_during_load": rss,
        "failures": tally.failures,
        "checks": checks,
        "passed": all(checks.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--max-jobs", type=int, default=16)
    parser.add_argument("--warm-up", type=float, help="seconds (default: max(10, seconds / 6))")
    parser.add_argument("--probe", metavar="BASE_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = min(args.seconds, MAX_SECONDS)
    if args.probe:
        probe(args.probe, seconds)
        return 0
    with shellgate(max_jobs=str(args.max_jobs)) as server, yardstick() as minimal_app:
        warm_up = args.warm_up if args.warm_up is not None else max(10.0, seconds / 6)
        report = asyncio.run(
            soak(
                server.base_url,
                server.pid,
                seconds,
                args.clients,
                warm_up,
                yardstick_url=minimal_app.base_url,
            )
        )
    report["max_jobs"] = args.max_jobs
    print(json.dumps(report, indent=2))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
