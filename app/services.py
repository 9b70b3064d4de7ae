"""Everything one running app owns, built from Settings and run by the app's lifespan (no
module globals).

Built bottom-up, each part from the parts below it, with nothing wired in afterwards: the
approvals come before everything that asks through them (sessions, executions, files), each of
which names the handler of its subject to them as it is built, and they are given at
construction whoever hears of their requests and decisions (the approvers' notifications, the
other replicas through the relay); the sessions know nothing of executions (they serve them
through `executions/ports.py`), and the runner, which needs both, comes last.

Run as one ordered sequence (`Services.run`): each step registers its stop on one exit stack
as it starts, so the stop is the start reversed by construction, and a step that fails stops
exactly what the steps before it started before its error reaches the caller."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

import anyio.to_thread

from app.api.ws_tickets import TicketBook
from app.approvals.remember import Remembering
from app.approvals.service import ApprovalService
from app.cluster import Cluster
from app.cluster.forwarding import Forwarder
from app.cluster.heartbeat import fence_when_silent, heartbeat_forever
from app.cluster.identity import with_node_id
from app.cluster.notify import ApprovalRelay
from app.confinement import Confinement, build_confinement
from app.confinement.limits import MiB
from app.core.auth import TokenBook
from app.core.config import Settings
from app.executions import ExecutionService
from app.executions.pending_record import recover_pending_records
from app.executions.recovery import (
    LostLogRecovery,
    prune_expired,
    recover_lost_executions,
    recover_lost_while_silent,
)
from app.executions.registry import Registry
from app.executions.result_text import FENCED_NOTICE
from app.files.approval import FileApprovals
from app.files.service import FileService
from app.governance.service import PolicyService
from app.notifications import Notifier
from app.notifications.approvals import ApprovalNotifier
from app.observability.metrics import Metrics
from app.observability.tracing import TRACING_OFF, Tracing
from app.output.sink_worker import WINDOW_PROCESS
from app.process.environment import inheritance_of, withheld_names
from app.process.reserved_signals import restore_reserved_signals
from app.sandbox import Sandbox
from app.sandbox.defaults import default_profile
from app.server.memory_trim import trim_memory_when_idle
from app.sessions.runs import SessionRuns
from app.sessions.sandbox_approval import SessionSandboxApprovals
from app.sessions.service import SessionService
from app.store.db import Database, make_engine
from app.store.migrate import upgrade_if_behind
from app.store.storage import StorageGuard

logger = logging.getLogger("shellgate")


def make_private(settings: Settings) -> None:
    """The data dir 0700 and the SQLite files 0600: they hold commands, their output and
    their env. SQLite gives its WAL and shared-memory files the database file's mode."""
    settings.data_dir.chmod(0o700)
    if settings.database_url is None:
        database = settings.data_dir / "shellgate.db"
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                database.with_name(database.name + suffix).chmod(0o600)


@dataclass
class Services:
    settings: Settings
    db: Database
    tokens: TokenBook
    tickets: TicketBook
    metrics: Metrics
    registry: Registry
    policy: PolicyService
    approvals: ApprovalService
    remembering: Remembering
    executions: ExecutionService
    files: FileService
    sessions: SessionService
    session_runs: SessionRuns
    confinement: Confinement
    storage: StorageGuard
    cluster: Cluster
    relay: ApprovalRelay
    forwarder: Forwarder
    notifier: Notifier
    approval_notifier: ApprovalNotifier
    sandbox: Sandbox
    # The long logs a previous run lost, re-read after the server listens.
    recovery: LostLogRecovery = field(default_factory=LostLogRecovery)

    @classmethod
    def build(
        cls, settings: Settings, metrics: Metrics, tracing: Tracing = TRACING_OFF
    ) -> Services:
        """Every part, built bottom-up. A part that fails to build undoes what the parts before
        it made (the confinement's cgroup folders, the database's pool, the intent journal)
        before its error goes on: `run`'s exit stack only takes over once all are built."""
        with contextlib.ExitStack() as undo:
            services = cls._build(settings, metrics, tracing, undo)
            undo.pop_all()
        return services

    @classmethod
    def _build(
        cls, settings: Settings, metrics: Metrics, tracing: Tracing, undo: contextlib.ExitStack
    ) -> Services:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        make_private(settings)
        settings = with_node_id(settings)
        confinement = build_confinement(
            settings.data_dir,
            settings.confinement,
            memory_mb=settings.limit_memory_mb,
            processes=settings.limit_processes,
            cpu_seconds=settings.limit_cpu_seconds,
            file_size_mb=settings.limit_file_size_mb,
            open_files=settings.limit_open_files,
            total_processes=settings.limit_total_processes,
            total_memory_mb=settings.limit_total_memory_mb,
        )
        undo.callback(confinement.close)
        db = Database(make_engine(settings.resolved_database_url))
        undo.callback(db.dispose)
        cluster = Cluster(settings, db)
        registry = Registry(
            settings.max_jobs, kill_grace_seconds=settings.kill_grace_seconds, ledger=cluster
        )
        metrics.watch_running_jobs(lambda: registry.running_jobs)
        metrics.watch_live_executions(lambda: len(registry.live))
        shared = confinement.shared
        if shared is not None:
            metrics.watch_commands_together(
                shared.processes_now,
                shared.memory_now,
                shared.processes,
                None if shared.memory_mb is None else shared.memory_mb * MiB,
            )
        policy = PolicyService(
            db,
            settings.policy_file,
            sandbox_default=default_profile(settings),
            workspace=settings.workspace,
        )
        sandbox = Sandbox(settings)
        notifier = Notifier(settings, db)
        # Approvers hear of prompts through the completion deliverer's machinery.
        approval_notifier = ApprovalNotifier(settings, notifier)
        relay = ApprovalRelay(cluster, db, settings.resolved_database_url)
        # One approvals for every subject: each owner below names its handler as it is built.
        approvals = ApprovalService(
            db,
            timeout_seconds=settings.approval_timeout,
            listeners=(approval_notifier.heard, relay.announce),
            metrics=metrics,
            max_pending_per_owner=settings.max_pending_approvals,
        )
        metrics.watch_pending_approvals(lambda: approvals.pending_count)
        file_approvals = FileApprovals(db, approvals)
        session_sandbox = SessionSandboxApprovals(db, approvals)
        sessions = SessionService(
            settings, db, registry, policy, confinement, sandbox, sandbox_approvals=session_sandbox
        )
        cluster.after_silence(sessions.forget_cached)
        storage = StorageGuard(settings.data_dir)
        executions = ExecutionService(
            settings,
            db,
            registry,
            policy,
            metrics,
            sessions,
            confinement,
            storage,
            tracing,
            cluster,
            completion=notifier,
            sandbox=sandbox,
            approvals=approvals,
        )
        undo.callback(executions.intents.close)
        # A replica cut off from the database ends its commands before the others record them
        # lost (docs/operations.md, "When a replica dies").
        cluster.when_fenced(lambda silent: executions.fence(FENCED_NOTICE.format(seconds=silent)))
        tokens = TokenBook.from_settings(settings)
        return cls(
            settings=settings,
            db=db,
            tokens=tokens,
            tickets=TicketBook(db, tokens),
            metrics=metrics,
            registry=registry,
            policy=policy,
            approvals=approvals,
            remembering=Remembering(settings, approvals, policy),
            executions=executions,
            # Prompted file operations ask through the same approvals as commands.
            files=FileService(
                settings,
                db,
                policy,
                approvals,
                file_approvals,
                executions.until_stopping,
            ),
            sessions=sessions,
            session_runs=SessionRuns(sessions, executions, registry),
            confinement=confinement,
            storage=storage,
            cluster=cluster,
            relay=relay,
            forwarder=Forwarder(settings, cluster, db, executions.until_ended_elsewhere),
            notifier=notifier,
            approval_notifier=approval_notifier,
            sandbox=sandbox,
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def run(
        cls, settings: Settings, metrics: Metrics, tracing: Tracing = TRACING_OFF
    ) -> AsyncIterator[Services]:
        """Build the services, start them in order and yield them running; stop them on exit.
        Every stop goes on one exit stack as its part starts: the stop runs in the reverse of
        the start, and a step that fails stops what the steps before it started, then its
        error goes on to the caller."""
        async with contextlib.AsyncExitStack() as stack:
            # Before any child is started: they would inherit them ignored.
            restore_reserved_signals()
            # Stopped last: it exports the spans of whatever stops before it.
            stack.callback(tracing.shutdown)
            services = cls.build(settings, metrics, tracing)
            # The parts below start on demand (the first use makes a pool connection, a helper
            # child, a timer, a delivery): their stops go on the stack now, each after what it
            # uses, so that it stops first. All of them serve the commands, whose stop comes
            # before theirs and still needs them (it records the commands `lost`).
            stack.callback(services.db.dispose)
            # The backend's own folders (build made them; the commands' stop closes it too,
            # with the standby shells).
            stack.push_async_callback(anyio.to_thread.run_sync, services.confinement.close)
            # The fence watcher (started by the first unsandboxed command): after the
            # commands' stop, so it finds nothing left to kill.
            stack.push_async_callback(anyio.to_thread.run_sync, services.registry.fence_watch.close)
            # The window process: a helper child, started by the first costly output.
            stack.push_async_callback(anyio.to_thread.run_sync, WINDOW_PROCESS.close)
            # The command readers (helper children) of long commands' judgements.
            stack.push_async_callback(services.policy.close)
            # What is not delivered by now stays due in the database for the next start.
            stack.push_async_callback(services.notifier.close)
            # Approval events go out through the deliverer: flushed before it closes.
            stack.push_async_callback(services.approval_notifier.close)
            # An approval's expiry is announced to the approvers: timers end before that.
            stack.push_async_callback(services.approvals.close)
            # The client of requests forwarded to other replicas (made on the first).
            stack.push_async_callback(services.forwarder.close)
            # The job slots that ending commands release in the database.
            stack.push_async_callback(services.cluster.drain)
            # What the relay (its listener is a background task below) has under way.
            stack.push_async_callback(services.relay.close)
            # The host lists' proxy: after the commands' stop (their sandboxes are its clients).
            stack.push_async_callback(services.sandbox.egress.aclose)

            # Before anything can run: with the sandbox on and unbuildable, the server must not
            # start (`shellgate serve` says why before this; an embedded app fails here).
            await anyio.to_thread.run_sync(services.sandbox.check)
            if not services.sandbox.enforced:
                logger.warning("SHELLGATE_SANDBOX=off: commands run unsandboxed (docs/sandbox.md)")
            elif os.geteuid() == 0:
                # The namespaces keep the host's uid for files: with every capability dropped,
                # permissions are checked as for any user, but uid 0 owns most of the host.
                logger.warning(
                    "the server runs as root: a sandboxed command owns what root owns on the "
                    "host, and reads whatever of it is not hidden (root's home, keys and "
                    "settings only root may read); run shellgate as an unprivileged user "
                    "(docs/sandbox.md#what-remains-outside)"
                )
            withheld = withheld_names(inheritance_of(settings))
            if withheld:
                # Names only: an operator who meant a command to have one passes it by name.
                logger.info(
                    "commands do not inherit these variables of the server's: %s "
                    "(SHELLGATE_COMMAND_ENV_PASS passes one; docs/api.md#the-process)",
                    ", ".join(withheld),
                )
            await anyio.to_thread.run_sync(
                upgrade_if_behind, services.db.engine, settings.resolved_database_url
            )
            await services.policy.load()
            await services.cluster.join()
            # Runs a dead server recorded only as intents first become `running` rows, which
            # the recovery below kills and records `lost` like any other.
            await anyio.to_thread.run_sync(
                recover_pending_records, services.db, services.executions.intents
            )
            lost = await recover_lost_executions(
                services.db, services.settings, later=services.recovery
            )
            if lost:
                logger.warning("%d executions were lost by a previous run", len(lost))
            # What the other replicas recorded `lost` meanwhile: ended and re-read here, the
            # only place its processes and its log (data directories not shared) can be reached.
            await recover_lost_while_silent(
                services.db, services.settings, services.cluster.previous_beat, services.recovery
            )
            # Before the restore, which would start a decided one for nobody.
            orphaned = await services.executions.withdraw_orphaned_streamed()
            if orphaned:
                logger.warning("%d runner calls awaiting approval were withdrawn", orphaned)

            # From here commands run (the restore settles a decision taken before the last
            # stop, then requests), and spawning ahead keeps shells ready: stopping ends them
            # all. uvicorn gave open requests half the grace already (app/server/serving.py).
            stack.push_async_callback(
                services.executions.shutdown, within=settings.shutdown_grace * 0.3
            )
            await services.approvals.restore()
            if settings.spawn_ahead and services.sandbox.standbys_serve:
                services.confinement.start_spawning_ahead(
                    settings.shell,
                    services.settings.data_dir,
                    settings.command_nice,
                    sandbox=(services.sandbox.standby_spawn if services.sandbox.enforced else None),
                    count=settings.spawn_ahead_shells,
                )
            # After the lost executions are recorded: their ends are due too.
            await services.notifier.start()

            background = [
                asyncio.create_task(_prune_forever(services)),
                asyncio.create_task(
                    heartbeat_forever(services.cluster, services.db, services.settings)
                ),
                asyncio.create_task(fence_when_silent(services.cluster)),
                asyncio.create_task(services.relay.run(services.approvals)),
                asyncio.create_task(trim_memory_when_idle(services.registry.live)),
                # Start-up does not wait on old logs: re-read while the server already answers.
                asyncio.create_task(services.recovery.run(services.db, services.settings)),
            ]
            # Cancelled, not awaited: one in a database call on a worker thread would hold
            # the stop until the call returns.
            for task in background:
                stack.callback(task.cancel)
            yield services

    def begin_stop(self) -> None:
        """The stop was requested (SIGTERM/SIGINT): while uvicorn still drains its requests,
        new work is refused, foreground calls whose command ends within the drain answer as
        usual, then waiting callers are answered and the commands are stopped."""
        self.executions.begin_stop(self.settings.stop_drain)
        # A long command's reading under way would hold its request past uvicorn's cut
        # (its thread runs to its end): ended now, it is a limit, answered as such.
        self.policy.stop_reading()


async def _prune_forever(services: Services) -> None:
    while True:
        try:
            await prune_expired(services.db, services.settings)
            # Replicas gone as long as the records they ran are kept: nothing points at them.
            await services.cluster.forget_silent(timedelta(days=services.settings.retention_days))
        except Exception:
            logger.exception("retention pruning failed")
        await asyncio.sleep(services.settings.prune_interval_seconds)
