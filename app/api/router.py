from __future__ import annotations

from fastapi import APIRouter

from app.api.routes import approvals, events, executions, files, health, policy, stream
from app.api.routes import sessions as session_routes
from app.api.routes import web as console

api_router = APIRouter()
api_router.include_router(health.router)
api_router.include_router(executions.router)
api_router.include_router(events.router)
api_router.include_router(approvals.router)
api_router.include_router(policy.router)
api_router.include_router(files.router)
api_router.include_router(stream.router)
api_router.include_router(session_routes.router)
api_router.include_router(console.router)
