"""A sandbox whose network is a host list (docs/sandbox.md, "Network"): a command reaches the
listed hosts through the server's proxy, as `HTTP_PROXY` and `HTTPS_PROXY` say, and nothing
else: not a host left off the list (the proxy refuses it, and the record says so), not a
direct connection of any kind. The listed host here is an HTTP server of the test's own on the
host's loopback, which the sandbox's loopback does not reach."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from pydantic import ValidationError

from app.core.config import Settings, describe_settings_error
from tests.api.test_spawn_ahead import spawns, standby_pids
from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import SQLITE, Databases
from tests.waiting import eventually, pending_approval_for


class Target:
    """An HTTP server on the host's loopback: answers every GET with its path, keeps them."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        paths = self.paths

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                # Through the proxy a plain request keeps its absolute form (valid HTTP/1.1
                # to an origin); through a tunnel it is the client's own origin form.
                path = urlsplit(self.path).path
                paths.append(path)
                body = f"from the host: {path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    served = Target()
    try:
        yield served
    finally:
        served.close()


@pytest.fixture(scope="module")
def sandboxed(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases, target: Target
) -> Iterator[LiveServer]:
    """A sandboxed server whose policy lists the target (by its literal address: a glob with a
    `*` never reaches a loopback or private address) and nothing else."""
    settings = make_settings(tmp_path_factory.mktemp("hosts"), module_databases.new(), sandbox="on")
    with serve(settings) as live:
        with live.client(ADMIN) as admin:
            install_network(admin, [f"127.0.0.1:{target.port}"])
        yield live


def install_network(admin: httpx.Client, network: str | list[str]) -> None:
    installed = admin.put("/v1/policy", json={"sandbox": {"network": network}})
    assert installed.status_code == 200, installed.text


@pytest.fixture
def agent(sandboxed: LiveServer) -> Iterator[httpx.Client]:
    with sandboxed.client(AGENT) as client:
        yield client


def fetch(url: str) -> str:
    """A command printing the answer's status and body for `url`, through `HTTP_PROXY`. The
    environment's `NO_PROXY` names 127.0.0.1 (loopback is the sandbox's own), which urllib
    would go to directly: the target here is the host's 127.0.0.1, so the program drops it."""
    program = (
        "import os, urllib.error, urllib.request as r\n"
        "os.environ.pop('no_proxy'); os.environ.pop('NO_PROXY')\n"
        "opener = r.build_opener(r.ProxyHandler({'http': os.environ['HTTP_PROXY']}))\n"
        "try:\n"
        f"    answer = opener.open({url!r}, timeout=10)\n"
        "    print(answer.status, answer.read().decode())\n"
        "except urllib.error.HTTPError as error:\n"
        "    print(error.code, error.read().decode())\n"
    )
    return f"python3 -c {shlex.quote(program)}"


def run(agent: httpx.Client, command: str, **fields: Any) -> dict[str, Any]:
    response = agent.post("/v1/executions", json={"command": command, **fields})
    assert response.status_code == 200, response.text
    record: dict[str, Any] = response.json()
    return record


def test_a_listed_host_is_reached_through_the_proxy(agent: httpx.Client, target: Target) -> None:
    record = run(agent, fetch(f"http://127.0.0.1:{target.port}/listed"))
    assert record["exit_code"] == 0, record["output"]
    assert record["output"].strip() == "200 from the host: /listed", record
    assert record["sandbox"]["network"] == [f"127.0.0.1:{target.port}"]
    assert "/listed" in target.paths
    assert not any("proxy refused" in notice for notice in record["notices"])


def test_a_tunnel_through_connect_reaches_a_listed_host(
    agent: httpx.Client, target: Target
) -> None:
    """What HTTPS takes: `CONNECT host:port`, then the bytes both ways (plain HTTP inside the
    tunnel here: the target speaks no TLS)."""
    program = (
        "import http.client\n"
        "connection = http.client.HTTPConnection('127.0.0.1', 3128, timeout=10)\n"
        f"connection.set_tunnel('127.0.0.1', {target.port})\n"
        "connection.request('GET', '/tunnelled')\n"
        "answer = connection.getresponse()\n"
        "print(answer.status, answer.read().decode())\n"
    )
    record = run(agent, f"python3 -c {shlex.quote(program)}")
    assert record["output"].strip() == "200 from the host: /tunnelled", record
    assert "/tunnelled" in target.paths


def test_a_host_not_listed_is_refused_and_the_record_says_so(agent: httpx.Client) -> None:
    record = run(agent, fetch("http://example.invalid/elsewhere"))
    assert record["output"].startswith("403 "), record
    assert "example.invalid:80" in record["output"]
    assert any(
        notice.startswith("the sandbox's proxy refused example.invalid:80: ")
        and '`sandbox` ({"network": ["example.invalid:80"]})' in notice
        for notice in record["notices"]
    ), record["notices"]


def test_nothing_but_the_proxy_is_routed(agent: httpx.Client, target: Target) -> None:
    """A direct connection to the listed host's address meets the sandbox's own loopback, and
    any other address has no route: the host list is not the host's network."""
    program = (
        "import socket\n"
        f"for address in (('127.0.0.1', {target.port}), ('1.1.1.1', 80)):\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=3).close()\n"
        "        print('connected')\n"
        "    except OSError as error:\n"
        "        print('refused:', error.strerror)\n"
    )
    before = len(target.paths)
    record = run(agent, f"python3 -c {shlex.quote(program)}")
    lines = record["output"].splitlines()
    assert len(lines) == 2 and all(line.startswith("refused:") for line in lines), record
    assert len(target.paths) == before


def test_the_environment_points_at_the_relay_and_the_command_keeps_its_status(
    agent: httpx.Client,
) -> None:
    record = run(agent, 'echo "$HTTPS_PROXY $https_proxy $NO_PROXY"; exit 7')
    assert record["output"].strip() == (
        "http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1"
    )
    assert record["exit_code"] == 7


def test_a_pty_command_and_a_session_call_reach_it_too(agent: httpx.Client, target: Target) -> None:
    pty = run(agent, fetch(f"http://127.0.0.1:{target.port}/pty"), pty=True)
    assert "200 from the host: /pty" in pty["output"], pty
    session = agent.post("/v1/sessions", json={}).json()
    assert session["sandbox"]["network"] == [f"127.0.0.1:{target.port}"]
    called = run(agent, fetch(f"http://127.0.0.1:{target.port}/session"), session=session["id"])
    assert called["output"].strip() == "200 from the host: /session", called
    assert {"/pty", "/session"} <= set(target.paths)


def relays_running(workspace: Path) -> list[int]:
    """The host's processes that are a host list's relay (app/sandbox/egress_relay.py) working
    in `workspace`: this server's (another test's may run meanwhile)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if RELAY_MARK in cmdline and cwd == str(workspace):
                found.append(int(entry.name))
    return found


# The relay's source travels in its argv; its first words.
RELAY_MARK = b"Runs inside a sandbox whose network is a host list"


def proxy_sockets() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("sg-egress-*/*.sock"))


def test_a_cancelled_job_takes_its_relay_and_its_proxy_socket_with_it(
    agent: httpx.Client, sandboxed: LiveServer
) -> None:
    workspace = sandboxed.settings.workspace.resolve()
    before = proxy_sockets()
    job = agent.post("/v1/executions", json={"command": "sleep 60", "async": True}).json()
    eventually(lambda: relays_running(workspace), what="the job's relay started")
    opened = proxy_sockets() - before
    assert opened, "no proxy socket was opened for the job"
    cancelled = agent.post(f"/v1/executions/{job['id']}/cancel").json()
    assert cancelled["state"] == "cancelled", cancelled
    eventually(lambda: not relays_running(workspace), what="the relay ended with the sandbox")
    # (Other tests' proxies may come and go meanwhile: only the job's own are looked at.)
    eventually(
        lambda: not any(path.exists() for path in opened), what="the job's proxy socket removed"
    )


def test_asking_for_a_host_is_an_approval_and_approved_the_command_reaches_it(
    sandboxed: LiveServer, agent: httpx.Client, target: Target
) -> None:
    """Under a policy whose network is `off`, a request asking for one host waits for a
    person; approved, that execution alone runs with the host list, through the proxy."""
    listed = [f"127.0.0.1:{target.port}"]
    path = f"/escalated-{uuid.uuid4().hex[:8]}"  # the target serves every database's run
    command = fetch(f"http://127.0.0.1:{target.port}{path}")
    with sandboxed.client(ADMIN) as admin, sandboxed.client(APPROVER) as approver:
        install_network(admin, "off")
        try:
            asked = agent.post(
                "/v1/executions",
                json={
                    "command": command,
                    "sandbox": {"network": listed, "justification": "the test's own host"},
                    "approval_wait": 0,
                },
            )
            assert asked.status_code == 202, asked.text
            approval = pending_approval_for(approver, command)
            assert approval["kind"] == "sandbox"
            assert approval["sandbox_request"]["network"] == listed
            assert path not in target.paths  # nothing ran while it waited
            decided = approver.post(f"/v1/approvals/{approval['id']}/approve")
            assert decided.status_code == 200, decided.text
            record = agent.get(f"/v1/executions/{asked.json()['id']}", params={"wait": 30}).json()
        finally:
            install_network(admin, listed)
    assert record["output"].strip() == f"200 from the host: {path}", record
    assert record["sandbox"]["network"] == listed
    assert record["sandbox"]["escalated"] is True


def test_a_runner_call_reaches_a_listed_host(agent: httpx.Client, target: Target) -> None:
    session = agent.post("/v1/sessions", json={}).json()["id"]
    command = fetch(f"http://127.0.0.1:{target.port}/runner")
    with agent.stream("POST", f"/v1/sessions/{session}/run", json={"command": command}) as answer:
        assert answer.status_code == 200
        items = [json.loads(line) for line in answer.iter_lines() if line]
    assert items[-1]["exit_code"] == 0, items
    assert "/runner" in target.paths


def test_a_default_host_list_from_the_settings_needs_no_policy_and_no_standby(
    tmp_path: Path, target: Target
) -> None:
    """`SHELLGATE_SANDBOX_NETWORK=host,…`: every command gets the list with no policy written,
    and the server keeps no standby shell (a host list's proxy and relay are each execution's
    own, so one waiting in the default sandbox could run nothing)."""
    listed = f"127.0.0.1:{target.port}"
    settings = make_settings(tmp_path, SQLITE, sandbox="on", sandbox_network=f" {listed} ,")
    with serve(settings) as live, live.client(AGENT) as agent:
        record = run(agent, fetch(f"http://{listed}/by-default"))
        assert record["output"].strip() == "200 from the host: /by-default", record
        assert record["sandbox"]["network"] == [listed]
        assert spawns(live, "standby") == 0
        assert spawns(live, "spawn") >= 1
        # A standby is made right after the start and after each call: none came.
        time.sleep(1)
        assert standby_pids(live) == []


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("on", "on"),
        (" OFF ", "off"),
        ("registry.npmjs.org, *.PyPI.org:443 ,", ("registry.npmjs.org", "*.pypi.org:443")),
        ("a.example:8080,a.example:8080", ("a.example:8080",)),
    ],
)
def test_the_setting_reads_on_off_or_comma_separated_globs(
    tmp_path: Path, written: str, read: object
) -> None:
    assert (
        Settings(_env_file=None, workspace=tmp_path, sandbox_network=written).sandbox_network
        == read
    )


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("maybe!", "network entry 'maybe!' is not a host[:port] glob"),
        (
            "example.com:70000",
            "network entry 'example.com:70000': the port must be within 1..65535",
        ),
        (" , ", '"on", "off" or comma-separated host[:port] globs'),
    ],
)
def test_a_setting_that_is_no_network_stops_the_start_saying_why(
    tmp_path: Path, written: str, said: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None, workspace=tmp_path, sandbox_network=written)
    message = describe_settings_error(refused.value)
    assert message.startswith("SHELLGATE_SANDBOX_NETWORK: ")
    assert said in message
