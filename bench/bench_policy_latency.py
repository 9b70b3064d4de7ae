"""What the policy and approvals cost through HTTP, on one loopback server.

    .venv/bin/python -m bench.bench_policy_latency [--rounds 400] [--approvals 50]

(a) `policy_overhead`: the round trip of a foreground `POST /v1/executions` running `true`
    under the realistic 20-rule policy of `bench.bench_policy` versus the empty default
    policy, alternating blocks of calls on the same server (`PUT /v1/policy` between blocks)
    so that machine noise hits both alike. Each call sends `true r<N>` with a fresh N so the
    policy's segment cache never answers: every call pays a first-time evaluation.
(b) `approve_to_start`: the time from sending `POST /v1/approvals/{id}/approve` to the
    approved command's first action (bash's `$EPOCHREALTIME`, printed by the command), over
    `--approvals` approvals; side by side, the same measure from sending an `async` submit of
    an allowed command (the baseline: starting a job without any approval).
The pure evaluation rate is `bench.bench_policy`; this script does not repeat it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx

from app.policy.engine import PolicyDocument, evaluate
from bench.bench_policy import RULES
from bench.servers import TOKEN, shellgate

REALISTIC_POLICY: dict[str, Any] = {
    "default": "allow",
    "rules": [{"match": match, "approval": approval} for match, approval in RULES],
}
EMPTY_POLICY: dict[str, Any] = {}
STAMP = "printf '%s' \"$EPOCHREALTIME\""
STAMP_PROMPT_POLICY: dict[str, Any] = {"rules": [{"match": "* #ask", "approval": "prompt"}]}
BLOCK = 25


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "samples": len(samples_ms),
        "median_ms": round(statistics.median(samples_ms), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
    }


def install(client: httpx.Client, policy: dict[str, Any]) -> None:
    response = client.put("/v1/policy", json=policy)
    response.raise_for_status()


def policy_overhead(client: httpx.Client, rounds: int) -> dict[str, object]:
    counter = itertools.count()

    def call() -> float:
        command = f"true r{next(counter)}"
        started = time.perf_counter()
        response = client.post("/v1/executions", json={"command": command})
        elapsed = (time.perf_counter() - started) * 1000
        assert response.status_code == 200 and response.json()["exit_code"] == 0, response.text
        return elapsed

    samples: dict[str, list[float]] = {"realistic_20_rules": [], "empty_default": []}
    policies = {"realistic_20_rules": REALISTIC_POLICY, "empty_default": EMPTY_POLICY}
    for policy in policies.values():  # warm both paths: imports, pools, SQLite pages
        install(client, policy)
        for _ in range(BLOCK):
            call()
    while min(len(values) for values in samples.values()) < rounds:
        for name, policy in policies.items():
            install(client, policy)
            samples[name].extend(call() for _ in range(BLOCK))
    realistic, empty = summary(samples["realistic_20_rules"]), summary(samples["empty_default"])
    return {
        "command": "true r<N> (foreground, 200)",
        "realistic_20_rules": realistic,
        "empty_default": empty,
        # The same evaluations without HTTP, to read the round-trip difference against.
        "in_process_evaluate_us": {
            name: _evaluate_cost_us(name, policy) for name, policy in policies.items()
        },
        "median_difference_ms": round(realistic["median_ms"] - empty["median_ms"], 3),
        "p99_difference_ms": round(realistic["p99_ms"] - empty["p99_ms"], 3),
        "median_ratio": round(realistic["median_ms"] / empty["median_ms"], 3),
        "target": "median difference under 1 ms",
    }


def _evaluate_cost_us(name: str, policy: dict[str, Any], calls: int = 2000) -> float:
    document = PolicyDocument.model_validate(policy)
    started = time.perf_counter()
    for index in range(calls):  # fresh text each call: the segment cache never answers
        evaluate(document, f"true {name}{index}")
    return round((time.perf_counter() - started) / calls * 1e6, 1)


def _started_at(client: httpx.Client, execution_id: str) -> float:
    final = client.get(f"/v1/executions/{execution_id}", params={"wait": 30}).json()
    assert final["state"] == "completed", final
    return float(final["output"])


def approve_to_start(client: httpx.Client, approvals: int) -> dict[str, object]:
    install(client, STAMP_PROMPT_POLICY)

    def approved_start() -> float:
        held = client.post("/v1/executions", json={"command": f"{STAMP} #ask", "async": True})
        assert held.status_code == 202 and held.json()["state"] == "awaiting_approval", held.text
        sent = time.time()
        decided = client.post(f"/v1/approvals/{held.json()['approval']['id']}/approve")
        assert decided.status_code == 200, decided.text
        return (_started_at(client, held.json()["id"]) - sent) * 1000

    def submitted_start() -> float:
        sent = time.time()
        job = client.post("/v1/executions", json={"command": STAMP, "async": True})
        assert job.status_code == 202, job.text
        return (_started_at(client, job.json()["id"]) - sent) * 1000

    measures: dict[str, Callable[[], float]] = {
        "approve_to_start": approved_start,
        "async_submit_to_start_baseline": submitted_start,
    }
    for measure in measures.values():
        for _ in range(5):
            measure()
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(approvals):  # alternate, as above
        for name, measure in measures.items():
            samples[name].append(measure())
    approved, baseline = (summary(samples[name]) for name in measures)
    return {
        "approve_to_start": approved,
        "async_submit_to_start_baseline": baseline,
        "median_ratio": round(approved["median_ms"] / baseline["median_ms"], 3),
        "target": "approve_to_start median under 50 ms",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--approvals", type=int, default=50)
    args = parser.parse_args()
    with (
        shellgate(auto_background_ms="30000") as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as client,
    ):
        report = {
            "benchmark": "policy_latency",
            "policy_overhead": policy_overhead(client, args.rounds),
            "approve_to_start": approve_to_start(client, args.approvals),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
