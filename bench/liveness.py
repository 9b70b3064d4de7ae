"""One hostile request at a time against a real server, while another client probes `/healthz`
(RELIABILITY.md "One request against all the others"): the worst probe latency during the
request and the server's RSS, for each case.

    .venv/bin/python -m bench.liveness [--list] [CASE ...]

The server is `python -m app serve` on loopback (bench/servers.py), the prober a process of its
own (`python -m bench.liveness --probe URL PID`) that asks every 5 ms and samples the server's
`VmRSS`. Every command the cases send is harmless (`true`, `echo`, absent targets).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.servers import Server, rss_kib, shellgate

PROBE_EVERY_S = 0.005


def probe(url: str, pid: int) -> None:
    """Probe until stdin closes; then print `[[monotonic, latency_ms, rss_kib], ...]`."""
    import os
    import threading

    samples: list[tuple[float, float, int]] = []
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    with httpx.Client(timeout=60) as client:
        while not done.is_set():
            started = time.monotonic()
            client.get(url)
            elapsed = time.monotonic() - started
            samples.append((started, elapsed * 1000, rss_kib(pid)))
            time.sleep(PROBE_EVERY_S)
    print(json.dumps(samples))
    os._exit(0)


Case = Callable[[Server, httpx.Client], str]


def _submit(server: Server, client: httpx.Client, body: dict[str, object] | bytes) -> str:
    url = server.base_url + "/v1/executions"
    if isinstance(body, bytes):
        headers = {**server.headers, "Content-Type": "application/json"}
        response = client.post(url, content=body, headers=headers)
    else:
        # A prompted command answers 202 at once instead of holding the call for a decision.
        body = {"approval_wait": 0, **body}
        response = client.post(url, json=body, headers=server.headers)
    return f"{response.status_code} {response.text[:90]!r}"


def _dry_run(server: Server, client: httpx.Client, command: str) -> str:
    url = server.base_url + "/v1/policy/evaluate"
    response = client.post(url, json={"command": command}, headers=server.headers)
    return f"{response.status_code} {response.text[:90]!r}"


def _mcp(server: Server, client: httpx.Client, arguments: dict[str, object]) -> str:
    """One `tools/call` of `bash`, without a session: the body is read and parsed first."""
    headers = {
        **server.headers,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    call = {"name": "bash", "arguments": arguments}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
    response = client.post(server.base_url + "/mcp", json=body, headers=headers)
    return f"{response.status_code} {response.text[:90]!r}"


def _ws_frames(server: Server, client: httpx.Client, frames: list[str], pty: bool = True) -> str:
    """Send `frames` on the stream of a PTY job that reads no input (`sleep`), then cancel it."""
    from websockets.sync.client import connect

    body = {"command": "sleep 120", "async": True, "pty": pty}
    job = client.post(server.base_url + "/v1/executions", json=body, headers=server.headers)
    execution_id = job.json()["id"]
    url = server.base_url.replace("http://", "ws://") + f"/v1/executions/{execution_id}/stream"
    replies = 0
    try:
        with connect(url, additional_headers=server.headers, max_size=None) as ws:
            for frame in frames:
                ws.send(frame)
            time.sleep(1.0)  # what the server buffered is in its RSS now
            ws.close()
            replies = 1
    except Exception as error:  # the server closing on an oversized frame is an answer too
        return f"closed: {error!s:.80}"
    finally:
        client.post(
            server.base_url + f"/v1/executions/{execution_id}/cancel", headers=server.headers
        )
    return f"sent {len(frames)} frames, {replies}"


def _get(server: Server, client: httpx.Client, path: str, **headers: str) -> str:
    """A GET written on a socket of its own (httpx refuses URLs over 64 KiB)."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(server.base_url)
    lines = [f"GET {path} HTTP/1.1", f"Host: {address.netloc}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in {**server.headers, **headers}.items()]
    with socket.create_connection((address.hostname, address.port), timeout=120) as sock:
        sent = "sent"
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        except OSError as error:  # the server answered and closed before the end
            sent = f"cut off ({error.strerror})"
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := sock.recv(1 << 16):
                chunks.append(chunk)
        answer = b"".join(chunks)
        if not answer:
            return sent
    head = answer.split(b"\r\n", 1)[0].decode(errors="replace")
    return f"{head} {len(answer)} bytes {answer[-60:]!r}"


def _big_output_read(server: Server, client: httpx.Client) -> str:
    """A job that wrote 16 MiB, then one read of all of it."""
    body = {"command": "head -c 16777216 /dev/zero | tr '\\0' a", "async": True}
    job = client.post(server.base_url + "/v1/executions", json=body, headers=server.headers)
    execution_id = job.json()["id"]
    client.get(server.base_url + f"/v1/executions/{execution_id}?wait=60", headers=server.headers)
    time.sleep(0.5)
    return _get(server, client, f"/v1/executions/{execution_id}/output?limit=16777216")


def _session_state(server: Server, client: httpx.Client) -> str:
    """A session call that saves 50 MB of exported variable and 20,000 functions, then a
    plain call in it (which restores all of that)."""
    url = server.base_url
    session = client.post(url + "/v1/sessions", json={}, headers=server.headers).json()["id"]
    grow = (
        "export BIG=$(head -c 50000000 /dev/zero | tr '\\0' a); "
        'for i in $(seq 20000); do eval "f$i() { echo $i; }"; done; echo grown'
    )
    answers = []
    for command in (grow, "echo ${#BIG}; declare -F | wc -l"):
        body = {"command": command, "session": session, "timeout": 120}
        record = client.post(url + "/v1/executions", json=body, headers=server.headers).json()
        answers.append(f"{record.get('state')} {record.get('output', '')[-40:]!r}")
    client.delete(url + f"/v1/sessions/{session}", headers=server.headers)
    return "; ".join(answers)


def _many_big(server: Server, client: httpx.Client) -> str:
    """Setup for `list_500`: 500 jobs with 64 KiB commands that print 64 KiB each."""
    command = "head -c 65000 /dev/zero | tr '\\0' a #" + "x" * 65400
    for _ in range(500):
        body = {"command": command, "async": True}
        client.post(server.base_url + "/v1/executions", json=body, headers=server.headers)
    time.sleep(5)
    return "500 jobs"


def _slowloris(server: Server, client: httpx.Client, count: int = 3000) -> str:
    """`count` connections that send half a request's headers, then hold them 20 s (a byte
    every 5 s); how many the server still holds open at the end."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(server.base_url)
    sockets = []
    try:
        for _ in range(count):
            sock = socket.create_connection((address.hostname, address.port), timeout=5)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            sockets.append(sock)
        for _ in range(4):
            time.sleep(5)
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.send(b"a")
        open_now = 0
        for sock in sockets:
            sock.setblocking(False)
            try:
                open_now += sock.recv(1) != b""
            except BlockingIOError:
                open_now += 1
            except OSError:
                pass
        return f"{open_now} of {count} still open after 20 s"
    finally:
        for sock in sockets:
            sock.close()


def _many_ranges(server: Server, client: httpx.Client) -> str:
    """A 4 MiB file, then one GET of it with 3,500 one-byte ranges (a 50 KiB Range header)."""
    url = server.base_url + "/v1/files?path=ranges.bin"
    headers = {**server.headers, "Content-Type": "application/octet-stream"}
    client.put(url, content=b"x" * (4 << 20), headers=headers)
    ranges = ",".join(f"{i * 600}-{i * 600}" for i in range(3500))
    return _get(server, client, "/v1/files?path=ranges.bin", Range=f"bytes={ranges}")


def _fill(unit: str, size: int, tail: str = "") -> str:
    return (unit * (size // len(unit) + 1))[: size - len(tail)] + tail


CASES: dict[str, Case] = {
    "idle": lambda s, c: (time.sleep(0.5), "idle")[1],
    "echo": lambda s, c: _submit(s, c, {"command": "echo hi"}),
    "pipes_2k": lambda s, c: _submit(s, c, {"command": _fill("true|", 2045, "true")}),
    "pipe_cut_2k": lambda s, c: _submit(s, c, {"command": _fill("a|", 2048)}),
    "pipe_cut_8k": lambda s, c: _submit(s, c, {"command": _fill("a|", 8192)}),
    "pipe_cut_16k": lambda s, c: _submit(s, c, {"command": _fill("a|", 16384)}),
    "pipe_cut_64k": lambda s, c: _submit(s, c, {"command": _fill("a|", 65536)}),
    "dry_run_pipe_cut_8k": lambda s, c: _dry_run(s, c, _fill("a|", 8192)),
    "pipes_64k": lambda s, c: _submit(s, c, {"command": _fill("true|", 65530, "true")}),
    "eval_2k": lambda s, c: _submit(s, c, {"command": _fill("eval ", 2048)}),
    "eval_64k": lambda s, c: _submit(s, c, {"command": _fill("eval ", 65536)}),
    "semicolons_64k": lambda s, c: _submit(s, c, {"command": _fill("true;", 65536)}),
    "and_64k": lambda s, c: _submit(s, c, {"command": _fill("true&&", 65530, "true")}),
    "nested_subst_64k": lambda s, c: _submit(
        s, c, {"command": "echo " + "$(echo " * 5000 + "x" + ")" * 5000}
    ),
    "heredoc_64k": lambda s, c: _submit(
        s, c, {"command": "cat <<'EOF' >/dev/null\n" + _fill("x" * 79 + "\n", 65000) + "EOF"}
    ),
    "quoted_64k": lambda s, c: _submit(s, c, {"command": 'echo "' + "a" * 65000 + '" >/dev/null'}),
    "redirections_64k": lambda s, c: _submit(
        s, c, {"command": "true " + _fill("</dev/null ", 65000)}
    ),
    "dry_run_pipes_64k": lambda s, c: _dry_run(s, c, _fill("true|", 65530, "true")),
    "dry_run_tools_64k": lambda s, c: c.post(
        s.base_url + "/v1/policy/evaluate",
        json={"command": _fill("cat x | grep y; ", 65536), "tools": ["Read", "Grep", "Glob"]},
        headers=s.headers,
    ).text[:80],
    "command_too_long_1m": lambda s, c: _submit(s, c, {"command": "x" * (1 << 20)}),
    "body_64m_string": lambda s, c: _submit(s, c, {"command": "x" * (64 << 20)}),
    "env_100k_names": lambda s, c: _submit(
        s, c, {"command": "true", "env": {f"V{i}": "x" for i in range(100_000)}}
    ),
    "mcp_body_64m": lambda s, c: _mcp(s, c, {"command": "x" * (64 << 20)}),
    "mcp_lists_3m": lambda s, c: _mcp(s, c, {"command": "true", "x": [[]] * 1_300_000}),
    "mcp_keys_3m": lambda s, c: _mcp(
        s, c, {"command": "true", **{f"k{i}": 0 for i in range(300_000)}}
    ),
    "mcp_lists_1m": lambda s, c: _mcp(s, c, {"command": "true", "x": [[]] * 400_000}),
    "mcp_keys_1m": lambda s, c: _mcp(
        s, c, {"command": "true", **{f"k{i}": 0 for i in range(110_000)}}
    ),
    "mcp_ints_8m": lambda s, c: _mcp(s, c, {"command": "true", "x": [0] * (4 << 20)}),
    "body_ints_1m": lambda s, c: _submit(
        s, c, b'{"command": "true", "tools": [' + b",".join([b"0"] * (1 << 19)) + b"]}"
    ),
    "body_lists_1m": lambda s, c: _submit(
        s, c, b'{"command": "true", "tools": [' + b",".join([b"[]"] * (1 << 18)) + b"]}"
    ),
    "lean_body_lists_256k": lambda s, c: _submit(
        s, c, b'{"command": "true", "tools": [' + b",".join([b"[]"] * (1 << 16)) + b"]}"
    ),
    "env_100k_bad_values": lambda s, c: _submit(
        s,
        c,
        b'{"command": "true", "env": {'
        + b",".join(b'"V%d": 0' % i for i in range(100_000))
        + b"}}",
    ),
    "ws_input_1m_x40": lambda s, c: _ws_frames(
        s, c, [json.dumps({"type": "input", "data": "x" * (1 << 20)})] * 40
    ),
    "ws_frame_16m_lists": lambda s, c: _ws_frames(
        s, c, ['{"type": "input", "data": "x", "junk": [' + ",".join(["[]"] * (5 << 20)) + "]}"]
    ),
    "ws_frame_1m_lists": lambda s, c: _ws_frames(
        s, c, ['{"type": "input", "data": "x", "junk": [' + ",".join(["[]"] * 400_000) + "]}"]
    ),
    "ws_frame_1m_keys": lambda s, c: _ws_frames(
        s,
        c,
        ['{"type": "input", "data": "x", ' + ",".join(f'"k{i}": 0' for i in range(120_000)) + "}"],
    ),
    "ws_frame_extra_keys": lambda s, c: _ws_frames(
        s,
        c,
        ['{"type": "input", "data": "x", ' + ",".join(f'"k{i}": 0' for i in range(1 << 20)) + "}"],
    ),
    "ws_resize_flood": lambda s, c: _ws_frames(
        s, c, ['{"type": "resize", "rows": 30, "cols": 100}'] * 20_000
    ),
    "query_1m": lambda s, c: _get(s, c, "/v1/executions?cursor=" + "x" * (1 << 20)),
    "query_states_100k": lambda s, c: _get(
        s, c, "/v1/executions?" + "&".join(["state=running"] * 100_000)
    ),
    "query_states_comma_200k": lambda s, c: _get(
        s, c, "/v1/executions?state=" + ",".join(["running"] * 200_000)
    ),
    "query_states_4k": lambda s, c: _get(
        s, c, "/v1/executions?" + "&".join(["state=running"] * 4_000)
    ),
    "query_states_comma_60k": lambda s, c: _get(
        s, c, "/v1/executions?state=" + ",".join(["running"] * 7_000)
    ),
    "query_params_60k": lambda s, c: _get(
        s, c, "/v1/executions?" + "&".join(f"p{i}=1" for i in range(10_000))
    ),
    "path_1m": lambda s, c: _get(s, c, "/v1/executions/" + "x" * (1 << 20)),
    "headers_10k": lambda s, c: _get(s, c, "/healthz", **{f"x-h{i}": "v" for i in range(10_000)}),
    "header_value_1m": lambda s, c: _get(s, c, "/healthz", **{"x-big": "v" * (1 << 20)}),
    "output_read_16m": _big_output_read,
    "session_state_50m": _session_state,
    "setup_500_big": _many_big,
    "list_500": lambda s, c: _get(s, c, "/v1/executions?limit=500"),
    "slowloris_3000": _slowloris,
    "header_value_64m": lambda s, c: _get(s, c, "/healthz", **{"x-big": "v" * (64 << 20)}),
    "file_ranges_3500": _many_ranges,
    "env_value_32m": lambda s, c: _submit(
        s, c, {"command": "true", "env": {"V": "x" * (32 << 20)}}
    ),
}


def run_case(server: Server, name: str, case: Case, spy: Path | None = None) -> dict[str, object]:
    argv = [sys.executable, "-m", "bench.liveness", "--probe", server.base_url + "/healthz"]
    prober = subprocess.Popen(
        [*argv, str(server.pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    spying = None
    try:
        time.sleep(0.5)
        if spy is not None:  # py-spy's collapsed stacks of the server during the case
            spy.mkdir(parents=True, exist_ok=True)
            record = ["py-spy", "record", "--pid", str(server.pid), "--rate", "1000"]
            record += ["--nonblocking", "--format", "raw", "-o", str(spy / f"{name}.txt")]
            spying = subprocess.Popen(record, stdout=subprocess.DEVNULL)
            time.sleep(1)
        rss_before = rss_kib(server.pid)
        with httpx.Client(timeout=600) as client:
            started = time.monotonic()
            answer = case(server, client)
            ended = time.monotonic()
        time.sleep(0.3)
        output, _ = prober.communicate(b"", timeout=120)
    finally:
        if spying is not None:
            spying.send_signal(signal.SIGINT)
            spying.wait(30)
        if prober.poll() is None:
            prober.kill()
            prober.wait()
    samples = json.loads(output)
    before = [ms for at, ms, _ in samples if at < started - 0.05]
    during = [ms for at, ms, _ in samples if started <= at + ms / 1000 and at <= ended]
    rss = [kib for at, _, kib in samples if started <= at <= ended + 0.3]
    return {
        "case": name,
        "request_s": round(ended - started, 3),
        "answer": answer,
        "baseline_worst_ms": round(max(before, default=0), 1),
        "worst_ms": round(max(during, default=0), 1),
        "probes": len(during),
        "rss_before_mib": round(rss_before / 1024, 1),
        "rss_peak_mib": round(max(rss, default=rss_before) / 1024, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--spy", type=Path, help="write py-spy's stacks of each case here")
    parser.add_argument("--probe", nargs=2, metavar=("URL", "PID"))
    args = parser.parse_args()
    if args.probe:
        probe(args.probe[0], int(args.probe[1]))
        return 0
    if args.list:
        print("\n".join(CASES))
        return 0
    names = args.cases or list(CASES)
    unknown = [name for name in names if name not in CASES]
    if unknown:
        parser.error(f"unknown case: {', '.join(unknown)}")
    with shellgate(auto_background_ms="30000") as server:
        for name in names:
            print(json.dumps(run_case(server, name, CASES[name], args.spy)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
