from __future__ import annotations

from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from app.api.routes import approvals, events, executions, files, health, policy, stream
from app.api.routes import sessions as session_routes
from app.api.routes import web as console

# Every route of the API and the console, in the order they are matched.
ROUTERS = (
    health.router,
    executions.router,
    events.router,
    approvals.router,
    policy.router,
    files.router,
    stream.router,
    session_routes.router,
    console.router,
)

# The app serves these route objects themselves (`create_app`), each router made with the
# app's `operation_id`: including a router instead makes FastAPI build every route a second
# time for the app (its 266 request and response TypeAdapters, 0.12 s of the start's CPU,
# bench/PROFILE.md, "Start-up: each route built once").
API_ROUTES: list[BaseRoute] = [route for router in ROUTERS for route in router.routes]


def allowed_methods(scope: Scope) -> str:
    """The `Allow` of a 405: every method some route serves at the request's path. Starlette
    names only the methods of the first route whose path matched, so `DELETE /v1/executions`
    said `Allow: POST` though GET serves that path too."""
    probe = {**scope, "method": "\0"}  # no route serves it: a path match is PARTIAL
    methods = {
        method
        for route in API_ROUTES
        if isinstance(route, Route) and route.matches(probe)[0] is Match.PARTIAL
        for method in route.methods or ()
    }
    return ", ".join(sorted(methods))
