"""One owner has at most `SHELLGATE_MAX_SESSIONS` open sessions (docs/streaming.md#sessions):
each holds a row, a state directory and, while used, a shell, and lives until it is closed, so
an agent that never closes them grew the server's disk and database without end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.conftest import ADMIN, AGENT, LiveServer, make_settings, serve
from tests.databases import ServerDatabase

CAP = 3


def _directories(server: LiveServer) -> set[str]:
    sessions = server.settings.data_dir / "sessions"
    return {path.name for path in sessions.iterdir()} if sessions.is_dir() else set()


def test_past_the_cap_a_session_is_refused_and_leaves_nothing(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with (
        serve(make_settings(tmp_path, database, max_sessions=CAP)) as server,
        server.client(AGENT) as agent,
        server.client(ADMIN) as admin,
    ):
        opened = [agent.post("/v1/sessions", json={}) for _ in range(CAP)]
        assert [response.status_code for response in opened] == [201] * CAP
        directories = _directories(server)
        refused = agent.post("/v1/sessions", json={})
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "session_limit_reached"
        assert error["message"] == (
            f"Too many open sessions ({CAP}). Close one (DELETE /v1/sessions/{{id}}) first."
        )
        assert error["details"] == {"max_sessions": CAP}
        assert int(refused.headers["Retry-After"]) > 0
        assert len(agent.get("/v1/sessions").json()["data"]) == CAP
        assert _directories(server) == directories
        # The cap is per owner: another token has its own.
        assert admin.post("/v1/sessions", json={}).status_code == 201
        # A closed session frees its place.
        assert agent.delete(f"/v1/sessions/{opened[0].json()['id']}").status_code == 204
        assert agent.post("/v1/sessions", json={}).status_code == 201


def test_concurrent_creations_never_pass_the_cap(tmp_path: Path, database: ServerDatabase) -> None:
    with serve(make_settings(tmp_path, database, max_sessions=CAP)) as server:

        async def open_many() -> list[int]:
            async with server.async_client(AGENT) as agent:
                calls = [agent.post("/v1/sessions", json={}) for _ in range(12)]
                return [response.status_code for response in await asyncio.gather(*calls)]

        codes = sorted(asyncio.run(open_many()))
        assert codes == [201] * CAP + [429] * (12 - CAP), codes
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {AGENT}"}
        ) as agent:
            assert len(agent.get("/v1/sessions").json()["data"]) == CAP
