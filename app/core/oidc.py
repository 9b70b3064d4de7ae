"""Bearer JWTs from an OpenID Connect issuer (docs/api.md#identity-from-a-gateway).

A gateway or identity provider signs a JWT; shellgate checks it against the keys the issuer
publishes (`<issuer>/.well-known/openid-configuration` → `jwks_uri`) and reads the caller's
owner name and role from two of its claims. The keys are fetched with httpx's async client, so
a slow issuer holds no request but the ones waiting for its keys, and kept in memory:

- fetched on the first token, and again once they are older than `KEYS_MAX_AGE`;
- fetched at once for a `kid` they do not hold (the issuer rotated its keys), but at most once
  per `refresh_seconds`: a client inventing `kid`s gets 401s, the issuer no extra traffic;
- after a failed fetch, not tried again for `FAILURE_BACKOFF` seconds: a down issuer is not
  hammered, and requests meanwhile use the keys already held or get 503 without waiting.

Only asymmetric algorithms are accepted, and only with a key of their family: `alg: none` and
an HS256 token "signed" with a public key are refused before any key is looked up."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from app.core.auth import Principal
from app.core.config import OWNER_NAME, ROLES, Settings
from app.core.errors import UnauthenticatedError, UnavailableError

logger = logging.getLogger("shellgate.oidc")

# The algorithms each JWK key type may verify. Symmetric keys (`oct`) have no entry: a secret
# shared with every relying party is not an identity.
ALGORITHMS_BY_KEY_TYPE: dict[str, frozenset[str]] = {
    "RSA": frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
    "EC": frozenset({"ES256", "ES384", "ES512"}),
    "OKP": frozenset({"EdDSA"}),
}
ACCEPTED_ALGORITHMS = frozenset().union(*ALGORITHMS_BY_KEY_TYPE.values())

KEYS_MAX_AGE = 3600.0  # seconds: keys removed by the issuer stop verifying within this
FAILURE_BACKOFF = 5.0  # seconds between attempts while the issuer does not answer
LEEWAY = 30  # seconds of clock difference tolerated on exp / nbf / iat
FETCH_TIMEOUT = 10.0  # seconds for one discovery or JWKS request
MAX_DOCUMENT_BYTES = 1024 * 1024  # a discovery document or a JWKS larger than this is refused


class IssuerUnavailableError(UnavailableError):
    code = "identity_provider_unavailable"


@dataclass(frozen=True)
class SigningKey:
    key: jwt.PyJWK
    key_type: str  # the JWK's kty: RSA, EC or OKP
    algorithm: str | None  # the JWK's alg, when it names one


class OidcVerifier:
    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        role_claim: str,
        owner_claim: str,
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._audience = audience
        self._role_claim = role_claim
        self._owner_claim = owner_claim
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._discovery_url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        self._jwks_uri: str | None = None
        self._keys: dict[str | None, SigningKey] = {}
        self._fetched_at: float | None = None  # the last successful fetch
        self._failed_at: float | None = None  # the last failed attempt
        self._forced_at: float | None = None  # the last fetch an unknown kid asked for
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> OidcVerifier | None:
        if not settings.oidc_issuer:
            return None
        return cls(
            issuer=settings.oidc_issuer,
            audience=settings.oidc_audience,
            role_claim=settings.oidc_role_claim,
            owner_claim=settings.oidc_owner_claim,
            refresh_seconds=settings.oidc_jwks_refresh_seconds,
        )

    async def verify(self, token: str) -> Principal:
        """The principal a valid token names; UnauthenticatedError for any token that is not
        one (with what is wrong), IssuerUnavailableError when no key can be had to check it."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise UnauthenticatedError("invalid bearer token") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in ACCEPTED_ALGORITHMS:
            raise UnauthenticatedError(
                f"the token's algorithm {str(algorithm)[:20]!r} is not accepted: only "
                "asymmetric signatures (RS*, PS*, ES*, EdDSA) by the issuer's published keys"
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise UnauthenticatedError("the token's kid is not a string")
        key = await self._key(kid)
        if algorithm not in ALGORITHMS_BY_KEY_TYPE[key.key_type] or key.algorithm not in (
            None,
            algorithm,
        ):
            raise UnauthenticatedError(
                f"the token's algorithm {algorithm} does not match its key ({key.key_type}"
                + (f", {key.algorithm}" if key.algorithm else "")
                + ")"
            )
        claims = self._decode(token, key.key, algorithm)
        return self._principal(claims)

    def _decode(self, token: str, key: jwt.PyJWK, algorithm: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=self._audience,
                issuer=self.issuer,
                leeway=LEEWAY,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise UnauthenticatedError("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise UnauthenticatedError("the token is not valid yet (nbf or iat ahead)") from None
        except jwt.InvalidAudienceError:
            raise UnauthenticatedError(
                f"the token is not for this server: its audience is not {self._audience!r}"
            ) from None
        except jwt.InvalidIssuerError:
            raise UnauthenticatedError(f"the token was not issued by {self.issuer!r}") from None
        except jwt.InvalidSignatureError:
            raise UnauthenticatedError(
                "the token's signature does not verify with the issuer's key"
            ) from None
        except jwt.MissingRequiredClaimError as error:
            raise UnauthenticatedError(f"the token has no {error.claim!r} claim") from None
        except jwt.PyJWTError as error:
            raise UnauthenticatedError(f"invalid token: {error}") from None
        return claims

    def _principal(self, claims: dict[str, Any]) -> Principal:
        role = claims.get(self._role_claim)
        if role is None:
            raise UnauthenticatedError(f"the token has no {self._role_claim!r} claim (the role)")
        if role not in ROLES:
            raise UnauthenticatedError(
                f"the token's {self._role_claim!r} claim must be one of {', '.join(ROLES)}"
            )
        owner = claims.get(self._owner_claim)
        if not isinstance(owner, str) or not OWNER_NAME.fullmatch(owner):
            raise UnauthenticatedError(
                f"the token's {self._owner_claim!r} claim is not an owner name "
                "(1-64 letters, digits or _.@-)"
            )
        return Principal(owner, role)

    # --- the issuer's keys --------------------------------------------------------------------

    async def _key(self, kid: str | None) -> SigningKey:
        if not self._stale() and (key := self._keys.get(kid)) is not None:
            return key
        async with self._lock:
            fetched = False
            if self._stale() and self._may_attempt():
                fetched = await self._fetch()
            if (key := self._keys.get(kid)) is not None:
                return key
            if self._fetched_at is None:
                raise IssuerUnavailableError(
                    f"the identity provider {self.issuer} did not give its keys; retry in a moment"
                )
            # A kid the issuer did not publish when last asked: a rotation, or a made-up kid.
            now = self._clock()
            rotation_allowed = self._forced_at is None or (
                now - self._forced_at >= self._refresh_seconds
            )
            if not fetched and rotation_allowed and self._may_attempt():
                self._forced_at = now
                await self._fetch()
                if (key := self._keys.get(kid)) is not None:
                    return key
            raise UnauthenticatedError(
                "the token is signed by a key the issuer does not publish"
                + (f" (kid {kid[:64]!r})" if kid is not None else " (and names no kid)")
            )

    def _stale(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= KEYS_MAX_AGE

    def _may_attempt(self) -> bool:
        return self._failed_at is None or self._clock() - self._failed_at >= FAILURE_BACKOFF

    async def _fetch(self) -> bool:
        """Fetch the keys; True if they were replaced. A failure keeps the keys already held
        (an issuer's outage should not log everyone out at once) and is logged."""
        try:
            async with httpx.AsyncClient(timeout=FETCH_TIMEOUT) as client:
                if self._jwks_uri is None:
                    self._jwks_uri = _jwks_uri(
                        await _get_json(client, self._discovery_url), self.issuer
                    )
                keys = _usable_keys(await _get_json(client, self._jwks_uri))
        except (httpx.HTTPError, _IssuerDocumentError) as error:
            self._failed_at = self._clock()
            self._jwks_uri = None  # discover again: the issuer may have moved its keys
            logger.warning("OIDC: could not fetch the keys of %s: %s", self.issuer, error)
            return False
        self._keys = keys
        self._fetched_at = self._clock()
        self._failed_at = None
        logger.info("OIDC: %d signing keys of %s", len(keys), self.issuer)
        return True


class _IssuerDocumentError(Exception):
    pass


async def _get_json(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    response = await client.get(url, headers={"Accept": "application/json"})
    if response.status_code != 200:
        raise _IssuerDocumentError(f"{url} answered {response.status_code}")
    if len(response.content) > MAX_DOCUMENT_BYTES:
        raise _IssuerDocumentError(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = response.json()
    except ValueError:
        raise _IssuerDocumentError(f"{url} did not answer JSON") from None
    if not isinstance(document, dict):
        raise _IssuerDocumentError(f"{url} did not answer a JSON object")
    return document


def _jwks_uri(discovery: dict[str, Any], issuer: str) -> str:
    # OpenID Connect Discovery 1.0, section 4.3: the document names the issuer it is for.
    if discovery.get("issuer") != issuer:
        raise _IssuerDocumentError(
            f"the discovery document names the issuer {discovery.get('issuer')!r}, not {issuer!r}"
        )
    uri = discovery.get("jwks_uri")
    if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
        raise _IssuerDocumentError("the discovery document has no http(s) jwks_uri")
    return uri


def _usable_keys(jwks: dict[str, Any]) -> dict[str | None, SigningKey]:
    """The signing keys of a JWKS by kid; a lone key also under None, for tokens that name no
    kid (with several, a token must say which). Keys for encryption, symmetric keys and keys
    PyJWT cannot load are left out."""
    entries = jwks.get("keys")
    if not isinstance(entries, list):
        raise _IssuerDocumentError("the JWKS has no 'keys' list")
    keys: dict[str | None, SigningKey] = {}
    usable: list[SigningKey] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if entry.get("kty") not in ALGORITHMS_BY_KEY_TYPE:
            continue
        try:
            loaded = jwt.PyJWK(entry)
        except (jwt.PyJWTError, ValueError, TypeError) as error:
            logger.warning("OIDC: skipping a key (kid %r): %s", entry.get("kid"), error)
            continue
        declared = entry.get("alg")
        key = SigningKey(loaded, entry["kty"], declared if isinstance(declared, str) else None)
        usable.append(key)
        if isinstance(entry.get("kid"), str):
            keys[entry["kid"]] = key
    if len(usable) == 1:
        keys[None] = usable[0]
    return keys
