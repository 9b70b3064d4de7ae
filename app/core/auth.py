"""Bearer tokens and roles (docs/api.md#access-and-roles). Pure: no FastAPI here."""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from app.core.config import ROLES, Role, Settings, TokenEntry
from app.core.errors import ForbiddenError, NotFoundError, UnauthenticatedError

if TYPE_CHECKING:
    from app.core.oidc import OidcVerifier

logger = logging.getLogger("shellgate.auth")

GENERATED_TOKEN_FILE = "admin.token"


class Owned(Protocol):
    @property
    def owner(self) -> str: ...


OwnedT = TypeVar("OwnedT", bound=Owned)


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def reads_everything(self) -> bool:
        return self.role in ("admin", "approver")

    def require(self, *roles: Role) -> None:
        if self.role not in roles:
            raise ForbiddenError(f"this action needs the role {' or '.join(roles)}")

    def may_read(self, owner: str) -> bool:
        """Approvers and admins read everything; an agent only what it owns."""
        return self.reads_everything or owner == self.name

    def readable(self, thing: OwnedT | None, what: str) -> OwnedT:
        """`thing` if it exists and this principal may read it, else NotFoundError("<what> not
        found"): another owner's things read as absent, so ids are not an oracle for agents."""
        if thing is None or not self.may_read(thing.owner):
            raise NotFoundError(f"{what} not found")
        return thing


class TokenBook:
    """Who a bearer token names: the static tokens of SHELLGATE_TOKENS, then, when an OIDC
    issuer is configured, a JWT it signed. The one place every surface (REST, WebSocket, SSE,
    MCP) asks."""

    def __init__(self, entries: list[TokenEntry], oidc: OidcVerifier | None = None) -> None:
        self._entries = entries
        self.oidc = oidc

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenBook:
        entries = settings.token_entries()
        if not entries:
            entries = [ensure_generated_admin_token(settings.data_dir)]
        if not settings.oidc_issuer:
            return cls(entries)
        # Imported only when used: PyJWT, cryptography and httpx stay out of a start without
        # an issuer (tests/test_lazy_startup.py).
        from app.core.oidc import OidcVerifier

        return cls(entries, OidcVerifier.from_settings(settings))

    async def authenticate(self, secret: str | None) -> Principal:
        if not secret:
            raise UnauthenticatedError("missing bearer token")
        static = self._static(secret)
        if static is not None:
            return static
        if self.oidc is not None:
            return await self.oidc.verify(secret)
        raise UnauthenticatedError("invalid bearer token")

    def _static(self, secret: str) -> Principal | None:
        for entry in self._entries:
            # Compare against every entry so timing does not reveal which one was close.
            if hmac.compare_digest(entry.secret.encode(), secret.encode()):
                return Principal(entry.name, entry.role)
        return None

    def configured(self, name: str, role: str) -> Principal | None:
        """The principal `name` with `role` if a configured token still grants it (a ticket
        outlives no token: one removed or re-roled since the ticket was issued is refused).
        With an OIDC issuer, a ticket may also have been bought with a JWT, which was checked
        when the ticket was issued and leaves nothing to check again: any name and role are
        honoured for the ticket's few seconds."""
        for entry in self._entries:
            if entry.name == name and entry.role == role:
                return Principal(entry.name, entry.role)
        if self.oidc is not None and role in ROLES:
            return Principal(name, role)
        return None


def ensure_generated_admin_token(data_dir: Path) -> TokenEntry:
    """With no token configured, create an admin token once and keep it 0600 in the data dir."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / GENERATED_TOKEN_FILE
    if path.exists():
        secret = path.read_text().strip()
    else:
        secret = "sg_" + secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secret + "\n")
        logger.warning("no SHELLGATE_TOKENS configured: generated an admin token in %s", path)
    os.chmod(path, 0o600)
    logger.warning("admin token file: %s", path.resolve())
    return TokenEntry("admin", "admin", secret)
