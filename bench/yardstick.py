"""The minimal app peer: the least a FastAPI endpoint can do to run a command (no auth, no
policy, no registry). The harness serves it with `uvicorn --loop asyncio --http h11`, stdlib
asyncio and the pure-Python HTTP parser, like the other peers."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI()


class Run(BaseModel):
    command: str


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/run")
async def run(body: Run) -> dict[str, object]:
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        body.command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    output, _ = await process.communicate()
    return {"exit_code": process.returncode, "output": output.decode(errors="replace")}
