"""A server for the SDK tests: auto-background after 300 ms, and a policy that prompts for
`echo needs-approval*` and denies `rm -rf *`, set through the SDK itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shellgate import Client
from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.faults.cuttable_proxy import CuttableProxy

POLICY = {
    "default": "allow",
    "rules": [
        {"match": "echo needs-approval*", "approval": "prompt"},
        {"match": "rm -rf *", "approval": "deny"},
    ],
}


@pytest.fixture(scope="module")
def sdk_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("sdk"), module_databases.new(), auto_background_ms=300
    )
    with serve(settings) as live:
        with Client(live.base_url, ADMIN) as admin:
            stored = admin.put_policy(POLICY)
        assert [rule["match"] for rule in stored["rules"]] == [
            "echo needs-approval*",
            "rm -rf *",
        ]
        yield live


@pytest.fixture
def client(sdk_server: LiveServer) -> Iterator[Client]:
    with Client(sdk_server.base_url, AGENT) as sdk:
        yield sdk


@pytest.fixture
def approver(sdk_server: LiveServer) -> Iterator[Client]:
    with Client(sdk_server.base_url, APPROVER) as sdk:
        yield sdk


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def numbered_lines_command(rounds: int, lines: int) -> str:
    """Deterministic output with a non-UTF-8 pair in every round (base64 frames)."""
    return (
        f'for i in $(seq 1 {rounds}); do seq -f "r$i-%06g" 1 {lines}; '
        "printf 'bin\\xff\\xfe\\n'; sleep 0.01; done"
    )


def numbered_lines_bytes(rounds: int, lines: int) -> bytes:
    parts = []
    for i in range(1, rounds + 1):
        parts.append("".join(f"r{i}-{n:06d}\n" for n in range(1, lines + 1)).encode())
        parts.append(b"bin\xff\xfe\n")
    return b"".join(parts)


@pytest.fixture
def proxy(sdk_server: LiveServer) -> Iterator[CuttableProxy]:
    """A TCP proxy in front of the server whose connections a test can cut (resume tests)."""
    port = int(sdk_server.base_url.rsplit(":", 1)[1])
    cuttable = CuttableProxy(("127.0.0.1", port))
    cuttable.start()
    try:
        yield cuttable
    finally:
        cuttable.cut()
