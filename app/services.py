"""Everything one running app owns, built from Settings in `main.lifespan` (no module globals).

Built bottom-up, each part from the parts below it, with nothing wired in afterwards: the
sessions know nothing of executions (they serve them through `executions/ports.py`), and the
runner, which needs both, comes last."""

from __future__ import annotations

from dataclasses import dataclass

from app.approvals import ApprovalService
from app.auth import TokenBook
from app.config import Settings
from app.db import Database, make_engine
from app.executions import ExecutionService
from app.metrics import Metrics
from app.observability.tracing import TRACING_OFF, Tracing
from app.policy_service import PolicyService
from app.registry import Registry
from app.session_runs import SessionRuns
from app.sessions import SessionService


@dataclass
class Services:
    settings: Settings
    db: Database
    tokens: TokenBook
    metrics: Metrics
    registry: Registry
    policy: PolicyService
    approvals: ApprovalService
    executions: ExecutionService
    sessions: SessionService
    session_runs: SessionRuns

    @classmethod
    def build(
        cls, settings: Settings, metrics: Metrics, tracing: Tracing = TRACING_OFF
    ) -> Services:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        db = Database(make_engine(settings.resolved_database_url))
        registry = Registry(settings.max_jobs, kill_grace_seconds=settings.kill_grace_seconds)
        metrics.watch_running_jobs(lambda: registry.running_jobs)
        metrics.watch_live_executions(lambda: len(registry.live))
        policy = PolicyService(db, settings.policy_file)
        sessions = SessionService(settings, db, registry, policy)
        executions = ExecutionService(settings, db, registry, policy, metrics, sessions, tracing)
        metrics.watch_pending_approvals(lambda: executions.approvals.pending_count)
        return cls(
            settings=settings,
            db=db,
            tokens=TokenBook.from_settings(settings),
            metrics=metrics,
            registry=registry,
            policy=policy,
            approvals=executions.approvals,
            executions=executions,
            sessions=sessions,
            session_runs=SessionRuns(sessions, executions, registry),
        )
