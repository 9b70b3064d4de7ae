"""A client generated from `openapi.json` by openapi-python-client works against the server:
the operation names, request and response models of the document are usable as they are."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import AGENT, LiveServer

DOCUMENT = Path(__file__).resolve().parents[2] / "openapi.json"
PACKAGE = "shellgate_generated_client"
CONFIG = f"""\
project_name_override: {PACKAGE}
package_name_override: {PACKAGE}
post_hooks: []
content_type_overrides:
  application/x-ndjson: application/octet-stream
"""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    root = tmp_path_factory.mktemp("client")
    config = root / "config.yml"
    config.write_text(CONFIG)
    result = subprocess.run(
        [
            Path(sys.executable).parent / "openapi-python-client",
            "generate",
            "--path",
            str(DOCUMENT),
            "--output-path",
            str(root / PACKAGE),
            "--meta",
            "none",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Warning" not in result.stdout, result.stdout
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name.startswith(PACKAGE)]:
            del sys.modules[name]


def test_the_generated_client_runs_a_command(generated: ModuleType, server: LiveServer) -> None:
    create_execution = importlib.import_module(f"{PACKAGE}.api.executions.create_execution")
    models = importlib.import_module(f"{PACKAGE}.models")
    client = generated.AuthenticatedClient(base_url=server.base_url, token=AGENT)
    with client:
        response = create_execution.sync_detailed(
            client=client, body=models.ExecutionCreate(command="echo generated")
        )
    assert response.status_code == 200
    execution = response.parsed
    assert isinstance(execution, models.ExecutionPublic)
    assert (execution.state, execution.exit_code) == (models.ExecutionState.COMPLETED, 0)
    assert execution.output == "generated\n"


def test_the_generated_client_parses_the_error_envelope(
    generated: ModuleType, server: LiveServer
) -> None:
    get_execution = importlib.import_module(f"{PACKAGE}.api.executions.get_execution")
    models = importlib.import_module(f"{PACKAGE}.models")
    client = generated.AuthenticatedClient(base_url=server.base_url, token=AGENT)
    with client:
        response = get_execution.sync_detailed("ex_absent000000000000", client=client)
    assert response.status_code == 404
    assert isinstance(response.parsed, models.ErrorResponse)
    assert response.parsed.error.code == "not_found"
    assert response.parsed.error.request_id == response.headers["X-Request-ID"]
