"""Approvals across replicas: what one replica requests or decides reaches the others at once
through PostgreSQL `LISTEN/NOTIFY`, and a polling loop (every half second) catches whatever a
notification missed (a listener reconnecting, a replica that was busy). A decision reaches
the replica whose caller waits for it, which starts the command there; every replica's
approvals WebSocket sees every request and decision.

The relay is built before the approvals, which are given its `announce` as a listener
(app/services.py); it relays what the others did into the approvals it is run with."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import make_url

from app.approvals.service import ApprovalService
from app.cluster import store
from app.cluster.node import Cluster
from app.core.errors import DatabaseUnavailableError
from app.store import crud
from app.store.db import Database
from app.store.models import Approval

logger = logging.getLogger("shellgate.cluster")

POLL_SECONDS = 0.5
# Decisions are timestamped before their commit, by the deciding replica's clock: the poll
# looks this far behind its last run (a decision seen twice is published once).
POLL_OVERLAP = timedelta(seconds=5)
RECONNECT_SECONDS = 1.0


def libpq_url(database_url: str) -> str:
    """The SQLAlchemy URL as psycopg's own connection string."""
    url = make_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class ApprovalRelay:
    def __init__(self, cluster: Cluster, db: Database, database_url: str) -> None:
        self._cluster = cluster
        self._db = db
        self._database_url = database_url
        self._tasks: set[asyncio.Task[Any]] = set()
        self.listening = asyncio.Event()

    # --- telling the others -------------------------------------------------------------------

    def announce(self, kind: str, approval: Approval) -> None:
        """The approvals' listener: this replica requested or decided `approval` (`kind`)."""
        if not self._cluster.shared:
            return  # nobody else to tell
        payload = json.dumps({"node": self._cluster.node_id, "approval": approval.id})
        self._spawn(self._notify(payload))

    async def _notify(self, payload: str) -> None:
        try:
            await self._db.call(store.notify, payload=payload)
        except Exception:
            logger.warning("could not notify the other replicas (the poll will tell them)")

    # --- hearing from them --------------------------------------------------------------------

    async def run(self, approvals: ApprovalService) -> None:
        """Relay what the other replicas request and decide into `approvals`, until cancelled
        (nothing to do on a single node's database)."""
        if not self._cluster.shared:
            return
        await asyncio.gather(self._listen_forever(approvals), self._poll_forever(approvals))

    async def _listen_forever(self, approvals: ApprovalService) -> None:
        import psycopg  # the [postgres] extra: only a PostgreSQL database gets here

        said = False  # one line per interruption, not one per reconnection attempt
        while True:
            try:
                connection = await psycopg.AsyncConnection.connect(
                    libpq_url(self._database_url), autocommit=True
                )
                async with connection:
                    await connection.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
                    self.listening.set()
                    said = False
                    async for notification in connection.notifies():
                        self._heard(approvals, notification.payload)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not said:
                    logger.warning("approval notifications interrupted (%s); reconnecting", error)
                    said = True
            finally:
                self.listening.clear()
            await asyncio.sleep(RECONNECT_SECONDS)

    def _heard(self, approvals: ApprovalService, payload: str) -> None:
        try:
            message = json.loads(payload)
            origin, approval_id = message["node"], message["approval"]
        except (ValueError, KeyError, TypeError):
            return
        if origin != self._cluster.node_id and isinstance(approval_id, str):
            self._spawn(self._relay(approvals, approval_id))

    async def _relay(self, approvals: ApprovalService, approval_id: str) -> None:
        approval = await self._db.call(crud.get_approval, approval_id=approval_id)
        if approval is not None:
            await approvals.relay(approval)

    async def _poll_forever(self, approvals: ApprovalService) -> None:
        since = datetime.now(UTC) - POLL_OVERLAP
        while True:
            await asyncio.sleep(POLL_SECONDS)
            started = datetime.now(UTC)
            try:
                await self.poll_once(approvals, since)
                since = started - POLL_OVERLAP
            except DatabaseUnavailableError:
                pass  # the database's outage log says so, once per outage
            except Exception:
                logger.exception("polling approvals failed")

    async def poll_once(self, approvals: ApprovalService, since: datetime) -> None:
        for approval in await self._db.call(store.approvals_changed_since, since=since):
            self._spawn(approvals.relay(approval))
        unsettled = await self._db.call(
            store.decided_but_waiting, me=self._cluster.node_id, cutoff=self._cluster.cutoff()
        )
        for approval in unsettled:
            self._spawn(approvals.settle_missed(approval))

    # --- bookkeeping --------------------------------------------------------------------------

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("relaying an approval failed", exc_info=task.exception())

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
