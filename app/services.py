"""Everything one running app owns, built from Settings in `main.lifespan` (no module globals).

Built bottom-up, each part from the parts below it, with nothing wired in afterwards: the
sessions know nothing of executions (they serve them through `executions/ports.py`), and the
runner, which needs both, comes last."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from app.api.ws_tickets import TicketBook
from app.approvals.remember import Remembering
from app.approvals.service import ApprovalService
from app.cluster import Cluster
from app.cluster.forwarding import Forwarder
from app.cluster.identity import with_node_id
from app.cluster.notify import ApprovalRelay
from app.confinement import Confinement, build_confinement
from app.core.auth import TokenBook
from app.core.config import Settings
from app.executions import ExecutionService
from app.executions.recovery import LostLogRecovery
from app.executions.registry import Registry
from app.executions.result_text import FENCED_NOTICE
from app.files.service import FileService
from app.governance.service import PolicyService
from app.notifications import Notifier
from app.notifications.approvals import ApprovalNotifier
from app.observability.metrics import Metrics
from app.observability.tracing import TRACING_OFF, Tracing
from app.sandbox import Sandbox
from app.sandbox.defaults import default_profile
from app.sessions.runs import SessionRuns
from app.sessions.service import SessionService
from app.store.db import Database, make_engine
from app.store.storage import StorageGuard


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
        )
        db = Database(make_engine(settings.resolved_database_url))
        cluster = Cluster(settings, db)
        registry = Registry(
            settings.max_jobs, kill_grace_seconds=settings.kill_grace_seconds, ledger=cluster
        )
        metrics.watch_running_jobs(lambda: registry.running_jobs)
        metrics.watch_live_executions(lambda: len(registry.live))
        policy = PolicyService(
            db,
            settings.policy_file,
            sandbox_default=default_profile(settings),
            workspace=settings.workspace,
        )
        sandbox = Sandbox(settings)
        sessions = SessionService(settings, db, registry, policy, confinement, sandbox)
        cluster.after_silence(sessions.forget_cached)
        storage = StorageGuard(settings.data_dir)
        notifier = Notifier(settings, db)
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
        )
        # A replica cut off from the database ends its commands before the others record them
        # lost (docs/operations.md, "When a replica dies").
        cluster.when_fenced(lambda silent: executions.fence(FENCED_NOTICE.format(seconds=silent)))
        metrics.watch_pending_approvals(lambda: executions.approvals.pending_count)
        # Approvers hear of prompts through the completion deliverer's machinery.
        approval_notifier = ApprovalNotifier(settings, notifier)
        executions.approvals.on_announced = approval_notifier.heard
        sessions.use_approvals(executions.approvals)
        tokens = TokenBook.from_settings(settings)
        return cls(
            settings=settings,
            db=db,
            tokens=tokens,
            tickets=TicketBook(db, tokens),
            metrics=metrics,
            registry=registry,
            policy=policy,
            approvals=executions.approvals,
            remembering=Remembering(settings, executions.approvals, policy),
            executions=executions,
            # Prompted file operations ask through the same approvals as commands.
            files=FileService(
                settings, db, policy, executions.approvals, executions.until_stopping
            ),
            sessions=sessions,
            session_runs=SessionRuns(sessions, executions, registry),
            confinement=confinement,
            storage=storage,
            cluster=cluster,
            relay=ApprovalRelay(cluster, db, executions.approvals, settings.resolved_database_url),
            forwarder=Forwarder(settings, cluster, db),
            notifier=notifier,
            approval_notifier=approval_notifier,
            sandbox=sandbox,
        )
