"""The files use-cases as the routes, the MCP tools and the CLI (through the routes) call them:
locate the path, judge it by the policy's `files` rules, hold a `prompt` for a human, record
the operation, and move the bytes (docs/api.md#files)."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO, Literal

import anyio.to_thread

from app.approvals.service import ApprovalService, new_approval_id
from app.core.auth import Principal
from app.core.config import Settings
from app.core.errors import (
    ApprovalRejectedError,
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PolicyDeniedError,
    StaleApprovalError,
)
from app.core.random_ids import random_token
from app.files.approval import WITHDRAWN_REASON, FileApprovals
from app.files.paths import (
    PROCESS_FILES,
    Located,
    locate,
    make_directories,
    missing_directories,
    names_a_directory,
    os_error,
    workspace_roots,
)
from app.files.transfer import (
    FileStat,
    Links,
    Upload,
    describe,
    judged_links,
    links_of,
    open_regular,
    read_at,
)
from app.governance.service import PolicyService
from app.policy.engine import PolicyDocument
from app.policy.file_rules import (
    FileAccess,
    FileVerdict,
    judge_file,
    judge_other_names,
    outranks,
    stricter,
)
from app.sandbox.hidden import HiddenPaths
from app.sandbox.program import server_files
from app.schemas.files import FileOperationPublic
from app.store import crud
from app.store.db import Database
from app.store.models import FileOperation
from app.store.timestamps import aware_utc

logger = logging.getLogger("shellgate.files")

Op = Literal["read", "write", "stat"]
# Uploads reach the disk in writes of up to this much: few thread hops, bounded memory.
WRITE_BATCH_BYTES = 1024 * 1024


def new_file_operation_id() -> str:
    return "fo_" + random_token(15)


def parse_mode(text: str | None) -> int | None:
    """An octal mode (`644`, `0755`, `0o600`) → its value; 422 for anything else, and for a
    setuid or setgid mode: a sandboxed command cannot make such a file (the seccomp filter
    refuses the mode, docs/sandbox.md#system-calls), so an upload may not make one either (the
    sticky bit grants nothing: allowed)."""
    if text is None or text == "":
        return None
    digits = text.lower().removeprefix("0o")
    if not digits or len(digits) > 5 or any(c not in "01234567" for c in digits):
        raise InvalidRequestError(f"mode {text!r} is not an octal mode such as 0644")
    value = int(digits, 8)
    if value > 0o7777:
        raise InvalidRequestError(f"mode {text!r} is larger than 07777")
    if value & (stat.S_ISUID | stat.S_ISGID):
        raise InvalidRequestError(
            f"mode {text} sets the setuid or setgid bit; shellgate does not create such files"
        )
    return value


@dataclass(frozen=True, slots=True)
class Pending:
    """A prompted operation still waiting for its human: answered 202 with its record."""

    record: FileOperationPublic


@dataclass(frozen=True, slots=True)
class Readable:
    located: Located
    stat: os.stat_result  # taken on `file`
    file: BinaryIO  # open on what was judged; whoever sends the bytes closes it
    record: FileOperation  # the read's, already `completed`: its bytes start to go out


def operation_public(record: FileOperation) -> FileOperationPublic:
    return FileOperationPublic(
        id=record.id,
        owner=record.owner,
        op=record.op,
        path=record.path,
        resolved_path=record.resolved_path,
        size=record.size,
        mode=None if record.mode is None else f"{record.mode:04o}",
        sha256=record.sha256,
        verdict=record.verdict,
        reason=record.reason,
        state=record.state,
        message=record.message,
        approval_id=record.approval_id,
        execution_id=None,
        created_at=aware_utc(record.created_at),
        finished_at=None if record.finished_at is None else aware_utc(record.finished_at),
    )


class FileService:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        policy: PolicyService,
        approvals: ApprovalService,
        file_approvals: FileApprovals,
        until_stopping: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._settings = settings
        # A call holding for a decision answers (202) as soon as the server starts stopping,
        # as a held command does: the approval stays pending for the next instance.
        self._until_stopping = until_stopping
        self._db = db
        self._policy = policy
        # Asked through `approvals`, which hand every decision on a file operation to
        # `file_approvals` (which named its handler to them as it was built).
        self._asking = approvals
        self._approvals = file_approvals
        self.max_bytes = settings.files_max_bytes
        self._hidden_of: tuple[PolicyDocument, HiddenPaths] | None = None
        # Read-only to every command wherever it lies (app/sandbox/program.py): to uploads too.
        self._program = HiddenPaths(server_files().program)

    @property
    def _hidden(self) -> HiddenPaths:
        """What the sandbox hides from commands under the policy in force: the server's own
        paths and the configured list, and the policy's `sandbox.hidden` (built once per
        policy version, as each is in force)."""
        document = self._policy.document
        if self._hidden_of is None or self._hidden_of[0] is not document:
            self._hidden_of = (document, HiddenPaths(self._policy.sandbox_profile().hidden))
        return self._hidden_of[1]

    # --- judging ----------------------------------------------------------------------------

    async def locate(self, requested: str) -> Located:
        return await anyio.to_thread.run_sync(locate, requested, str(self._settings.workspace))

    def judge(
        self,
        access: FileAccess,
        located: Located,
        also: tuple[str, ...] = (),
        links: Links | None = None,
    ) -> FileVerdict:
        """`also`: more paths the operation writes (the directories `parents=true` makes),
        each judged as a write; the strictest verdict of all decides. `links`: the hard links
        of the regular file a read leads to; with more than one, its other names count too
        (docs/policy.md#hard-links). A write never reaches them: it replaces the name it is
        given by a new file (`Upload`)."""
        # What no command can see, no file operation reaches either, whatever the rules say.
        if (process_file := located.in_process_files()) is not None:
            return FileVerdict(
                "deny",
                f"{process_file} is in {PROCESS_FILES}, which the files API never serves: a "
                "sandboxed command sees there only its own processes (docs/sandbox.md)",
                None,
                process_file,
            )
        if access == "write":
            for path in (located.path, located.resolved, *also):
                if (program := self._program.covering(path)) is not None:
                    return FileVerdict(
                        "deny",
                        f"{program} is the server's own program, which no command may change "
                        "and no upload either (docs/sandbox.md#the-servers-program)",
                        None,
                        path,
                    )
        for path in (located.path, located.resolved, *also):
            if (hidden := self._hidden.covering(path)) is not None:
                return FileVerdict(
                    "deny", f"{hidden} is hidden by the sandbox (docs/sandbox.md)", None, path
                )
        if links is not None and links.hidden is not None:
            return FileVerdict(
                "deny",
                f"{located.path} is another name (a hard link) of {links.hidden}, which is "
                "hidden by the sandbox (docs/sandbox.md)",
                None,
                located.path,
            )
        rules = self._policy.document.files
        verdict = judge_file(
            rules,
            access,
            (located.path, located.resolved, *also),
            workspace_roots(str(self._settings.workspace)),
        )
        count = 1 if links is None else links.count
        return stricter(verdict, judge_other_names(rules, access, located.path, count))

    async def _links(self, located: Located) -> Links | None:
        return await anyio.to_thread.run_sync(judged_links, located, self._hidden)

    def _check_links(self, record: FileOperation, located: Located, links: Links | None) -> None:
        """The path was judged before the file was opened; `links` are those of the descriptor
        actually read. Links it gained in between that would have made the verdict stricter
        stop the operation here: a hard link swapped in after the judgement reads nothing."""
        if links is None:
            return
        now = self.judge("read", located, links=links)
        if not outranks(now.approval, record.verdict):
            return
        if now.approval == "deny":
            raise PolicyDeniedError(now.reason, details={"file_operation_id": record.id})
        raise ConflictError(
            f"{located.path} has {links.count} hard links now, more than when it was judged; ask "
            f"again ({now.reason})"
        )

    async def _authorize(
        self,
        principal: Principal,
        op: Op,
        located: Located,
        *,
        approval_id: str | None,
        approval_wait: float,
        size: int | None = None,
        mode: int | None = None,
        making: tuple[str, ...] = (),
    ) -> FileOperation | Pending:
        """The operation's record in state `running` when it may go ahead; Pending while a
        human has not decided; raises when it is denied or rejected. Approvers decide, they
        do not move files (as they do not run commands)."""
        principal.require("agent", "admin")
        links = None if op == "write" else await self._links(located)
        verdict = self.judge("write" if op == "write" else "read", located, making, links)
        record = FileOperation(
            id=new_file_operation_id(),
            owner=principal.name,
            op=op,
            path=located.path,
            resolved_path=located.resolved,
            size=size,
            mode=mode,
            verdict=verdict.approval,
            reason=verdict.reason,
            state="running",
            created_at=datetime.now(UTC),
        )
        if verdict.approval == "deny":
            record.state, record.message = "denied", verdict.reason
            record.finished_at = datetime.now(UTC)
            await self._db.call(crud.insert_file_operation, record=record)
            logger.info("file %s by %s denied: %s", op, principal.name, verdict.reason)
            raise PolicyDeniedError(verdict.reason, details={"file_operation_id": record.id})
        if op == "write" and size is not None and size > self.max_bytes:
            refused = self._too_large()
            record.state, record.message = "failed", refused.message
            record.finished_at = datetime.now(UTC)
            await self._db.call(crud.insert_file_operation, record=record)
            raise refused
        if verdict.approval == "allow":
            return await self._db.call(crud.insert_file_operation, record=record)
        if approval_id:
            return await self._claim(principal, op, located, approval_id, approval_wait)
        record.state = "awaiting_approval"
        record.approval_id = new_approval_id()
        future = self._approvals.waiter(record.approval_id)
        try:
            await self._approvals.request(
                record,
                _describe(op, located, size, mode, making, links),
                verdict.reason,
            )
            if approval_wait > 0:
                await self._hold(future, approval_wait)
        finally:
            self._approvals.forget(record.approval_id, future)
        return await self._take(record.id, record.approval_id)

    async def _claim(
        self, principal: Principal, op: Op, located: Located, approval_id: str, wait: float
    ) -> FileOperation | Pending:
        """A retry naming the approval an earlier call asked for: the same operation on the same
        path, by the same caller; it runs once, whoever claims it first."""
        record = await self._db.call(crud.file_operation_by_approval, approval_id=approval_id)
        if record is None or record.owner != principal.name:
            raise NotFoundError(f"no file operation of yours waits on approval {approval_id}")
        if record.op != op or record.path != located.path:
            raise ConflictError(
                f"approval {approval_id} is for the {record.op} of {record.path}, not this call"
            )
        if record.resolved_path != located.resolved:
            raise StaleApprovalError(
                f"{located.path} now leads to {located.resolved}, not to the "
                f"{record.resolved_path} the approver was shown"
            )
        if record.state == "awaiting_approval" and wait > 0:
            # Registered before the approval is read, so that a decision in between is seen.
            future = self._approvals.waiter(approval_id)
            try:
                approval = await self._db.call(crud.get_approval, approval_id=approval_id)
                if approval is not None and approval.state == "pending":
                    await self._hold(future, wait)
            finally:
                self._approvals.forget(approval_id, future)
        return await self._take(record.id, approval_id)

    async def _hold(self, decision: asyncio.Future[Any], seconds: float) -> None:
        """Until the decision, `seconds`, or the server starting to stop: whichever is first."""
        waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(asyncio.shield(decision))}
        if self._until_stopping is not None:
            waits.add(asyncio.ensure_future(self._until_stopping()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _take(self, operation_id: str, approval_id: str) -> FileOperation | Pending:
        if await self._db.call(
            crud.claim_file_operation,
            operation_id=operation_id,
            from_state="approved",
            to_state="running",
        ):
            record = await self._db.call(crud.file_operation_by_approval, approval_id=approval_id)
            assert record is not None
            return record
        record = await self._db.call(crud.file_operation_by_approval, approval_id=approval_id)
        assert record is not None
        if record.state == "awaiting_approval":
            approval = await self._db.call(crud.get_approval, approval_id=approval_id)
            if approval is None or approval.state == "pending":
                return Pending(operation_public(record))
            # Decided without this replica hearing of it yet (another replica's decision).
            await self._approvals.settle(record, approval)
            return await self._take(operation_id, approval_id)
        if record.state == "rejected":
            raise ApprovalRejectedError(
                record.message or f"approval {approval_id} was not given",
                details={"approval_id": approval_id, "file_operation_id": record.id},
            )
        raise ConflictError(f"approval {approval_id} was already used ({record.state})")

    async def _finish(
        self, record: FileOperation, state: str, *, level: int = logging.INFO, **values: Any
    ) -> None:
        logger.log(
            level,
            "file %s of %s by %s: %s (%s)",
            record.op,
            record.path,
            record.owner,
            state,
            values.get("message") or f"{values.get('size')} bytes",
        )
        values = {"state": state, "finished_at": datetime.now(UTC), **values}
        await self._db.call(crud.update_file_operation, operation_id=record.id, values=values)

    def _too_large(self) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"the file is larger than this server accepts ({self.max_bytes} bytes; "
            "SHELLGATE_FILES_MAX_BYTES)",
            details={"max_bytes": self.max_bytes},
        )

    # --- the operations -----------------------------------------------------------------------

    async def open_read(
        self,
        principal: Principal,
        requested: str,
        *,
        approval_id: str | None = None,
        approval_wait: float = 30,
        accept: Callable[[Readable], None] | None = None,
    ) -> Readable | Pending:
        """What a download sends (the route streams it, `Range` included); recorded as the
        server starts sending it. `accept` may still refuse it (an AppError: a `Range` that
        does not fit the file), which is then recorded as the read's failure."""
        located = await self.locate(requested)
        authorized = await self._authorize(
            principal, "read", located, approval_id=approval_id, approval_wait=approval_wait
        )
        if isinstance(authorized, Pending):
            return authorized
        file: BinaryIO | None = None
        try:
            opened, info = await anyio.to_thread.run_sync(open_regular, located)
            file = opened
            links = await anyio.to_thread.run_sync(links_of, info, self._hidden)
            self._check_links(authorized, located, links)
            readable = Readable(located, info, opened, authorized)
            if accept is not None:
                accept(readable)
        except Exception as error:
            if file is not None:
                file.close()
            await self._finish(authorized, "failed", message=getattr(error, "message", None))
            raise
        await self._finish(authorized, "completed", size=readable.stat.st_size)
        return readable

    async def read_cut_short(self, readable: Readable, why: str) -> None:
        """The file shrank while its bytes went out: the read, recorded `completed` as they
        started to, did not complete after all (the client got a body cut short)."""
        await self._finish(readable.record, "failed", level=logging.WARNING, message=why)

    async def read_range(
        self,
        principal: Principal,
        requested: str,
        *,
        offset: int,
        limit: int,
        approval_id: str | None = None,
        approval_wait: float = 30,
    ) -> tuple[bytes, int] | Pending:
        """A window of a file (for the MCP tools, which answer in one message): its bytes and
        the file's size, judged and recorded as a read."""
        readable = await self.open_read(
            principal, requested, approval_id=approval_id, approval_wait=approval_wait
        )
        if isinstance(readable, Pending):
            return readable
        try:
            with readable.file:
                data = await anyio.to_thread.run_sync(read_at, readable.file, offset, limit)
        except OSError as error:
            raise os_error(error, readable.located.path) from None
        return data, readable.stat.st_size

    async def stat(
        self,
        principal: Principal,
        requested: str,
        *,
        sha256: bool = False,
        approval_id: str | None = None,
        approval_wait: float = 30,
    ) -> FileStat | Pending:
        located = await self.locate(requested)
        authorized = await self._authorize(
            principal, "stat", located, approval_id=approval_id, approval_wait=approval_wait
        )
        if isinstance(authorized, Pending):
            return authorized
        try:
            result = await anyio.to_thread.run_sync(
                lambda: describe(located, with_sha256=sha256, hidden=self._hidden)
            )
            self._check_links(authorized, located, result.links)
        except Exception as error:
            await self._finish(authorized, "failed", message=getattr(error, "message", None))
            raise
        await self._finish(authorized, "completed", size=result.size, sha256=result.sha256)
        return result

    async def write(
        self,
        principal: Principal,
        requested: str,
        body: AsyncIterator[bytes],
        *,
        declared_size: int | None,
        mode: int | None,
        approval_id: str | None = None,
        approval_wait: float = 30,
        parents: bool = False,
    ) -> FileOperationPublic | Pending:
        """Stream `body` into place: never more than one batch in memory; over the cap → 413
        and the old file untouched; a failure of any kind leaves no temporary file behind.
        `parents`: the missing directories are made first (as `mkdir -p`), each one judged by
        the files rules as a write; they stay if the upload then fails."""
        if names_a_directory(requested):
            # `new/` would otherwise become a file called `new`.
            raise InvalidRequestError(
                f"{requested} names a directory (it ends with `/`, `.` or `..`): "
                "give the file's own name"
            )
        located = await self.locate(requested)
        making: list[str] = []
        if parents:
            making = await anyio.to_thread.run_sync(missing_directories, located)
        authorized = await self._authorize(
            principal,
            "write",
            located,
            approval_id=approval_id,
            approval_wait=approval_wait,
            size=declared_size,
            mode=mode,
            making=tuple(making),
        )
        if isinstance(authorized, Pending):
            return authorized
        upload = Upload(located, mode)

        def make_and_open() -> None:
            make_directories(making, located.path)
            upload.open()

        try:
            await anyio.to_thread.run_sync(make_and_open)
            batch = bytearray()
            received = 0
            async for chunk in body:
                received += len(chunk)
                if received > self.max_bytes:
                    raise self._too_large()
                batch += chunk
                if len(batch) >= WRITE_BATCH_BYTES:
                    await anyio.to_thread.run_sync(upload.write, bytes(batch))
                    batch.clear()
            if batch:
                await anyio.to_thread.run_sync(upload.write, bytes(batch))
            digest = await anyio.to_thread.run_sync(upload.commit)
        except BaseException as error:
            await anyio.to_thread.run_sync(upload.abort)
            message = getattr(error, "message", None) or "the upload ended before its last byte"
            with anyio.CancelScope(shield=True):
                await self._finish(authorized, "failed", message=message, size=upload.size)
            raise
        await self._finish(
            authorized, "completed", size=upload.size, sha256=digest, mode=upload.mode
        )
        record = await self._db.call(crud.file_operation_by_id, operation_id=authorized.id)
        assert record is not None
        return operation_public(record)

    async def check(self, requested: str, access: FileAccess) -> tuple[Located, FileVerdict]:
        """The dry run: the verdict for `access` to `requested`, judged as a real call would
        be (a read counts the file's hard links); nothing is recorded."""
        located = await self.locate(requested)
        links = None if access == "write" else await self._links(located)
        return located, self.judge(access, located, links=links)

    async def list(self, principal: Principal, *, limit: int) -> list[FileOperationPublic]:
        owner = None if principal.reads_everything else principal.name
        records = await self._db.call(crud.list_file_operations, owner=owner, limit=limit)
        return [operation_public(record) for record in records]

    async def cancel(self, principal: Principal, operation_id: str) -> FileOperationPublic:
        """Withdraw the approval a prompted operation awaits: its approval ends `expired`, the
        operation `rejected`, and a call holding for it (or a retry naming the approval)
        answers 403 `approval_rejected`. Only its owner or an admin; one that no longer awaits
        a decision is 409."""
        record = await self._db.call(crud.file_operation_by_id, operation_id=operation_id)
        record = principal.readable(record, f"file operation {operation_id}")
        if record.owner != principal.name and not principal.is_admin:
            raise ForbiddenError("only the owner or an admin can cancel this file operation")
        if record.state != "awaiting_approval" or record.approval_id is None:
            raise ConflictError(f"file operation {operation_id} is already {record.state}")
        withdrawn = await self._asking.withdraw(
            record.approval_id, by=principal.name, reason=WITHDRAWN_REASON
        )
        approval = await self._db.call(crud.get_approval, approval_id=record.approval_id)
        if approval is not None and approval.state != "pending":
            # Withdrawn here, or decided just before: either way the record follows it now.
            await self._approvals.settled(approval)
        record = await self._db.call(crud.file_operation_by_id, operation_id=operation_id)
        assert record is not None
        if not withdrawn:
            raise ConflictError(f"file operation {operation_id} is already {record.state}")
        return operation_public(record)


def _describe(
    op: Op,
    located: Located,
    size: int | None,
    mode: int | None,
    making: tuple[str, ...] = (),
    links: Links | None = None,
) -> str:
    """What the approver sees as the "command" of a prompted file operation."""
    target = located.path
    if located.resolved != located.path:
        target += f" (-> {located.resolved})"
    details = []
    if size is not None:
        details.append(f"{size} bytes")
    if mode is not None:
        details.append(f"mode {mode:04o}")
    if links is not None:
        details.append(f"{links.count} hard links")
    if making:
        details.append("making " + ", ".join(f"{directory}/" for directory in making))
    suffix = f" ({', '.join(details)})" if details else ""
    return f"[file {op}] {target}{suffix}"
