"""What a session costs: the same `true` as a plain execution (the baseline), as an execution in
a session (the state wrapper: restore, then save on exit), and through the streaming runner
(wrapper + NDJSON stream), side by side against one server; plus the time to the first item of a
command that keeps running (the stream does not wait for the exit).

    .venv/bin/python -m bench.bench_sessions [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import httpx

from bench.servers import TOKEN, shellgate

# A lived-in session: some exported variables, functions and aliases to restore and save.
STATE_SETUP = "; ".join(
    [*(f"export VAR_{i}=value-{i}" for i in range(20))]
    + [f"fn_{i}() {{ echo {i}; }}" for i in range(5)]
    + [f"alias al_{i}='echo {i}'" for i in range(5)]
)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(samples_ms), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
    }


def stream_run(client: httpx.Client, session_id: str, command: str) -> list[dict[str, object]]:
    body = {"command": command}
    with client.stream("POST", f"/v1/sessions/{session_id}/run", json=body) as response:
        assert response.status_code == 200
        return [json.loads(line) for line in response.iter_lines() if line]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with (
        shellgate() as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as client,
    ):
        session_id = client.post("/v1/sessions", json={}).json()["id"]
        assert stream_run(client, session_id, STATE_SETUP)[-1]["exit_code"] == 0

        def plain() -> None:
            response = client.post("/v1/executions", json={"command": "true"})
            assert response.json()["exit_code"] == 0

        def in_session() -> None:
            body = {"command": "true", "session": session_id}
            assert client.post("/v1/executions", json=body).json()["exit_code"] == 0

        def runner() -> None:
            assert stream_run(client, session_id, "true")[-1]["exit_code"] == 0

        calls: dict[str, Callable[[], None]] = {
            "execution": plain,
            "execution_in_session": in_session,
            "runner": runner,
        }
        for _ in range(20):  # warm up: imports, connection pool, SQLite pages
            for call in calls.values():
                call()
        samples: dict[str, list[float]] = {name: [] for name in calls}
        # Interleaved so that noise from the rest of the machine hits all three alike.
        for _ in range(rounds):
            for name, call in calls.items():
                started = time.perf_counter()
                call()
                samples[name].append((time.perf_counter() - started) * 1000)

        first_item_ms: list[float] = []
        for _ in range(10):
            body = {"command": "echo first; sleep 0.5"}
            started = time.perf_counter()
            with client.stream("POST", f"/v1/sessions/{session_id}/run", json=body) as response:
                for _line in response.iter_lines():
                    first_item_ms.append((time.perf_counter() - started) * 1000)
                    break

    results = {name: summary(values) for name, values in samples.items()}
    baseline = results["execution"]["median_ms"]
    print(
        json.dumps(
            {
                "rounds": rounds,
                "state": "20 exported variables, 5 functions, 5 aliases",
                **results,
                "median_ratio_execution_in_session": round(
                    results["execution_in_session"]["median_ms"] / baseline, 3
                ),
                "median_ratio_runner": round(results["runner"]["median_ms"] / baseline, 3),
                "first_item_of_echo_then_sleep_500ms": summary(first_item_ms),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
