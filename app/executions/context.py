"""What every phase of the execution use-case works with, built once by `ExecutionService`."""

from __future__ import annotations

from dataclasses import dataclass

from app.confinement import Confinement
from app.core.config import Settings
from app.executions.changes import StateChanges
from app.executions.completion import NO_DELIVERY, CompletionHooks
from app.executions.ports import LOCAL_NODE, NodeRole
from app.executions.registry import Registry
from app.observability.metrics import Metrics
from app.observability.tracing import TRACING_OFF, Tracing
from app.sandbox import Sandbox
from app.store.db import Database
from app.store.storage import StorageGuard


@dataclass(frozen=True)
class Context:
    settings: Settings
    db: Database
    registry: Registry  # the live executions, the job cap, deadlines and kills
    metrics: Metrics
    changes: StateChanges  # record state changes: notify and wait; the server stopping
    confinement: Confinement  # per-execution units: limits, evidence, whole-tree kill
    storage: StorageGuard  # whether the data directory has room for new work
    tracing: Tracing = TRACING_OFF  # spans for the policy, approval wait, spawn and run
    node: NodeRole = LOCAL_NODE  # which awaiting executions this replica settles (app/cluster)
    completion: CompletionHooks = NO_DELIVERY  # notify_url: admitted at submit, fed the end
    # The kernel boundary each spawn runs in (app/sandbox/); None only where nothing spawns.
    sandbox: Sandbox | None = None
