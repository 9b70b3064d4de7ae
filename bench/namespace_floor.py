"""What the kernel charges for a command's sandbox, part by part, and the floor under it.

    .venv/bin/python -m bench.namespace_floor [--runs 200] [--rounds 3]

Each subject runs `--runs` times in a row (`/bin/true` inside), rounds rotating the order; the
figure is the whole machine's busy CPU per run (from `/proc/stat`, after a settle), because a
namespace's end is paid by kernel workers (the network namespace's `cleanup_net`, the mount
namespace's teardown) that no process's own accounting shows. Run it on a quiet machine.

- `true`: the program alone.
- `unshare`: util-linux `unshare` with the namespaces the sandbox makes (user, PID with a fresh
  `/proc`, IPC, network, mount) and nothing else: the floor any per-command sandbox with those
  namespaces pays, whatever builds it (plus `unshare`'s own start).
- `bwrap`: the default profile's sandbox (app/sandbox/bwrap.py), then without its parts one at a
  time: what each costs.

The ratio that matters is against an unsandboxed call's whole-tree CPU, from
`bench.bench_sandbox` (its `off` server) in the same minutes: bench/PROFILE.md, "The kernel's
floor under the sandbox". That one is read from a cgroup, which leaves kernel workers out:
the two readings differ by them, so such a ratio is an estimate, not a bound.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import time

from app.core.config import Settings
from app.sandbox.bwrap import bwrap_prefix
from app.sandbox.defaults import default_profile

SETTLE_SECONDS = 0.4


def machine_busy_seconds() -> float:
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def without(argv: list[str], *flags: str) -> list[str]:
    """`argv` without each of `flags` and, for an option, its operands (`--dev /dev`)."""
    operands = {"--dev": 1, "--proc": 1, "--tmpfs": 1, "--bind": 2, "--ro-bind": 2}
    kept: list[str] = []
    skip = 0
    for word in argv:
        if skip:
            skip -= 1
            continue
        if word in flags:
            skip = operands.get(word, 0)
            continue
        kept.append(word)
    return kept


def subjects() -> dict[str, list[str]]:
    profile = default_profile(Settings())
    sandbox = bwrap_prefix(profile, "/")
    return {
        "true": ["/bin/true"],
        "unshare (user, pid + /proc, ipc, net, mount)": [
            "unshare",
            "-Urpin",
            "-f",
            "--mount-proc",
            "/bin/true",
        ],
        "bwrap, the default sandbox": [*sandbox, "/bin/true"],
        "bwrap without --unshare-net": [*without(sandbox, "--unshare-net"), "/bin/true"],
        "bwrap without --dev": [*without(sandbox, "--dev"), "/bin/true"],
        "bwrap without the hidden paths' covers": [
            *bwrap_prefix(dataclasses.replace(profile, hidden=()), "/"),
            "/bin/true",
        ],
        "bwrap, namespaces and --ro-bind / / only": [
            *sandbox[: sandbox.index("--ro-bind") + 3],
            "--",
            "/bin/true",
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    measured = subjects()
    names = list(measured)
    per_run: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(arguments.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            before = machine_busy_seconds()
            for _ in range(arguments.runs):
                subprocess.run(measured[name], check=True)
            time.sleep(SETTLE_SECONDS)
            per_run[name].append((machine_busy_seconds() - before) * 1000 / arguments.runs)
    floor = statistics.median(per_run["true"])
    print("| subject | machine CPU per run (ms), median | rounds | over `true` |")
    print("|---|---|---|---|")
    for name in names:
        median = statistics.median(per_run[name])
        spread = ", ".join(f"{value:.2f}" for value in per_run[name])
        print(f"| {name} | {median:.2f} | {spread} | +{median - floor:.2f} |")


if __name__ == "__main__":
    main()
