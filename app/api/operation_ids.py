"""OpenAPI operationIds: camelCase verbs a generated client can use as method names
(`createExecution`), instead of FastAPI's `create_execution_v1_executions_post`."""

from __future__ import annotations

from fastapi.routing import APIRoute

# Route functions whose names do not read as a verb and an object.
_RENAMED = {
    "healthz": "checkHealth",
    "readyz": "checkReadiness",
    "metrics": "getMetrics",
    "info": "getInfo",
    "tool": "getExecutionTool",
    "read_output": "readExecutionOutput",
    "search_output": "searchExecutionOutput",
    "send_input": "sendExecutionInput",
    "resize": "resizeExecution",
    "issue_ws_ticket": "createWsTicket",
    "approve": "approveApproval",
    "deny": "denyApproval",
    "policy_versions": "listPolicyVersions",
    "evaluate": "evaluatePolicy",
    "put_policy": "replacePolicy",
    "session_tool": "getSessionTool",
    "run_in_session": "runInSession",
}


def operation_id(route: APIRoute) -> str:
    if route.name in _RENAMED:
        return _RENAMED[route.name]
    head, *rest = route.name.split("_")
    return head + "".join(word.capitalize() for word in rest)
