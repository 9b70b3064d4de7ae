"""A start that fails halfway (`Services.run`, app/services.py) stops what the steps before the
failing one started, and its error reaches the caller: an embedded app's lifespan raises it.

The failure is real: a delivery record whose next attempt's time cannot be read (a value no
timestamp can be) stops the start where the webhook deliveries resume, after the standby shells
of spawning ahead were started and the database was used by every step before. A record in a
state this version does not know, by contrast, is skipped there and the server starts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import traceback
from pathlib import Path

import pytest
from sqlalchemy import text

from app.confinement.cgroups import CgroupBackend
from app.confinement.choice import choose_backend
from app.core.auth import GENERATED_TOKEN_FILE
from app.core.config import Settings
from app.executions.pending_record import PENDING_RECORDS_DIR
from app.main import create_app
from app.observability.metrics import Metrics
from app.process.standby import STANDBY_SCRIPT
from app.services import Services
from app.store.models import NotifyState
from tests.api.test_spawn_ahead import cgroup_backend
from tests.conftest import make_settings, run_foreground, serve
from tests.databases import ServerDatabase
from tests.waiting import eventually

UNKNOWN_STATE = "archived"
# What each database keeps in a timestamp column and the server cannot read back as one:
# SQLite stores any text; PostgreSQL's `infinity` is beyond every datetime.
UNREADABLE_TIME = {"sqlite": "not a time", "postgres": "infinity"}
# What the start's error then says (PostgreSQL's DataError as the server words it).
UNREADABLE_ERROR = {
    "sqlite": "Invalid isoformat string",
    "postgres": "the database cannot hold a value of this request",
}
SPAWN_AHEAD_THREAD = "spawn-ahead"  # app/confinement/standby.py


def _helper_children() -> dict[int, bytes]:
    """This process's live children that are the server's own: standby shells and helper
    children (`python -m app.…`); pid → command line."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                arguments = cmdline.read().split(b"\0")
        except (OSError, IndexError):
            continue
        state, parent = fields[0], int(fields[1])
        if parent != os.getpid() or state == b"Z":
            continue
        helper = b"-m" in arguments and any(arg.startswith(b"app.") for arg in arguments)
        if os.fsencode(STANDBY_SCRIPT) in arguments or helper:
            found[int(entry.name)] = b" ".join(arguments)
    return found


def _database_connections(settings: Settings, database: ServerDatabase) -> list[str]:
    """What this process still holds open on the server's database: its SQLite files, or
    its sessions on PostgreSQL (the only client of a database of the test's own)."""
    if database.url is None:
        files = []
        for entry in os.scandir("/proc/self/fd"):
            try:
                target = os.readlink(entry.path)
            except OSError:
                continue
            if target.startswith(str(settings.data_dir / "shellgate.db")):
                files.append(target)
        return files
    engine = database.engine(settings.data_dir)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT application_name || ' ' || state FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            return [str(row[0]) for row in rows]
    finally:
        engine.dispose()


def test_a_start_failing_halfway_stops_what_it_started_and_raises_its_error(
    tmp_path: Path, database: ServerDatabase
) -> None:
    settings = make_settings(
        tmp_path, database, confinement=cgroup_backend(tmp_path / "probe"), spawn_ahead_shells=1
    )
    with serve(settings) as live, live.client() as client:
        run_foreground(client, "echo written")
    engine = database.engine(settings.data_dir)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE executions SET notify_state = :waiting, notify_next_at = :when"),
            {"waiting": NotifyState.waiting.value, "when": UNREADABLE_TIME[database.kind]},
        )
    engine.dispose()
    children_before = set(_helper_children())
    threads_before = set(threading.enumerate())

    async def start() -> set[asyncio.Task[object]]:
        app = create_app(settings)
        with pytest.raises(Exception, match=UNREADABLE_ERROR[database.kind]) as failed:
            async with app.router.lifespan_context(app):
                pass
        # Where the deliveries resume, the last step of the start.
        frames = traceback.extract_tb(failed.value.__traceback__)
        assert any(
            frame.name == "start" and frame.filename.endswith("notifications/delivery.py")
            for frame in frames
        )
        return asyncio.all_tasks() - {asyncio.current_task()}

    assert asyncio.run(start()) == set()
    spawning = [
        thread
        for thread in set(threading.enumerate()) - threads_before
        if thread.name == SPAWN_AHEAD_THREAD
    ]
    assert spawning == []
    left = {pid: args for pid, args in _helper_children().items() if pid not in children_before}
    assert left == {}
    eventually(
        lambda: not _database_connections(settings, database),
        what="the end of the failed start's database connections",
    )


def test_a_delivery_in_a_state_this_version_does_not_know_is_skipped_and_the_server_starts(
    tmp_path: Path, database: ServerDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path, database)
    with serve(settings) as live, live.client() as client:
        execution_id = run_foreground(client, "echo written")["id"]
    engine = database.engine(settings.data_dir)
    with engine.begin() as connection:
        # As a newer version, rolled back, may leave it.
        connection.execute(
            text("UPDATE executions SET state = :state, notify_state = :waiting"),
            {"state": UNKNOWN_STATE, "waiting": NotifyState.waiting.value},
        )
    engine.dispose()
    with (
        caplog.at_level("WARNING", logger="shellgate.notifications"),
        serve(settings) as live,
        live.client() as client,
    ):
        assert client.get("/healthz").status_code == 200
    skipped = [
        record.getMessage() for record in caplog.records if execution_id in record.getMessage()
    ]
    assert skipped == [
        f"not resuming the delivery of {execution_id}: its state '{UNKNOWN_STATE}' is unknown "
        "to this version"
    ]


def test_a_build_failing_halfway_leaves_no_cgroup_folder_and_no_database_open(
    tmp_path: Path, database: ServerDatabase
) -> None:
    backend = cgroup_backend(tmp_path / "probe")
    # No token configured: the server keeps a generated admin token in its data directory.
    settings = make_settings(tmp_path, database, confinement=backend, tokens="")
    # Where this data directory's cgroup folders go (the probe makes them, then removes them).
    probe = choose_backend(settings.data_dir, backend).backend
    assert isinstance(probe, CgroupBackend)
    bases = list(probe.bases.values())
    probe.close()
    assert bases and not [base for base in bases if base.exists()]
    # A directory where that token file goes: the token book, built after the confinement, the
    # database and the executions, cannot read it.
    (settings.data_dir / GENERATED_TOKEN_FILE).mkdir(parents=True)

    with pytest.raises(IsADirectoryError):
        Services.build(settings, Metrics())

    assert [base for base in bases if base.exists()] == []
    journal = settings.data_dir / PENDING_RECORDS_DIR
    held = []
    for entry in os.scandir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(entry.path)
            if target.startswith((str(journal), str(settings.data_dir / "shellgate.db"))):
                held.append(target)
    assert held == []
    assert _database_connections(settings, database) == []
