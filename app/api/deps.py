"""Dependencies shared by the routes: the app's services and the caller's identity.

`async def` on purpose: FastAPI runs a plain `def` dependency in a worker thread, a hop per
dependency per request; these only read app state and compare token digests (or check a JWT's
signature against keys held in memory, fetched with an async client), which is cheaper on the
loop than the hop."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, WebSocket
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.core.auth import Principal
from app.core.errors import ForbiddenError, UnauthenticatedError
from app.services import Services

bearer_scheme = HTTPBearer(
    auto_error=False,
    description="A token from SHELLGATE_TOKENS, or a JWT from SHELLGATE_OIDC_ISSUER.",
)


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_principal(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Principal:
    return await services.tokens.authenticate(credentials.credentials if credentials else None)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise ForbiddenError("this action needs the admin role")
    return principal


AdminDep = Annotated[Principal, Depends(get_admin)]


async def get_websocket_services(websocket: WebSocket) -> Services:
    services: Services = websocket.app.state.services
    return services


WebSocketServicesDep = Annotated[Services, Depends(get_websocket_services)]


async def websocket_principal(websocket: WebSocket, services: Services) -> Principal:
    """The caller of a WebSocket: an `Authorization: Bearer` header, else a single-use
    `?ticket=` from `POST /v1/ws-tickets` (browsers cannot set headers on a WebSocket).

    Raises UnauthenticatedError. Not a dependency on purpose: routes call it after `accept()`
    so that a refusal reaches the client as close code 4401 with its reason; refusing before
    the handshake would show the client only a bare HTTP 403.
    """
    header = websocket.headers.get("authorization")
    if header:
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer":
            raise UnauthenticatedError("the Authorization header must be a Bearer token")
        return await services.tokens.authenticate(secret.strip())
    ticket = websocket.query_params.get("ticket")
    if ticket:
        return await services.tickets.redeem(ticket)
    raise UnauthenticatedError("missing bearer token or ticket")
