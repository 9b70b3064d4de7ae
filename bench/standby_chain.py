"""What one sandboxed standby shell and its command cost the process tree, this tree against
another checkout, interleaved call by call in the same run.

    .venv/bin/python -m bench.standby_chain --baseline DIR [--calls 200] [--pause 0.02]

`DIR`: `git archive main | tar -x -C DIR`. Each checkout runs in a worker process of its own
(its `app` package, this virtualenv) that, per call: starts a standby shell waiting in the
default sandbox (`Sandbox.standby_prefix`, no cgroups), lets it be built for `--pause`
seconds, as the server's spawn-ahead thread does off the request's path, then claims it for
`echo hi` and reads the output to EOF. CPU is the worker's reaped children's (`RUSAGE_CHILDREN`:
the standby's shells, bwrap, the command) per call: what the server's tree pays for a
command's process, without the server's own work. The worker is a child subreaper, so bwrap's
init in the sandbox, which outlives bwrap's own exit, is reaped and counted by it (a server
never reaps that one: the system's init does). Claim is the wall time from the claim to
EOF and the exit.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = """
import ctypes, os, resource, sys, time
from pathlib import Path
sys.path.insert(0, os.getcwd())
from app.core.config import Settings
from app.process.standby import StandbyShell
from app.sandbox import Sandbox

workspace = Path(sys.argv[1])
pause = float(sys.argv[2])
settings = Settings(_env_file=None, data_dir=workspace / "data", workspace=workspace)
prefix = Sandbox(settings).standby_prefix()
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER

def children():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime

for _ in sys.stdin:
    before = children()
    shell = StandbyShell("/bin/bash", (), sandbox=prefix)
    time.sleep(pause)
    started = time.perf_counter()
    shell.claim(["/bin/echo", "hi"], str(workspace), {}, ":")
    # A tree whose standby holds a pidfd of its command hands it over, as the server's does.
    witness = getattr(shell, "take_witness", lambda: None)()
    out = shell.popen.stdout.read()
    shell.popen.wait()
    claim = time.perf_counter() - started
    shell.popen.stdout.close()
    shell.popen.stderr.close()
    if witness is not None:
        os.close(witness)
    while True:  # what the sandbox left, reparented here: its init
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    assert out == b"hi\\n", out
    print((children() - before) * 1000, claim * 1000, flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--pause", type=float, default=0.02)
    args = parser.parse_args()
    trees = {"this": Path(__file__).resolve().parent.parent, "baseline": args.baseline.resolve()}
    with tempfile.TemporaryDirectory(prefix="shellgate-chain-") as scratch:
        workers = {
            label: subprocess.Popen(
                [sys.executable, "-c", WORKER, scratch, str(args.pause)],
                cwd=tree,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for label, tree in trees.items()
        }
        cpu: dict[str, list[float]] = {label: [] for label in trees}
        claim: dict[str, list[float]] = {label: [] for label in trees}
        for index in range(args.calls + 10):
            order = ["this", "baseline"] if index % 2 == 0 else ["baseline", "this"]
            for label in order:
                worker = workers[label]
                assert worker.stdin is not None and worker.stdout is not None
                worker.stdin.write("\n")
                worker.stdin.flush()
                cpu_ms, claim_ms = map(float, worker.stdout.readline().split())
                if index >= 10:  # warm-up
                    cpu[label].append(cpu_ms)
                    claim[label].append(claim_ms)
        for worker in workers.values():
            assert worker.stdin is not None
            worker.stdin.close()
            worker.wait()
    print(f"{args.calls} calls each, interleaved; pause {args.pause * 1000:.0f} ms before a claim")
    print("| | tree CPU per call, mean | claim to end, median |")
    print("|---|---|---|")
    for label in trees:
        print(
            f"| {label} | {statistics.mean(cpu[label]):.2f} ms "
            f"| {statistics.median(claim[label]):.2f} ms |"
        )
    ratio = statistics.mean(cpu["this"]) / statistics.mean(cpu["baseline"])
    wall = statistics.median(claim["this"]) / statistics.median(claim["baseline"])
    print(f"this/baseline: tree CPU ×{ratio:.3f}, claim to end ×{wall:.3f}")


if __name__ == "__main__":
    main()
