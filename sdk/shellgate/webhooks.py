"""Checking a completion webhook's signature on the receiving side.

The server signs each delivery with `X-Shellgate-Signature: t=<unix seconds>,v1=<hex>`, where
the hex is HMAC-SHA256 with the shared secret over `f"{t}.".encode() + body` (the raw request
body, byte for byte). A receiver recomputes it, compares in constant time, and refuses
timestamps older (or newer) than `tolerance` seconds so a captured delivery cannot be replayed
later. Several `v1=` entries may be present (during a secret rotation); one match suffices.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from shellgate.errors import ShellgateError

SIGNATURE_HEADER = "X-Shellgate-Signature"
DEFAULT_TOLERANCE_SECONDS = 300


class SignatureError(ShellgateError):
    """The delivery is not authentic (malformed header, wrong signature, stale timestamp)."""


def sign(body: bytes, secret: str, timestamp: int) -> str:
    """The hex signature of `body` at `timestamp` (what `v1=` carries)."""
    message = f"{timestamp}.".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_signature(
    body: bytes,
    header: str,
    secret: str,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    *,
    now: float | None = None,
) -> int:
    """Check `header` (the `X-Shellgate-Signature` value) against `body`; returns the signed
    timestamp, raises `SignatureError` saying why it is refused."""
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, separator, value = part.strip().partition("=")
        if not separator:
            raise SignatureError("malformed signature header")
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                raise SignatureError("malformed signature timestamp") from None
        elif key == "v1":
            candidates.append(value.lower())
    if timestamp is None or not candidates:
        raise SignatureError("signature header lacks t= or v1=")
    moment = time.time() if now is None else now
    if abs(moment - timestamp) > tolerance:
        raise SignatureError(f"signature timestamp is outside the {tolerance:g} s tolerance")
    expected = sign(body, secret, timestamp)
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise SignatureError("signature does not match the body")
    return timestamp
