"""The model-facing `text` block of an execution (docs/api.md#the-text-block)."""

from __future__ import annotations

from app.executions.timeouts import format_seconds
from app.store.inline_text import text_body
from app.store.models import ExecutionState

BACKGROUNDED_NOTICE = "Backgrounded as job {id}; result will be delivered automatically."


def timeout_notice(timeout_seconds: float | None) -> str:
    if timeout_seconds is None:
        return "Command timed out"
    return f"Command timed out after {format_seconds(timeout_seconds)} seconds"


CANCELLED_NOTICE = "Command cancelled"
LOST_NOTICE = "The server stopped while this command ran; its process group was killed."
# Added by a replica that ended its own commands, cut off from the cluster's database.
FENCED_NOTICE = (
    "This replica could not reach the cluster's database for {seconds:.0f} s, so the others "
    "take its work for lost: its process group was killed before they do."
)
# What the replica that records `lost` the running executions of one gone silent writes (a
# fixed part, which the returning replica finds its records by, and lost_on_silent_node's
# text); it killed nothing: their processes ended by the silent replica's own means.
LOST_ON_SILENT_NODE = "stopped heartbeating and its lease ran out"
# The notice replicas wrote before: a returning replica still finds the records they marked.
LOST_ON_SILENT_NODE_BEFORE = (
    "The replica running it stopped heartbeating; its output may be incomplete."
)


def lost_on_silent_node(*, node: str, recorder: str, timeout: float, sandboxed: bool) -> str:
    """The notice of an execution replica `recorder` recorded `lost` because `node`, which ran
    it, was silent past the node timeout (docs/operations.md, "When a replica dies")."""
    ended_by = (
        "the sandbox's PID namespace, which dies with that replica"
        if sandboxed
        else "that replica's fence watcher, which kills them when it dies"
    )
    return (
        f"Replica {node} {LOST_ON_SILENT_NODE} ({timeout:g} s without a beat); replica "
        f"{recorder} recorded this command lost and killed nothing itself. Its processes were "
        f"ended by {ended_by}, or, if it was only cut off from the database, by its own fence "
        "before the lease ran out. Its output may be incomplete."
    )


# Reading stopped before EOF when the command exited (app.process.OutputCut): keyed by its value.
OUTPUT_CUT_NOTICES = {
    "background": "Output capture stopped when the command exited: background processes it left "
    "running still hold its output open; what they write later is not recorded.",
    "escaped": "Output capture stopped when the command exited: a process that left its process "
    "group (setsid, a daemon) still holds its output open; what it writes later is not recorded.",
}

# A write to the output log failed otherwise than for lack of space (an I/O error): what the
# command wrote afterwards was read and dropped, never recorded with a hole in it.
OUTPUT_LOG_FAILED_NOTICE = (
    "Output capture stopped: writing the output log failed; what the command wrote later is "
    "not recorded."
)

STOPPING_NOTICE = "The server is shutting down: this command is being stopped and recorded."


def final_text(
    *,
    body: str,
    wall_time_ms: float | None,
    notices: list[str],
    state: ExecutionState,
    exit_code: int | None,
    footer: str | None,
) -> str:
    # Always the output first: the registry keeps the text as what follows it.
    text = text_body(body)
    if footer:
        text = f"{text}\n\n{footer}"
    block = []
    if wall_time_ms is not None:
        block.append(f"Wall time: {wall_time_ms / 1000:.2f} seconds")
    block.extend(notices)
    if block:
        text = f"{text}\n\n" + "\n".join(block)
    if state is ExecutionState.failed and exit_code not in (None, 0):
        text = f"{text}\n\nCommand exited with code {exit_code}"
    return text


def backgrounded_text(*, preview: str, notices: list[str], execution_id: str) -> str:
    parts = []
    preview = preview.strip()
    if preview:
        parts.append(preview)
    if notices:
        parts.append("\n".join(notices))
    parts.append(BACKGROUNDED_NOTICE.format(id=execution_id))
    return "\n\n".join(parts)
