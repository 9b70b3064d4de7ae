"""Two (or more) real replicas: `python -m app serve` child processes on loopback, each with
its own data dir, sharing one PostgreSQL database made for the test and dropped after it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url, text

from tests.conftest import free_port
from tests.databases import POSTGRES_URL, ServerDatabase, postgres_unreachable_reason
from tests.faults.server_process import ServerProcess, server_env, server_process

CLUSTER_SECRET = "cluster-secret-0123456789"


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A PostgreSQL database of the test's own (NOTIFY channels are per database)."""
    reason = postgres_unreachable_reason()
    if reason is not None:
        pytest.skip(reason)  # with CI=true the run stopped at collection already
    name = f"sg_cluster_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@dataclass
class Replica:
    name: str
    server: ServerProcess

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.server, attribute)

    @property
    def ws_url(self) -> str:
        return self.server.base_url.replace("http://", "ws://")


@contextlib.contextmanager
def replica(
    tmp: Path,
    name: str,
    database_url: str,
    *,
    shared_data: bool = False,
    own_workspace: bool = False,
    port: int | None = None,
    **settings: Any,
) -> Iterator[Replica]:
    """`own_workspace`: the replica's workspace is its own directory, not the one it shares.
    `port`: the one it had before, to start it again as the same node."""
    directory = tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    env = server_env(
        directory,
        ServerDatabase("postgres", database_url),
        node_id=name,
        node_url=f"http://127.0.0.1:{port}",
        cluster_secret=CLUSTER_SECRET,
        **settings,
    )
    # One workspace, as replicas behind a gateway have: an approved command may start on
    # another replica than the one that showed its cwd to the approver.
    workspace = tmp / "workspace"
    workspace.mkdir(exist_ok=True)
    if not own_workspace:
        env["SHELLGATE_WORKSPACE"] = str(workspace)
    if shared_data:
        env["SHELLGATE_DATA_DIR"] = str(tmp / "shared-data")
    with server_process(env, directory / "server.log", port=port) as server:
        yield Replica(name, server)
