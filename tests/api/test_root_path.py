"""Behind a gateway that strips a prefix: `SHELLGATE_ROOT_PATH` reaches the server (uvicorn's
root_path, as `shellgate serve` passes it), not FastAPI's deprecated argument."""

from __future__ import annotations

import warnings
from pathlib import Path

import httpx

from tests.conftest import make_settings, serve
from tests.databases import ServerDatabase


def test_a_root_path_is_served_and_documented_without_a_deprecation_warning(
    tmp_path: Path,
    database: ServerDatabase,
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with serve(make_settings(tmp_path, database, root_path="/gateway/shellgate")) as live:
            health = httpx.get(f"{live.base_url}/healthz")
            document = httpx.get(f"{live.base_url}/openapi.json").json()
    assert health.status_code == 200
    # Generated clients prefix their calls with the gateway's path.
    assert document["servers"] == [{"url": "/gateway/shellgate"}]
    assert not [warning for warning in caught if "root_path" in str(warning.message)]
