"""One database write for a foreground call that ends quickly.

A plain foreground call (a session's too; no PTY, no approval, not streamed) does not insert its
`running` row at the spawn. Instead, in the spawn's worker-thread hop, the row is written to a
small *intent file* (`<data_dir>/pending-records/<id>.json`, a page-cache write, no fsync). Then
either

- the command ends before `foreground_record_delay_ms` (or before its caller's answer is due):
  the terminal row is inserted in one statement, in the same hop that ends its unit, and the
  intent file is removed; or
- it is still running at that moment (or its caller is answered early): the `running` row is
  inserted then, the intent file removed, and the end is the usual update.

Crash safety: a server that dies (SIGKILL, OOM) between the spawn and the insert leaves the
intent file behind. The next start (`recover_pending_records`, before the recovery of `running`
rows) inserts every intent whose row does not exist as a `running` row; the usual recovery then
kills its process group behind the pid-reuse guard and records it `lost` with its output, like
any execution that was running when the server died. No record is lost; a call is only unknown
to the registry (lists, another client's GET) for at most the delay. The page cache survives a
process crash; an OS crash can lose the file, as it can lose SQLite's last WAL commits
(`synchronous=NORMAL`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread

from app import crud
from app.db import Database
from app.errors import DatabaseUnavailableError
from app.models import Execution

logger = logging.getLogger("shellgate.executions")

PENDING_RECORDS_DIR = "pending-records"
_DATETIME_COLUMNS = ("created_at", "started_at", "finished_at")


class IntentFiles:
    """The intent files of executions whose row is not in the database yet."""

    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir / PENDING_RECORDS_DIR
        self._made = False

    def _path(self, execution_id: str) -> str:
        return os.path.join(self.directory, f"{execution_id}.json")

    def write(self, row: dict[str, Any]) -> None:
        """Blocking (a worker thread). The file holds the row as the `running` insert would."""
        if not self._made:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._made = True
        text = json.dumps(row, default=_encode)
        descriptor = os.open(self._path(row["id"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(descriptor, text.encode())
        finally:
            os.close(descriptor)

    def remove(self, execution_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(execution_id))

    def left_behind(self) -> list[tuple[Path, dict[str, Any] | None]]:
        """Every intent file with its row (None when the file cannot be read back: a crash
        during its write, which happens before the command could do anything)."""
        if not self.directory.is_dir():
            return []
        found: list[tuple[Path, dict[str, Any] | None]] = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                row = json.loads(path.read_text())
            except (OSError, ValueError):
                found.append((path, None))
                continue
            found.append((path, _decode(row) if isinstance(row, dict) else None))
        return found


def _encode(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot keep {type(value).__name__} in an intent file")


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for column in _DATETIME_COLUMNS:
        if isinstance(row.get(column), str):
            row[column] = datetime.fromisoformat(row[column])
    return row


def recover_pending_records(db: Database, intents: IntentFiles) -> list[str]:
    """At start, before `running` rows are recovered: the intents a dead server left become
    `running` rows (unless their row exists), and their files go. Blocking (a worker thread)."""
    recovered: list[str] = []
    for path, row in intents.left_behind():
        if row is None:
            logger.warning("unreadable intent file %s: removed", path)
            path.unlink(missing_ok=True)
            continue
        try:
            if db.run_in_transaction(crud.insert_execution_if_absent, row=row):
                recovered.append(str(row["id"]))
        except DatabaseUnavailableError:
            raise  # the start fails, as it does for the rest of the recovery
        except Exception:
            # Kept for an operator, never retried: one bad file must not stop every start.
            logger.exception("intent file %s could not be recorded: kept as .rejected", path)
            path.rename(path.with_suffix(".rejected"))
            continue
        path.unlink(missing_ok=True)
    return recovered


class PendingRecord:
    """The row of one running execution that is, so far, only an intent file. On the loop."""

    def __init__(self, record: Execution, db: Database, intents: IntentFiles) -> None:
        self.record = record
        self._db = db
        self._intents = intents
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self._written = False
        self._closed = False  # the end took over: it inserts the whole row

    def arm(self, delay: float) -> None:
        """Insert the `running` row after `delay` seconds unless the run ended before."""
        self._timer = asyncio.get_running_loop().call_later(delay, self._start_writing)

    def _start_writing(self) -> None:
        if self._writing is None and not self._closed:
            self._writing = asyncio.create_task(self._write_running())

    async def _write_running(self) -> None:
        row = crud.execution_row(self.record)
        execution_id = self.record.id

        def insert() -> None:
            self._db.run_in_transaction(crud.insert_execution_if_absent, row=row)
            self._intents.remove(execution_id)

        try:
            await anyio.to_thread.run_sync(insert)
            self._written = True
        except Exception:
            # The intent file stays: the end inserts the row, or the next start recovers it.
            logger.exception("could not record %s as running", execution_id)
            self._writing = None

    async def ensure_written(self) -> None:
        """Before anyone else may learn the id (an early answer): the row exists after this,
        unless the database refuses it (then the end, or the next start, writes it)."""
        if self._written or self._closed:
            return
        self._start_writing()
        if self._writing is not None:
            await asyncio.shield(self._writing)

    async def take_over_for_the_end(self) -> bool:
        """At the run's end: True if the end must insert the whole row (no `running` row was
        written), False if it updates the row as usual."""
        if self._timer is not None:
            self._timer.cancel()
        if self._writing is not None and not self._written:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._writing)
        self._closed = True
        return not self._written

    # --- the end, in the worker thread that ends the unit -----------------------------------

    def insert_final(self, values: dict[str, Any]) -> bool:
        """The terminal row, whole, in one statement (blocking); then the intent file goes."""
        row = {**crud.execution_row(self.record), **values}
        self._db.run_in_transaction(crud.insert_execution_row, row=row)
        self._intents.remove(self.record.id)
        return True

    def insert_or_finish(self, values: dict[str, Any]) -> bool:
        """A retry of `insert_final`: the row may exist since (blocking)."""
        row = {**crud.execution_row(self.record), **values}
        written = self._db.run_in_transaction(crud.insert_or_finish_execution, row=row)
        self._intents.remove(self.record.id)
        return written
