"""This replica's node id: `SHELLGATE_NODE_ID`, else one generated once and kept in the data
dir, so that a restarted replica recognises (and recovers) the executions it left running."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
from pathlib import Path

from app.core.config import Settings

NODE_ID_FILE = "node-id"
_VALID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def with_node_id(settings: Settings) -> Settings:
    if settings.node_id:
        return settings
    return settings.model_copy(update={"node_id": persisted_node_id(settings.data_dir)})


def persisted_node_id(data_dir: Path) -> str:
    path = data_dir / NODE_ID_FILE
    with contextlib.suppress(FileNotFoundError):
        existing = path.read_text(encoding="utf-8").strip()
        if _VALID.match(existing):
            return existing
    host = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:40] or "node"
    generated = f"{host}-{secrets.token_hex(4)}"
    temporary = path.with_name(f".{NODE_ID_FILE}.{os.getpid()}")
    # Private like everything in the data dir; written whole, then renamed into place.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(generated + "\n")
    os.replace(temporary, path)
    return generated
