"""Housekeeping of the registry across restarts: executions a dead server left `running`
become `lost` (their process groups killed behind a pid-reuse guard), and finished executions
past the retention period are pruned with their logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio.to_thread

from app.core.config import Settings
from app.executions.result_text import (
    LOST_NOTICE,
    LOST_ON_SILENT_NODE,
    LOST_ON_SILENT_NODE_BEFORE,
    final_text,
)
from app.output.artifact_log import ArtifactLog, existing_log_path
from app.output.window import OutputSink
from app.process import (
    boot_id,
    group_members,
    kill_marked_processes,
    process_environ_has,
    process_start_ticks,
    signal_group,
)
from app.process.environment import EXECUTION_MARKER
from app.store import crud
from app.store.db import Database
from app.store.models import Execution, ExecutionState

logger = logging.getLogger("shellgate.recovery")


# A lost log at most this long is re-read before the server listens; a longer one after
# (LostLogRecovery), so that start-up does not wait on old logs (re-reading costs ~34 ms/MB).
SUMMARISE_AT_START_BYTES = 1024 * 1024


class LostLogRecovery:
    """The logs of lost executions re-read after the server listens: their record gets the
    inline output and byte counts then (`/readyz` says `recovery: running` until done)."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.done = asyncio.Event()
        self.done.set()

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def defer(self, execution_ids: list[str]) -> None:
        self.pending.extend(execution_ids)
        if self.pending:
            self.done.clear()

    async def run(self, db: Database, settings: Settings) -> None:
        try:
            while self.pending:
                execution_id = self.pending[0]
                try:
                    await _summarise_lost(db, settings, execution_id)
                except Exception:
                    logger.exception("re-reading the lost log of %s failed", execution_id)
                self.pending.pop(0)
        finally:
            self.done.set()
        logger.info("recovery of lost logs done")


async def _summarise_lost(db: Database, settings: Settings, execution_id: str) -> None:
    record = await db.call(crud.get_execution, execution_id=execution_id)
    if record is None or record.state != ExecutionState.lost.value:
        return
    summary = await anyio.to_thread.run_sync(summarise_log, settings.artifacts_dir, execution_id)
    text = final_text(
        body=summary.get("output", ""),
        wall_time_ms=None,
        notices=json.loads(record.notices),
        state=ExecutionState.lost,
        exit_code=None,
        footer=None,
    )
    await db.run(
        crud.rewrite_lost_output, execution_id=execution_id, values={"text": text, **summary}
    )


def _log_size(artifacts_dir: Path, execution_id: str) -> int:
    path = existing_log_path(artifacts_dir, execution_id)
    try:
        return 0 if path is None else path.stat().st_size
    except OSError:
        return 0


async def recover_lost_executions(
    db: Database, settings: Settings, later: LostLogRecovery | None = None
) -> list[str]:
    """Executions a dead server left `running` become `lost`; their groups are killed. With
    `later`, a long log is re-read after start-up rather than now."""
    running = await db.call(crud.executions_in_state, state=ExecutionState.running)
    # Only this node's (or, from before nodes were recorded, nobody's): another replica's are
    # its own, or the heartbeat's once it falls silent (app/cluster/heartbeat.py).
    orphans = [record for record in running if record.node in (None, settings.node_id)]
    this_boot = boot_id()
    for record in orphans:
        await anyio.to_thread.run_sync(kill_orphan_group, record, this_boot)
        # Daemons that left the group: their cgroup went with the sweep at start (cgroup
        # backends); what carries the execution's marker goes here (every backend).
        await anyio.to_thread.run_sync(kill_orphan_tree, record, this_boot)
        size = await anyio.to_thread.run_sync(_log_size, settings.artifacts_dir, record.id)
        summary: dict[str, Any] = {}
        if later is not None and size > SUMMARISE_AT_START_BYTES:
            later.defer([record.id])
        else:
            summary = await anyio.to_thread.run_sync(
                summarise_log, settings.artifacts_dir, record.id
            )
        notices = [*json.loads(record.notices), LOST_NOTICE]
        text = final_text(
            body=summary.get("output", ""),
            wall_time_ms=None,
            notices=notices,
            state=ExecutionState.lost,
            exit_code=None,
            footer=None,
        )
        await db.run(
            crud.finish_execution,
            execution_id=record.id,
            values={
                "state": ExecutionState.lost.value,
                "finished_at": datetime.now(UTC),
                "notices": json.dumps(notices),
                "text": text,
                **summary,
            },
        )
        logger.warning("execution %s was running when the server stopped: lost", record.id)
    return [record.id for record in orphans]


async def recover_lost_while_silent(
    db: Database, settings: Settings, since: datetime | None, later: LostLogRecovery
) -> list[str]:
    """This node's executions the other replicas recorded `lost` while it was silent (since
    `since`, its last heartbeat before): their processes, which may have outlived it (no
    sandbox), are killed as after any crash, and their record gets the output of the log
    on this node's disk, which the others could not read (read after start-up if long)."""
    if since is None:
        return []
    records = await db.call(
        crud.lost_by_others_since,
        node_id=settings.node_id,
        since=since,
        notices=(LOST_ON_SILENT_NODE, LOST_ON_SILENT_NODE_BEFORE),
    )
    this_boot = boot_id()
    for record in records:
        await anyio.to_thread.run_sync(kill_orphan_group, record, this_boot)
        await anyio.to_thread.run_sync(kill_orphan_tree, record, this_boot)
        size = await anyio.to_thread.run_sync(_log_size, settings.artifacts_dir, record.id)
        if size > SUMMARISE_AT_START_BYTES:
            later.defer([record.id])
        elif size > 0:
            await _summarise_lost(db, settings, record.id)
        logger.warning(
            "execution %s was recorded lost by another replica while this one was silent",
            record.id,
        )
    return [record.id for record in records]


def kill_orphan_group(record: Execution, this_boot: str) -> bool:
    """SIGKILL the recorded group only if it is provably this execution's; True if signalled."""
    pgid = record.pgid
    if not pgid or record.boot_id != this_boot:
        return False  # another boot: every process of that run is already gone
    marker = f"{EXECUTION_MARKER}={record.id}".encode()
    leader_matches = (
        record.proc_start_ticks is not None and process_start_ticks(pgid) == record.proc_start_ticks
    )
    # pid-reuse guard: kill only a group whose leader is ours (same start time) or whose
    # members carry this execution's marker in their environment.
    if not leader_matches and not any(
        process_environ_has(pid, marker) for pid in group_members(pgid)
    ):
        return False
    with contextlib.suppress(ValueError):
        return signal_group(pgid, signal.SIGKILL)
    return False


def kill_orphan_tree(record: Execution, this_boot: str) -> int:
    """SIGKILL every process carrying the execution's marker (same boot only)."""
    if record.boot_id != this_boot:
        return 0
    return kill_marked_processes(f"{EXECUTION_MARKER}={record.id}".encode())


def summarise_log(artifacts_dir: Path, execution_id: str) -> dict[str, Any]:
    """The inline window of a log no pump finished: re-read it (bounded memory) and settle it."""
    try:
        log = ArtifactLog.open_existing(artifacts_dir, execution_id)
    except OSError:
        return {}
    sink = OutputSink()
    offset = 0
    while offset < log.total_bytes:
        offset = log.next_available(offset)
        chunk = log.read(offset, 1024 * 1024)
        if not chunk:
            break
        sink.feed(chunk)
        offset += len(chunk)
    sink.flush()
    log.finish()
    return sink.summary().record_fields()


async def prune_expired(db: Database, settings: Settings) -> int:
    """Delete executions finished more than `retention_days` ago, and their logs."""
    cutoff = datetime.now(UTC) - timedelta(days=settings.retention_days)
    doomed = await db.call(crud.delete_finished_before, cutoff=cutoff)
    for record in doomed:
        await anyio.to_thread.run_sync(_delete_log, settings.artifacts_dir, record.id)
    if doomed:
        logger.info("pruned %d executions finished before %s", len(doomed), cutoff)
    return len(doomed)


def _delete_log(artifacts_dir: Path, execution_id: str) -> None:
    with contextlib.suppress(OSError):
        ArtifactLog.open_existing(artifacts_dir, execution_id).delete()
