"""The webhook signature (docs/api.md#verifying-a-delivery):

    X-Shellgate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, f"{t}.".encode() + body)>

The timestamp is signed with the body so that a receiver can refuse replays of an old delivery.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Shellgate-Signature"


def signature(secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def sign(secret: str, body: bytes) -> str:
    return signature(secret, body, int(time.time()))


def verify(secret: str, body: bytes, header: str, *, tolerance: float = 300) -> bool:
    """True when `header` signs `body` with `secret` and its timestamp is within `tolerance`
    seconds of now (the receiver's side, here for tests and documentation)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance:
        return False
    expected = signature(secret, body, timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))
