"""`shellgate serve`: check the settings, then run the API on uvicorn.

Kept apart from the Typer CLI (app/cli/main.py) so that a server start imports neither Typer,
Click and Rich nor the SDK and its HTTP client: `app/entry.py` calls `serve` directly for a
plain `shellgate serve [--host H] [--port N]` (bench/PROFILE.md, "Start-up and idle memory").
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from pydantic import ValidationError

from app.core.config import Settings, describe_settings_error

EXIT_USAGE = 2
# What uvicorn exits with when the app's start fails, which a failed migration was before it
# moved out of the lifespan.
EXIT_START_FAILED = 3


def fail(message: str, status: int) -> NoReturn:
    """One line on stderr and the exit status, as the client commands print their errors."""
    sys.stderr.write(f"shellgate: {message}\n")
    sys.stderr.flush()
    raise SystemExit(status)


def serve(host: str | None = None, port: int | None = None) -> None:
    """Apply migrations and serve the API (uvicorn)."""
    from app.confinement import choose_backend, require_shared_limits
    from app.governance.service import PolicyFileError, read_policy_file
    from app.observability.logs import configure_logging

    overrides: dict[str, object] = {}
    if host is not None:
        overrides["host"] = host
    if port is not None:
        overrides["port"] = port
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
        if settings.policy_file is not None:
            # Fail before uvicorn starts, with the file's problem and no traceback.
            read_policy_file(settings.policy_file)
        totals = (settings.limit_total_processes, settings.limit_total_memory_mb)
        if settings.confinement != "auto" or any(totals):
            # A backend asked for by name must exist here, and one that can hold the totals
            # the operator set: say why not, with no traceback.
            choice = choose_backend(settings.data_dir, settings.confinement)
            require_shared_limits(choice.backend, *totals)
    except ValidationError as error:
        # Never str(error): pydantic's text echoes the input, a token secret included.
        fail(describe_settings_error(error), EXIT_USAGE)
    except (PolicyFileError, OSError) as error:
        fail(str(error), EXIT_USAGE)
    from app.sandbox import Sandbox, SandboxUnavailable

    sandbox = Sandbox(settings)
    if (exposed := sandbox.exposed_launch()) is not None:
        fail(exposed, EXIT_USAGE)  # before anything is made or started
    configure_logging(settings.log_level, settings.log_format)
    from app.process.descriptor_limit import raise_soft_limit
    from app.server.http_server import SWITCH_INTERVAL_SECONDS, limit_malloc_arenas, server_options

    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    limit_malloc_arenas()
    # Descriptors for many executions, viewers and proxy connections; the commands keep the
    # limit the server was given (app/process/descriptor_limit.py).
    raise_soft_limit()
    import uvicorn

    from app.cluster.identity import with_node_id
    from app.main import create_app
    from app.process.instance_lock import InstanceLockedError, hold_instance_lock
    from app.server.serving import GracefulServer, graceful_shutdown_timeout
    from app.services import make_private
    from app.store.migrate import MigrationFailedError, upgrade_in_child_if_behind

    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        make_private(settings)
    except OSError as error:
        fail(
            f"cannot use the data directory {settings.data_dir} (SHELLGATE_DATA_DIR): "
            f"{error.strerror or error}",
            EXIT_USAGE,
        )
    # One server per data directory and node: a second start's recovery would remove the
    # live one's cgroups and kill its running commands as `lost` (docs/operations.md).
    node_id = with_node_id(settings).node_id
    try:
        instance_lock = hold_instance_lock(settings.data_dir / f".serve-{node_id}.lock")
    except InstanceLockedError as locked:
        fail(
            f"another shellgate server (pid {locked.holder}) is serving {settings.data_dir} "
            f"as node {node_id}; stop it first, or give this one its own SHELLGATE_DATA_DIR",
            EXIT_START_FAILED,
        )
    try:
        sandbox.check()
    except SandboxUnavailable as error:
        fail(str(error), EXIT_START_FAILED)
    app = create_app(settings)
    # The lifespan would migrate too (it finds nothing due after this), but in the server's
    # own process, where Alembic's modules would stay loaded for good.
    try:
        upgrade_in_child_if_behind(settings.resolved_database_url)
    except MigrationFailedError as error:
        fail(str(error), EXIT_START_FAILED)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        # Our handler formats every line (text or JSON, with the request id); uvicorn's access
        # line would print query strings, where WebSocket tickets travel: the request
        # middleware logs the route template instead.
        log_config=None,
        access_log=False,
        **server_options(settings),
        timeout_graceful_shutdown=graceful_shutdown_timeout(settings.shutdown_grace),
    )
    GracefulServer(
        config,
        on_stop=app.state.stop_signal.fire,
        before_closing=app.state.stop_signal.until_announced,
        grace=settings.shutdown_grace,
    ).run()
    os.close(instance_lock)
