"""Completion delivery through a real server to a real HTTP receiver on loopback: the body is
the record, signed; failures are retried with every attempt recorded; a restart resumes a
pending delivery; URLs outside the allow-list, and private addresses no glob names, are 422."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from app.core.config import Settings
from app.notifications.signing import verify
from shellgate.webhooks import verify_signature
from tests.conftest import ADMIN, LiveServer, make_settings, serve
from tests.databases import POSTGRES_URL, SQLITE, postgres_unreachable_reason
from tests.waiting import eventually
from tests.webhook_receiver import webhook_receiver

SECRET = "notify-secret-0123456789"
ALICE_SECRET = "alice-notify-secret-0123456789"
LOOPBACK = {
    "notify_allow": "http://127.0.0.1:*",
    "notify_secret": SECRET,
    "notify_backoff_seconds": 0.2,
    "notify_timeout_seconds": 3,
    "notify_retry_seconds": 120,
}
# Fields that move on after the body was sent (the attempt being made is recorded after it).
MOVING = {"notify_state", "notifications"}


def settled(client: httpx.Client, execution_id: str, within: float = 30) -> dict[str, Any]:
    """The record once its delivery is no longer `waiting`."""

    def probe() -> dict[str, Any] | None:
        record: dict[str, Any] = client.get(f"/v1/executions/{execution_id}").json()
        return record if record["notify_state"] in ("delivered", "failed") else None

    found = eventually(probe, what=f"the delivery of {execution_id}", within=within, interval=0.05)
    assert found is not None
    return found


def without(record: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in keys}


@pytest.mark.settings(**LOOPBACK)
def test_the_terminal_record_is_posted_signed_and_the_attempt_recorded(
    fresh_server: LiveServer,
) -> None:
    with webhook_receiver() as receiver, fresh_server.client() as client:
        response = client.post(
            "/v1/executions", json={"command": "echo hello; exit 3", "notify_url": receiver.url()}
        )
        assert response.status_code == 200, response.text
        answered = response.json()
        assert answered["notify_url"] == receiver.url()
        record = settled(client, answered["id"])
        posts = receiver.posts()
    assert len(posts) == 1
    post = posts[0]
    assert post.path == "/hook"
    assert post.headers["content-type"] == "application/json"
    assert post.headers["x-shellgate-execution"] == answered["id"]
    assert post.headers["x-shellgate-attempt"] == "1"
    assert verify(SECRET, post.body, post.headers["x-shellgate-signature"])
    # The SDK's receiver-side check accepts what the server sends.
    assert verify_signature(post.body, post.headers["x-shellgate-signature"], SECRET) > 0
    assert not verify(SECRET, post.body + b" ", post.headers["x-shellgate-signature"])
    assert not verify("another-secret-0123456789", post.body, post.headers["x-shellgate-signature"])
    delivered = json.loads(post.body)
    # The body is the record as GET returns it, `text` included.
    assert without(delivered, MOVING) == without(record, MOVING)
    assert delivered["text"].endswith("Command exited with code 3")
    assert delivered["state"] == "failed"
    assert delivered["notifications"] == []
    assert record["notify_state"] == "delivered"
    [attempt] = record["notifications"]
    assert attempt["status_code"] == 200 and attempt["error"] is None
    assert attempt["duration_ms"] >= 0 and attempt["at"].endswith("Z")


@pytest.mark.settings(**LOOPBACK)
def test_500s_and_a_timeout_are_retried_with_every_attempt_recorded(
    fresh_server: LiveServer,
) -> None:
    with webhook_receiver(script=[500, ("hang", 5), 503, 200]) as receiver:
        with fresh_server.client() as client:
            started = client.post(
                "/v1/executions",
                json={"command": "echo retried", "async": True, "notify_url": receiver.url()},
            )
            assert started.status_code == 202
            record = settled(client, started.json()["id"])
        posts = receiver.posts()
    attempts = record["notifications"]
    assert record["notify_state"] == "delivered"
    assert [a["status_code"] for a in attempts] == [500, None, 503, 200]
    assert attempts[0]["error"] == "HTTP 500"
    assert attempts[1]["error"] == "no answer within 3s"
    assert attempts[1]["duration_ms"] >= 2900
    assert attempts[2]["error"] == "HTTP 503"
    assert attempts[3]["error"] is None
    # Exponential backoff: each wait at least the doubled base (0.2, 0.4, 0.8 s).
    times = [attempt["at"] for attempt in attempts]
    assert times == sorted(times)
    assert [post.headers["x-shellgate-attempt"] for post in posts] == ["1", "2", "3", "4"]
    for post in posts:
        assert verify(SECRET, post.body, post.headers["x-shellgate-signature"])
    # Each retry sends the record as it is then: the attempts so far included.
    assert len(json.loads(posts[3].body)["notifications"]) == 3


@pytest.mark.settings(**{**LOOPBACK, "notify_retry_seconds": 1})
def test_delivery_gives_up_when_the_retry_window_closes(fresh_server: LiveServer) -> None:
    with webhook_receiver(default=500) as receiver, fresh_server.client() as client:
        execution = client.post(
            "/v1/executions", json={"command": "true", "notify_url": receiver.url()}
        ).json()
        record = settled(client, execution["id"])
        posts = receiver.posts()
    assert record["notify_state"] == "failed"
    assert len(record["notifications"]) == len(posts) >= 2
    assert all(attempt["status_code"] == 500 for attempt in record["notifications"])


@pytest.mark.settings(**LOOPBACK)
def test_a_redirect_is_not_followed(fresh_server: LiveServer) -> None:
    with webhook_receiver(script=[("redirect", "/elsewhere")]) as receiver:
        with fresh_server.client() as client:
            execution = client.post(
                "/v1/executions", json={"command": "true", "notify_url": receiver.url()}
            ).json()
            record = settled(client, execution["id"])
        paths = [(post.method, post.path) for post in receiver.posts()]
    assert record["notifications"][0] == {
        **record["notifications"][0],
        "status_code": 302,
        "error": "HTTP 302: redirects are not followed",
    }
    assert ("POST", "/elsewhere") not in paths and ("GET", "/elsewhere") not in paths


@pytest.mark.settings(
    **{**LOOPBACK, "notify_secrets": f"alice:{ALICE_SECRET}", "notify_allow": "http://localhost:*"}
)
def test_a_named_host_is_reached_at_its_checked_address_under_its_name_with_the_owners_secret(
    fresh_server: LiveServer,
) -> None:
    with webhook_receiver() as receiver, fresh_server.client() as client:
        url = receiver.url(host="localhost")
        execution = client.post("/v1/executions", json={"command": "true", "notify_url": url})
        assert execution.status_code == 200, execution.text
        settled(client, execution.json()["id"])
        [post] = receiver.posts()
    assert post.headers["host"] == f"localhost:{receiver.port}"
    assert verify(ALICE_SECRET, post.body, post.headers["x-shellgate-signature"])
    assert not verify(SECRET, post.body, post.headers["x-shellgate-signature"])


def test_a_restarted_server_resumes_a_pending_delivery(tmp_path: Path) -> None:
    restart_resumes(make_settings(tmp_path, SQLITE, **{**LOOPBACK, "notify_backoff_seconds": 3}))


@pytest.mark.postgres
def test_a_restarted_server_resumes_a_pending_delivery_on_postgresql(tmp_path: Path) -> None:
    reason = postgres_unreachable_reason()
    if reason is not None:
        pytest.skip(reason)
    schema = f"notify_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
        restart_resumes(
            make_settings(
                tmp_path, SQLITE, database_url=url, **{**LOOPBACK, "notify_backoff_seconds": 3}
            )
        )
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def restart_resumes(settings: Settings) -> None:
    """A delivery failing on one server is made by the next one started on the same data."""
    with webhook_receiver(default=500) as receiver:
        with serve(settings) as first, first.client() as client:
            execution = client.post(
                "/v1/executions", json={"command": "echo before", "notify_url": receiver.url()}
            ).json()

            def first_attempt_recorded() -> bool:
                record = client.get(f"/v1/executions/{execution['id']}").json()
                return len(record["notifications"]) == 1

            eventually(first_attempt_recorded, what="the first attempt's record", within=20)
        # The first server stopped with the delivery due again later; the next one resumes it.
        before_restart = len(receiver.posts())
        receiver.default = 200
        with serve(settings) as second, second.client() as client:
            record = settled(client, execution["id"])
        posts = receiver.posts()
    assert record["notify_state"] == "delivered"
    statuses = [attempt["status_code"] for attempt in record["notifications"]]
    assert statuses == [500] * before_restart + [200]
    assert len(posts) == before_restart + 1
    assert posts[-1].headers["x-shellgate-attempt"] == str(before_restart + 1)
    assert json.loads(posts[-1].body)["output"] == "before\n"


REFUSALS = {
    "outside the allow-list": ("http://127.0.0.1:*", "https://hooks.example.com/x"),
    "a scheme that is not http": ("*", "ftp://127.0.0.1:21/x"),
    "credentials in the URL": ("http://127.0.0.1:*", "http://127.0.0.1:80@169.254.169.254/x"),
    "loopback through a public glob": ("http://*", "http://127.0.0.1:9/x"),
    "a name resolving to loopback": ("http://*", "http://localhost:9/x"),
    "the metadata address": ("http://*", "http://169.254.169.254/latest/meta-data/"),
    "IPv6 loopback": ("http://*", "http://[::1]:9/x"),
    "IPv4-mapped loopback": ("http://*", "http://[::ffff:127.0.0.1]:9/x"),
    "a private network": ("http://*", "http://10.1.2.3/x"),
    "a decimal loopback": ("http://*", "http://2130706433:9/x"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_urls_not_allowed_are_422_and_nothing_runs(tmp_path: Path, case: str) -> None:
    allow, url = REFUSALS[case]
    settings = make_settings(tmp_path, SQLITE, notify_allow=allow, notify_secret=SECRET)
    with serve(settings) as server, server.client(ADMIN) as client:
        marker = tmp_path / "ran"
        response = client.post(
            "/v1/executions", json={"command": f"touch {marker}", "notify_url": url}
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert "notify_url" in error["message"]
        assert client.get("/v1/executions").json()["data"] == []
    assert not marker.exists()


def test_without_a_signing_secret_a_notify_url_is_422(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, SQLITE, notify_allow="http://127.0.0.1:*")
    with serve(settings) as server, server.client() as client:
        response = client.post(
            "/v1/executions", json={"command": "true", "notify_url": "http://127.0.0.1:9/x"}
        )
    assert response.status_code == 422
    assert "signing secret" in response.json()["error"]["message"]


def test_the_server_default_is_checked_again_after_dns_at_delivery(tmp_path: Path) -> None:
    """The default URL names a host whose address only a delivery resolves: a public-only glob
    lets it through at start, and the delivery refuses the loopback address it resolves to."""
    with webhook_receiver() as receiver:
        settings = make_settings(
            tmp_path,
            SQLITE,
            notify_allow="http://*",
            notify_url=receiver.url(host="localhost"),
            notify_secret=SECRET,
            notify_retry_seconds=0,
        )
        with serve(settings) as server, server.client() as client:
            execution = client.post("/v1/executions", json={"command": "true"}).json()
            assert execution["notify_url"] == receiver.url(host="localhost")
            record = settled(client, execution["id"])
        assert receiver.posts() == []
    assert record["notify_state"] == "failed"
    [attempt] = record["notifications"]
    assert attempt["status_code"] is None
    assert "localhost resolves to" in attempt["error"]
    assert "127.0.0.1" in attempt["error"] or "::1" in attempt["error"]


@pytest.mark.settings(**{**LOOPBACK, "notify_per_host": 2, "notify_timeout_seconds": 8})
def test_a_slow_receiver_delays_neither_other_receivers_nor_the_api(
    fresh_server: LiveServer,
) -> None:
    with (
        webhook_receiver(default=("hang", 6)) as slow,
        webhook_receiver() as fast,
        fresh_server.client() as client,
    ):
        for _ in range(4):
            response = client.post(
                "/v1/executions", json={"command": "true", "notify_url": slow.url()}
            )
            assert response.status_code == 200
        eventually(lambda: len(slow.posts()) == 2, what="the slow receiver's first two posts")
        started = time.monotonic()
        quick = client.post("/v1/executions", json={"command": "echo quick"})
        assert quick.status_code == 200
        execution = client.post(
            "/v1/executions", json={"command": "true", "notify_url": fast.url()}
        ).json()
        record = settled(client, execution["id"], within=20)
        elapsed = time.monotonic() - started
        # Two attempts hang at the slow receiver (its per-host limit), two more wait their turn.
        assert len(slow.posts()) == 2
    assert record["notify_state"] == "delivered"
    assert elapsed < 5, f"the fast delivery waited {elapsed:.1f}s behind the slow receiver"


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A certificate for `name` (and its key), made by the openssl CLI."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_https_checks_the_certificate_for_the_urls_host_at_the_checked_address(
    tmp_path: Path,
) -> None:
    """The attempt connects to the address it checked, yet TLS (SNI and the certificate check)
    is for the URL's name: a certificate for `localhost` passes, one for another name fails."""
    good = self_signed(tmp_path, "localhost")
    other = self_signed(tmp_path, "other.example")
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(good[0].read_bytes() + other[0].read_bytes())
    settings = make_settings(
        tmp_path,
        SQLITE,
        **{
            **LOOPBACK,
            "notify_allow": "https://localhost:*",
            "notify_ca_file": bundle,
            "notify_retry_seconds": 0,
        },
    )
    with webhook_receiver(tls=good) as right, webhook_receiver(tls=other) as wrong:
        with serve(settings) as server, server.client() as client:
            ids = [
                client.post(
                    "/v1/executions",
                    json={"command": "true", "notify_url": receiver.url(host="localhost")},
                ).json()["id"]
                for receiver in (right, wrong)
            ]
            delivered, refused = (settled(client, execution_id) for execution_id in ids)
        assert len(right.posts()) == 1 and wrong.posts() == []
    assert right.posts()[0].headers["host"] == f"localhost:{right.port}"
    assert delivered["notify_state"] == "delivered"
    assert refused["notify_state"] == "failed"
    assert "CERTIFICATE_VERIFY_FAILED" in refused["notifications"][0]["error"]
