"""This replica as a member of the cluster: its heartbeat, what it knows of the other nodes,
the job slots it takes under the shared cap, and which awaiting executions it settles."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app import __version__
from app.cluster import store
from app.core.config import Settings
from app.core.errors import DatabaseUnavailableError
from app.store.db import Database
from app.store.models import Execution, Node
from app.store.timestamps import aware_utc

logger = logging.getLogger("shellgate.cluster")

# A heartbeat several times per timeout, so that one late beat never makes a node look dead.
BEATS_PER_TIMEOUT = 3
MAX_HEARTBEAT_SECONDS = 10.0


def fence_after(timeout: float, heartbeat: float, settings: Settings) -> float:
    """Seconds without a beat after which a node ends its own commands: early enough that they
    are gone (TERM, the kill grace, KILL) before the others, checking once per heartbeat, see
    the node timeout run out; never before half the timeout, so a short blip of the database
    does not cost running work."""
    return max(timeout / 2, timeout - heartbeat - settings.kill_grace_seconds - 1)


@dataclass(frozen=True)
class NodeStatus:
    id: str
    url: str | None
    version: str
    started_at: datetime
    last_heartbeat: datetime
    alive: bool
    stopping: bool


class Cluster:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.node_id = settings.node_id
        self.url = settings.node_url or None
        self.secret = settings.cluster_secret
        self.timeout = settings.node_timeout
        self.max_jobs = settings.max_jobs
        self._db = db
        # Only a shared database has other replicas; SQLite is one node's file.
        self.shared = db.engine.dialect.name == "postgresql"
        self._releases: set[asyncio.Task[None]] = set()
        # Slots whose release found no database: released again at the next beat.
        self._unreleased: set[str] = set()
        # When this node last heartbeat (monotonic): a beat after a gap longer than the timeout
        # means the others may have declared it dead meanwhile (its sessions lost).
        self._last_beat = time.monotonic()
        self._silence_hooks: list[Callable[[], None]] = []
        # Fencing: past `fence_after` seconds without a beat that reached the database, this
        # node ends its commands itself, before another replica records them `lost`.
        self.fence_after = fence_after(self.timeout, self.heartbeat_interval, settings)
        self._fence_hooks: list[Callable[[float], object]] = []
        self._fenced = False
        # Whether another live replica was seen at the last beat: with none, nobody takes this
        # node's work over, so an outage of the database alone fences nothing.
        self._peers_seen = False
        # The last heartbeat of this node's previous run (None: a new node), read at `join`:
        # what the others recorded `lost` of its work after it is what they took over.
        self.previous_beat: datetime | None = None

    @property
    def heartbeat_interval(self) -> float:
        return min(self.timeout / BEATS_PER_TIMEOUT, MAX_HEARTBEAT_SECONDS)

    def cutoff(self) -> datetime:
        """Nodes silent since before this are dead."""
        return datetime.now(UTC) - timedelta(seconds=self.timeout)

    def is_alive(self, node: Node) -> bool:
        return node.id == self.node_id or aware_utc(node.last_heartbeat) >= self.cutoff()

    @staticmethod
    def is_stopping(node: Node) -> bool:
        """Its graceful stop has begun (`leave`): it still answers for a moment, then not."""
        return node.stopping_since is not None

    # --- membership ---------------------------------------------------------------------------

    async def join(self) -> None:
        """At start: register, note the restart, and free the job slots a previous run of this
        node held (its processes died with it and recovery records them `lost`)."""
        now = datetime.now(UTC)
        previous = await self._db.call(store.get_node, node_id=self.node_id)
        self.previous_beat = aware_utc(previous.last_heartbeat) if previous else None
        await self.beat(now)
        await self._db.call(store.restarted, node_id=self.node_id, now=now)
        await self._db.call(store.release_slots_of, node_id=self.node_id)

    async def beat(self, now: datetime | None = None) -> None:
        # The lease runs from the time written, not from the answer: measured before the write.
        attempted = time.monotonic()
        await self._db.call(
            store.heartbeat,
            node_id=self.node_id,
            url=self.url,
            version=__version__,
            now=now or datetime.now(UTC),
        )
        for execution_id in list(self._unreleased):
            await self._db.call(store.release_job_slot, execution_id=execution_id)
            self._unreleased.discard(execution_id)
        beaten, self._last_beat = self._last_beat, attempted
        self._fenced = False
        if self.shared:
            nodes = await self._db.call(store.list_nodes)
            self._peers_seen = any(
                node.id != self.node_id and self.is_alive(node) for node in nodes
            )
        if self.shared and self._last_beat - beaten > self.timeout:
            logger.warning(
                "this node was silent for %.1f s (over the node timeout): forgetting what "
                "the others may have declared lost meanwhile",
                self._last_beat - beaten,
            )
            for hook in self._silence_hooks:
                hook()

    async def leave(self) -> None:
        """The graceful stop begins: say so in this node's row before anything else of the stop
        (the server awaits this before it stops listening), so that the others answer from the
        database what they would have forwarded here, rather than reach a replica that no
        longer answers (app/cluster/forwarding.py)."""
        if not self.shared:
            return
        await self._db.call(store.mark_stopping, node_id=self.node_id, now=datetime.now(UTC))

    def when_fenced(self, hook: Callable[[float], object]) -> None:
        """Call `hook(seconds_silent)` once per outage when this node must end its work."""
        self._fence_hooks.append(hook)

    def fence_if_due(self) -> bool:
        """Past `fence_after` seconds since the last beat that reached the database, with other
        replicas around to take its work over, end this node's commands (once per outage).
        Whether it fenced now."""
        silent = time.monotonic() - self._last_beat
        if not self.shared or not self._peers_seen or self._fenced or silent < self.fence_after:
            return False
        self._fenced = True
        logger.error(
            "no heartbeat reached the database for %.1f s (node timeout %g s): ending this "
            "replica's commands before the others take them for lost",
            silent,
            self.timeout,
        )
        for hook in self._fence_hooks:
            hook(silent)
        return True

    def after_silence(self, hook: Callable[[], None]) -> None:
        """Call `hook` when a beat follows a silence longer than the node timeout."""
        self._silence_hooks.append(hook)

    async def node(self, node_id: str) -> Node | None:
        return await self._db.call(store.get_node, node_id=node_id)

    async def nodes(self) -> list[NodeStatus]:
        return [
            NodeStatus(
                id=node.id,
                url=node.url,
                version=node.version,
                started_at=aware_utc(node.started_at),
                last_heartbeat=aware_utc(node.last_heartbeat),
                alive=self.is_alive(node),
                stopping=self.is_stopping(node),
            )
            for node in await self._db.call(store.list_nodes)
        ]

    async def forget_silent(self, silent_for: timedelta) -> list[str]:
        """Drop the rows of replicas silent for longer than `silent_for` that hold no work any
        more (store.forget_silent_nodes); the ids dropped."""
        if not self.shared:
            return []
        forgotten = await self._db.call(
            store.forget_silent_nodes,
            me=self.node_id,
            silent_before=datetime.now(UTC) - silent_for,
        )
        if forgotten:
            logger.info(
                "forgot %d replicas silent for over %s: %s",
                len(forgotten),
                silent_for,
                ", ".join(forgotten),
            )
        return forgotten

    # --- the job cap across replicas (the Registry's ledger) ----------------------------------

    async def acquire(self, execution_id: str) -> bool:
        if not self.shared:
            return True  # one node: the Registry's own count is the whole truth
        return await self._db.call(
            store.acquire_job_slot,
            execution_id=execution_id,
            node_id=self.node_id,
            cap=self.max_jobs,
            now=datetime.now(UTC),
        )

    def release(self, execution_id: str) -> None:
        if not self.shared:
            return
        task = asyncio.get_running_loop().create_task(self._release(execution_id))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release(self, execution_id: str) -> None:
        try:
            await self._db.call(store.release_job_slot, execution_id=execution_id)
        except DatabaseUnavailableError:
            # Logged once per outage by the database. The cap errs on the safe side until the
            # next beat that reaches the database releases it.
            self._unreleased.add(execution_id)
        except Exception:
            # The row outlives the job until this node restarts or is declared dead; the cap
            # errs on the safe side meanwhile.
            logger.exception("releasing the job slot of %s failed", execution_id)

    async def drain(self) -> None:
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)

    async def running_jobs(self) -> int | None:
        """Jobs running on every replica (None on a single node's database)."""
        if not self.shared:
            return None
        return await self._db.call(store.count_job_slots)

    # --- who settles an execution awaiting approval -------------------------------------------

    async def settles(self, record: Execution) -> bool:
        """True when this node should start (or reject) `record` once its approval is decided:
        it holds the record, or took it over from a node that stopped heartbeating. The node
        that holds a live record hears of the decision itself (notify.py)."""
        if record.node in (None, self.node_id):
            return True
        owner = await self.node(record.node)
        if owner is not None and self.is_alive(owner):
            return False
        claimed = await self._db.call(
            store.claim_awaiting,
            execution_id=record.id,
            from_node=record.node,
            to_node=self.node_id,
        )
        if claimed:
            logger.warning(
                "node %s is silent: its approved execution %s runs here", record.node, record.id
            )
            if record.session_id is not None and record.node is not None:
                # Its session's shell went with that replica: recorded lost now (the heartbeat
                # loop would, a beat later), so that the call ends `session_lost` rather than
                # run in a fresh shell here or fail on the session's cwd as seen from here.
                await self._db.call(
                    store.lose_session,
                    session_id=record.session_id,
                    node_id=record.node,
                    now=datetime.now(UTC),
                )
            record.node = self.node_id
        return claimed
