"""Every documented response is what the server sends: schemathesis calls each operation of
`/openapi.json` with generated and example requests and checks status codes, content types,
headers and bodies against the document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import AGENT, LiveServer, make_settings, serve
from tests.databases import Databases

# Generated commands never run: everything is denied but the documented example (`echo …`);
# and no generated sandbox request or file operation outside the workspace (the documented
# examples name `/etc/hostname`) waits for a human (it would hold the call past the timeout).
DENY_BUT_ECHO = {
    "default": "deny",
    "critical": "deny",
    "rules": [{"match": "echo *", "approval": "allow"}],
    "interceptor": {"enabled": False, "rules": None},
    "sandbox": {"escalation": "deny"},
    "files": {"workspace": "allow", "outside": "deny"},
}
CONFORMANCE_CHECKS = [
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
]


@pytest.fixture(scope="module")
def conformance_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("conformance")
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(DENY_BUT_ECHO))
    with serve(
        make_settings(tmp, module_databases.new(), policy_file=policy, max_timeout=5)
    ) as live:
        yield live


# The committed document: test_openapi.py checks that it is what the app serves.
schema = schemathesis.openapi.from_path(Path(__file__).resolve().parents[2] / "openapi.json")


@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_every_response_matches_the_document(
    case: schemathesis.Case, conformance_server: LiveServer
) -> None:
    case.call_and_validate(
        base_url=conformance_server.base_url,
        headers={"Authorization": f"Bearer {AGENT}"},
        checks=CONFORMANCE_CHECKS,
        timeout=30,
    )
