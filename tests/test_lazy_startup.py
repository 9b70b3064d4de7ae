"""What the start leaves out until it is needed: the MCP SDK (first `/mcp` request), Alembic
(a database behind the head revision, and then in a child; a fresh one is created without
it), the CLI's Typer/Rich stack and the SDK (`serve` enters by app/entry.py), httpx and
websockets' client (first forward or notification)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.mcp.mount import MCP_PATH
from app.api.mcp.server import MCP_PATH as SERVER_MCP_PATH
from app.entry import plain_serve
from app.store.migrate import upgrade_to_head
from tests.conftest import AGENT, TOKENS, free_port
from tests.databases import PostgresDatabases, ServerDatabase

CHECK = """
import asyncio, sys, tempfile
from pathlib import Path
import httpx
from app.core.config import Settings
from app.main import create_app
from app.store.migrate import upgrade_to_head

LAZY = ("mcp", "mcp_types", "alembic")
assert not [name for name in LAZY if name in sys.modules], "imported by app.main"
tmp = Path(tempfile.mkdtemp())
settings = Settings(_env_file=None, data_dir=tmp / "data", workspace=tmp, tokens="a:agent:{token}")
(tmp / "data").mkdir()
if {current}:  # a current database: the start skips Alembic
    upgrade_to_head(settings.resolved_database_url)
    for name in [name for name in sys.modules if name.split(".")[0] == "alembic"]:
        del sys.modules[name]
# else a fresh one, which the start creates from the models, without Alembic either

async def main() -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            headers = {{"Authorization": "Bearer {token}"}}
            body = {{"command": "echo hi"}}
            ran = await client.post("/v1/executions", json=body, headers=headers)
            assert ran.status_code == 200, ran.text
            assert not [name for name in LAZY if name in sys.modules], "imported by a REST call"
            refused = await client.post("/mcp", json={{}})
            assert refused.status_code == 401, refused.text
            assert "mcp" in sys.modules  # the first /mcp request started the endpoint

asyncio.run(main())
print("ok")
"""


@pytest.mark.parametrize("current", [True, False], ids=["current-schema", "fresh-database"])
def test_the_mcp_sdk_and_alembic_load_only_when_needed(current: bool) -> None:
    token = "lazy-startup-token-0123456789abcdef"
    result = subprocess.run(
        [sys.executable, "-c", CHECK.format(token=token, current=current)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_lazy_route_serves_the_mcp_servers_path() -> None:
    assert MCP_PATH == SERVER_MCP_PATH


# What a server start leaves unimported: the CLI's own stack (Typer, Rich), the SDK, the HTTP
# and WebSocket clients (httpx loads Rich, Click and Pygments for its own CLI), Alembic and the
# MCP SDK (Click stays: uvicorn's package imports its own command line). bench/PROFILE.md,
# "Start-up and idle memory", says what each costs.
NOT_AT_START = (
    "typer",
    "rich",
    "pygments",
    "httpx",
    "websockets.asyncio.client",
    "alembic",
    "yaml",
    "mcp",
    "app.cli.main",
    "shellgate",
)


def imported_modules(importtime_stderr: str) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


@pytest.fixture(params=["current-schema", "fresh-database"])
def start_database(
    request: pytest.FixtureRequest, database: ServerDatabase, tmp_path: Path
) -> Iterator[ServerDatabase]:
    """A current schema, as on every start but the first, or none at all, as on the first
    (created from the models, in the server's process: no migration child)."""
    if request.param == "current-schema":
        data_dir = tmp_path / "data"
        data_dir.mkdir()
        upgrade_to_head(database.url or f"sqlite:///{data_dir / 'shellgate.db'}")
        yield database
    elif database.kind == "sqlite":
        yield database
    else:
        postgres: PostgresDatabases = request.getfixturevalue("postgres_databases")
        with postgres.database(migrated=False) as empty:
            yield empty


def test_serve_reaches_healthz_without_the_cli_clients_or_alembic(
    tmp_path: Path, start_database: ServerDatabase
) -> None:
    database = start_database
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SHELLGATE_")}
    env.update(
        SHELLGATE_PORT=str(port),
        SHELLGATE_DATA_DIR=str(data_dir),
        SHELLGATE_WORKSPACE=str(tmp_path),
        SHELLGATE_TOKENS=TOKENS,
        SHELLGATE_LOG_LEVEL="warning",
        PYTHONPROFILEIMPORTTIME="1",
        **database.environment(),
    )
    stderr_path = tmp_path / "server.err"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "app", "serve"], cwd=tmp_path, env=env, stderr=stderr
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, stderr_path.read_text()[-2000:]
            assert time.monotonic() < deadline, "no /healthz 200 within 60 s"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.05)  # polling a starting process: nothing to await
        modules = imported_modules(stderr_path.read_text())
        assert "app.main" in modules and "uvicorn" in modules  # the profile is of the server
        assert not [name for name in NOT_AT_START if name in modules]
        if database.kind == "sqlite":
            assert "sqlalchemy.dialects.postgresql" not in modules
        # Features behind what stayed out still work: a command runs (the policy, the registry).
        ran = httpx.post(
            f"{url}/v1/executions",
            json={"command": "echo lazy-serve"},
            headers={"Authorization": f"Bearer {AGENT}"},
            timeout=30,
        )
        assert ran.status_code == 200 and ran.json()["output"] == "lazy-serve\n", ran.text
    finally:
        process.terminate()
        process.wait(30)


UPGRADE_IN_CHILD = """
import sys
from app.store.migrate import MigrationFailedError, head_revisions, stored_revisions
from app.store.migrate import upgrade_in_child_if_behind
from app.store.db import make_engine

url = sys.argv[1]
assert upgrade_in_child_if_behind(url) is True  # no tables: created here, without Alembic
assert "alembic" not in sys.modules, "the upgrade ran in this process"
engine = make_engine(url)
assert stored_revisions(engine) == head_revisions()
engine.dispose()
assert upgrade_in_child_if_behind(url) is False  # at the head: nothing runs
try:
    upgrade_in_child_if_behind("sqlite:////nonexistent-shellgate-dir/x.db")
except MigrationFailedError as error:
    assert "cannot reach the database" in str(error), error  # said before any fork
else:
    raise AssertionError("a database that cannot be opened migrated")
import sqlite3
clashing = sys.argv[2]
with sqlite3.connect(clashing) as connection:  # a table the first migration would create
    connection.execute("CREATE TABLE executions (unrelated INTEGER)")
try:
    upgrade_in_child_if_behind("sqlite:///" + clashing)
except MigrationFailedError as error:
    assert "exit status 1" in str(error), error  # the child failed and said why on stderr
else:
    raise AssertionError("a migration that cannot apply succeeded")
print("ok")
"""


def test_a_due_migration_runs_in_a_child_and_its_failure_is_reported(
    empty_database_url: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", UPGRADE_IN_CHILD, empty_database_url, str(tmp_path / "clash.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert "table executions already exists" in result.stderr  # the child's own error


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (["serve"], {}),
        (["serve", "--port", "9000"], {"port": "9000"}),
        (["serve", "--host=0.0.0.0", "--port=1"], {"host": "0.0.0.0", "port": "1"}),
        (["serve", "--help"], None),
        (["serve", "--port"], None),
        (["serve", "--port", "1", "--port", "2"], None),
        (["serve", "--reload"], None),
        (["run", "echo hi"], None),
        (["--url", "http://x", "serve"], None),
        ([], None),
    ],
)
def test_only_a_plain_serve_skips_the_cli(args: list[str], options: dict[str, str] | None) -> None:
    assert plain_serve(args) == options


def test_serve_help_and_usage_errors_still_come_from_the_cli() -> None:
    run = [sys.executable, "-P", "-m", "app", "serve"]
    shown = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "Overrides SHELLGATE_PORT" in shown.stdout, shown.stderr
    refused = subprocess.run([*run, "--port", "x"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "'x' is not a valid int" in refused.stderr


def test_the_app_serves_the_routes_built_at_import(tmp_path: Path) -> None:
    """Each route is built once: the app holds the routers' own route objects, so FastAPI does
    not build a second copy of each for an included router (app/api/router.py), and the
    operation ids are still the app's."""
    from fastapi.routing import APIRoute

    from app.api.router import API_ROUTES
    from app.core.config import Settings
    from app.main import create_app

    settings = Settings(_env_file=None, data_dir=tmp_path / "data", workspace=tmp_path)  # type: ignore[call-arg]
    app = create_app(settings)
    served = [route for route in app.routes if isinstance(route, APIRoute)]
    assert served, "no API route served"
    built = {id(route) for route in API_ROUTES}
    assert [route for route in served if id(route) not in built] == []
    assert {route.unique_id for route in served} >= {"createExecution", "checkHealth"}
