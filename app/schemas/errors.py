"""Wire models of error answers: the `{"error": ...}` body and the 422 shapes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel


class ErrorBody(BaseModel):
    code: str = Field(description="Machine-readable error code, e.g. `policy_denied`.")
    message: str = Field(description="What went wrong, for a human or an agent to read.")
    details: dict[str, Any] = Field(
        default_factory=dict, description="Structured context (the matched rule, ids, limits)."
    )
    request_id: str | None = Field(
        default=None,
        description="The request's id (the `X-Request-ID` response header): the key to the "
        "server's log lines about it.",
    )


class ErrorResponse(BaseModel):
    """Every refusal but request-shape validation: `{"error": {code, message, details,
    request_id}}`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "code": "policy_denied",
                        "message": "Blocked by bash pattern: rm -rf *",
                        "details": {"rule": "rm -rf *"},
                        "request_id": "5f0c3e0b8a8e4d3f9b1d2c7a6e4f8a90",
                    }
                }
            ]
        }
    )

    error: ErrorBody


class ValidationIssue(BaseModel):
    """One problem pydantic found in the request (FastAPI's shape)."""

    loc: list[str | int] = Field(description="Where: `body`, `query`, `path`, then field names.")
    msg: str
    type: str
    input: Any = None
    ctx: dict[str, Any] | None = None


class RequestValidationErrorResponse(BaseModel):
    """A body, query or path value that does not fit its schema (FastAPI's 422 shape)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": [
                        {
                            "type": "missing",
                            "loc": ["body", "command"],
                            "msg": "Field required",
                            "input": {},
                        }
                    ]
                }
            ]
        }
    )

    detail: list[ValidationIssue]


class UnprocessableResponse(RootModel[RequestValidationErrorResponse | ErrorResponse]):
    """A 422: `{"detail": [...]}` when the request does not fit its schema, `{"error": ...}`
    when the server refuses a well-formed value (`invalid_request`, `intercepted`)."""
