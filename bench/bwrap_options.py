"""What each part of the sandbox costs the machine per command: bwrap with the default profile's
argv (app/sandbox/bwrap.py) around `/bin/true`, the same with the seccomp filter every command
gets (app/sandbox/seccomp.py), then with one part taken out, and the least a namespaced sandbox
can be (a user and PID namespace over the host read-only).

    .venv/bin/python -m bench.bwrap_options [--runs 150] [--rounds 3]

The figure is the machine's busy time (all of /proc/stat but idle and iowait) per run, not the
tree's: tearing down a network namespace runs in a kernel worker, outside any process's CPU
time, and the machine pays for it all the same. Runs are sequential, so the machine's other
work shows as noise in every variant alike; read the variants against `full` in the same round.
A variant takes a part out only to price it: each part is what the boundary is made of
(docs/sandbox.md)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from app.core.config import Settings
from app.sandbox.bwrap import BWRAP, bwrap_prefix
from app.sandbox.defaults import default_profile
from app.sandbox.program import ServerFiles, server_files
from app.sandbox.seccomp import host_program, program_pipe

# Stands for the seccomp pipe's descriptor in a variant's argv (a pipe per run).
SECCOMP = "<seccomp-fd>"


def _busy_seconds() -> float:
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle, iowait = fields[3], fields[4]
    return (sum(fields) - idle - iowait) / os.sysconf("SC_CLK_TCK")


def _without(argv: list[str], flag: str, values: int) -> list[str]:
    """`argv` without each `flag` and the `values` words after it."""
    kept, index = [], 0
    while index < len(argv):
        if argv[index] == flag:
            index += 1 + values
            continue
        kept.append(argv[index])
        index += 1
    return kept


def variants(workspace: Path) -> dict[str, list[str]]:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=workspace / "data", workspace=workspace
    )
    profile = default_profile(settings)
    full = bwrap_prefix(profile, str(workspace))
    own_dev = full.index("--dev")
    # A workspace set to the checkout: the server's package, client, virtualenv, migrations and npm
    # packages inside the workspace, each bound read-only again (app/sandbox/program.py).
    names = ("app", "sdk/shellgate", ".venv", "migrations", "node_modules")
    inside = [workspace / name for name in names]
    for directory in inside:
        directory.mkdir(parents=True, exist_ok=True)
    holding = ServerFiles(tuple(map(str, inside)), server_files().read_at_start)
    found = {
        "full": full,
        "the workspace holding the server's program": bwrap_prefix(
            profile, str(workspace), server=holding
        ),
    }
    if host_program() is not None:
        found["with the seccomp filter"] = [full[0], "--seccomp", SECCOMP, *full[1:]]
    return found | {
        "without --unshare-net": _without(full, "--unshare-net", 0),
        "without --unshare-ipc": _without(full, "--unshare-ipc", 0),
        "host /dev instead of --dev": [
            *full[:own_dev],
            "--dev-bind",
            "/dev",
            "/dev",
            *full[own_dev + 2 :],
        ],
        "without the hidden paths' remount": _without(full, "--remount-ro", 1),
        "user + pid namespaces over / read-only": [
            BWRAP,
            "--unshare-user",
            "--unshare-pid",
            "--ro-bind",
            "/",
            "/",
            "--",
        ],
    }


def measure(argv: list[str], runs: int) -> float:
    """Machine busy ms per run of `argv` around /bin/true (`SECCOMP` in it: each run's bwrap
    reads the filter from a pipe of its own, as a spawn's does)."""
    before = _busy_seconds()
    for _ in range(runs):
        if SECCOMP not in argv:
            subprocess.run([*argv, "/bin/true"], check=True)
            continue
        pipe = program_pipe()
        assert pipe is not None
        try:
            spawned = [str(pipe) if word == SECCOMP else word for word in argv]
            subprocess.run([*spawned, "/bin/true"], check=True, pass_fds=(pipe,))
        finally:
            os.close(pipe)
    time.sleep(0.3)  # the namespaces' teardown in kernel workers, counted too
    return (_busy_seconds() - before) / runs * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch)
        figures: dict[str, list[float]] = {}
        for _ in range(arguments.rounds):
            for name, argv in variants(workspace).items():
                figures.setdefault(name, []).append(measure(argv, arguments.runs))
    full = statistics.median(figures["full"])
    print(f"{arguments.rounds} rounds x {arguments.runs} runs; machine busy ms per run, median")
    print("| variant | ms | of full |")
    print("|---|---|---|")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | x{median / full:.2f} |")


if __name__ == "__main__":
    main()
