"""Dependencies shared by the routes: the app's services and the caller's identity."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.auth import Principal
from app.errors import ForbiddenError
from app.services import Services

_bearer = HTTPBearer(auto_error=False, description="A token from SHELLGATE_TOKENS.")


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_principal(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    return services.tokens.authenticate(credentials.credentials if credentials else None)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def get_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise ForbiddenError("this action needs the admin role")
    return principal


AdminDep = Annotated[Principal, Depends(get_admin)]
