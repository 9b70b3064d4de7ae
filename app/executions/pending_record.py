"""One database write for a foreground call that ends quickly.

A plain foreground call (a session's too; no PTY, no approval, not streamed) does not insert its
`running` row at the spawn. Instead, in the spawn's worker-thread hop, the row is appended to
this node's *intent journal* (`<data_dir>/pending-records/<node id>.journal`, a page-cache
write, no fsync). Then either

- the command ends before `foreground_record_delay_ms` (or before its caller's answer is due):
  the terminal row is inserted in one statement, in the same hop that ends its unit, and the
  journal says the intent is resolved; or
- it is still running at that moment (or its caller is answered early): the `running` row is
  inserted then, the intent resolved, and the end is the usual update.

Crash safety: a server that dies (SIGKILL, OOM) between the spawn and the insert leaves the
intent unresolved in its journal. The next start (`recover_pending_records`, before the recovery
of `running` rows) inserts every unresolved intent whose row does not exist as a `running` row;
the usual recovery then kills its process group behind the pid-reuse guard and records it `lost`
with its output, like any execution that was running when the server died. No record is lost;
a call is only unknown to the registry (lists, another client's GET) for at most the delay. The
page cache survives a process crash; an OS crash can lose the journal's newest lines, as it can
lose SQLite's last WAL commits (`synchronous=NORMAL`).

Why a journal and not a file per call (as before 2026-12-02, whose `<id>.json` files a start
still recovers): on ext4 without a journal, as this project's VMs have, every file created in a
block group first skips, one by one, each inode freed there in the last seconds; a file made
and removed per call made every later create in the data directory pay for all of them
(bench/PROFILE.md, "Files per call"). One line appended and one more when resolved frees no
inode; the journal is emptied in place whenever nothing is pending, and rewritten whole only
if it keeps growing under calls that always overlap.

Lines: `+ <row as JSON>` for an intent, `- <id>` once resolved. One server writes a node's
journal (it holds the node's lock, app/process/instance_lock.py); a start reads every node's
journal (the data directory may be shared) but rewrites only its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from app.core.errors import DatabaseUnavailableError
from app.store import crud
from app.store.db import DATABASE_THREADS, Database
from app.store.models import Execution

logger = logging.getLogger("shellgate.executions")

PENDING_RECORDS_DIR = "pending-records"
JOURNAL_SUFFIX = ".journal"
_DATETIME_COLUMNS = ("created_at", "started_at", "finished_at")
# Past this size a journal with nothing pending is emptied; past four times it, rewritten with
# only what is pending (calls that always overlap never leave it empty).
COMPACT_BYTES: Final = 1024 * 1024


class IntentJournal:
    """This node's intent journal. Blocking calls: worker threads only."""

    def __init__(self, data_dir: Path, node_id: str, compact_bytes: int = COMPACT_BYTES) -> None:
        self.directory = data_dir / PENDING_RECORDS_DIR
        self.path = self.directory / f"{node_id or 'local'}{JOURNAL_SUFFIX}"
        self._compact_bytes = compact_bytes
        self._lock = threading.Lock()
        self._fd = -1
        self._size = 0  # what this server wrote: the file's length while it holds the lock
        self._pending: dict[str, bytes] = {}  # id -> its `+` line, for a rewrite

    def write(self, row: dict[str, Any]) -> None:
        """The row as the `running` insert would write it; OSError when it cannot be kept."""
        line = b"+ " + json.dumps(row, default=_encode).encode() + b"\n"
        with self._lock:
            self._append(line)
            self._pending[str(row["id"])] = line

    def remove(self, execution_id: str) -> None:
        """The intent's row is in the database now. A failure to say so costs nothing but a
        row the next start finds present."""
        with self._lock:
            if self._pending.pop(execution_id, None) is None:
                return
            try:
                self._append(b"- " + execution_id.encode() + b"\n")
                self._compact_if_due()
            except OSError:
                logger.warning("intent journal %s: could not resolve %s", self.path, execution_id)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _append(self, line: bytes) -> None:
        fd = self._open()
        try:
            _write_all(fd, line)
        except OSError:
            # A part written (a full disk) must not run into the next line.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            raise
        self._size += len(line)

    def _open(self) -> int:
        if self._fd < 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o600)
            self._size = os.fstat(self._fd).st_size
        return self._fd

    def _compact_if_due(self) -> None:
        if self._size <= self._compact_bytes:
            return
        if not self._pending:
            os.ftruncate(self._fd, 0)  # O_APPEND: the next line goes to the new end
            self._size = 0
        elif self._size > 4 * self._compact_bytes:
            self._rewrite(list(self._pending.values()))

    def _rewrite(self, lines: list[bytes]) -> None:
        """The journal replaced whole by `lines` (a new file renamed over it: never half)."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, b"".join(lines))
        finally:
            os.close(fd)
        os.replace(temporary, self.path)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._open()

    # --- at start ----------------------------------------------------------------------------

    def recover(self, db: Database) -> list[str]:
        """Every unresolved intent in the data directory becomes a `running` row unless its row
        exists; this node's journal is emptied after. Returns the ids inserted."""
        recovered: list[str] = []
        rejected: list[bytes] = []
        if self.directory.is_dir():
            for path in sorted(self.directory.glob(f"*{JOURNAL_SUFFIX}")):
                for line, row in read_unresolved(path):
                    outcome = _insert_intent(db, row, path)
                    if outcome is True:
                        recovered.append(str(row["id"]))
                    elif outcome is None and path == self.path:
                        rejected.append(line)
            recovered += _recover_legacy_files(db, self.directory)
        with self._lock:
            if self.path.exists():  # rejected lines come from it alone
                self._keep_rejected(rejected)
                self._rewrite([])
                self._pending.clear()
        return recovered

    def _keep_rejected(self, lines: list[bytes]) -> None:
        if not lines:
            return
        path = self.path.with_suffix(".rejected")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, b"".join(lines))
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view, written = memoryview(data), 0
    while written < len(data):
        written += os.write(fd, view[written:])


def read_unresolved(path: Path) -> list[tuple[bytes, dict[str, Any]]]:
    """The `+` lines of a journal that no `-` line resolves, with their rows."""
    try:
        data = path.read_bytes()
    except OSError:
        logger.warning("intent journal %s could not be read", path)
        return []
    pending: dict[str, tuple[bytes, dict[str, Any]]] = {}
    for line in data.splitlines(keepends=True):
        if line.startswith(b"- "):
            pending.pop(line[2:].strip().decode(errors="replace"), None)
            continue
        row = _row(line[2:]) if line.startswith(b"+ ") and line.endswith(b"\n") else None
        if row is None:  # torn by a crash during its write, before the command could run
            logger.warning("unreadable line in intent journal %s: skipped", path)
            continue
        pending[str(row["id"])] = (line, row)
    return list(pending.values())


def _row(text: bytes) -> dict[str, Any] | None:
    try:
        row = json.loads(text)
    except ValueError:
        return None
    return _decode(row) if isinstance(row, dict) and "id" in row else None


def _insert_intent(db: Database, row: dict[str, Any], source: Path) -> bool | None:
    """True: inserted; False: its row existed; None: refused (kept for an operator)."""
    try:
        return bool(db.run_in_transaction(crud.insert_execution_if_absent, row=row))
    except DatabaseUnavailableError:
        raise  # the start fails, as it does for the rest of the recovery
    except Exception:
        # Kept for an operator, never retried: one bad row must not stop every start.
        logger.exception("an intent in %s could not be recorded: kept as .rejected", source)
        return None


def _recover_legacy_files(db: Database, directory: Path) -> list[str]:
    """The one-file-per-intent form (`<id>.json`) an older version may have left."""
    recovered: list[str] = []
    for path in sorted(directory.glob("*.json")):
        try:
            row = _row(path.read_bytes())
        except OSError:
            row = None
        if row is None:
            logger.warning("unreadable intent file %s: removed", path)
            path.unlink(missing_ok=True)
            continue
        outcome = _insert_intent(db, row, path)
        if outcome is None:
            path.rename(path.with_suffix(".rejected"))
            continue
        if outcome:
            recovered.append(str(row["id"]))
        path.unlink(missing_ok=True)
    return recovered


def _encode(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot keep {type(value).__name__} in an intent")


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for column in _DATETIME_COLUMNS:
        if isinstance(row.get(column), str):
            row[column] = datetime.fromisoformat(row[column])
    return row


def recover_pending_records(db: Database, intents: IntentJournal) -> list[str]:
    """At start, before `running` rows are recovered (blocking: a worker thread)."""
    return intents.recover(db)


class PendingRecord:
    """The row of one running execution that is, so far, only an intent. On the loop."""

    def __init__(self, record: Execution, db: Database, intents: IntentJournal) -> None:
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
            await DATABASE_THREADS.run(insert)
            self._written = True
        except Exception:
            # The intent stays: the end inserts the row, or the next start recovers it.
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
        """The terminal row, whole, in one statement (blocking); then the intent is resolved."""
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
