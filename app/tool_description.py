"""The MCP tool object that describes `POST /v1/executions` to a model (`GET /v1/tool`)."""

from __future__ import annotations

from typing import Any

from app.config import Settings
from app.schemas import ExecutionCreate


def execution_tool(settings: Settings) -> dict[str, Any]:
    schema = ExecutionCreate.model_json_schema(by_alias=True)
    schema.pop("title", None)
    threshold = settings.auto_background_ms / 1000
    background = (
        f"A call still running after {threshold:g} s becomes a background job: the answer is "
        "202 with the output so far, and `GET /v1/executions/{id}?wait=N` returns the result."
        if threshold > 0
        else "Use `async: true` for long commands and poll `GET /v1/executions/{id}?wait=N`."
    )
    description = (
        "Run a bash command (`bash -c`) and return its merged stdout and stderr. "
        "The default timeout is 300 seconds (0 disables it; values are clamped to 1-3600). "
        f"{background} "
        "Output over the inline window (20 KiB head + 50 KiB tail) is elided in the middle; "
        "the full log stays readable as artifact://<id> through "
        "`GET /v1/executions/{id}/output?offset=&limit=`. "
        f"At most {settings.max_jobs} background jobs run at once. "
        "Commands pass the server's policy: some are denied, some wait for a human approval."
    )
    return {"name": "bash", "description": description, "inputSchema": schema}
