"""Where a command in a session spends its time (what the session section of
`bench/PROFILE.md` is written from), in one run:

1. wall time and server CPU per call, alternating: a foreground `true`, `true` in a session
   (`POST /v1/executions` with `session`, and the NDJSON runner), and the persistent-bash floor;
2. the session wrapper alone (`app/sessions/session_wrapper.sh`, no server): `bash -c true` against
the
   wrapper running `true` as a one-shot call and as the saving call, CPU of the child;
3. py-spy (`--gil`) over the server during the session calls, with the same report as
   `bench/profile.py`.

    .venv/bin/python -m bench.profile_session [--calls 300] [--py-spy PATH] [--baseline DIR]

`--baseline DIR`: a checkout of another revision (`git archive main | tar -x -C DIR`) whose
server and wrapper run alongside, alternating, for a before/after in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from app.sessions.service import WRAPPER
from bench import servers
from bench.profile import report
from bench.sidebyside import RESULTS, PersistentBash


@contextlib.contextmanager
def py_spy(binary: str, pid: int, output: Path) -> Iterator[None]:
    """As in `bench/profile.py` (GIL samples only), with the py-spy binary given."""
    argv = [binary, "record", "--pid", str(pid), "--rate", "500", "--format", "raw"]
    argv += ["--output", str(output), "--threads", "--gil"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # py-spy attaches before the work starts
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def server_calls(ours: servers.Server, baseline: servers.Server | None, calls: int) -> str:
    subjects: dict[str, Callable[[], None]] = {}
    for label, server in (("", ours), ("baseline: ", baseline)):
        if server is not None:
            subjects.update(calls_against(server, label))
    floor = PersistentBash()
    subjects["persistent bash floor"] = lambda: floor.run("true")
    pids = {
        name: (baseline.pid if name.startswith("baseline") and baseline else ours.pid)
        for name in subjects
    }
    for call in subjects.values():
        call()
        call()
    walls: dict[str, list[float]] = {name: [] for name in subjects}
    cpu = dict.fromkeys(subjects, 0.0)
    try:
        for _ in range(calls):
            for name, call in subjects.items():
                before_cpu = servers.cpu_seconds(pids[name])
                started = time.perf_counter()
                call()
                walls[name].append(time.perf_counter() - started)
                cpu[name] += servers.cpu_seconds(pids[name]) - before_cpu
    finally:
        floor.close()
    lines = [f"## {calls} calls each, alternating (load {os.getloadavg()[0]:.1f})", ""]
    for name, values in walls.items():
        server_cpu = (
            ""
            if name == "persistent bash floor"
            else (f"   server CPU {cpu[name] / calls * 1000:5.2f} ms/call")
        )
        lines.append(f"  {name:50s} median {statistics.median(values) * 1000:6.2f} ms{server_cpu}")
    return "\n".join(lines) + "\n"


def calls_against(server: servers.Server, label: str) -> dict[str, Callable[[], None]]:
    client = httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30)
    session_id = client.post("/v1/sessions", json={}).json()["id"]

    def foreground() -> None:
        body = client.post("/v1/executions", json={"command": "true"}).json()
        assert body["exit_code"] == 0, body

    def in_session() -> None:
        body = {"command": "true", "session": session_id}
        answer = client.post("/v1/executions", json=body).json()
        assert answer["exit_code"] == 0, answer

    def runner() -> None:
        response = client.post(f"/v1/sessions/{session_id}/run", json={"command": "true"})
        assert response.status_code == 200 and b'"exit_code":0' in response.content, response.text

    return {
        f"{label}foreground `true`": foreground,
        f"{label}`true` in a session (executions API)": in_session,
        f"{label}`true` in a session (runner)": runner,
    }


@contextlib.contextmanager
def baseline_server(tree: Path | None) -> Iterator[servers.Server | None]:
    """shellgate from another checkout (`git archive main | tar -x -C DIR`), run with this
    virtualenv: `python -m app` imports the `app` package of the directory it starts in."""
    if tree is None:
        yield None
        return
    saved = servers.BENCH_DIR
    servers.BENCH_DIR = tree / "bench"  # `servers.running` starts the server in its parent
    try:
        with servers.shellgate() as server:
            servers.BENCH_DIR = saved
            yield server
    finally:
        servers.BENCH_DIR = saved


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wrapper_alone(calls: int, baseline: Path | None) -> str:
    """The wrapper's own bash work, with a snapshot of one export, one function, one alias."""
    directory = Path(tempfile.mkdtemp(prefix="shellgate-wrapper-"))
    state = directory / "state.sh"
    state.write_text("export GREETING=hello\nf () \n{ \n    echo hi\n}\nalias ll='ls -l'\n")
    try:
        scripts = {"bash -c true": "true", "wrapper": WRAPPER}
        if baseline is not None:
            scripts["baseline wrapper"] = (baseline / "app/sessions/session_wrapper.sh").read_text()
        subjects = {
            (f"{name}, {kind}" if kind else name): (script, kind == "saving")
            for name, script in scripts.items()
            for kind in (("one-shot", "saving") if script != "true" else ("",))
        }
        cpu = dict.fromkeys(subjects, 0.0)
        walls: dict[str, list[float]] = {name: [] for name in subjects}
        for index in range(calls):
            for name, (script, saving) in subjects.items():
                scratch, save_to = directory / f"call.{index}", directory / f"save.{index}"
                env = {
                    **os.environ,
                    "__SHELLGATE_COMMAND": "true",
                    "__SHELLGATE_STATE": str(state),
                    "__SHELLGATE_SCRATCH": str(scratch),
                    "__SHELLGATE_CALL_KEYS": "",
                }
                if saving:
                    env["__SHELLGATE_SAVE_TO"] = str(save_to)
                before = children_cpu()
                started = time.perf_counter()
                subprocess.run(["bash", "-c", script], env=env, check=True)
                walls[name].append(time.perf_counter() - started)
                cpu[name] += children_cpu() - before
                scratch.unlink(missing_ok=True)
                save_to.unlink(missing_ok=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    lines = [f"## the wrapper alone, {calls} runs each, alternating", ""]
    for name in subjects:
        lines.append(
            f"  {name:40s} median {statistics.median(walls[name]) * 1000:6.2f} ms"
            f"   bash CPU {cpu[name] / calls * 1000:5.2f} ms/run"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--py-spy", help="profile the session calls with this py-spy binary")
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    print(wrapper_alone(args.calls, args.baseline))
    with servers.shellgate() as server, baseline_server(args.baseline) as baseline:
        print(server_calls(server, baseline, args.calls))
        if args.py_spy:
            collapsed = RESULTS / "profile-session.txt"
            client = httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30)
            session_id = client.post("/v1/sessions", json={}).json()["id"]
            body = {"command": "true", "session": session_id}
            with py_spy(args.py_spy, server.pid, collapsed):
                for _ in range(args.calls):
                    assert client.post("/v1/executions", json=body).json()["exit_code"] == 0
            print(report(f"{args.calls} `true` in a session", collapsed.read_text()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
