"""The execution side of completion delivery (app/notifications): a request's `notify_url` is
admitted before anything runs, recorded with the execution, and handed over once the execution
is terminal. The deliverer itself is plugged in by `Services`; without one, a `notify_url` is
refused."""

from __future__ import annotations

from typing import Any, Protocol

from app.core.errors import InvalidRequestError
from app.store.models import NotifyState


class CompletionHooks(Protocol):
    async def admit(self, owner: str, url: str | None) -> str | None:
        """The URL to deliver this owner's execution to (the request's, else the server's
        default; None: no delivery); InvalidRequestError (422) when it may not be used."""
        ...

    def ended(self, execution_id: str, notify_url: str | None) -> None:
        """The execution's terminal record is written: deliver it (never blocks)."""
        ...


class NoDelivery:
    async def admit(self, owner: str, url: str | None) -> str | None:
        if url is not None:
            raise InvalidRequestError("notify_url is not accepted: delivery is not configured")
        return None

    def ended(self, execution_id: str, notify_url: str | None) -> None:
        return None


NO_DELIVERY = NoDelivery()


def notify_columns(notify_url: str | None) -> dict[str, Any]:
    """The record's delivery columns for a new execution."""
    if notify_url is None:
        return {}
    return {"notify_url": notify_url, "notify_state": NotifyState.waiting.value}
