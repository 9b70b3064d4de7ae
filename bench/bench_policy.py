"""Policy evaluation benchmark: `python -m bench.bench_policy` from the repo root.

Times `app.policy.engine.evaluate` over 10,000 deterministic, mixed commands against a realistic
20-rule policy and prints one JSON object. Next to it, as a yardstick, it times a plain
`re.fullmatch` of the same 20 globs against the raw command (no parsing, no segments), so
results can be recorded as a ratio that is stable across machines.

Two evaluate figures are reported: `uncached` clears the segment cache before every call (the
cost of a command seen for the first time), `cached` re-runs the same commands (an approval
flow re-evaluating a command it has already seen).

`benign_corpus` is the acceptance figure: the real-world agent commands of
tests/policy_corpus.py under its realistic policy (p99 under 1 ms, and how many are not
allowed: the false-prompt rate). `interceptor` times the interceptor on growing commands.
`hostile_inputs` times the pattern engines on inputs sized to make a backtracking pattern take
ages (the unit tests check only what those inputs are judged): the slowest of each group.
"""

from __future__ import annotations

import json
import platform
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from app.policy.critical_patterns import find_critical_hits
from app.policy.engine import (
    InterceptorRule,
    PolicyDocument,
    RuleAction,
    compile_interceptor_pattern,
    evaluate,
)
from app.policy.env_rules import glob_matches_name
from app.policy.interceptor import DEFAULT_INTERCEPTOR_RULES
from app.policy.interceptor import check as intercept
from app.policy.shell.syntax import clear_segment_cache, normalize_whitespace
from tests.policy_corpus import (
    BENIGN_COMMANDS,
    HOSTILE_CRITICAL_INPUTS,
    HOSTILE_INTERCEPTOR_INPUTS,
    REALISTIC_POLICY,
)

BENIGN_ROUNDS = 20

COMMAND_COUNT = 10_000

RULES: list[tuple[str, str]] = [
    ("rm -rf /*", "deny"),
    ("git push --force*", "deny"),
    ("git push -f*", "deny"),
    ("sudo *", "deny"),
    ("mkfs*", "deny"),
    ("git status*", "allow"),
    ("git diff*", "allow"),
    ("git log*", "allow"),
    ("ls*", "allow"),
    ("cat *", "allow"),
    ("pytest*", "allow"),
    ("npm test*", "allow"),
    ("npm run *", "allow"),
    ("make *", "allow"),
    ("python -m *", "allow"),
    ("grep *", "allow"),
    ("rm -rf *", "prompt"),
    ("curl *", "prompt"),
    ("docker *", "prompt"),
    ("pip install *", "prompt"),
]

_NAMES = ["app", "core", "utils", "api", "models", "views", "auth", "db", "cli", "io"]
_WORDS = ["fix", "add", "update", "refactor", "remove", "tidy", "bump", "docs", "tests"]


def _simple(rng: random.Random) -> str:
    name = rng.choice(_NAMES)
    return rng.choice(
        [
            "git status",
            "git status --short",
            f"git diff HEAD~{rng.randint(1, 9)} -- src/{name}.py",
            f"git log --oneline -n {rng.randint(5, 50)}",
            f"ls -la src/{name}",
            f"cat src/{name}/__init__.py",
            f"pytest tests/test_{name}.py -q -x",
            "npm test",
            f"npm run build:{name}",
            f"make {rng.choice(['test', 'lint', 'build'])}",
            f"python -m pip show {name}",
            f"grep -rn 'TODO' src/{name}",
            f"rm -rf build/{name}",
            f"curl -s https://example.com/{name}.json",
            f"docker ps --filter name={name}",
            f"sed -n '{rng.randint(1, 200)},+20p' src/{name}.py",
        ]
    )


def _compound(rng: random.Random) -> str:
    name = rng.choice(_NAMES)
    word = rng.choice(_WORDS)
    return rng.choice(
        [
            f"cd src/{name} && make test",
            f'git add -A && git commit -m "{word} {name}"',
            f"ls src | grep {name} | wc -l",
            "make build 2>&1 | tail -n 50",
            f'for f in src/{name}/*.py; do wc -l "$f"; done',
            f"test -f {name}.lock || npm install",
            f"mkdir -p out/{name}; cp -r src/{name} out/{name}",
            f"npm run lint && npm test -- --coverage > coverage-{name}.txt",
            f"[[ -d .venv ]] && .venv/bin/pytest -q tests/{name}",
            f"git stash && git pull --rebase && git stash pop; git log -n {rng.randint(1, 5)}",
        ]
    )


def _substitution(rng: random.Random) -> str:
    name = rng.choice(_NAMES)
    return rng.choice(
        [
            "echo $(date +%s)",
            f"kill $(cat /tmp/{name}.pid)",
            'export SHA="$(git rev-parse HEAD)"',
            f"diff <(ls src/{name}) <(ls out/{name})",
            f"cat <<'EOF' > notes/{name}.md\n# {name}\n\n- {rng.choice(_WORDS)} it\nEOF",
            f"python - <<EOF\nprint('{name}', $(nproc))\nEOF",
            f'echo "build {name} at `date`"',
            f"VERSION=$(python -c 'import {name}; print({name}.__version__)') make release",
            f"echo $(( {rng.randint(1, 99)} * 2 ))",
            f"files=$(git ls-files '*.py' | grep {name}) && wc -l $files",
        ]
    )


def _wrapped(rng: random.Random) -> str:
    name = rng.choice(_NAMES)
    return rng.choice(
        [
            f"timeout {rng.randint(10, 600)} pytest tests/test_{name}.py",
            "env CI=1 NODE_ENV=test npm test",
            f"sudo apt-get install -y lib{name}-dev",
            f"nohup python -m {name}.server > server.log 2>&1 &",
            f"bash -c 'cd src/{name} && make'",
            f'sh -c "rm -rf build/{name} && make"',
            f"find src/{name} -name '*.pyc' | xargs rm -f",
            f"nice -n 10 make -j{rng.randint(2, 16)}",
            f"time python -m {name}.bench",
            f"sudo env PATH=$PATH timeout 5 rm -rf /var/tmp/{name}",
        ]
    )


def build_commands(count: int, seed: int = 0) -> list[str]:
    """A deterministic mix: 40 % simple, 30 % compound, 15 % substitutions, 15 % wrappers."""
    rng = random.Random(seed)
    kinds: list[tuple[float, Callable[[random.Random], str]]] = [
        (0.40, _simple),
        (0.70, _compound),
        (0.85, _substitution),
        (1.00, _wrapped),
    ]
    commands: list[str] = []
    for _ in range(count):
        draw = rng.random()
        generate = next(make for threshold, make in kinds if draw < threshold)
        commands.append(generate(rng))
    return commands


def _glob_regex(pattern: str) -> re.Pattern[str]:
    parts = normalize_whitespace(pattern).split("*")
    return re.compile(".*".join(re.escape(part) for part in parts), re.DOTALL)


def _summary(samples_ns: Sequence[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    total_s = sum(ordered) / 1e9
    return {
        "median_us": round(statistics.median(ordered) / 1000, 2),
        "p99_us": round(p99 / 1000, 2),
        "mean_us": round(statistics.fmean(ordered) / 1000, 2),
        "max_us": round(ordered[-1] / 1000, 2),
        "commands_per_s": round(len(ordered) / total_s) if total_s else 0,
    }


def run() -> dict[str, object]:
    policy = PolicyDocument.model_validate(
        {"rules": [{"match": match, "approval": approval} for match, approval in RULES]}
    )
    commands = build_commands(COMMAND_COUNT)
    perf = time.perf_counter_ns

    for command in commands[:200]:  # warm imports, glob cache and regex caches
        evaluate(policy, command)

    uncached: list[int] = []
    outcomes: dict[str, int] = {}
    for command in commands:
        clear_segment_cache()
        started = perf()
        verdict = evaluate(policy, command)
        uncached.append(perf() - started)
        outcomes[verdict.approval.value] = outcomes.get(verdict.approval.value, 0) + 1

    cached: list[int] = []
    for command in commands:
        evaluate(policy, command)  # fill the cache
    for command in commands:
        started = perf()
        evaluate(policy, command)
        cached.append(perf() - started)

    globs = [_glob_regex(match) for match, _ in RULES]
    yardstick: list[int] = []
    for command in commands:
        started = perf()
        for glob in globs:
            if glob.fullmatch(command):
                break
        yardstick.append(perf() - started)

    uncached_summary = _summary(uncached)
    yardstick_summary = _summary(yardstick)
    return {
        "benign_corpus": _benign_corpus(),
        "interceptor": _interceptor(),
        "hostile_inputs": _hostile_inputs(),
        "benchmark": "policy.evaluate",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rules": len(RULES),
        "commands": len(commands),
        "unique_commands": len(set(commands)),
        "verdicts": dict(sorted(outcomes.items())),
        "evaluate_uncached": uncached_summary,
        "evaluate_cached": _summary(cached),
        "yardstick_re_fullmatch": yardstick_summary,
        "median_ratio_uncached_to_yardstick": round(
            uncached_summary["median_us"] / max(yardstick_summary["median_us"], 0.01), 1
        ),
    }


def _benign_corpus() -> dict[str, object]:
    """The acceptance figure: uncached `evaluate` over the benign agent corpus under the
    realistic policy of tests/policy_corpus.py (p99 must stay under 1 ms), and how many of
    those commands are not allowed (the false-prompt rate, target 0)."""
    policy = PolicyDocument.model_validate(REALISTIC_POLICY)
    wall: list[int] = []
    # CPU time of this thread too: on a shared machine the wall-clock tail is mostly time the
    # process spent preempted, not evaluating.
    cpu: list[int] = []
    not_allowed = sum(
        evaluate(policy, command).approval is not RuleAction.allow for command in BENIGN_COMMANDS
    )
    for _ in range(BENIGN_ROUNDS):
        for command in BENIGN_COMMANDS:
            clear_segment_cache()
            started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
            evaluate(policy, command)
            cpu.append(time.thread_time_ns() - started_cpu)
            wall.append(time.perf_counter_ns() - started)
    return {
        "commands": len(BENIGN_COMMANDS),
        "rounds": BENIGN_ROUNDS,
        "false_prompts": not_allowed,
        "false_prompt_rate": round(not_allowed / len(BENIGN_COMMANDS), 4),
        "evaluate_uncached_wall": _summary(wall),
        "evaluate_uncached_cpu": _summary(cpu),
    }


def _interceptor() -> dict[str, object]:
    """Cost of the interceptor (built-in rules plus a pathological admin rule on RE2) on one
    command of growing size: what a call would block the event loop for if run inline."""
    rules = [*DEFAULT_INTERCEPTOR_RULES, InterceptorRule(pattern=r"^(a+)+$", tool="bash")]
    tools = ["read", "grep", "glob", "edit", "write", "bash"]
    result: dict[str, object] = {}
    for size in (2048, 65_536):
        command = "echo " + "a" * (size - 5)
        started = time.perf_counter_ns()
        intercept(command, tools, rules, command)
        result[f"ms_at_{size}_chars"] = round((time.perf_counter_ns() - started) / 1e6, 2)
    started = time.perf_counter_ns()
    intercept("a" * 25, tools, rules, "a" * 25)
    result["pathological_regex_25_a_ms"] = round((time.perf_counter_ns() - started) / 1e6, 3)
    return result


def _slowest_ms(calls: Sequence[Callable[[], object]]) -> float:
    slowest = 0
    for call in calls:
        started = time.perf_counter_ns()
        call()
        slowest = max(slowest, time.perf_counter_ns() - started)
    return round(slowest / 1e6, 2)


def _hostile_inputs() -> dict[str, float]:
    """The slowest call of each group on its hostile inputs (tests/policy_corpus.py): each
    stays linear, so milliseconds; a backtracking pattern would take seconds to forever."""
    tools = ["read", "grep", "glob", "edit", "write", "bash"]
    admin = compile_interceptor_pattern(r"^(a+)+$", "")
    glob = "*A" * 30 + "*B"
    return {
        "interceptor_built_in_rules_ms": _slowest_ms(
            [
                lambda command=command: intercept(
                    command, tools, DEFAULT_INTERCEPTOR_RULES, command
                )
                for command, _ in HOSTILE_INTERCEPTOR_INPUTS
            ]
        ),
        "critical_patterns_ms": _slowest_ms(
            [
                lambda command=command: find_critical_hits(command)
                for command in HOSTILE_CRITICAL_INPUTS
            ]
        ),
        "admin_regex_100k_ms": _slowest_ms([lambda: admin.search("a" * 100_000 + "!")]),
        "env_glob_100k_ms": _slowest_ms(
            [
                lambda: glob_matches_name(glob, "A" * 100_000),
                lambda: glob_matches_name("*A*A*A*C", "A" * 100_000 + "B"),
            ]
        ),
    }


def main() -> None:
    json.dump(run(), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
