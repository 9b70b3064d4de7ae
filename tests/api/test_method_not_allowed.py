"""A method no route serves at a path is a 405 in the app's error shape whose `Allow` names
every method the path does serve, not only those of the first route whose
path matched."""

from __future__ import annotations

import pytest

from tests.conftest import AGENT, LiveServer

# A path, and every method the API serves there.
SERVED = [
    ("/v1/executions", {"GET", "POST"}),
    ("/v1/executions/ex_missing0000", {"GET"}),
    ("/v1/executions/ex_missing0000/output", {"GET"}),
    ("/v1/policy", {"GET", "PUT"}),
    ("/healthz", {"GET"}),
]


@pytest.mark.parametrize(("path", "methods"), SERVED)
def test_a_405_allows_every_method_served_at_the_path(
    server: LiveServer, path: str, methods: set[str]
) -> None:
    with server.client(AGENT) as client:
        refused = client.request("PATCH", path)
        assert refused.status_code == 405, refused.text
        assert refused.json()["error"]["code"] == "method_not_allowed"
        allowed = {method.strip() for method in refused.headers["Allow"].split(",")}
        assert allowed == methods
        # What Allow names is served: none of them answers 405.
        for method in allowed:
            assert client.request(method, path).status_code != 405, method
