"""The strict JSON check against the plain parser: `python -m bench.bench_strict_json`.

`loads_strict` (app/core/strict_json.py) checks a parsed body with scans of its text instead of
a walk of the result in Python (the walk took 4-5 times the parse). Prints one JSON object: the
best of five timings of `json.loads` and of `loads_strict` on a wide body (500,000 numbers in
one array) and their ratio, which the machine's load moves little (target: under 2).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from app.core.strict_json import loads_strict

ROUNDS = 5
WIDE_BODY = b"[" + b",".join([b"0"] * 500_000) + b"]"


def _best_ms(call: Callable[[bytes], object]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        call(WIDE_BODY)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def run() -> dict[str, object]:
    parse = _best_ms(json.loads)
    strict = _best_ms(loads_strict)
    return {
        "benchmark": "strict_json.wide_body",
        "body_bytes": len(WIDE_BODY),
        "json_loads_ms": round(parse, 2),
        "loads_strict_ms": round(strict, 2),
        "ratio": round(strict / parse, 2),
    }


if __name__ == "__main__":
    json.dump(run(), sys.stdout, indent=2)
    sys.stdout.write("\n")
