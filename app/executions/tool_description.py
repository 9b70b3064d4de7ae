"""The descriptions of the `bash` tool for its two audiences: the REST tool object that describes
`POST /v1/executions` to a model (`GET /v1/tool`), and the MCP `bash` tool, whose caller follows
a job through MCP tools (job_wait, read_output) and cannot call REST paths."""

from __future__ import annotations

from typing import Any

from app.core.config import Settings
from app.schemas import ExecutionCreate

RUNS = "Run a bash command (`bash -c`) and return its merged stdout and stderr. "
TIMEOUT = "The default timeout is 300 seconds (0 disables it; values are clamped to 1-3600). "
APPROVAL_WAIT_DEFAULT: float = ExecutionCreate.model_fields["approval_wait"].default
# Agents learn here that a refusal from the sandbox can be asked past, and how.
SANDBOX = (
    "Each command runs in a sandbox: it writes only inside its profile (the workspace, a "
    "private /tmp) and reaches the network the policy allows; when a command needs more, "
    "pass `sandbox: {write, network, justification}` and a human decides."
)
INLINE_WINDOW = (
    "Output over the inline window (20 KiB head + 50 KiB tail) is elided in the middle; "
)


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
        f"{RUNS}{TIMEOUT}{background} {INLINE_WINDOW}"
        "the full log stays readable as artifact://<id> through "
        "`GET /v1/executions/{id}/output?offset=&limit=`. "
        f"At most {settings.max_jobs} background jobs run at once. "
        "Commands pass the server's policy: some are denied, some wait for a human approval. "
        f"{SANDBOX}"
    )
    return {"name": "bash", "description": description, "inputSchema": schema}


def mcp_bash_description(settings: Settings) -> str:
    """The MCP `bash` tool's description: the same facts, each pointing at the MCP tool that
    follows up, and how a command held for a human approval answers."""
    threshold = settings.auto_background_ms / 1000
    background = (
        f"A call still running after {threshold:g} s becomes a background job: the answer "
        "carries the output so far and the job id; call job_wait with that id for the result, "
        "or job_cancel to stop it."
        if threshold > 0
        else "For a long command pass `async: true`, then call job_wait with the job id for "
        "the result, or job_cancel to stop it."
    )
    return (
        f"{RUNS}{TIMEOUT}{background} {INLINE_WINDOW}"
        "the full log stays readable as artifact://<id>: call read_output with the id and a "
        "byte offset to page through it. "
        f"At most {settings.max_jobs} background jobs run at once. "
        "Commands pass the server's policy: some are denied (a tool error that says why), some "
        "need a human approval. Such a call holds up to `approval_wait` seconds (default "
        f"{APPROVAL_WAIT_DEFAULT:g}) for the decision: approved in time, it runs and answers "
        "like any call; still undecided, it answers with the execution and approval ids, and "
        "job_wait with the execution id follows it. An `async: true` call never holds. "
        f"{SANDBOX}"
    )
