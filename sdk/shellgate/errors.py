"""The SDK's exceptions: every server refusal is an `ApiError` (a subclass per HTTP status)
carrying the error envelope's `code`, `message`, `details`, `request_id` and the `Retry-After`
seconds; a server that cannot be reached is `ServerUnreachableError`. Callers never see an
httpx or websockets exception."""

from __future__ import annotations

from typing import Any


class ShellgateError(Exception):
    """The base of every exception the SDK raises."""


class ServerUnreachableError(ShellgateError):
    """No answer: refused connection, unknown host, timeout, a stream that kept breaking."""


class ApiError(ShellgateError):
    """The server answered with an error status (docs/api.md#error-envelope-and-codes)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}
        self.request_id = request_id
        # Seconds the server asked the caller to wait before trying again (429, 503, 507).
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, {self.message!r})"


class AuthenticationError(ApiError):
    """401: no token, an unknown token, an expired or used ticket."""


class PermissionDeniedError(ApiError):
    """403: the role may not do this, the policy denied it, or its approval was rejected."""


class NotFoundError(ApiError):
    """404: an unknown id, or one the caller may not see."""


class ConflictError(ApiError):
    """409: the action does not fit the current state (e.g. cancelling a finished run)."""


class InvalidRequestError(ApiError):
    """422: refused input (`invalid_request`, `validation_error`, `intercepted`)."""


class RateLimitedError(ApiError):
    """429: the job cap or the pending-approvals cap; `retry_after` says when to try again."""


class ServerError(ApiError):
    """5xx: the server is stopping, its database or storage is unavailable, or a bug."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: InvalidRequestError,
    429: RateLimitedError,
}


def api_error(
    status: int,
    code: str,
    message: str,
    *,
    details: dict[str, Any] | None = None,
    request_id: str | None = None,
    retry_after: float | None = None,
) -> ApiError:
    """The exception class that fits `status`."""
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return kind(
        status,
        code,
        message,
        details=details,
        request_id=request_id,
        retry_after=retry_after,
    )


class ApprovalPendingError(ShellgateError):
    """A file transfer the policy prompts for, and nobody decided within `approval_wait`:
    once it is approved, send the same call again with `approval_id=error.approval_id`."""

    def __init__(self, operation: Any) -> None:
        self.operation = operation  # the FileOperation record (state awaiting_approval)
        self.approval_id: str = operation.approval_id or ""
        super().__init__(
            f"the {operation.op} of {operation.path} awaits approval {self.approval_id} "
            f"({operation.reason})"
        )


class TransferError(ShellgateError):
    """A file transfer arrived other than it was sent: the stored sha256 differs from the
    bytes sent, or the file changed on the server while a download resumed."""
