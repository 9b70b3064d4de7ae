"""The OpenAPI document, generated from the app with neutral settings so it is reproducible."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from app.core.config import Settings
from app.main import create_app


def openapi_document() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(
            _env_file=None,
            data_dir=Path(scratch),
            workspace=Path(scratch),
            tokens="",
        )
        return create_app(settings).openapi()
