"""The heartbeat loop: this node says it is alive, and looks for nodes that stopped saying so.
A silent node's running executions become `lost` (their processes, if any still run, are out
of reach: another machine, or a replica that no longer answers), its job slots are freed and
its open sessions are lost (their shell state is on its disk).
Its executions awaiting approval stay as they are: whichever node settles the decision runs
them (Cluster.settles)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime

import anyio.to_thread

from app.cluster import store
from app.cluster.node import Cluster
from app.core.config import Settings
from app.core.errors import DatabaseUnavailableError
from app.executions.recovery import summarise_log
from app.executions.result_text import final_text, lost_on_silent_node
from app.store import crud
from app.store.db import Database
from app.store.models import Execution, ExecutionState

logger = logging.getLogger("shellgate.cluster")


async def heartbeat_forever(cluster: Cluster, db: Database, settings: Settings) -> None:
    while True:
        try:
            await cluster.beat()
            await take_over_silent_nodes(cluster, db, settings)
        except DatabaseUnavailableError:
            pass  # the database's outage log says so, once per outage
        except Exception:
            logger.exception("heartbeat failed")
        await asyncio.sleep(cluster.heartbeat_interval)


# How often the lease is looked at: arithmetic only, so often enough that the fence is late by
# a second at most.
FENCE_CHECK_SECONDS = 1.0


async def fence_when_silent(cluster: Cluster) -> None:
    """End this replica's commands once its lease ran out (Cluster.fence_if_due). Apart from
    the heartbeat loop on purpose: a beat stuck in a database call that never answers (a
    partition, where no reset ever comes; a worker thread cannot be cancelled) would hold a
    check made after it, and the fence would never come."""
    while True:
        await asyncio.sleep(FENCE_CHECK_SECONDS)
        cluster.fence_if_due()


async def take_over_silent_nodes(cluster: Cluster, db: Database, settings: Settings) -> list[str]:
    if not cluster.shared:
        return []
    cutoff = cluster.cutoff()
    orphans = await db.call(store.running_on_dead_nodes, me=cluster.node_id, cutoff=cutoff)
    lost = [record.id for record in orphans if await _mark_lost(db, settings, cluster, record)]
    released = await db.call(store.release_slots_of_dead_nodes, me=cluster.node_id, cutoff=cutoff)
    sessions = await db.call(
        store.lose_sessions_of_dead_nodes, me=cluster.node_id, cutoff=cutoff, now=datetime.now(UTC)
    )
    if lost or released or sessions:
        logger.warning(
            "silent nodes: %d running executions marked lost, %d job slots freed, %d sessions lost",
            len(lost),
            released,
            sessions,
        )
    return lost


async def _mark_lost(db: Database, settings: Settings, cluster: Cluster, record: Execution) -> bool:
    # With a shared data dir the log is here to summarise; otherwise the record keeps no output.
    summary = await anyio.to_thread.run_sync(summarise_log, settings.artifacts_dir, record.id)
    # What happened, said by the replica that saw it: not LOST_NOTICE ("its process group was
    # killed"), since this one killed nothing.
    notice = lost_on_silent_node(
        node=record.node or "?",
        recorder=cluster.node_id,
        timeout=cluster.timeout,
        sandboxed=record.sandbox is not None,
    )
    notices = [*json.loads(record.notices), notice]
    text = final_text(
        body=summary.get("output", ""),
        wall_time_ms=None,
        notices=notices,
        state=ExecutionState.lost,
        exit_code=None,
        footer=None,
    )
    changed = await db.run(
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
    if changed:
        logger.warning("execution %s on silent node %s: lost", record.id, record.node)
    return changed
