"""Where shellgate's time goes: py-spy (from the peers' virtualenv) sampling one server over
foreground calls, then over a live stream; prints the top frames with their shares (what
`bench/PROFILE.md` is written from).

    .venv/bin/python -m bench.profile [--calls 800] [--stream-bytes 200000000]

Shares are of the samples in which a server thread held the GIL (`py-spy --gil`).
`inclusive`: the share of samples with the frame anywhere on the stack; `self`: with the frame
on top. The raw collapsed stacks stay in `bench/results/profile-*.txt`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench import servers
from bench.sidebyside import RESULTS, shellgate_stream

# "function (path/to/file.py:123)": py-spy's frame text; the line is dropped so that one
# function counts once however many lines of it were sampled.
FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^:]*)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "/app/", "python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1] if marker != "/app/" else "app/" + path.split(marker)[1]
            break
    return f"{match['function']} ({path})"


def shares(collapsed: str) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """Total samples, and per frame its inclusive and self sample counts."""
    inclusive: collections.Counter[str] = collections.Counter()
    on_top: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(frame) for frame in stack.split(";")]
        total += count
        for name in set(frames):
            inclusive[name] += count
        on_top[frames[-1]] += count
    return total, inclusive, on_top


def package(name: str) -> str:
    """`sqlalchemy` for a frame in sqlalchemy/…, `app/store/crud.py` for one of ours, the stdlib
    module otherwise."""
    path = name.rsplit("(", 1)[-1].rstrip(")")
    if path.startswith("app/"):
        return path
    return path.split("/", 1)[0].removesuffix(".py")


def report(title: str, collapsed: str, top: int = 30) -> str:
    total, inclusive, on_top = shares(collapsed)
    by_package: collections.Counter[str] = collections.Counter()
    for name, count in on_top.items():
        by_package[package(name)] += count
    ours = [(name, n) for name, n in inclusive.most_common() if "(app/" in name]
    lines = [f"## {title}: {total} samples holding the GIL", "", "self, by package:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in by_package.most_common(top)]
    lines += ["", "inclusive, shellgate's own functions:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in ours[:top]]
    lines += ["", "inclusive, all frames:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in inclusive.most_common(top * 2)]
    lines += ["", "self:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in on_top.most_common(top)]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def py_spy(pid: int, output: Path) -> Iterator[None]:
    """Sample `pid` until the block ends: only the thread holding the GIL (`--gil`), so the
    shares are of the server's Python CPU time and an idle or waiting thread counts nothing."""
    spy = servers.ensure_peers_venv() / "py-spy"
    argv = [str(spy), "record", "--pid", str(pid), "--rate", "500", "--format", "raw"]
    argv += ["--output", str(output), "--threads", "--gil"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=800)
    parser.add_argument("--stream-bytes", type=int, default=200_000_000)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    foreground_file = RESULTS / "profile-foreground.txt"
    stream_file = RESULTS / "profile-stream.txt"
    with servers.shellgate(auto_background_ms="30000") as server:
        with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30) as client:
            for _ in range(20):  # warm up
                client.post("/v1/executions", json={"command": "echo hi"})
            with py_spy(server.pid, foreground_file):
                for _ in range(args.calls):
                    body = client.post("/v1/executions", json={"command": "echo hi"}).json()
                    assert body["exit_code"] == 0, body
        with py_spy(server.pid, stream_file):
            rate = asyncio.run(shellgate_stream(server, args.stream_bytes, pty=False))
    print(report(f"{args.calls} foreground `echo hi`", foreground_file.read_text()))
    print(
        report(
            f"live stream, pipe, {args.stream_bytes} bytes ({rate:.0f} MB/s)",
            stream_file.read_text(),
        )
    )


if __name__ == "__main__":
    main()
