"""`verify_signature` against HMACs computed here, independently of the SDK's `sign`."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest

from shellgate import SignatureError, verify_signature

SECRET = "whsec-test-0123456789"
BODY = json.dumps({"id": "ex_0123456789abcdefghij", "state": "completed"}).encode()


def header_for(body: bytes, secret: str, timestamp: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def test_a_fresh_delivery_is_accepted_and_its_timestamp_returned() -> None:
    now = int(time.time())
    assert verify_signature(BODY, header_for(BODY, SECRET, now), SECRET) == now


def test_one_matching_entry_among_several_suffices() -> None:
    now = int(time.time())
    good = header_for(BODY, SECRET, now).split(",")[1]
    header = f"t={now}, v1={'0' * 64}, {good}"
    assert verify_signature(BODY, header, SECRET) == now


@pytest.mark.parametrize("age", [301, -301, 10_000])
def test_a_timestamp_outside_the_tolerance_is_refused(age: int) -> None:
    then = int(time.time()) - age
    with pytest.raises(SignatureError, match="tolerance"):
        verify_signature(BODY, header_for(BODY, SECRET, then), SECRET)


def test_the_tolerance_is_the_callers() -> None:
    then = int(time.time()) - 1000
    header = header_for(BODY, SECRET, then)
    assert verify_signature(BODY, header, SECRET, tolerance=2000) == then
    with pytest.raises(SignatureError):
        verify_signature(BODY, header, SECRET, tolerance=10)


def test_a_tampered_body_or_a_wrong_secret_is_refused() -> None:
    now = int(time.time())
    header = header_for(BODY, SECRET, now)
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(BODY.replace(b"completed", b"failed"), header, SECRET)
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(BODY + b" ", header, SECRET)
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(BODY, header, "another-secret")


def test_a_timestamp_changed_after_signing_is_refused() -> None:
    now = int(time.time())
    signature = header_for(BODY, SECRET, now).split(",")[1]
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(BODY, f"t={now - 1},{signature}", SECRET)


@pytest.mark.parametrize(
    "header",
    ["", "garbage", "t=abc,v1=00", "v1=00", f"t={int(time.time())}", "t=1;v1=2"],
    # Ids that do not hold the clock: every worker of a parallel run collects the same tests.
    ids=["empty", "garbage", "bad-time", "no-time", "no-signature", "semicolon"],
)
def test_a_malformed_header_is_refused(header: str) -> None:
    with pytest.raises(SignatureError):
        verify_signature(BODY, header, SECRET)
