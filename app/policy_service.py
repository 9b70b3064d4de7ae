"""The policy in force: loaded at start, replaced by admins, every version kept (SPEC §5.4)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import yaml
from pydantic import ValidationError

from app import crud
from app.db import Database
from app.errors import InvalidRequestError
from app.models import PolicyVersion
from app.policy import PolicyDocument, Verdict, evaluate

logger = logging.getLogger("shellgate.policy")


def read_policy_file(path: Path) -> PolicyDocument:
    """YAML or JSON (JSON is YAML); a bad file stops the server with a clear message."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read policy file {path}: {error}") from error
    try:
        return PolicyDocument.model_validate(raw or {})
    except ValidationError as error:
        raise ValueError(f"invalid policy file {path}: {error}") from error


class PolicyService:
    def __init__(self, db: Database, policy_file: Path | None) -> None:
        self._db = db
        self._policy_file = policy_file
        self.document = PolicyDocument()
        self.version_id: int | None = None

    async def load(self) -> None:
        """The newest stored version wins; the policy file only seeds an empty registry."""
        latest = await self._db.call(crud.latest_policy_version)
        if latest is not None:
            self.document = PolicyDocument.model_validate_json(latest.document)
            self.version_id = latest.id
            return
        if self._policy_file is not None:
            document = read_policy_file(self._policy_file)
            version = await self.replace(document, author=f"file:{self._policy_file.name}")
            logger.info("policy seeded from %s as version %s", self._policy_file, version.id)

    def evaluate(self, command: str) -> Verdict:
        return evaluate(self.document, command)

    async def replace(self, document: PolicyDocument, *, author: str) -> PolicyVersion:
        text = document.model_dump_json()
        version = await self._db.call(crud.insert_policy_version, document=text, author=author)
        self.document = document
        self.version_id = version.id
        return version

    async def versions(self, limit: int) -> list[PolicyVersion]:
        return await self._db.call(crud.list_policy_versions, limit=limit)


def parse_policy_body(body: object) -> PolicyDocument:
    try:
        return PolicyDocument.model_validate(body)
    except ValidationError as error:
        raise InvalidRequestError(
            "invalid policy", details={"errors": json.loads(error.json(include_url=False))}
        ) from error
