"""Domain errors: pure Python, one code and message each. `api/errors.py` maps them to HTTP."""

from __future__ import annotations

import errno
from typing import Any


class AppError(Exception):
    code = "error"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}


class InvalidRequestError(AppError):
    code = "invalid_request"


class BadRequestError(AppError):
    """The request itself cannot be read as HTTP (a header that does not parse), as opposed
    to a readable request the server refuses (`InvalidRequestError`)."""

    code = "bad_request"


class RangeNotSatisfiableError(AppError):
    """A `Range` that asks for no byte of the file: answered with `Content-Range: bytes */size`
    so a client learns the size it can ask within."""

    code = "range_not_satisfiable"

    def __init__(self, message: str, *, size: int) -> None:
        super().__init__(message, details={"size": size})
        self.size = size


class UnauthenticatedError(AppError):
    code = "unauthenticated"


class ForbiddenError(AppError):
    code = "forbidden"


class NotFoundError(AppError):
    code = "not_found"


class ConflictError(AppError):
    code = "conflict"


class TooManyRequestsError(AppError):
    """A limit that frees up with time: the answer says when to try again (`Retry-After`)."""

    code = "too_many_requests"

    def __init__(
        self, message: str, *, retry_after_seconds: int, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, details=details)
        self.retry_after_seconds = retry_after_seconds


class StaleApprovalError(ConflictError):
    """What an approved command would run with is no longer what its approver was shown."""


class JobLimitReachedError(TooManyRequestsError):
    code = "job_limit_reached"

    def __init__(self, limit: int, retry_after_seconds: int = 5) -> None:
        super().__init__(
            f"Background job limit reached ({limit}). "
            "Wait for running jobs to finish or cancel one.",
            retry_after_seconds=retry_after_seconds,
            details={"max_jobs": limit},
        )


class PendingApprovalLimitError(TooManyRequestsError):
    code = "pending_approval_limit"

    def __init__(self, limit: int, retry_after_seconds: int) -> None:
        super().__init__(
            f"Too many pending approvals ({limit}).",
            retry_after_seconds=retry_after_seconds,
            details={"max_pending_approvals": limit},
        )


class SessionLimitError(TooManyRequestsError):
    code = "session_limit_reached"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"Too many open sessions ({limit}). Close one (DELETE /v1/sessions/{{id}}) first.",
            # Only a closed session frees a place: a minute is a back-off, not a promise.
            retry_after_seconds=60,
            details={"max_sessions": limit},
        )


class PayloadTooLargeError(AppError):
    code = "too_large"


class PolicyDeniedError(AppError):
    code = "policy_denied"


class ApprovalRejectedError(AppError):
    code = "approval_rejected"


class InterceptedError(AppError):
    code = "intercepted"


class UnavailableError(AppError):
    """A temporary condition: the client should retry after `retry_after_seconds`."""

    code = "unavailable"
    retry_after_seconds = 5


class ShuttingDownError(UnavailableError):
    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__("The server is shutting down; retry in a moment (on the next instance).")


class DatabaseUnavailableError(UnavailableError):
    code = "database_unavailable"

    def __init__(self) -> None:
        super().__init__("The database is unreachable; retry in a moment.")


class SessionLostError(AppError):
    """A session whose shell lived on a replica that stopped heartbeating: its state went with
    that replica, and no other replica pretends to be it (docs/operations.md#several-replicas)."""

    code = "session_lost"

    def __init__(self, session_id: str, node: str | None) -> None:
        super().__init__(
            f"session {session_id} was lost with replica {node}, which stopped heartbeating; "
            "its shell state is gone: open a new session",
            details={"node": node},
        )


class OutputGoneError(AppError):
    """An execution ran, but its output log is no longer in the data directory (deleted or
    lost with the disk): the record's inline output is all that is left."""

    code = "output_gone"

    def __init__(self, execution_id: str) -> None:
        super().__init__(
            f"The output log of {execution_id} is no longer on this server's disk; "
            "the record's inline output is all that is left of it."
        )


class ReadersBusyError(UnavailableError):
    """Every command reader stayed busy with other long commands for as long as a command may
    wait for one (app/policy/reader_process.py): it was not read, so it is neither allowed nor
    run."""

    code = "readers_busy"

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(
            "The server's command readers are busy with other long commands; this one was not "
            "read (nothing ran). Retry in a moment."
        )
        self.retry_after_seconds = retry_after_seconds


class DescriptorsExhaustedError(UnavailableError):
    """The server reached its open-files limit: a spawn, a log or a connection could not be
    opened. Commands holding descriptors free them as they end (docs/operations.md#open-files)."""

    code = "descriptors_exhausted"

    def __init__(self) -> None:
        super().__init__(
            "The server has reached its open-files limit: it could not open what this request "
            "needs, and did nothing. Retry in a moment."
        )


def is_descriptors_exhausted(error: BaseException) -> bool:
    """Whether `error` is this process (EMFILE) or the system (ENFILE) out of descriptors."""
    return isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE)


class ProcessesExhaustedError(UnavailableError):
    """The kernel refused the server a new process or thread: a limit on processes or memory
    above the commands' own (the host's, or the server's cgroup's) is reached
    (docs/operations.md#confinement)."""

    code = "processes_exhausted"

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"The server could not start a process ({reason}): the host's or its own cgroup's "
            "limit on processes or memory is reached, and nothing was done. Retry in a moment."
        )


def processes_exhausted_reason(error: BaseException) -> str | None:
    """Why the kernel refused the server a process or a thread (fork's EAGAIN or ENOMEM, a
    thread that could not start), or None when `error` is something else."""
    if isinstance(error, OSError) and error.errno in (errno.EAGAIN, errno.ENOMEM):
        return error.strerror or str(error)
    if isinstance(error, RuntimeError) and str(error) == "can't start new thread":
        return "a thread could not start"
    return None


class LogOwnerUnreachableError(UnavailableError):
    """The log is on the disk of the replica that ran the execution (data directories not
    shared), and that replica does not answer."""

    code = "node_unreachable"

    def __init__(self, execution_id: str, node_id: str) -> None:
        super().__init__(
            f"The output log of {execution_id} is on replica {node_id}, which does not "
            "answer; retry once it is back."
        )


class StorageFullError(AppError):
    code = "storage_full"
    # Space comes back when an operator or the retention pruning frees it: a back-off.
    retry_after_seconds = 30

    def __init__(self) -> None:
        super().__init__(
            "The server's data storage is full: nothing was started. Retry once space is freed."
        )
