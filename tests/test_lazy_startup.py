"""What the start leaves out until it is needed: the MCP SDK (first `/mcp` request) and
Alembic (a database behind the head revision)."""

from __future__ import annotations

import subprocess
import sys

from app.api.mcp_mount import MCP_PATH
from app.mcp_server import MCP_PATH as SERVER_MCP_PATH

CHECK = """
import asyncio, sys, tempfile
from pathlib import Path
import httpx
from app.config import Settings
from app.main import create_app
from app.migrate import upgrade_to_head

LAZY = ("mcp", "mcp_types", "alembic")
assert not [name for name in LAZY if name in sys.modules], "imported by app.main"
tmp = Path(tempfile.mkdtemp())
settings = Settings(_env_file=None, data_dir=tmp / "data", workspace=tmp, tokens="a:agent:{token}")
(tmp / "data").mkdir()
upgrade_to_head(settings.resolved_database_url)  # a current database: the start skips Alembic
del sys.modules["alembic"]
for name in [name for name in sys.modules if name.startswith("alembic.")]:
    del sys.modules[name]

async def main() -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            headers = {{"Authorization": "Bearer {token}"}}
            body = {{"command": "echo hi"}}
            ran = await client.post("/v1/executions", json=body, headers=headers)
            assert ran.status_code == 200, ran.text
            assert not [name for name in LAZY if name in sys.modules], "imported by a REST call"
            refused = await client.post("/mcp", json={{}})
            assert refused.status_code == 401, refused.text
            assert "mcp" in sys.modules  # the first /mcp request started the endpoint

asyncio.run(main())
print("ok")
"""


def test_the_mcp_sdk_and_alembic_load_only_when_needed() -> None:
    token = "lazy-startup-token-0123456789abcdef"
    result = subprocess.run(
        [sys.executable, "-c", CHECK.format(token=token)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_lazy_route_serves_the_mcp_servers_path() -> None:
    assert MCP_PATH == SERVER_MCP_PATH
