"""The SDK as a package of its own: it imports without the server's stack, its models
declare exactly the fields the API's schema has, and its stream bookkeeping passes each log
byte once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from shellgate import models
from shellgate.frames import ExitFrame, GapFrame, OutputFrame, StateFrame, StreamCursor

ROOT = Path(__file__).resolve().parents[2]
SERVER_STACK = (
    "fastapi",
    "starlette",
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "uvicorn",
    "tree_sitter",
    "tree_sitter_bash",
    "re2",
    "typer",
    "app.store.models",
    "app.schemas",
    "app.core.config",
    "app.policy.engine",
    "app.store.db",
    "app.main",
)


def test_importing_the_sdk_loads_nothing_of_the_server() -> None:
    probe = "import json, sys; import shellgate; print(json.dumps(sorted(m for m in sys.modules)))"
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
    )
    assert "httpx" in loaded and "websockets" in loaded and "shellgate" in loaded
    offending = [
        name
        for name in loaded
        if any(name == banned or name.startswith(banned + ".") for banned in SERVER_STACK)
    ]
    assert offending == []


SCHEMA_OF_MODEL: dict[str, type[BaseModel]] = {
    "ExecutionPublic": models.Execution,
    "ExecutionsPublic": models.ExecutionPage,
    "ApprovalSummary": models.ApprovalSummary,
    "ApprovalPublic": models.Approval,
    "ApprovalsPublic": models.ApprovalList,
    "SessionPublic": models.Session,
    "SessionsPublic": models.SessionList,
    "ToolObject": models.ToolObject,
    "PolicyEvaluation": models.PolicyEvaluation,
    "EnvVerdictPublic": models.EnvVerdict,
    "Info": models.Info,
    "Caller": models.Caller,
    "FileOperationPublic": models.FileOperation,
    "FileOperationsPublic": models.FileOperationList,
    "FileStatPublic": models.FileStat,
    "FileCheckPublic": models.FileCheck,
    "FileRule": models.FileRule,
}


@pytest.mark.parametrize("schema_name", sorted(SCHEMA_OF_MODEL))
def test_each_model_declares_the_fields_of_the_api_schema(schema_name: str) -> None:
    schemas = json.loads((ROOT / "openapi.json").read_text())["components"]["schemas"]
    wire_fields = set(schemas[schema_name]["properties"])
    model = SCHEMA_OF_MODEL[schema_name]
    declared = {field.alias or name for name, field in model.model_fields.items()}
    assert declared == wire_fields
    required = set(schemas[schema_name].get("required", []))
    optional_here = {
        field.alias or name for name, field in model.model_fields.items() if not field.is_required()
    }
    # A field the API always sends may be optional here, never the other way round.
    assert not (optional_here - wire_fields)
    assert required <= wire_fields


def test_the_cursor_drops_replayed_bytes_and_trims_overlaps() -> None:
    cursor = StreamCursor()
    assert cursor.accept(StateFrame("running")) == StateFrame("running")
    assert cursor.accept(OutputFrame(0, b"hello ", "stdout")) is not None
    # A reconnect replays the state and part of what was delivered.
    assert cursor.accept(StateFrame("running")) is None
    assert cursor.accept(OutputFrame(0, b"hel", "stdout")) is None
    assert cursor.accept(OutputFrame(3, b"lo world", "stdout")) == OutputFrame(
        6, b"world", "stdout"
    )
    assert cursor.offset == 11
    assert cursor.accept(GapFrame(5, 11)) is None
    assert cursor.accept(GapFrame(11, 90)) == GapFrame(11, 90)
    assert cursor.offset == 90
    assert cursor.accept(StateFrame("completed")) == StateFrame("completed")
    exit_frame = ExitFrame("completed", 0, None)
    assert cursor.accept(exit_frame) == exit_frame
