from __future__ import annotations

from fastapi import APIRouter

from app.api.routes import approvals, executions, health, policy

api_router = APIRouter()
api_router.include_router(health.router)
api_router.include_router(executions.router)
api_router.include_router(approvals.router)
api_router.include_router(policy.router)
