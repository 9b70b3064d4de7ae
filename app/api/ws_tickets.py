"""Browser WebSocket tickets (docs/streaming.md#tickets-for-browsers): browsers cannot send an
Authorization header on a WebSocket, so they trade their token for a ticket that goes in the
query string, good for one connection within `SHELLGATE_WS_TICKET_SECONDS`.

Tickets live in the database, not in the memory of the replica that issued them: behind a
gateway the WebSocket may reach any replica (or be forwarded to the one that owns the
execution), and each must be able to redeem it — once. Redeeming is a single DELETE … RETURNING,
so two replicas racing for the same ticket cannot both win. The table holds the ticket's
sha256, never the ticket: a copy of the database opens no stream."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime, timedelta

from app.core.auth import Principal, TokenBook
from app.core.errors import UnauthenticatedError
from app.store import crud
from app.store.db import Database

TICKET_PREFIX = "wst_"
# What `issue` mints: the prefix and 32 url-safe base64 characters. Anything else is refused
# before it reaches the database (a query string can carry any text, lone surrogates included).
_TICKET_SHAPE = re.compile(r"wst_[A-Za-z0-9_-]{32}")


def _digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


def _as_utc(moment: datetime) -> datetime:
    # SQLite keeps no offset: every stored moment is UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class TicketBook:
    def __init__(self, db: Database, tokens: TokenBook) -> None:
        self._db = db
        self._tokens = tokens

    async def issue(self, principal: Principal, ttl_seconds: float) -> tuple[str, datetime]:
        ticket = TICKET_PREFIX + secrets.token_urlsafe(24)
        expires_at = datetime.now(UTC) + timedelta(seconds=ttl_seconds)
        await self._db.run(
            crud.store_ws_ticket,
            digest=_digest(ticket),
            owner=principal.name,
            role=principal.role,
            expires_at=expires_at,
            now=datetime.now(UTC),
        )
        return ticket, expires_at

    async def redeem(self, ticket: str) -> Principal:
        """The principal the ticket was issued to, once; UnauthenticatedError for a ticket that
        is unknown, already used, expired, or whose token is no longer configured."""
        if not _TICKET_SHAPE.fullmatch(ticket):
            raise UnauthenticatedError("invalid or expired ticket")
        taken = await self._db.run(crud.take_ws_ticket, digest=_digest(ticket))
        if taken is None:
            raise UnauthenticatedError("invalid or expired ticket")
        owner, role, expires_at = taken
        if _as_utc(expires_at) < datetime.now(UTC):
            raise UnauthenticatedError("invalid or expired ticket")
        principal = self._tokens.configured(owner, role)
        if principal is None:
            raise UnauthenticatedError("invalid or expired ticket")
        return principal
