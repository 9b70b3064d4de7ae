"""The policy in force: loaded at start, replaced by admins, every version kept (SPEC §5.4)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path

import anyio.to_thread
import yaml
from pydantic import ValidationError

from app import crud
from app.db import Database
from app.interceptor import Interception, effective_rules
from app.interceptor import check as check_interception
from app.models import PolicyVersion
from app.policy import InterceptorSettings, PolicyDocument, Verdict, evaluate

logger = logging.getLogger("shellgate.policy")


class PolicyFileError(ValueError):
    """The policy file cannot be used; the server refuses to start rather than run unguarded."""


def read_policy_file(path: Path) -> PolicyDocument:
    """YAML or JSON (JSON is YAML), the shape of `GET /v1/policy`."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise PolicyFileError(f"cannot read policy file {path}: {error}") from error
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PolicyFileError(
            f"invalid policy file {path}: expected a mapping like GET /v1/policy, "
            f"got {type(raw).__name__}"
        )
    try:
        return PolicyDocument.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or '(top)'}: {item['msg']}"
            for item in error.errors(include_url=False)
        )
        raise PolicyFileError(f"invalid policy file {path}: {problems}") from error


INLINE_EVALUATION_MAX_CHARS = 2048
# The interceptor costs ~1.5 ms per 2 KiB (the flat splitter and the built-in rules).
INLINE_INTERCEPT_MAX_CHARS = 512


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

    async def evaluate(self, command: str) -> Verdict:
        # Parsing is CPU work that grows with the command (~10 ms at 64 KiB): long commands
        # are judged on a worker thread so that the event loop never stalls.
        if len(command) <= INLINE_EVALUATION_MAX_CHARS:
            return evaluate(self.document, command)
        return await anyio.to_thread.run_sync(evaluate, self.document, command)

    async def intercept(
        self, command: str, tools: Collection[str] | None, *, rewritten: str | None = None
    ) -> Interception | None:
        """The interceptor exactly as `POST /v1/executions` applies it, for submit and the dry
        run alike: the command as sent, then the command the leading-`cd` rewrite left (if it
        changed anything); the message always quotes the command as sent (reference §5.1).

        Linear in the command's length, but that adds up: longer commands are checked on a
        worker thread, as `evaluate` does."""
        settings = self.document.interceptor
        if not settings.enabled or not tools:
            return None
        if len(command) <= INLINE_INTERCEPT_MAX_CHARS:
            return self._intercept(settings, command, tools, rewritten)
        return await anyio.to_thread.run_sync(self._intercept, settings, command, tools, rewritten)

    @staticmethod
    def _intercept(
        settings: InterceptorSettings,
        command: str,
        tools: Collection[str],
        rewritten: str | None,
    ) -> Interception | None:
        rules = effective_rules(settings)
        candidates = [command]
        if rewritten is not None and rewritten != command:
            candidates.append(rewritten)
        for candidate in candidates:
            hit = check_interception(candidate, tools, rules, command)
            if hit is not None:
                return hit
        return None

    async def replace(self, document: PolicyDocument, *, author: str) -> PolicyVersion:
        text = document.model_dump_json()
        version = await self._db.call(crud.insert_policy_version, document=text, author=author)
        self.document = document
        self.version_id = version.id
        logger.info("policy version %s installed by %s", version.id, author)
        return version

    async def versions(self, limit: int) -> list[PolicyVersion]:
        return await self._db.call(crud.list_policy_versions, limit=limit)
