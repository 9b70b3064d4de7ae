"""`openapi.json` at the repo root is generated from the app and must not go stale."""

from __future__ import annotations

import json
from pathlib import Path

from app.api.openapi_export import openapi_document

ROOT = Path(__file__).resolve().parent.parent


def test_openapi_json_is_fresh() -> None:
    committed = json.loads((ROOT / "openapi.json").read_text())
    assert committed == openapi_document(), "run `make openapi` and commit openapi.json"


def test_openapi_names_every_public_route() -> None:
    paths = openapi_document()["paths"]
    for path in (
        "/v1/executions",
        "/v1/executions/{execution_id}",
        "/v1/executions/{execution_id}/cancel",
        "/v1/executions/{execution_id}/output",
        "/v1/approvals",
        "/v1/policy",
        "/v1/policy/evaluate",
        "/v1/tool",
        "/v1/info",
        "/healthz",
        "/readyz",
    ):
        assert path in paths, path
