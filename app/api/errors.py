"""One table from domain errors to HTTP statuses; no traceback ever reaches a client."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from app.core import errors
from app.observability.logs import current_request_id
from app.schemas import ErrorResponse, UnprocessableResponse

logger = logging.getLogger("shellgate.api")

STATUS_BY_ERROR: dict[type[errors.AppError], int] = {
    errors.BadRequestError: 400,
    errors.InvalidRequestError: 422,
    errors.InterceptedError: 422,
    errors.UnauthenticatedError: 401,
    errors.ForbiddenError: 403,
    errors.PolicyDeniedError: 403,
    errors.ApprovalRejectedError: 403,
    errors.NotFoundError: 404,
    errors.ConflictError: 409,
    errors.OutputGoneError: 410,
    errors.SessionLostError: 410,
    errors.PayloadTooLargeError: 413,
    errors.RangeNotSatisfiableError: 416,
    errors.TooManyRequestsError: 429,
    errors.UnavailableError: 503,
    errors.StorageFullError: 507,
}

_CODE_BY_STATUS = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    429: "job_limit_reached",
}


# What each status means wherever it is documented; routes may say more (`described=`).
_STATUS_DESCRIPTIONS = {
    400: "The body is not JSON text the server can decode (`bad_request`).",
    401: "No bearer token, one the server does not know, or a JWT that does not verify "
    "(`unauthenticated`; the message says what is wrong).",
    403: "The caller's role may not do this (`forbidden`).",
    404: "No such resource, or one the caller may not see (`not_found`).",
    409: "The resource is not in a state that allows this (`conflict`).",
    410: "The execution ran, but its output log is no longer on disk (`output_gone`).",
    413: "The body is larger than the server accepts (`too_large`); nothing was kept.",
    416: "The `Range` asks for no byte of the file (`range_not_satisfiable`, header "
    "`Content-Range: bytes */<size>`).",
    422: 'The request does not fit its schema (FastAPI\'s `{"detail": [...]}`), or the '
    'server refuses a well-formed value (`{"error": ...}` with `invalid_request`).',
    429: "The background job cap is reached (`job_limit_reached`, header `Retry-After`).",
    503: "Temporarily unavailable: the server is stopping (`shutting_down`), the database "
    "does not answer (`database_unavailable`), the replica that holds the execution does "
    "not (`node_unreachable`), or a long command found no free command reader in time "
    "(`readers_busy`), or the OIDC issuer does not give the keys to check a JWT "
    "(`identity_provider_unavailable`), or the server reached its open-files limit "
    "(`descriptors_exhausted`), or the kernel refused it a process or a thread "
    "(`processes_exhausted`); retry after the `Retry-After` seconds.",
    507: "The server's data storage is full (`storage_full`): nothing was started.",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    }
}

_CONTENT_RANGE = {
    "Content-Range": {
        "description": "`bytes */<size>`: the size of the file.",
        "schema": {"type": "string", "pattern": "^bytes \\*/[0-9]+$"},
    }
}


def error_responses(
    *codes: int, described: dict[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses: the error envelope (422 also FastAPI's
    validation shape), with what the status means for this operation; and the 503 any route
    may answer (stopping, database unreachable)."""
    responses: dict[int | str, dict[str, Any]] = {}
    for code in sorted({*codes, 503}):
        description = (described or {}).get(code, _STATUS_DESCRIPTIONS[code])
        model = UnprocessableResponse if code == 422 else ErrorResponse
        responses[code] = {"model": model, "description": description}
        if code in (429, 503, 507):
            responses[code]["headers"] = _RETRY_AFTER
        if code == 416:
            responses[code]["headers"] = _CONTENT_RANGE
    return responses


def status_for(error: errors.AppError) -> int:
    # Walk the MRO so a subclass inherits its base's status.
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 400


def error_body(
    code: str, message: str, details: dict[str, object] | None = None
) -> dict[str, object]:
    # The request id lets an operator find this request's log lines.
    return {
        "error": {
            "code": code,
            "message": message,
            "details": details or {},
            "request_id": current_request_id(),
        }
    }


def app_error_response(error: errors.AppError) -> JSONResponse:
    headers: dict[str, str] = {}
    if isinstance(
        error, errors.TooManyRequestsError | errors.UnavailableError | errors.StorageFullError
    ):
        headers["Retry-After"] = str(error.retry_after_seconds)
    if isinstance(error, errors.UnauthenticatedError):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(error, errors.RangeNotSatisfiableError):
        headers["Content-Range"] = f"bytes */{error.size}"
    return JSONResponse(
        error_body(error.code, error.message, error.details),
        status_code=status_for(error),
        headers=headers,
    )


async def _on_app_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, errors.AppError)
    return app_error_response(error)


def _on_http_error(
    allowed_methods: Callable[[Scope], str],
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def answer(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        code = _CODE_BY_STATUS.get(error.status_code, "error")
        headers = dict(getattr(error, "headers", None) or {})
        if error.status_code == 405:
            headers["Allow"] = allowed_methods(request.scope)
        return JSONResponse(
            error_body(code, str(error.detail)), status_code=error.status_code, headers=headers
        )

    return answer


async def _on_validation_error(_: Request, error: Exception) -> JSONResponse:
    # FastAPI's own shape, with each rejected `input` made encodable: a lone surrogate or an
    # infinite number echoed back as-is would fail the encoding and turn the 422 into a 500.
    assert isinstance(error, RequestValidationError)
    reported = [_bounded(item) for item in error.errors()[:MAX_REPORTED_ERRORS]]
    return JSONResponse({"detail": _encodable(jsonable_encoder(reported))}, status_code=422)


# What a 422 reports of a body that fails validation everywhere: echoing all of it (each error
# carries its `input`, a missing field's input being the whole object) cost 2.2 s on the event
# loop for 100,000 wrong env values in a 1.2 MB body (RELIABILITY.md, "One request against all
# the others"). The first errors are the ones a client fixes first anyway.
MAX_REPORTED_ERRORS = 20
MAX_REPORTED_INPUT = 1024


def _bounded(item: Any) -> Any:
    """One error with its `input` left out when that is long (over MAX_REPORTED_INPUT
    characters of JSON, or about: `_longer_than` stops counting there)."""
    if isinstance(item, dict) and "input" in item and _longer_than(item["input"]):
        return {key: value for key, value in item.items() if key != "input"}
    return item


def _longer_than(value: Any, budget: int = MAX_REPORTED_INPUT) -> bool:
    """Whether `value` as JSON would be longer than `budget` characters; every step takes at
    least one off the budget, so this never looks at more than `budget` parts of it."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict | list | tuple):
            if len(item) * 2 > budget:
                return True
            budget -= 2 + len(item)
            if isinstance(item, dict):
                budget -= sum(len(str(key)) + 3 for key in item)
                pending.extend(item.values())
            else:
                pending.extend(item)
        else:
            budget -= len(item) + 2 if isinstance(item, str) else 1 + len(str(item)[:budget])
        if budget < 0:
            return True
    return False


def _encodable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_encodable(key): _encodable(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(child) for child in value]
    return value


def _passing_shortage(error: Exception) -> errors.UnavailableError | None:
    """The 503 for an error that is the host (or the server's own limits) out of descriptors,
    processes or threads, not a fault of the request or the server's code."""
    if errors.is_descriptors_exhausted(error):
        return errors.DescriptorsExhaustedError()
    reason = errors.processes_exhausted_reason(error)
    return None if reason is None else errors.ProcessesExhaustedError(reason)


async def _on_unexpected(request: Request, error: Exception) -> JSONResponse:
    # Answered outside the request middleware: it names the request id itself.
    request_id = current_request_id()
    passing = _passing_shortage(error)
    if passing is not None:
        # Not a bug of the server's: a limit of the host's or its own was reached; it passes.
        logger.warning("%s %s: %s", request.method, request.url.path, error)
        response = app_error_response(passing)
        if request_id:
            response.headers["X-Request-ID"] = request_id
        return response
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse(
        error_body("internal_error", "internal server error"),
        status_code=500,
        headers={"X-Request-ID": request_id} if request_id else None,
    )


def install_error_handlers(app: FastAPI, allowed_methods: Callable[[Scope], str]) -> None:
    """`allowed_methods`: the `Allow` of a 405 at a request's path (app/api/router.py)."""
    app.add_exception_handler(errors.AppError, _on_app_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error(allowed_methods))
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(Exception, _on_unexpected)
