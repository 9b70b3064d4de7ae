"""`GET /v1/executions/{id}/events`: an execution's state changes as Server-Sent Events, for
clients that cannot take a webhook (docs/api.md#server-sent-events).

Events (each `data` is the record exactly as `GET /v1/executions/{id}` returns it):

    id: 1  event: state  the execution awaits an approval
    id: 2  event: state  it runs
    id: 3  event: end    it is terminal; the stream then ends

States only move forward, so an event's id is the rank of its state: a client that reconnects
with `Last-Event-ID: N` gets only what comes after N, and one that already saw the end gets a
204 (which tells an EventSource to stop reconnecting). Between events a comment line keeps
gateways from cutting the idle connection."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Response
from fastapi.responses import StreamingResponse

from app.api.deps import PrincipalDep, ServicesDep
from app.api.errors import error_responses
from app.api.operation_ids import operation_id
from app.core.auth import Principal
from app.core.errors import InvalidRequestError, NotFoundError
from app.output.frame_json import one_line
from app.services import Services
from app.store.models import ExecutionState

router = APIRouter(
    generate_unique_id_function=operation_id, prefix="/v1/executions", tags=["executions"]
)

RECONNECT_MS = 3000
_RANKS = {ExecutionState.awaiting_approval: 1, ExecutionState.running: 2}
END_RANK = 3


def rank(state: ExecutionState) -> int:
    return _RANKS.get(state, END_RANK)


def parse_last_event_id(value: str | None) -> int:
    if value is None or value.strip() == "":
        return 0
    text = value.strip()
    # ASCII digits only, and few of them: `²` passes `isdigit()` and 5000 digits pass it too,
    # but `int()` refuses both (it raised out of here as a 500).
    if not (text.isascii() and text.isdigit() and len(text) <= 8) or int(text) > END_RANK:
        raise InvalidRequestError(f"Last-Event-ID must be 0..{END_RANK}, the id of an event")
    return int(text)


@router.get(
    "/{execution_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "description": "`state` events (id 1: awaiting_approval, 2: running) and one `end` "
            "event (id 3), each with the record as `data`; comment lines as heartbeats.",
        },
        204: {"description": "`Last-Event-ID` says the end was already seen."},
        **error_responses(401, 404, 422, described={404: "No such execution, or another's."}),
    },
    summary="Follow an execution's states (Server-Sent Events)",
)
async def follow_execution_events(
    execution_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", description="Resume after this event id (1, 2 or 3)."),
    ] = None,
) -> Response:
    """The execution's state changes, then its final record, as `text/event-stream`. Readable
    by whoever may read the execution."""
    seen = parse_last_event_id(last_event_id)
    record = await services.executions.authorize_read(principal, execution_id)
    if seen >= END_RANK and ExecutionState(record.state).is_terminal:
        return Response(status_code=204)
    return StreamingResponse(
        _feed(services, principal, execution_id, seen),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _feed(
    services: Services, principal: Principal, execution_id: str, seen_rank: int
) -> AsyncIterator[str]:
    executions = services.executions
    heartbeat = services.settings.sse_heartbeat_seconds
    yield f"retry: {RECONNECT_MS}\n\n"
    seen_state: str | None = None
    while True:
        try:
            record = await executions.wait_for_state_change(
                principal, execution_id, seen_state, heartbeat
            )
            if record.state == seen_state:
                if executions.stopping:
                    return  # the client reconnects (to this server once back, or another)
                yield ": keepalive\n\n"
                continue
            public = await executions.get(principal, execution_id)
        except NotFoundError:
            return  # pruned meanwhile
        seen_state = public.state.value
        event_rank = rank(public.state)
        if event_rank > seen_rank:
            seen_rank = event_rank
            name = "end" if event_rank == END_RANK else "state"
            # Compact JSON has no raw CR or LF, so the record is one `data:` line; NEL,
            # U+2028 and U+2029 are escaped too, for readers that split with splitlines().
            data = one_line(
                json.dumps(
                    public.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")
                )
            )
            yield f"id: {event_rank}\nevent: {name}\ndata: {data}\n\n"
        if event_rank == END_RANK:
            return
