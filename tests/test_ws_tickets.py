"""The ticket book on a real database (SQLite and PostgreSQL, the `database` fixture): single
use, expiry, tokens removed since issue, concurrent redemption, and what the table keeps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from app.api.ws_tickets import TicketBook
from app.core.auth import Principal, TokenBook
from app.core.config import TokenEntry
from app.core.errors import UnauthenticatedError
from app.store.db import Database, make_engine
from app.store.migrate import upgrade_to_head
from tests.databases import ServerDatabase

pytestmark = pytest.mark.anyio

ALICE = Principal("alice", "agent")
BOOK = TokenBook([TokenEntry("alice", "agent", "sg_alice"), TokenEntry("ops", "admin", "sg_ops")])


@pytest.fixture
def db(database: ServerDatabase, tmp_path: Path) -> Database:
    url = database.url or f"sqlite:///{tmp_path / 'tickets.db'}"
    upgrade_to_head(url)
    return Database(make_engine(url))


async def test_a_ticket_is_redeemed_once(db: Database) -> None:
    tickets = TicketBook(db, BOOK)
    ticket, _ = await tickets.issue(ALICE, 60)
    assert await tickets.redeem(ticket) == ALICE
    with pytest.raises(UnauthenticatedError, match="invalid or expired ticket"):
        await tickets.redeem(ticket)


async def test_an_expired_ticket_is_refused_and_forgotten(db: Database) -> None:
    tickets = TicketBook(db, BOOK)
    expired, _ = await tickets.issue(ALICE, -1)
    with pytest.raises(UnauthenticatedError):
        await tickets.redeem(expired)
    # Issuing another drops every expired row.
    await tickets.issue(ALICE, -1)
    await tickets.issue(ALICE, 60)
    assert _rows(db) == 1


async def test_a_ticket_outlives_no_token(db: Database) -> None:
    ticket, _ = await TicketBook(db, BOOK).issue(ALICE, 60)
    # The server restarted with alice's token gone (or re-roled): her ticket opens nothing.
    without_alice = TokenBook([TokenEntry("alice", "approver", "sg_new")])
    with pytest.raises(UnauthenticatedError):
        await TicketBook(db, without_alice).redeem(ticket)


async def test_strings_that_are_not_tickets_are_refused(db: Database) -> None:
    tickets = TicketBook(db, BOOK)
    for junk in ("", "wst_", "sg_alice", "wst_" + "x" * 500, "wst_\udcff"):
        with pytest.raises(UnauthenticatedError):
            await tickets.redeem(junk)


async def test_of_concurrent_redemptions_exactly_one_wins(db: Database) -> None:
    # As two replicas would: separate books, one database.
    ticket, _ = await TicketBook(db, BOOK).issue(ALICE, 60)
    books = [TicketBook(db, BOOK) for _ in range(8)]
    results = await asyncio.gather(*(book.redeem(ticket) for book in books), return_exceptions=True)
    assert [result for result in results if isinstance(result, Principal)] == [ALICE]
    assert sum(isinstance(result, UnauthenticatedError) for result in results) == 7


async def test_the_table_keeps_no_usable_ticket(db: Database) -> None:
    ticket, _ = await TicketBook(db, BOOK).issue(ALICE, 60)
    with db.engine.connect() as connection:
        stored = connection.execute(text("SELECT digest, owner, role FROM ws_tickets")).all()
    assert len(stored) == 1
    assert ticket not in repr(stored) and ticket.removeprefix("wst_") not in repr(stored)
    assert tuple(stored[0][1:]) == ("alice", "agent")


def _rows(db: Database) -> int:
    with db.engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM ws_tickets")).scalar_one())
