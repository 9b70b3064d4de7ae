"""The shell reader against issue 28's corpora: `python -m bench.bench_reader [--baseline DIR]`.

Prints one JSON object: how many bypass forms of tests/reader_corpus.py are caught (not
`allow`) under its policy, how many everyday commands are not `allow` (false positives), and
the median and p99 µs per command of `evaluate` with the segment cache cleared every call,
over the everyday corpus. With `--baseline DIR` the same timing runs in a child process on
another checkout's code (say /work/main before a change), interleaved round by round, and the
ratio of the medians is reported: the machine's load moves both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = 7

_TIMER = """
import json, sys, time
from app.policy.engine import PolicyDocument, evaluate
from app.policy.shell.syntax import clear_segment_cache
commands = json.loads(sys.stdin.read())
policy = PolicyDocument.model_validate(commands.pop())
samples = []
for command in commands:
    clear_segment_cache()
    start = time.perf_counter_ns()
    evaluate(policy, command)
    samples.append((time.perf_counter_ns() - start) / 1000)
print(json.dumps(samples))
"""


def _time_in(checkout: Path, commands: list[str], policy: dict[str, object]) -> list[float]:
    """Per-command µs of `evaluate` run on `checkout`'s code, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", _TIMER],
        input=json.dumps([*commands, policy]),
        capture_output=True,
        text=True,
        check=True,
        cwd=checkout,
        env=env,
    )
    samples: list[float] = json.loads(done.stdout)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", type=Path, help="another checkout to time the same way")
    options = parser.parse_args()

    from app.policy.engine import PolicyDocument, RuleAction, evaluate
    from tests.reader_corpus import BYPASS_FORMS, READER_POLICY
    from tests.test_policy_reader_corpus import EVERYDAY

    policy = PolicyDocument.model_validate(READER_POLICY)
    caught = sum(evaluate(policy, c).approval is not RuleAction.allow for c in BYPASS_FORMS)
    false_positives = [c for c in EVERYDAY if evaluate(policy, c).approval is not RuleAction.allow]
    here = Path(__file__).resolve().parent.parent
    ours: list[float] = []
    theirs: list[float] = []
    ratios: list[float] = []
    started = time.monotonic()
    for _ in range(ROUNDS):
        round_ours = _time_in(here, EVERYDAY, READER_POLICY)
        ours.extend(round_ours)
        if options.baseline is not None:
            round_theirs = _time_in(options.baseline.resolve(), EVERYDAY, READER_POLICY)
            theirs.extend(round_theirs)
            ratios.append(statistics.median(round_ours) / statistics.median(round_theirs))
    result: dict[str, object] = {
        "bypass_caught": f"{caught}/{len(BYPASS_FORMS)}",
        "everyday_false_positives": f"{len(false_positives)}/{len(EVERYDAY)}",
        "false_positive_commands": false_positives,
        "median_us": round(statistics.median(ours), 1),
        "p99_us": round(statistics.quantiles(ours, n=100)[98], 1),
        "rounds": ROUNDS,
        "seconds": round(time.monotonic() - started, 1),
    }
    if options.baseline is not None:
        result["baseline"] = str(options.baseline)
        result["baseline_median_us"] = round(statistics.median(theirs), 1)
        result["ratio_median_of_rounds"] = round(statistics.median(ratios), 3)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
