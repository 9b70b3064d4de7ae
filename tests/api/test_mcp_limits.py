"""`/mcp` bodies are bounded as the REST routes' are (app/api/mcp/server.py): the SDK reads up to
4 MiB and parses it on the event loop, where 3 MiB of `[[],…]` stalled every client 0.7 s
(RELIABILITY.md, "One request against all the others"). Over the JSON body limit: 413
`too_large`; more arrays, objects or members than any request has: a JSON-RPC parse error,
before the SDK parses anything. A normal call is not affected."""

from __future__ import annotations

import json

from app.core.strict_json import MAX_CONTAINERS, MAX_MEMBERS, json_body_limit
from tests.api.test_mcp import INITIALIZE, MCP_HEADERS
from tests.conftest import LiveServer


def _call(arguments: dict[str, object]) -> bytes:
    call = {"name": "bash", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}).encode()


def test_an_oversized_or_overfull_mcp_body_is_refused_before_the_sdk_parses_it(
    server: LiveServer,
) -> None:
    limit = json_body_limit(server.settings.max_command_bytes)
    bodies = {
        "large": _call({"command": "echo ran > ran-mcp", "pad": "x" * limit}),
        "lists": _call({"command": "echo ran > ran-mcp", "x": [[]] * (MAX_CONTAINERS + 1)}),
        "members": _call(
            {"command": "echo ran > ran-mcp", **{f"k{i}": 0 for i in range(MAX_MEMBERS + 1)}}
        ),
    }
    with server.client() as client:
        answers = {
            name: client.post("/mcp", content=body, headers=MCP_HEADERS)
            for name, body in bodies.items()
        }
        started = client.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert answers["large"].status_code == 413, answers["large"].text
    assert answers["large"].json()["error"] == {
        **answers["large"].json()["error"],
        "code": "too_large",
        "message": f"The request body is larger than {limit} bytes.",
    }
    for name, reason in (
        ("lists", f"more than {MAX_CONTAINERS} arrays and objects"),
        ("members", f"more than {MAX_MEMBERS} object members"),
    ):
        assert answers[name].status_code == 400, answers[name].text
        assert answers[name].json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": f"Parse error: {reason}"},
        }
    assert started.status_code == 200, started.text
    assert "mcp-session-id" in started.headers
    assert not list(server.settings.workspace.glob("ran-*"))
