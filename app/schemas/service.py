"""Wire models of the service itself: health, info and the MCP tool objects."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.sandbox import SandboxInfo


class ToolObject(BaseModel):
    """An MCP tool object (name, description, inputSchema)."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(Health):
    recovery: Literal["running", "done"] = Field(
        description="`running` while the long output logs a previous run lost are re-read "
        "(their records get their output then); new work is taken meanwhile."
    )


class Caller(BaseModel):
    """Who the request's token names: what the console shows as signed in."""

    name: str
    role: Literal["admin", "approver", "agent"]


class EnvironmentInfo(BaseModel):
    """What a command inherits of the server's environment (docs: api.md, The process)."""

    model_config = ConfigDict(populate_by_name=True)

    inherit: Literal["all", "core", "none"] = Field(
        description="The base: all of the server's variables, the core ones (PATH, HOME, USER, "
        "LANG, ...) or none (`SHELLGATE_COMMAND_ENV_INHERIT`)."
    )
    exclude: list[str] = Field(
        description="Case-insensitive name globs kept back from commands, credentials by "
        "default (`SHELLGATE_COMMAND_ENV_EXCLUDE`); a value that is a URL with a password is "
        "kept back too."
    )
    passed: list[str] = Field(
        alias="pass",
        description="Name globs inherited whatever the other two say "
        "(`SHELLGATE_COMMAND_ENV_PASS`).",
    )


class Info(BaseModel):
    version: str
    caller: Caller = Field(description="The token's principal: its name and role.")
    node: str = Field(description="This replica's node id (`SHELLGATE_NODE_ID`, GET /v1/nodes).")
    max_jobs: int
    running_jobs: int
    cluster_running_jobs: int | None = Field(
        default=None,
        description="Jobs running on every replica sharing the database, counted against "
        "`max_jobs` (null on SQLite, a single node's database).",
    )
    limits: dict[str, Any]
    confinement: Literal["cgroup2", "cgroup1", "rlimit"]
    execution_limits: dict[str, int | None] = Field(
        description="The server's per-execution limits (null: none); requests may only lower them."
    )
    total_limits: dict[str, int | None] = Field(
        description="What all running commands together may use (`memory_mb`, `processes`; "
        "null: no such limit): the server keeps the rest for itself. Set with a cgroup "
        "backend only (docs: operations.md, Confinement)."
    )
    sandbox: SandboxInfo = Field(description="The kernel boundary around every command.")
    environment: EnvironmentInfo = Field(
        description="What a command inherits of the server's environment; never the "
        "server's own SHELLGATE_* settings. A request's `env` is added to it as sent."
    )
    oidc_issuer: str | None = Field(
        default=None,
        description="The OpenID Connect issuer whose JWTs are accepted beside the static "
        "tokens (`SHELLGATE_OIDC_ISSUER`); null when only static tokens are.",
    )


class NodePublic(BaseModel):
    id: str
    url: str | None = Field(description="Where the other replicas reach it (SHELLGATE_NODE_URL).")
    version: str
    started_at: datetime
    last_heartbeat: datetime
    alive: bool = Field(description="Heartbeat within `SHELLGATE_NODE_TIMEOUT` seconds.")
    stopping: bool = Field(
        description="Its graceful stop has begun (SIGTERM): the other replicas answer from the "
        "database what they would forward to it. Cleared when it starts again."
    )
    current: bool = Field(description="The replica answering this request.")


class NodesPublic(BaseModel):
    data: list[NodePublic]
