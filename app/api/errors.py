"""One table from domain errors to HTTP statuses; no traceback ever reaches a client."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import errors
from app.schemas import ErrorResponse

logger = logging.getLogger("shellgate.api")

STATUS_BY_ERROR: dict[type[errors.AppError], int] = {
    errors.InvalidRequestError: 422,
    errors.InterceptedError: 422,
    errors.UnauthenticatedError: 401,
    errors.ForbiddenError: 403,
    errors.PolicyDeniedError: 403,
    errors.ApprovalRejectedError: 403,
    errors.NotFoundError: 404,
    errors.ConflictError: 409,
    errors.JobLimitReachedError: 429,
    errors.UnavailableError: 503,
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


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` documenting the error envelope for these statuses."""
    return {code: {"model": ErrorResponse} for code in codes}


def status_for(error: errors.AppError) -> int:
    # Walk the MRO so a subclass inherits its base's status.
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 400


def error_body(
    code: str, message: str, details: dict[str, object] | None = None
) -> dict[str, object]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def app_error_response(error: errors.AppError) -> JSONResponse:
    headers: dict[str, str] = {}
    if isinstance(error, errors.JobLimitReachedError):
        headers["Retry-After"] = str(error.retry_after_seconds)
    if isinstance(error, errors.UnauthenticatedError):
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(
        error_body(error.code, error.message, error.details),
        status_code=status_for(error),
        headers=headers,
    )


async def _on_app_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, errors.AppError)
    return app_error_response(error)


async def _on_http_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    code = _CODE_BY_STATUS.get(error.status_code, "error")
    return JSONResponse(
        error_body(code, str(error.detail)),
        status_code=error.status_code,
        headers=getattr(error, "headers", None),
    )


async def _on_unexpected(request: Request, error: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse(error_body("internal_error", "internal server error"), status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(errors.AppError, _on_app_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
