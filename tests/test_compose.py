"""docker-compose.yml, read as data (no Docker engine runs here): the single node passes the
settings `.env` holds to its container and waits for PostgreSQL; the `cluster` profile has
PostgreSQL, three replicas and a gateway whose nginx configuration routes HTTP and WebSockets
under the path prefix, with the timeouts and headers the README names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
NGINX = (ROOT / "deploy" / "nginx.conf").read_text()
README = (ROOT / "README.md").read_text()


def service(name: str) -> dict[str, Any]:
    found: dict[str, Any] = COMPOSE["services"][name]
    return found


def in_profile(profile: str) -> set[str]:
    return {
        name for name, body in COMPOSE["services"].items() if profile in body.get("profiles", [])
    }


def test_the_single_node_gets_its_env_file_and_the_settings_it_was_missing() -> None:
    shellgate = service("shellgate")
    assert shellgate["env_file"] == [{"path": ".env", "required": False}]
    for name in ("SHELLGATE_DATABASE_URL", "SHELLGATE_ROOT_PATH", "SHELLGATE_FORWARDED_ALLOW_IPS"):
        assert f"${{{name}:" in shellgate["environment"][name]
    assert shellgate["depends_on"]["postgres"] == {
        "condition": "service_healthy",
        "required": False,
    }
    assert "profiles" not in shellgate  # the default `docker compose up`


def test_postgres_has_a_healthcheck_the_others_wait_for() -> None:
    postgres = service("postgres")
    assert set(postgres["profiles"]) == {"postgres", "cluster"}
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


REPLICAS = ("replica-a", "replica-b", "replica-c")


def test_the_cluster_profile_is_postgres_three_replicas_and_a_gateway() -> None:
    assert in_profile("cluster") == {"postgres", *REPLICAS, "gateway"}
    assert {"shellgate-data", "shellgate-pg", "shellgate-cluster-data"} == set(COMPOSE["volumes"])
    urls = set()
    for name in REPLICAS:
        replica = service(name)
        env = replica["environment"]
        assert env["SHELLGATE_NODE_ID"] == name
        assert env["SHELLGATE_NODE_URL"] == f"http://{name}:8000"
        urls.add(env["SHELLGATE_NODE_URL"])
        assert env["SHELLGATE_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["SHELLGATE_DATABASE_URL"].endswith("@postgres:5432/shellgate")
        assert "SHELLGATE_CLUSTER_SECRET" in env
        assert env["SHELLGATE_ROOT_PATH"] == "/shellgate"
        assert env["SHELLGATE_FORWARDED_ALLOW_IPS"]
        assert replica["volumes"] == ["shellgate-cluster-data:/data"]
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "/readyz" in " ".join(replica["healthcheck"]["test"])
        assert replica["cgroup"] == "private" and replica["cap_drop"] == ["ALL"]
    assert len(urls) == len(REPLICAS)
    gateway = service("gateway")
    assert gateway["image"].startswith("nginx")
    assert "./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in gateway["volumes"]
    assert set(gateway["depends_on"]) == set(REPLICAS)
    assert all(when["condition"] == "service_healthy" for when in gateway["depends_on"].values())
    assert "healthcheck" in gateway


def test_the_gateway_routes_http_and_websockets_under_the_prefix() -> None:
    upstreams = re.findall(r"^\s*server (replica-[a-z]):8000", NGINX, re.MULTILINE)
    assert upstreams == list(REPLICAS)
    location = NGINX[NGINX.index("location /shellgate/ {") :]
    assert "proxy_pass http://shellgate/;" in location  # the prefix stripped
    assert "proxy_set_header Upgrade $http_upgrade;" in location
    assert "proxy_set_header Connection $connection_upgrade;" in location
    for header in ("X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Prefix"):
        assert f"proxy_set_header {header}" in location
    # A client cannot pose as a replica: the gateway drops the forwarding marker.
    assert 'proxy_set_header X-Shellgate-Cluster-Secret "";' in location
    # Idle timeouts above the stream's ping interval (20 s at most).
    for directive in ("proxy_read_timeout", "proxy_send_timeout"):
        seconds = int(re.search(rf"{directive} (\d+)s;", location).group(1))  # type: ignore[union-attr]
        assert seconds > 20
    assert "proxy_buffering off;" in location
    # A stopping replica's 503 `shutting_down` goes on to the next one (idempotent requests).
    assert "proxy_next_upstream error timeout http_503;" in location


def test_the_readme_describes_the_cluster_profile() -> None:
    section = README[README.index("## Several replicas") :]
    for name in (*REPLICAS, "gateway", "postgres", "deploy/nginx.conf"):
        assert name in section
    assert "--profile cluster" in section
