"""Property-based fuzzing of every documented operation against a live server.

Valid and invalid data for each operation; the policy denies every command and every file
operation, so nothing generated runs or touches a file. Checks: no 5xx
(`not_a_server_error`) and every answer matches the documented schema for its status
(`response_schema_conformance`). Bounded: a few examples per operation, well under two minutes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from app.api.openapi_export import openapi_document
from tests.conftest import ADMIN, LiveServer, make_settings, serve
from tests.databases import Databases

# Per operation and mode (valid data, then invalid data); a deeper run sets more.
EXAMPLES_PER_OPERATION = int(os.environ.get("SHELLGATE_FUZZ_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def deny_all(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("fuzz")
    policy = tmp / "deny-all.json"
    # Files too: no generated path is read or written, inside the workspace or out.
    files = {"workspace": "deny", "outside": "deny"}
    policy.write_text(json.dumps({"default": "deny", "rules": [], "files": files}))
    with serve(make_settings(tmp, module_databases.new(), policy_file=policy)) as live:
        yield live


def test_no_generated_request_gets_a_server_error_or_an_undocumented_body(
    deny_all: LiveServer,
) -> None:
    schema = schemathesis.openapi.from_dict(openapi_document())
    # Replacing the policy is the one call that could let a command run: only the deny-all one.
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if result.ok().label != "PUT /v1/policy"
    ]
    assert operations
    headers = {"Authorization": f"Bearer {ADMIN}"}
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    for operation, mode in ((operation, mode) for operation in operations for mode in modes):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: schemathesis.Case) -> None:
            response = case.call(base_url=deny_all.base_url, headers=headers, timeout=30)
            case.validate_response(
                response, checks=[not_a_server_error, response_schema_conformance]
            )

        try:
            fuzz()
        except Unsatisfiable:
            # No parameter or body to make invalid (e.g. GET /healthz): nothing to generate.
            assert mode is GenerationMode.NEGATIVE, operation.label
    with deny_all.client(ADMIN) as admin:
        ran = admin.get("/v1/executions", params={"state": "completed,failed"}).json()["data"]
    assert ran == []
    assert not list(Path(deny_all.settings.workspace).iterdir())
