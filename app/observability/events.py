"""One log line per step of an execution's life, with its id and owner as fields.

Events: `submitted`, `verdict`, `approval_decided`, `started`, `finished` (`denied` calls
end at the verdict). In JSON logs the keyword arguments become fields of the line; in text
logs they follow the message as `key=value`.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("shellgate.lifecycle")


def execution_event(event: str, *, execution_id: str | None, owner: str, **fields: object) -> None:
    described = " ".join(f"{key}={value}" for key, value in fields.items())
    logger.info(
        "execution %s %s owner=%s %s",
        event,
        execution_id or "-",
        owner,
        described,
        extra={"event": event, "execution_id": execution_id, "owner": owner, **fields},
    )
