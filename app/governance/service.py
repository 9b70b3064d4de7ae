"""The policy in force: loaded at start, replaced by admins, every version kept
(docs/policy.md#policy-api)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.core.blocking import run_blocking
from app.core.errors import InvalidRequestError, PolicyDeniedError
from app.policy.critical_patterns import judged_by_cwd
from app.policy.engine import (
    InterceptorSettings,
    PolicyDocument,
    PolicyRule,
    RuleAction,
    Verdict,
    evaluate,
    glob_matches,
)
from app.policy.env_rules import EnvJudgement, judge_env, validate_env
from app.policy.interceptor import Interception, effective_rules
from app.policy.interceptor import check as check_interception
from app.policy.reader_process import CommandReaders, ReadingBudget
from app.policy.remembered import RememberedRule, active_rules, suggest_pattern
from app.policy.shell.syntax import env_scripts, extract_leading_cd
from app.policy.working_directory import working_directory
from app.sandbox.effective import SandboxAsk, effective_profile, expand_paths, under_hidden
from app.sandbox.policy_rules import SandboxWidening
from app.sandbox.profile import SandboxProfile
from app.schemas import (
    CdRewrite,
    EnvVerdictPublic,
    InterceptionPublic,
    PolicyEvaluate,
    PolicyEvaluation,
    PolicyVersionPublic,
    SandboxProfilePublic,
)
from app.store import crud
from app.store.db import Database
from app.store.models import PolicyVersion
from app.store.timestamps import aware_utc

logger = logging.getLogger("shellgate.policy")


class PolicyFileError(ValueError):
    """The policy file cannot be used; the server refuses to start rather than run unguarded."""


def read_policy_file(path: Path) -> PolicyDocument:
    """YAML or JSON (JSON is YAML), the shape of `GET /v1/policy`."""
    import yaml  # only servers with SHELLGATE_POLICY_FILE read one (tests/test_lazy_startup.py)

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


# The longest command judged on the event loop: its parse holds the loop for a few ms at most
# (the worst shape found, `a|a|…|`, 12 ms at 1 KiB). Longer ones are read in a process of
# their own (app/policy/reader_process.py) and judged on a worker thread.
INLINE_EVALUATION_MAX_CHARS = 1024
# The interceptor costs ~1.5 ms per 2 KiB (the flat splitter and the built-in rules).
INLINE_INTERCEPT_MAX_CHARS = 512
_SEVERITY = {RuleAction.allow: 0, RuleAction.prompt: 1, RuleAction.deny: 2}


@dataclass(frozen=True)
class Judgement:
    """The policy's word on one request: the command's verdict and the env's, combined so that
    the stricter wins (a prompt on either side needs an approval; a deny on either refuses)."""

    command: Verdict
    env: EnvJudgement

    @property
    def env_action(self) -> RuleAction:
        return RuleAction(self.env.action)

    @property
    def approval(self) -> RuleAction:
        return max(self.command.approval, self.env_action, key=_SEVERITY.__getitem__)

    @property
    def reason(self) -> str:
        command, env = self.command.approval, self.env_action
        if command is RuleAction.deny or env is RuleAction.allow:
            return self.command.reason
        if env is RuleAction.deny or command is RuleAction.allow:
            return self.env.reason
        return f"{self.command.reason}; {self.env.reason}"

    @property
    def denied_by_env(self) -> bool:
        return self.command.approval is not RuleAction.deny and self.env_action is RuleAction.deny


class PolicyService:
    def __init__(
        self,
        db: Database,
        policy_file: Path | None,
        *,
        sandbox_default: SandboxProfile | None = None,
        workspace: Path | None = None,
    ) -> None:
        self._db = db
        self._policy_file = policy_file
        self.document = PolicyDocument()
        self.version_id: int | None = None
        self._readers = CommandReaders()
        # One version written at a time, so that two decisions remembered together both stay.
        self._writing = asyncio.Lock()
        # The server's own profile (app/sandbox/defaults.py), which the policy only widens.
        self.sandbox_default = sandbox_default or SandboxProfile("on", (), ())
        self._workspace = str(workspace or Path.cwd())

    def sandbox_profile(self, widening: SandboxWidening | None = None) -> SandboxProfile:
        """The profile the policy in force gives a command whose deciding rule carries
        `widening` (docs/policy.md#sandbox)."""
        return effective_profile(
            self.sandbox_default, self.document.sandbox, widening, workspace=self._workspace
        )

    def expand_sandbox_paths(self, paths: Iterable[str]) -> list[str]:
        """`$WORKSPACE` and `~` in checked paths, as a profile has them."""
        return expand_paths(paths, workspace=self._workspace)

    def check_sandbox(self, document: PolicyDocument) -> None:
        """Hidden wins: a write path at or below a path the server hides is refused (422), so
        that no document seems to grant what the kernel will never give."""
        hidden = self.sandbox_default.hidden
        fields = [("sandbox.write", document.sandbox.write)]
        fields += [
            (f"rules[{index}].sandbox.write", rule.sandbox.write)
            for index, rule in enumerate(document.rules)
            if rule.sandbox is not None
        ]
        for name, paths in fields:
            for path in paths:
                if under_hidden(self.expand_sandbox_paths([path]), hidden):
                    raise InvalidRequestError(
                        f"{name}: {path} is hidden from every command by the server "
                        "(the data directory, the token and policy files, the configured "
                        "hidden list); hidden wins, so it cannot be made writable",
                        details={"field": name, "path": path},
                    )

    async def load(self) -> None:
        """The newest stored version wins; the policy file only seeds an empty registry."""
        latest = await self._db.call(crud.latest_policy_version)
        if latest is not None:
            self.document = PolicyDocument.model_validate_json(latest.document)
            self.version_id = latest.id
            return
        if self._policy_file is not None:
            document = read_policy_file(self._policy_file)
            try:
                self.check_sandbox(document)
            except InvalidRequestError as error:
                raise PolicyFileError(
                    f"invalid policy file {self._policy_file}: {error.message}"
                ) from error
            version = await self.replace(document, author=f"file:{self._policy_file.name}")
            logger.info("policy seeded from %s as version %s", self._policy_file, version.id)

    def in_force(self) -> PolicyDocument:
        """The policy in force as `GET /v1/policy` shows it: remembered rules that expired
        have dropped out."""
        return _without_expired(self.document)

    async def evaluate(
        self,
        command: str,
        *,
        cwd: str | None = None,
        scripts: Sequence[str] = (),
        home: str | None = None,
        cdpath: bool = False,
        budget: ReadingBudget | None = None,
        owner: str | None = None,
        document: PolicyDocument | None = None,
    ) -> Verdict:
        """The command's verdict under `document` (default: the policy in force); with `owner`,
        a `prompt` that one of the owner's remembered rules vouches for becomes an `allow`
        naming that rule (docs/policy.md#remembered-decisions)."""
        # Parsing is CPU work that grows with the text, superlinearly on some, and holds the
        # interpreter lock: past the inline size every text (the command and the scripts its
        # env hands programs) is read in a child process, bounded in time and memory, and the
        # rest of the judgement runs on a worker thread. `budget`: the call's share of the
        # readers (its owner, its wait, its reading time), shared by all its texts.
        document = document or self.document  # one version for the whole judgement
        texts = (command, *scripts)
        if sum(len(text) for text in texts) <= INLINE_EVALUATION_MAX_CHARS:
            return _judged_with_remembered(
                document, owner, command, cwd=cwd, scripts=scripts, home=home, cdpath=cdpath
            )
        budget = budget if budget is not None else self._readers.budget("")
        readings = {text: await self._readers.read(text, budget) for text in dict.fromkeys(texts)}
        return await run_blocking(
            lambda: _judged_with_remembered(
                document,
                owner,
                command,
                cwd=cwd,
                scripts=scripts,
                home=home,
                cdpath=cdpath,
                readings=readings,
            )
        )

    async def remembered_widening(
        self, command: str, *, owner: str, cwd: str | None = None
    ) -> RememberedRule | None:
        """The owner's remembered rule from a sandbox escalation that vouches for `command`, as
        a remembered prompt does (the engine's matching: the whole command, no control syntax,
        every command inside allowed too), or None; its `sandbox` is what the call may ask
        beyond its profile without a prompt (docs/policy.md#remembered-decisions)."""
        document = self.document
        candidates = [
            rule
            for rule in active_rules(document.remembered, owner=owner, now=datetime.now(UTC))
            if rule.sandbox is not None
        ]
        if not candidates:
            return None
        widened = _with_remembered(document, candidates)
        verdict = await self.evaluate(command, cwd=cwd, document=widened)
        if verdict.approval is not RuleAction.allow or verdict.matched_rule is None:
            return None
        return _remembered_by(candidates, verdict.matched_rule.match)

    def stop_reading(self) -> None:
        """The stop was requested: the command readers' work ends now (their reads become
        limits, never allowed)."""
        self._readers.stop()

    async def close(self) -> None:
        """Stop the command readers (the server is stopping)."""
        await self._readers.close()

    def judge_env(self, names: Iterable[str]) -> EnvJudgement:
        return judge_env(self.document.env, names)

    def refuse_denied_env(self, env: dict[str, str] | None) -> None:
        """403 `Blocked environment variable: <NAME>` if the env rules deny any name of `env`
        (a prompted name passes: it is judged again on every call that runs with it)."""
        judgement = self.judge_env(env or {})
        if judgement.action == "deny":
            raise PolicyDeniedError(
                judgement.reason, details={"env": [item.name for item in judgement.named("deny")]}
            )

    async def judge(
        self,
        command: str,
        *,
        env: Mapping[str, str],
        cwd: str | None = None,
        run: tuple[str, str] | None = None,
        owner: str = "",
        document: PolicyDocument | None = None,
    ) -> Judgement:
        """The command and every env name of a request, under the policy in force now; the
        values a program runs as shell text (`GIT_EXTERNAL_DIFF`, `PAGER`, …) are read with
        the command, as they would be in its own text. `cwd`: where the command starts (for
        a command whose leading `cd` was rewritten, the directory before that `cd`); `run`:
        the rewritten command and its directory, when there is one; `owner`: who asks (long
        commands share the readers fairly between owners). ReadersBusyError (503) when a
        long command found no free reader in time."""
        # The env rules of the document the command is judged by (a replayed draft's own).
        names = judge_env((document or self.document).env, env)
        scripts = env_scripts(env)
        home = env.get("HOME") or None  # what `~` means to this command
        cdpath = bool(env.get("CDPATH"))
        budget = self._readers.budget(owner)  # from the call's arrival, for all its readings
        verdict = await self.evaluate(
            command,
            cwd=cwd,
            scripts=scripts,
            home=home,
            cdpath=cdpath,
            budget=budget,
            owner=owner or None,
            document=document,
        )
        run_command, run_cwd = run or (command, cwd)
        if run_cwd is not None and judged_by_cwd(verdict.segments):
            # Also what runs where it runs: the command the leading-`cd` rewrite left, in its
            # directory with the symlinks followed (`cd link-to-root && rm -rf .`); the
            # critical patterns judge both, the stricter verdict wins.
            real = await run_blocking(functools.partial(os.path.realpath, run_cwd))
            if real != cwd or run_command != command:
                other = await self.evaluate(
                    run_command,
                    cwd=real,
                    scripts=scripts,
                    home=home,
                    cdpath=cdpath,
                    budget=budget,
                    owner=owner or None,
                    document=document,
                )
                if _SEVERITY[other.approval] > _SEVERITY[verdict.approval]:
                    verdict = other
        return Judgement(verdict, names)

    async def dry_run(
        self, request: PolicyEvaluate, *, max_command_bytes: int, workspace: Path, owner: str = ""
    ) -> PolicyEvaluation:
        """What `POST /v1/executions` would decide for this request; runs nothing."""
        size = len(request.command.encode("utf-8", "surrogatepass"))
        if size > max_command_bytes:
            raise InvalidRequestError(f"command is longer than {max_command_bytes} bytes")
        validate_env(request.env)
        leading = None if request.cwd else extract_leading_cd(request.command)
        cwd_request = request.cwd or (leading.target if leading else None)
        cwd = working_directory(cwd_request, str(workspace))
        start = working_directory(None, str(workspace)) if leading else cwd
        judgement = await self.judge(
            request.command,
            env=request.env or {},
            cwd=start,
            run=(leading.rest, cwd) if leading else None,
            owner=owner,
        )
        verdict = judgement.command
        interception = None
        if judgement.approval is not RuleAction.deny:
            hit = await self.intercept(
                request.command, request.tools, rewritten=leading.rest if leading else None
            )
            if hit is not None:
                interception = InterceptionPublic(tool=hit.tool, message=hit.message)
        return PolicyEvaluation(
            verdict=judgement.approval,
            reason=judgement.reason,
            command_verdict=verdict.approval,
            matched_rule=verdict.matched_rule,
            matched_segment=_matched_text(verdict, request.command),
            segments=verdict.segments,
            critical_hits=verdict.critical_hits,
            unreadable_reasons=verdict.unreadable_reasons,
            parse_error=verdict.parse_error,
            env_verdict=judgement.env_action,
            env=[
                EnvVerdictPublic(name=item.name, verdict=RuleAction(item.action), rule=item.glob)
                for item in judgement.env.names
            ],
            cwd=cwd,
            cd_rewrite=CdRewrite(cwd=leading.target, command=leading.rest) if leading else None,
            interception=interception,
            sandbox=self._dry_run_sandbox(judgement),
        )

    def _dry_run_sandbox(self, judgement: Judgement) -> SandboxProfilePublic | None:
        if judgement.approval is RuleAction.deny:
            return None
        rule = judgement.command.matched_rule
        record = self.sandbox_profile(rule.sandbox if rule is not None else None).to_record()
        return SandboxProfilePublic.model_validate(
            {key: record[key] for key in ("network", "write", "hidden")}
        )

    async def intercept(
        self, command: str, tools: Collection[str] | None, *, rewritten: str | None = None
    ) -> Interception | None:
        """The interceptor exactly as `POST /v1/executions` applies it, for submit and the dry
        run alike: the command as sent, then the command the leading-`cd` rewrite left (if it
        changed anything); the message always quotes the command as sent
        (docs/policy.md#interceptor).

        Linear in the command's length, but that adds up: longer commands are checked on a
        worker thread, as `evaluate` does."""
        settings = self.document.interceptor
        if not settings.enabled or not tools:
            return None
        if len(command) <= INLINE_INTERCEPT_MAX_CHARS:
            return self._intercept(settings, command, tools, rewritten)
        return await run_blocking(
            functools.partial(self._intercept, settings, command, tools, rewritten)
        )

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
        async with self._writing:
            return await self._install(_without_expired(document), author=author)

    async def remember(self, rule: RememberedRule) -> PolicyVersion:
        """A new policy version: the policy in force with `rule` added (and the remembered
        rules that expired dropped), by the rule's author."""
        async with self._writing:
            current = _without_expired(self.document)
            document = current.model_copy(update={"remembered": [*current.remembered, rule]})
            return await self._install(document, author=rule.author)

    async def _install(self, document: PolicyDocument, *, author: str) -> PolicyVersion:
        self.check_sandbox(document)
        text = document.model_dump_json()
        version = await self._db.call(crud.insert_policy_version, document=text, author=author)
        self.document = document
        self.version_id = version.id
        logger.info("policy version %s installed by %s", version.id, author)
        return version

    async def versions(self, limit: int) -> list[PolicyVersion]:
        return await self._db.call(crud.list_policy_versions, limit=limit)


def _without_expired(document: PolicyDocument) -> PolicyDocument:
    active = active_rules(document.remembered)
    if len(active) == len(document.remembered):
        return document
    return document.model_copy(update={"remembered": active})


def _judged_with_remembered(
    document: PolicyDocument,
    owner: str | None,
    command: str,
    **options: Any,
) -> Verdict:
    """`evaluate`, then, for a `prompt`, again with the owner's remembered rules placed before
    the policy's own as `allow` rules: the allow wins only where the engine lets an allow
    vouch (the whole command, no control syntax, every command inside allowed too), and a
    critical pattern or an unreadable part still prompts."""
    verdict = evaluate(document, command, **options)
    if verdict.approval is not RuleAction.prompt or owner is None:
        return verdict
    remembered = active_rules(document.remembered, owner=owner, now=datetime.now(UTC))
    if not remembered:
        return verdict
    again = evaluate(_with_remembered(document, remembered), command, **options)
    if again.approval is not RuleAction.allow or again.matched_rule is None:
        return verdict
    rule = _remembered_by(remembered, again.matched_rule.match)
    if rule is None:
        return verdict
    return dataclasses.replace(
        again,
        reason=remembered_reason(rule),
        remembered_rule=rule.id,
    )


def _with_remembered(document: PolicyDocument, rules: Sequence[RememberedRule]) -> PolicyDocument:
    """`document` with `rules` placed before its own as `allow` rules."""
    allows = [PolicyRule(match=rule.match, approval=RuleAction.allow) for rule in rules]
    return document.model_copy(update={"rules": [*allows, *document.rules]})


def _remembered_by(rules: Sequence[RememberedRule], matched: str) -> RememberedRule | None:
    """The remembered rule whose pattern decided (`matched`), if one did."""
    return next((rule for rule in rules if rule.match == matched), None)


def remembered_reason(rule: RememberedRule) -> str:
    """The reason an execution allowed by `rule` records (docs/policy.md#remembered-decisions)."""
    return f"Allowed by remembered rule {_remembered_terms(rule)}"


def escalation_reason(rule: RememberedRule, ask: SandboxAsk) -> str:
    """What an execution records when `rule`, remembered from a sandbox escalation, let it
    have `ask` beyond its profile without a prompt."""
    terms = _remembered_terms(rule)
    return f"Sandbox escalation ({ask.describe()}) allowed by remembered rule {terms}"


def _remembered_terms(rule: RememberedRule) -> str:
    scope = f"for {rule.owner}" if rule.owner is not None else "for everyone"
    until = rule.expires_at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return f"{rule.id}: {rule.match} ({scope} until {until})"


def suggested_pattern(verdict: Verdict, command: str) -> str:
    """The pattern an approver is offered to remember for a prompted command: from the
    segment that prompted (the one the prompting rule matched, else the first), its command
    word and subcommand with the rest as `*`."""
    segment = None
    if verdict.matched_rule is not None and verdict.matched_rule.approval is RuleAction.prompt:
        segment = _matched_text(verdict, command)
    if segment is None:
        segment = verdict.segments[0] if verdict.segments else command
    return suggest_pattern(segment)


def _matched_text(verdict: Verdict, command: str) -> str | None:
    """The text the deciding rule matched: the whole command first (as the engine tries it),
    else the first segment it matches."""
    rule = verdict.matched_rule
    if rule is None:
        return None
    for text in (command, *verdict.segments):
        if glob_matches(rule.match, text):
            return text
    return None


def version_public(version: PolicyVersion) -> PolicyVersionPublic:
    return PolicyVersionPublic(
        id=version.id or 0,
        author=version.author,
        created_at=aware_utc(version.created_at),
        document=PolicyDocument.model_validate_json(version.document),
    )
