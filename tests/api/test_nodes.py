"""A single server as a node (SQLite): its id, kept across restarts, `GET /v1/info` and
`GET /v1/nodes`, the forwarding header it refuses, and a start that records `lost` only its
own running executions."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlmodel import Session, create_engine

from app.store.migrate import upgrade_to_head
from app.store.models import Execution, ExecutionState
from tests.conftest import ADMIN, AGENT, LiveServer, make_settings, serve
from tests.databases import SQLITE, ServerDatabase


def test_info_and_nodes_name_this_replica(fresh_server: LiveServer) -> None:
    node_id = (fresh_server.data_dir / "node-id").read_text().strip()
    with fresh_server.client(AGENT) as agent, fresh_server.client(ADMIN) as admin:
        info = agent.get("/v1/info").json()
        assert info["node"] == node_id
        # SQLite is one node's database; on PostgreSQL every replica's jobs count.
        on_sqlite = fresh_server.settings.database_url is None
        assert info["cluster_running_jobs"] == (None if on_sqlite else 0)
        nodes = admin.get("/v1/nodes").json()["data"]
        assert [(node["id"], node["alive"], node["current"]) for node in nodes] == [
            (node_id, True, True)
        ]
        assert nodes[0]["url"] is None
        refused = agent.get("/v1/nodes")
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden"
        ran = agent.post("/v1/executions", json={"command": "true"}).json()
        assert ran["node"] == node_id


def test_the_generated_node_id_survives_a_restart_and_the_setting_wins(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with serve(make_settings(tmp_path, database)) as first, first.client() as agent:
        generated = agent.get("/v1/info").json()["node"]
    with serve(make_settings(tmp_path, database)) as second, second.client() as agent:
        assert agent.get("/v1/info").json()["node"] == generated
    settings = make_settings(
        tmp_path, database, node_id="named-node", node_url="http://10.0.0.5:8000/"
    )
    with serve(settings) as third, third.client(ADMIN) as admin:
        assert admin.get("/v1/info").json()["node"] == "named-node"
        nodes = {node["id"]: node for node in admin.get("/v1/nodes").json()["data"]}
        assert nodes["named-node"]["url"] == "http://10.0.0.5:8000"
        assert set(nodes) == {generated, "named-node"}


@pytest.mark.parametrize("bad", ["a b", "x" * 65, "../etc"])
def test_a_bad_node_id_is_refused_at_start(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="node_id"):
        make_settings(tmp_path, SQLITE, node_id=bad)


def test_a_short_cluster_secret_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shorter than 16"):
        make_settings(tmp_path, SQLITE, cluster_secret="short")


def test_a_forwarding_header_is_refused_where_no_secret_is_set(fresh_server: LiveServer) -> None:
    with fresh_server.client(AGENT) as agent:
        response = agent.get(
            "/v1/executions", headers={"X-Shellgate-Cluster-Secret": "anything-0123456789"}
        )
        assert response.status_code == 403
        assert response.json()["error"]["message"] == "invalid cluster forwarding header"


def test_a_start_records_lost_only_its_own_running_executions(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, SQLITE, node_id="me")  # a file set up before the start
    settings.data_dir.mkdir(parents=True)
    upgrade_to_head(settings.resolved_database_url)
    engine = create_engine(settings.resolved_database_url)
    with Session(engine) as session:
        for execution_id, node in (("ex_mine", "me"), ("ex_older", None), ("ex_other", "other")):
            session.add(
                Execution(
                    id=execution_id,
                    owner="alice",
                    command="sleep 100",
                    original_command="sleep 100",
                    cwd="/",
                    state=ExecutionState.running.value,
                    artifact_path=str(settings.artifacts_dir / f"{execution_id}.log"),
                    node=node,
                    created_at=datetime.now(UTC),
                )
            )
        session.commit()
    engine.dispose()
    with serve(settings) as live, live.client(ADMIN) as admin:
        states = {
            execution_id: admin.get(f"/v1/executions/{execution_id}").json()["state"]
            for execution_id in ("ex_mine", "ex_older", "ex_other")
        }
    assert states == {"ex_mine": "lost", "ex_older": "lost", "ex_other": "running"}
