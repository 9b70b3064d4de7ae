"""Writes `app/api/examples.py`: the OpenAPI examples of every request body and every 2xx
answer, captured from a real server rather than written by hand, so that they show what the
server really says. Paths, the node's name and the server's version are made neutral.

    .venv/bin/python -m tests.api_examples_capture && make format

tests/test_openapi_examples.py checks that every body and 2xx answer has one and that each
validates against its published schema; rerun this when a model changes shape."""

from __future__ import annotations

import json
import pprint
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ADMIN, AGENT, APPROVER, make_settings, serve
from tests.databases import SQLITE

TARGET = Path(__file__).resolve().parents[1] / "app" / "api" / "examples.py"
WORKSPACE = "/home/agent/project"
JSON = "application/json"

HEADER = '''"""Examples of every request body and 2xx answer in `openapi.json`, keyed by
operation id, then `request` or the status, then the content type (app/api/openapi_examples.py
puts them in the document). Generated from a real server by
`python -m tests.api_examples_capture`: do not edit by hand; tests/test_openapi_examples.py
validates each against its schema."""
# ruff: noqa: E501 (captured text: an answer's line is as long as the server made it)

from __future__ import annotations

from typing import Any

'''


def _body(response: httpx.Response) -> Any:
    if response.headers.get("content-type", "").startswith(JSON):
        return response.json()
    return response.text


def capture() -> dict[str, dict[str, dict[str, Any]]]:
    examples: dict[str, dict[str, dict[str, Any]]] = {}

    def answer(operation: str, response: httpx.Response) -> Any:
        assert response.is_success, (operation, response.status_code, response.text)
        if response.status_code == 204:
            return None
        kind = response.headers["content-type"].split(";")[0]
        body = _body(response)
        examples.setdefault(operation, {})[str(response.status_code)] = {kind: body}
        return body

    def request(operation: str, body: Any, kind: str = JSON) -> Any:
        examples.setdefault(operation, {})["request"] = {kind: body}
        return body

    with tempfile.TemporaryDirectory() as scratch:
        settings = make_settings(Path(scratch), SQLITE)
        with (
            serve(settings) as live,
            live.client(AGENT) as agent,
            live.client(APPROVER) as approver,
            live.client(ADMIN) as admin,
        ):
            answer("checkHealth", agent.get("/healthz"))
            answer("checkReadiness", agent.get("/readyz"))
            node = answer("getInfo", agent.get("/v1/info"))["node"]
            metrics = agent.get("/metrics")
            examples["getMetrics"] = {
                "200": {"text/plain": "\n".join(metrics.text.splitlines()[:6]) + "\n"}
            }
            policy = {
                key: value
                for key, value in admin.get("/v1/policy").json().items()
                if key not in ("version", "updated_at", "updated_by", "remembered")
            }
            policy["rules"] = [
                {"match": "terraform apply*", "approval": "prompt"},
                {"match": "rm -rf /*", "approval": "deny"},
            ]
            answer(
                "replacePolicy",
                admin.put("/v1/policy", json=request("replacePolicy", policy)),
            )
            answer("getPolicy", agent.get("/v1/policy"))
            answer("listPolicyVersions", agent.get("/v1/policy/versions", params={"limit": 1}))
            answer(
                "evaluatePolicy",
                agent.post(
                    "/v1/policy/evaluate",
                    json={"command": "terraform apply -auto-approve"},
                ),
            )
            record = agent.post("/v1/executions", json={"command": "echo hello"}).json()
            answer("listExecutions", agent.get("/v1/executions", params={"limit": 1}))
            answer("readExecutionOutput", agent.get(f"/v1/executions/{record['id']}/output"))
            build = agent.post(
                "/v1/executions",
                json={"command": "printf 'compiling\\nerror: missing ;\\ndone\\n'"},
            ).json()
            answer(
                "searchExecutionOutput",
                agent.get(f"/v1/executions/{build['id']}/search", params={"q": "error"}),
            )
            answer("followExecutionEvents", agent.get(f"/v1/executions/{record['id']}/events"))
            shell = agent.post(
                "/v1/executions", json={"command": "cat", "pty": True, "async": True}
            ).json()
            agent.post(
                f"/v1/executions/{shell['id']}/input",
                json=request("sendExecutionInput", {"data": "ls -la\n"}),
            )
            agent.post(
                f"/v1/executions/{shell['id']}/resize",
                json=request("resizeExecution", {"rows": 40, "cols": 120}),
            )
            agent.post(f"/v1/executions/{shell['id']}/cancel")
            held = agent.post(
                "/v1/executions",
                json={"command": "terraform apply -auto-approve", "approval_wait": 0},
            ).json()
            answer("listApprovals", approver.get("/v1/approvals", params={"limit": 1}))
            approval_id = held["approval"]["id"]
            answer("getApproval", approver.get(f"/v1/approvals/{approval_id}"))
            decision = request("denyApproval", {"reason": "not in this change window"})
            answer(
                "denyApproval", approver.post(f"/v1/approvals/{approval_id}/deny", json=decision)
            )
            again = agent.post(
                "/v1/executions",
                json={"command": "terraform apply -target=module.dns", "approval_wait": 0},
            ).json()
            approval = request("approveApproval", {"reason": "DNS only, reviewed"})
            answer(
                "approveApproval",
                approver.post(f"/v1/approvals/{again['approval']['id']}/approve", json=approval),
            )
            draft = {
                **policy,
                "rules": [{"match": "terraform apply -target=*", "approval": "allow"}],
            }
            answer(
                "replayPolicy",
                approver.post(
                    "/v1/policy/replay",
                    params={"limit": 2},
                    json=request("replayPolicy", draft),
                ),
            )
            content = request("upload", "buy milk\n", "application/octet-stream")
            note = {"path": "notes/todo.txt", "parents": "true"}
            answer("upload", agent.put("/v1/files", params=note, content=content.encode()))
            outside = {"path": "/etc/hostname", "approval_wait": "0"}
            prompted = answer(
                "upload", agent.put("/v1/files", params=outside, content=b"new-name\n")
            )
            answer("download", agent.get("/v1/files", params={"path": "notes/todo.txt"}))
            answer(
                "download",
                agent.get(
                    "/v1/files", params={"path": "notes/todo.txt"}, headers={"Range": "bytes=4-"}
                ),
            )
            answer("download", agent.get("/v1/files", params=outside))
            answer("statFile", agent.get("/v1/files/stat", params={"path": "notes/todo.txt"}))
            answer("statFile", agent.get("/v1/files/stat", params=outside))
            answer(
                "check",
                agent.get("/v1/files/check", params={"path": "notes/todo.txt", "op": "write"}),
            )
            answer("listOperations", agent.get("/v1/files/operations", params={"limit": 1}))
            answer("cancelOperation", agent.post(f"/v1/files/operations/{prompted['id']}/cancel"))
            created = {"env": {"PROJECT": "demo"}, "keep_cwd": True}
            session = answer(
                "createSession", agent.post("/v1/sessions", json=request("createSession", created))
            )
            answer(
                "createSession",
                agent.post("/v1/sessions", json={"sandbox": {"network": "on"}}),
            )
            answer("listSessions", agent.get("/v1/sessions", params={"limit": 1}))
            answer("getSession", agent.get(f"/v1/sessions/{session['id']}"))
            patch = request("patchSession", {"env": {"PROJECT": "demo", "STAGE": "test"}})
            answer("patchSession", agent.patch(f"/v1/sessions/{session['id']}", json=patch))
            run = request("runInSession", {"command": "echo $PROJECT-$STAGE"})
            answer("runInSession", agent.post(f"/v1/sessions/{session['id']}/run", json=run))
            answer("getSessionTool", agent.get(f"/v1/sessions/{session['id']}/tool"))
            answer("getExecutionTool", agent.get("/v1/tool"))
            answer("nodes", admin.get("/v1/nodes"))
            answer("createWsTicket", agent.post("/v1/ws-tickets"))
            text = json.dumps(examples)
            for machine, neutral in (
                (str(settings.workspace), WORKSPACE),
                (str(settings.data_dir), "/var/lib/shellgate"),
                (str(Path.cwd()), "/srv/shellgate"),
                (node, "node-a"),
            ):
                text = text.replace(machine, neutral)
            return dict(json.loads(text))


def main() -> None:
    examples = capture()
    TARGET.write_text(
        HEADER
        + "EXAMPLES: dict[str, dict[str, dict[str, Any]]] = "
        + pprint.pformat(examples, width=96, sort_dicts=True)
        + "\n"
    )


if __name__ == "__main__":
    main()
