"""The deliverer: one task per execution whose terminal record is due at its `notify_url`.

Each attempt re-reads the record (the body is what `GET /v1/executions/{id}` returns at that
moment), resolves and checks the host again (urls.py), connects to the checked address, and
POSTs the body signed (signing.py), within `SHELLGATE_NOTIFY_TIMEOUT_SECONDS` all told; no
redirect is followed and the answer's body is never read. A 2xx delivers it; anything else is
retried after 1, 2, 4, … × `SHELLGATE_NOTIFY_BACKOFF_SECONDS` (capped) until
`SHELLGATE_NOTIFY_RETRY_SECONDS` after the execution ended. Every attempt is recorded on the
execution before the next is planned, with the time the next is due: a restarted server picks
up where the last one stopped (`start`). At most `SHELLGATE_NOTIFY_PER_HOST` attempts are in
flight per receiver, so a slow receiver only ever delays its own deliveries."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from app import __version__
from app.core.config import Settings, parse_notify_secrets
from app.core.errors import InvalidRequestError
from app.core.urls import AllowList, UrlRefused
from app.executions.views import to_public
from app.notifications.signing import SIGNATURE_HEADER, sign
from app.store import crud
from app.store.db import Database
from app.store.models import Execution, ExecutionState, NotifyState
from app.store.timestamps import aware_utc

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("shellgate.notifications")


def render_body(record: Execution) -> bytes:
    """The record as `GET /v1/executions/{id}` sends it (Starlette's JSONResponse encoding)."""
    content = to_public(record).model_dump(mode="json")
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


class _HostLimits:
    """A semaphore per receiver, dropped once nobody holds or waits for it."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._slots: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def hold(self, host: str) -> AsyncIterator[None]:
        semaphore, users = self._slots.get(host, (asyncio.Semaphore(self._size), 0))
        self._slots[host] = (semaphore, users + 1)
        try:
            async with semaphore:
                yield
        finally:
            semaphore, users = self._slots[host]
            if users <= 1:
                del self._slots[host]
            else:
                self._slots[host] = (semaphore, users - 1)


class Notifier:
    def __init__(self, settings: Settings, db: Database) -> None:
        self._settings = settings
        self._db = db
        self._allow = AllowList(settings.notify_allow)
        self._secrets = parse_notify_secrets(settings.notify_secrets)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._hosts = _HostLimits(settings.notify_per_host)
        self._client: httpx.AsyncClient | None = None
        self._client_made = asyncio.Lock()
        self._closed = False
        # Read at start, so that an unreadable bundle stops the server rather than each delivery.
        self._verify: ssl.SSLContext | bool = True
        if settings.notify_ca_file is not None:
            self._verify = ssl.create_default_context(cafile=str(settings.notify_ca_file))

    # --- the execution side (app/executions/completion.py) ------------------------------------

    async def admit(self, owner: str, url: str | None) -> str | None:
        if url is None:
            # The server's default was checked at start; its host is checked at delivery.
            default = self._settings.notify_url
            if default is None or self.secret_for(owner) is None:
                return None
            return self._allow.admit(default)[0].canonical
        if self.secret_for(owner) is None:
            raise InvalidRequestError(
                "notify_url is not accepted: no signing secret is configured "
                "(SHELLGATE_NOTIFY_SECRET, or this token's SHELLGATE_NOTIFY_SECRETS entry)"
            )
        try:
            destination = await self._allow.resolve(url)
        except UrlRefused as error:
            raise InvalidRequestError(str(error), details={"field": "notify_url"}) from error
        return destination.url.canonical

    def ended(self, execution_id: str, notify_url: str | None) -> None:
        if notify_url is not None:
            self._schedule(execution_id, 0.0)

    def secret_for(self, owner: str) -> str | None:
        return self._secrets.get(owner) or self._settings.notify_secret or None

    # --- the server's life --------------------------------------------------------------------

    async def start(self) -> int:
        """Resume the deliveries a previous run left due (after lost executions were
        recorded); returns how many."""
        records = await self._db.call(crud.executions_awaiting_delivery)
        now = datetime.now(UTC)
        resumed = 0
        for record in records:
            try:
                state = ExecutionState(record.state)
            except ValueError:
                # Written by another version (a newer one, rolled back): its delivery is left
                # as it is for a version that knows the state, and the server starts.
                logger.warning(
                    "not resuming the delivery of %s: its state %r is unknown to this version",
                    record.id,
                    record.state,
                )
                continue
            if not state.is_terminal:
                continue  # it ends in this run and is handed over then
            due = aware_utc(record.notify_next_at)
            self._schedule(record.id, 0.0 if due is None else (due - now).total_seconds())
            resumed += 1
        if resumed:
            logger.info("resuming %d webhook deliveries", resumed)
        return resumed

    async def close(self) -> None:
        """Stop delivering; what is not delivered stays due in the database for the next start."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    @property
    def pending(self) -> int:
        return len(self._tasks)

    # --- delivering ---------------------------------------------------------------------------

    def _schedule(self, execution_id: str, delay: float) -> None:
        if self._closed or execution_id in self._tasks:
            return
        task = asyncio.create_task(self._deliver(execution_id, max(0.0, delay)))
        self._tasks[execution_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(execution_id, None))

    def _backoff(self, attempts: int) -> float:
        base = self._settings.notify_backoff_seconds * 2 ** max(0, attempts - 1)
        return float(min(self._settings.notify_backoff_max_seconds, base))

    async def _deliver(self, execution_id: str, delay: float) -> None:
        failures = 0
        while True:
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                delay = await self._step(execution_id)
                failures = 0
            except Exception:
                # The database (or something unforeseen) failed between attempts: the delivery
                # is still due in the database; try again later, never give up silently here.
                failures += 1
                logger.exception("webhook delivery of %s failed; retrying", execution_id)
                delay = self._backoff(failures)
            if delay < 0:
                return

    async def _step(self, execution_id: str) -> float:
        """One attempt and its record; the seconds until the next (negative: done)."""
        record = await self._db.call(crud.get_execution, execution_id=execution_id)
        if (
            record is None
            or record.notify_state != NotifyState.waiting.value
            or record.notify_url is None
            or not ExecutionState(record.state).is_terminal
        ):
            return -1.0
        attempts: list[dict[str, Any]] = json.loads(record.notify_attempts or "[]")
        now = datetime.now(UTC)
        ended = aware_utc(record.finished_at) or now
        give_up_at = ended + timedelta(seconds=self._settings.notify_retry_seconds)
        if attempts and now >= give_up_at:
            # The window closed while no server ran: the last recorded attempt was the last.
            await self._save(execution_id, attempts, NotifyState.failed, None)
            return -1.0
        attempt = await self._attempt(record, len(attempts) + 1)
        attempts.append(attempt)
        if attempt["error"] is None:
            await self._save(execution_id, attempts, NotifyState.delivered, None)
            logger.info("delivered %s to its notify_url", execution_id)
            return -1.0
        delay = self._backoff(len(attempts))
        next_at = datetime.now(UTC) + timedelta(seconds=delay)
        if next_at > give_up_at:
            await self._save(execution_id, attempts, NotifyState.failed, None)
            logger.warning(
                "gave up delivering %s after %d attempts: %s",
                execution_id,
                len(attempts),
                attempt["error"],
            )
            return -1.0
        await self._save(execution_id, attempts, NotifyState.waiting, next_at)
        return delay

    async def _save(
        self,
        execution_id: str,
        attempts: list[dict[str, Any]],
        state: NotifyState,
        next_at: datetime | None,
    ) -> None:
        values = {
            "notify_attempts": json.dumps(attempts),
            "notify_state": state.value,
            "notify_next_at": next_at,
        }
        await self._db.run(crud.update_execution, execution_id=execution_id, values=values)

    async def _attempt(self, record: Execution, number: int) -> dict[str, Any]:
        assert record.notify_url is not None
        headers = {"X-Shellgate-Execution": record.id, "X-Shellgate-Attempt": str(number)}
        return await self.attempt(
            record.notify_url, self.secret_for(record.owner), render_body(record), headers
        )

    # --- one signed POST (completion deliveries here, approval events in approvals.py) --------

    async def attempt(
        self, url: str, secret: str | None, body: bytes, headers: dict[str, str]
    ) -> dict[str, Any]:
        """POST `body` to `url`, signed with `secret`, with `headers` besides the standard
        ones; the attempt as recorded (`at`, `status_code`, `error` — None when delivered —,
        `duration_ms`). Never raises for the receiver's sake."""
        # httpx (with the CLI tools it loads: Rich, Click, Pygments) and the client (its CA
        # bundle) only once a delivery is due, as most servers never send one
        # (tests/test_lazy_startup.py): made on a worker thread, not the event loop, and before
        # the attempt's time starts.
        async with self._client_made:
            if self._client is None:
                await anyio.to_thread.run_sync(self._http)
        import httpx

        at = datetime.now(UTC)
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        timeout = self._settings.notify_timeout_seconds
        try:
            status = await asyncio.wait_for(self._post(url, secret, body, headers), timeout)
            if 300 <= status < 400:
                error = f"HTTP {status}: redirects are not followed"
            elif not 200 <= status < 300:
                error = f"HTTP {status}"
        except UrlRefused as refused:
            error = str(refused)
        except TimeoutError:
            error = f"no answer within {timeout:g}s"
        except httpx.HTTPError as failure:
            error = f"{type(failure).__name__}: {failure}".rstrip(": ")
        return {
            "at": at.isoformat().replace("+00:00", "Z"),
            "status_code": status,
            "error": error,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        }

    def backoff(self, attempts: int) -> float:
        """The wait after `attempts` failed attempts in a row."""
        return self._backoff(attempts)

    async def _post(
        self, target: str, secret: str | None, body: bytes, extra: dict[str, str]
    ) -> int:
        import httpx

        if secret is None:
            raise UrlRefused("no signing secret is configured for this execution's owner")
        destination = await self._allow.resolve(target)
        url = destination.url
        headers = {
            "Host": url.host_header,
            "Content-Type": "application/json",
            "User-Agent": f"shellgate/{__version__}",
            SIGNATURE_HEADER: sign(secret, body),
            **extra,
        }
        extensions: dict[str, Any] = {}
        if url.scheme == "https":
            # TLS (SNI, certificate) for the name, the connection to the checked address.
            extensions["sni_hostname"] = url.host
        client = self._http()
        async with self._hosts.hold(f"{url.scheme}://{url.host_header}"):
            # Each checked address in the resolver's order, as a browser would: `localhost`
            # may answer on 127.0.0.1 but not on ::1.
            for position, address in enumerate(destination.addresses, start=1):
                request = client.build_request(
                    "POST",
                    destination.connect_url(address),
                    content=body,
                    headers=headers,
                    extensions=extensions,
                )
                try:
                    response = await client.send(request, stream=True)
                except httpx.ConnectError:
                    if position == len(destination.addresses):
                        raise
                    continue
                await response.aclose()  # the answer's body is never read
                return response.status_code
        raise AssertionError("a destination has at least one address")

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            # No proxies from the environment (they would connect elsewhere than the checked
            # address), no redirects.
            self._client = httpx.AsyncClient(
                verify=self._verify,
                follow_redirects=False,
                trust_env=False,
                timeout=self._settings.notify_timeout_seconds,
                limits=httpx.Limits(max_keepalive_connections=8),
            )
        return self._client
