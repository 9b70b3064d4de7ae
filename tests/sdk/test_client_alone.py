"""The client as its users get it: `pip install` of sdk/ (the distribution shellgate-client)
into a fresh venv brings none of the server's stack, and `from shellgate import Client,
AsyncClient` drives a live server from a project that has its own `app/` package (normal for
FastAPI users; the client used to be `app.client` and collided with it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import AGENT, LiveServer

ROOT = Path(__file__).resolve().parents[2]
# Distributions of the server's stack that the client must not pull in.
SERVER_DISTRIBUTIONS = {
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlmodel",
    "sqlalchemy",
    "alembic",
    "tree-sitter",
    "tree-sitter-bash",
    "google-re2",
    "typer",
    "mcp",
    "shellgate",
}

USER_PROGRAM = """
    import asyncio, json, sys

    import app  # the user's own package, not the server's
    from shellgate import AsyncClient, Client

    url, token = sys.argv[1], sys.argv[2]
    with Client(url, token=token) as client:
        sync_output = client.run("echo from-the-sync-client").output

    async def main() -> str:
        async with AsyncClient(url, token=token) as client:
            return (await client.run("echo from-the-async-client")).output

    print(json.dumps({
        "app": app.OWNER,
        "sync": sync_output,
        "async": asyncio.run(main()),
        "server_loaded": sorted(
            m for m in sys.modules if m.split(".")[0] in {"fastapi", "sqlalchemy", "uvicorn"}
        ),
    }))
"""


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    venv = tmp_path_factory.mktemp("client-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [
            str(venv / "bin/pip"),
            "install",
            "-q",
            "-c",
            str(ROOT / "constraints.txt"),
            str(ROOT / "sdk"),
        ],
        check=True,
        capture_output=True,
    )
    yield venv


def installed_distributions(venv: Path) -> set[str]:
    listing = subprocess.run(
        [str(venv / "bin/pip"), "list", "--format=json"], check=True, capture_output=True, text=True
    ).stdout
    return {entry["name"].lower().replace("_", "-") for entry in json.loads(listing)}


def test_installing_the_client_alone_brings_none_of_the_server(client_venv: Path) -> None:
    installed = installed_distributions(client_venv)
    assert {"shellgate-client", "httpx", "websockets"} <= installed
    assert installed & SERVER_DISTRIBUTIONS == set()


def test_the_client_alone_drives_a_live_server_beside_a_users_app_package(
    client_venv: Path, sdk_server: LiveServer, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text('OWNER = "the user"\n')
    (project / "main.py").write_text(textwrap.dedent(USER_PROGRAM))

    answer = subprocess.run(
        [str(client_venv / "bin/python"), "main.py", sdk_server.base_url, AGENT],
        cwd=project,
        check=True,
        capture_output=True,
        text=True,
    )

    assert json.loads(answer.stdout) == {
        "app": "the user",
        "sync": "from-the-sync-client\n",
        "async": "from-the-async-client\n",
        "server_loaded": [],
    }
