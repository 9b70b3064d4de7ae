"""Bearer JWTs from an OpenID Connect issuer (docs/api.md#identity-from-a-gateway), against a
real issuer: a small HTTP server on loopback that serves a discovery document and a JWKS of keys
made here with `cryptography`, and a real shellgate server configured with it."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.conftest import AGENT, LiveServer, free_port, make_settings, serve
from tests.databases import SQLITE, Databases, ServerDatabase
from tests.waiting import pending_approval_for

AUDIENCE = "shellgate-test"
SigningKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def algorithm_of(key: SigningKey) -> str:
    return "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"


def public_jwk(kid: str, key: SigningKey) -> dict[str, Any]:
    algorithm = jwt.get_algorithm_by_name(algorithm_of(key))
    jwk: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig", "alg": algorithm_of(key)}


@dataclass
class Issuer:
    """An OIDC issuer on loopback: what it publishes can change while it runs (a rotation)."""

    url: str
    keys: dict[str, SigningKey] = field(default_factory=dict)
    jwks_requests: int = 0

    def token(
        self,
        kid: str = "k1",
        *,
        key: SigningKey | None = None,
        sub: str = "oidc-alice",
        role: str | None = "agent",
        lifetime: float = 300,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": sub,
            "iat": now,
            "exp": now + int(lifetime),
            **({"shellgate_role": role} if role is not None else {}),
            **claims,
        }
        signer = key or self.keys[kid]
        return jwt.encode(payload, signer, algorithm=algorithm_of(signer), headers={"kid": kid})

    def token_without_kid(self, **claims: Any) -> str:
        token = self.token(**claims)
        signer = self.keys["k1"]
        return jwt.encode(claims_of(token), signer, algorithm=algorithm_of(signer))


def serve_issuer() -> tuple[Issuer, ThreadingHTTPServer]:
    port = free_port()
    issuer = Issuer(f"http://127.0.0.1:{port}/realm")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/realm/.well-known/openid-configuration":
                body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks"}
            elif self.path == "/realm/jwks":
                issuer.jwks_requests += 1
                body = {"keys": [public_jwk(kid, key) for kid, key in issuer.keys.items()]}
            else:
                self.send_error(404)
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: object) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    return issuer, http


@contextlib.contextmanager
def running_issuer() -> Iterator[Issuer]:
    issuer, http = serve_issuer()
    issuer.keys["k1"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    try:
        yield issuer
    finally:
        http.shutdown()
        http.server_close()


def oidc_settings(tmp: Path, database: ServerDatabase, issuer_url: str, **extra: Any) -> Any:
    return make_settings(tmp, database, oidc_issuer=issuer_url, oidc_audience=AUDIENCE, **extra)


# `ask-*` waits for an approver.
GATED_POLICY = {"default": "allow", "rules": [{"match": "*ask-*", "approval": "prompt"}]}


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with running_issuer() as running:
        yield running


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases, issuer: Issuer
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("oidc")
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(GATED_POLICY))
    settings = oidc_settings(tmp, module_databases.new(), issuer.url, policy_file=policy)
    with serve(settings) as live:
        yield live


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], payload: dict[str, Any], sign: Any = None) -> str:
    """A token put together by hand, for the shapes PyJWT refuses to make."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    signature = sign(signing_input.encode()) if sign else b""
    return f"{signing_input}.{b64(signature)}"


def claims_of(token: str) -> dict[str, Any]:
    decoded: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return decoded


def refusal(server: LiveServer, token: str) -> tuple[int, dict[str, Any]]:
    with server.client(token) as client:
        response = client.get("/v1/info")
    return response.status_code, response.json().get("error", {})


# --- who a token names, and what it may do ----------------------------------------------------


def test_an_agent_jwt_runs_a_command_as_the_owner_its_sub_names(
    gateway: LiveServer, issuer: Issuer
) -> None:
    with gateway.client(issuer.token(sub="oidc-alice", role="agent")) as client:
        info = client.get("/v1/info").json()
        assert info["caller"] == {"name": "oidc-alice", "role": "agent"}
        assert info["oidc_issuer"] == issuer.url
        ran = client.post("/v1/executions", json={"command": "echo from-a-jwt"})
    assert ran.status_code == 200, ran.text
    assert ran.json()["output"] == "from-a-jwt\n"
    assert ran.json()["owner"] == "oidc-alice"


def test_an_approver_jwt_decides_an_agent_jwts_prompt_and_cannot_run(
    gateway: LiveServer, issuer: Issuer
) -> None:
    agent_token = issuer.token(sub="oidc-agent", role="agent")
    approver_token = issuer.token(sub="oidc-carol", role="approver")

    def submit() -> httpx.Response:
        with gateway.client(agent_token) as agent:
            return agent.post("/v1/executions", json={"command": "echo ask-via-oidc"})

    pool = ThreadPoolExecutor(1)
    waiting: Future[httpx.Response] = pool.submit(submit)
    pool.shutdown(wait=False)
    with gateway.client(approver_token) as approver:
        approval = pending_approval_for(approver, "echo ask-via-oidc")
        assert approval["requested_by"] == "oidc-agent"
        decided = approver.post(f"/v1/approvals/{approval['id']}/approve", json={})
        assert decided.status_code == 200, decided.text
        assert decided.json()["decided_by"] == "oidc-carol"
        # The same permissions as an approver's static token: reading yes, running no.
        assert approver.post("/v1/executions", json={"command": "true"}).status_code == 403
    answered = waiting.result(timeout=30)
    assert answered.status_code == 200, answered.text
    assert answered.json()["output"] == "ask-via-oidc\n"


def test_an_agent_jwt_cannot_read_another_owners_execution(
    gateway: LiveServer, issuer: Issuer
) -> None:
    with gateway.client(issuer.token(sub="oidc-one")) as one:
        mine = one.post("/v1/executions", json={"command": "echo private"}).json()
    with gateway.client(issuer.token(sub="oidc-two")) as two:
        assert two.get(f"/v1/executions/{mine['id']}").status_code == 404


def test_an_admin_jwt_has_the_admin_routes_an_agent_jwt_has_not(
    gateway: LiveServer, issuer: Issuer
) -> None:
    with gateway.client(issuer.token(sub="oidc-root", role="admin")) as admin:
        assert admin.get("/v1/nodes").status_code == 200
    with gateway.client(issuer.token(sub="oidc-agent", role="agent")) as agent:
        assert agent.get("/v1/nodes").status_code == 403


def test_a_token_without_kid_is_checked_with_the_issuers_only_key(
    gateway: LiveServer, issuer: Issuer
) -> None:
    with gateway.client(issuer.token_without_kid(sub="oidc-nokid")) as client:
        response = client.get("/v1/info")
    assert response.status_code == 200, response.text
    assert response.json()["caller"]["name"] == "oidc-nokid"


def test_an_audience_list_that_contains_ours_is_accepted(
    gateway: LiveServer, issuer: Issuer
) -> None:
    with gateway.client(issuer.token(aud=["another-service", AUDIENCE])) as client:
        assert client.get("/v1/info").status_code == 200


def test_static_tokens_still_work_beside_the_issuer(gateway: LiveServer) -> None:
    with gateway.client(AGENT) as client:
        info = client.get("/v1/info")
        ran = client.post("/v1/executions", json={"command": "echo static"})
    assert info.json()["caller"] == {"name": "alice", "role": "agent"}
    assert ran.json()["output"] == "static\n"


# --- tokens that are refused ------------------------------------------------------------------


def _expired(issuer: Issuer) -> str:
    return issuer.token(lifetime=-120)


def _not_yet_valid(issuer: Issuer) -> str:
    return issuer.token(nbf=int(time.time()) + 600)


def _signed_by_another_key(issuer: Issuer) -> str:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return issuer.token("k1", key=stranger)  # names the issuer's kid, signed by another key


def _wrong_audience(issuer: Issuer) -> str:
    return issuer.token(aud="some-other-service")


def _wrong_issuer(issuer: Issuer) -> str:
    return issuer.token(iss="http://127.0.0.1:1/elsewhere")


def _alg_none(issuer: Issuer) -> str:
    return forged({"alg": "none", "kid": "k1", "typ": "JWT"}, claims_of(issuer.token()))


def _hs256_keyed_with_the_public_key(issuer: Issuer) -> str:
    # The classic confusion: the verifier's public key used as an HMAC secret.
    public_pem = (
        issuer.keys["k1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return forged(
        {"alg": "HS256", "kid": "k1", "typ": "JWT"},
        claims_of(issuer.token()),
        lambda data: hmac.new(public_pem, data, hashlib.sha256).digest(),
    )


def _issued_in_the_future(issuer: Issuer) -> str:
    return issuer.token(iat=int(time.time()) + 600)


def _no_role(issuer: Issuer) -> str:
    return issuer.token(role=None)


def _unknown_role(issuer: Issuer) -> str:
    return issuer.token(role="superuser")


def _owner_not_a_name(issuer: Issuer) -> str:
    return issuer.token(sub="auth0|has a space")


def _no_expiry(issuer: Issuer) -> str:
    payload = {k: v for k, v in claims_of(issuer.token()).items() if k != "exp"}
    return jwt.encode(payload, issuer.keys["k1"], algorithm="RS256", headers={"kid": "k1"})


def _not_a_jwt(_: Issuer) -> str:
    return "eyJ-definitely.not-a.token"


REFUSED = {
    "expired": (_expired, "expired"),
    "not-yet-valid": (_not_yet_valid, "not valid yet"),
    "issued-in-the-future": (_issued_in_the_future, "not valid yet"),
    "signed-by-another-key": (_signed_by_another_key, "signature does not verify"),
    "wrong-audience": (_wrong_audience, "audience"),
    "wrong-issuer": (_wrong_issuer, "not issued by"),
    "alg-none": (_alg_none, "algorithm 'none' is not accepted"),
    "hs256-with-public-key": (_hs256_keyed_with_the_public_key, "'HS256' is not accepted"),
    "no-role-claim": (_no_role, "no 'shellgate_role' claim"),
    "unknown-role": (_unknown_role, "must be one of agent, approver, admin"),
    "owner-not-a-name": (_owner_not_a_name, "'sub' claim is not an owner name"),
    "no-expiry": (_no_expiry, "no 'exp' claim"),
    "not-a-jwt": (_not_a_jwt, "invalid bearer token"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_a_bad_jwt_is_401_with_what_is_wrong(
    gateway: LiveServer, issuer: Issuer, case: str
) -> None:
    make, message = REFUSED[case]
    status, error = refusal(gateway, make(issuer))
    assert status == 401
    assert error["code"] == "unauthenticated"
    assert message in error["message"], error["message"]


# --- every surface --------------------------------------------------------------------------


def test_a_jwt_opens_the_websocket_a_ticket_sse_and_mcp(
    gateway: LiveServer, issuer: Issuer
) -> None:
    token = issuer.token(sub="oidc-streams")
    bearer = {"Authorization": f"Bearer {token}"}
    with gateway.client(token) as client:
        done = client.post("/v1/executions", json={"command": "echo streamed"}).json()
        ticket = client.post("/v1/ws-tickets")
        with client.stream("GET", f"/v1/executions/{done['id']}/events") as events:
            assert events.status_code == 200
            sse_text = "".join(events.iter_text())
    assert '"output":"streamed\\n"' in sse_text.replace(" ", "")

    stream = f"{gateway.ws_url}/v1/executions/{done['id']}/stream"
    with connect(stream, additional_headers=bearer) as socket:
        frames = [json.loads(message) for message in socket]
    assert frames[-1]["type"] == "exit"

    assert ticket.status_code == 201, ticket.text
    with connect(f"{stream}?ticket={ticket.json()['ticket']}") as socket:
        assert [json.loads(message) for message in socket][-1]["type"] == "exit"

    with connect(f"{gateway.ws_url}/v1/approvals/stream", additional_headers=bearer) as socket:
        assert json.loads(socket.recv(timeout=10))["type"] == "snapshot"

    mcp = httpx.post(
        f"{gateway.base_url}/mcp", json=INITIALIZE, headers=MCP_HEADERS | bearer, timeout=10
    )
    assert mcp.status_code == 200, mcp.text
    refused = httpx.post(
        f"{gateway.base_url}/mcp",
        json=INITIALIZE,
        headers=MCP_HEADERS | {"Authorization": f"Bearer {issuer.token(lifetime=-120)}"},
        timeout=10,
    )
    assert refused.status_code == 401
    assert "expired" in refused.json()["error"]["message"]


def test_an_expired_jwt_closes_the_websocket_with_4401(gateway: LiveServer, issuer: Issuer) -> None:
    headers = {"Authorization": f"Bearer {issuer.token(lifetime=-120)}"}
    with (
        connect(f"{gateway.ws_url}/v1/approvals/stream", additional_headers=headers) as socket,
        pytest.raises(ConnectionClosed) as closed,
    ):
        socket.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401
    assert "expired" in closed.value.rcvd.reason


# --- the issuer's keys ----------------------------------------------------------------------


def test_a_rotated_key_is_fetched_once_and_made_up_kids_fetch_nothing(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with running_issuer() as issuer, serve(oidc_settings(tmp_path, database, issuer.url)) as live:
        with live.client(issuer.token("k1")) as client:
            assert client.get("/v1/info").status_code == 200
        assert issuer.jwks_requests == 1

        # The issuer rotates to a new key of another family; the old token keeps working.
        issuer.keys["k2"] = ec.generate_private_key(ec.SECP256R1())
        with live.client(issuer.token("k2", sub="oidc-rotated")) as client:
            info = client.get("/v1/info")
        assert info.status_code == 200, info.text
        assert info.json()["caller"]["name"] == "oidc-rotated"
        assert issuer.jwks_requests == 2
        assert refusal(live, issuer.token("k1"))[0] == 200

        # Kids nobody published, within the refresh interval: 401s, and no request to the
        # issuer (an attacker cannot make the server hammer it).
        stranger = ec.generate_private_key(ec.SECP256R1())
        for number in range(10):
            status, error = refusal(live, issuer.token(f"made-up-{number}", key=stranger))
            assert status == 401
            assert "a key the issuer does not publish" in error["message"]
        assert issuer.jwks_requests == 2


def test_an_unreachable_issuer_is_503_and_static_tokens_still_work(
    tmp_path: Path, database: ServerDatabase
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/realm"  # a port nothing listens on
    with running_issuer() as issuer:
        token = issuer.token(iss=nobody)  # well formed, for an issuer that does not answer
    with serve(oidc_settings(tmp_path, database, nobody)) as live:
        with live.client(token) as client:
            response = client.get("/v1/info")
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "identity_provider_unavailable"
        assert nobody in error["message"]
        assert response.headers["retry-after"]
        with live.client(AGENT) as client:
            assert client.get("/v1/info").status_code == 200


def test_settings_refuse_an_issuer_without_an_audience(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="SHELLGATE_OIDC_AUDIENCE"):
        make_settings(tmp_path, SQLITE, oidc_issuer="https://id.example.test/realm")
