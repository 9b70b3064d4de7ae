"""The OpenAPI document's description: what an operation list cannot say (authentication,
errors, request ids, and the two WebSocket protocols, which OpenAPI cannot describe)."""

from __future__ import annotations

API_DESCRIPTION = """\
Run bash commands for remote AI agents over HTTP: foreground, background jobs and PTYs,
under an allow / prompt / deny policy with human approvals.

## Authentication
`Authorization: Bearer <token>` on every route but `/healthz`, `/readyz` and `/console`.
Roles: `agent` (runs commands), `approver` (reads everything, decides approvals), `admin`
(everything, and replaces the policy). Browsers, which cannot set headers on a WebSocket,
pass a single-use `?ticket=` from `POST /v1/ws-tickets` instead.

## Errors and request ids
A refusal is `{"error": {"code", "message", "details", "request_id"}}`; a body, query or path
value that does not fit its schema is FastAPI's 422 `{"detail": [{"loc", "msg", "type", ...}]}`.
Every response carries `X-Request-ID`: the id a gateway sent in that header (1-128 characters
of `A-Za-z0-9._:/+=@-`), else one the server made. The server's log lines about the request
carry the same id.

## WebSocket `GET /v1/executions/{execution_id}/stream?offset=N[&format=binary]`
Replays the execution's merged log from byte `N` (default 0), follows it live and ends with
one `exit` frame. Every frame is a JSON text message, except output with `?format=binary`.

Server to client:
- `{"type": "state", "state": s}` on connect, when an approved run starts, and at the end.
- `{"type": "output", "stream": "stdout" | "stderr" | "pty", "offset": n, "data": text}`:
  `offset` is the log position of the frame's first byte; `offset` + its byte length is where
  a reconnect resumes. At most 64 KiB a frame; bytes that are not UTF-8 travel with
  `"encoding": "base64"`. With `?format=binary` output frames are binary messages instead: one
  byte for the stream (0 stdout, 1 stderr, 2 pty), the offset in 8 bytes big-endian, then up
  to 256 KiB of log bytes as they are; every other frame stays JSON text.
- `{"type": "gap", "from": a, "to": b}`: bytes `[a, b)` were evicted from a log over the
  artifact cap.
- `{"type": "exit", "state", "exit_code", "signal"}`, then close 1000. Only this frame means
  done; after a dropped socket reconnect with the last offset (nothing lost or repeated).
- `{"type": "ping"}` after `SHELLGATE_WS_PING_SECONDS` of silence;
  `{"type": "error", "code", "message"}` for a refused client frame (the socket stays open).

Client to server (the owner or an admin; approvers may only watch):
`{"type": "input", "data": text[, "encoding": "base64"]}`,
`{"type": "resize", "rows", "cols"}`,
`{"type": "signal", "signal": "INT" | "TERM" | "KILL" | "HUP" | "QUIT"}` (to the process
group; TERM and KILL cancel), `{"type": "ping"}` (answered with `pong`).

Close codes: 1000 after `exit`; 4000 + the HTTP status the same error would get on REST (4401
no or bad credentials, 4404 unknown or another agent's execution, 4410 the execution's log is
gone from disk, 4422 a bad offset or format); 1011 a server-side failure; 1013 a temporary one (the
database, or the replica holding the log, does not answer): reconnect later.

## WebSocket `GET /v1/approvals/stream`
First `{"type": "snapshot", "approvals": [...pending...]}`, then `{"type":
"approval.requested" | "approval.decided", "approval": {...}}` as they happen (agents see only
their own executions' approvals), `{"type": "ping"}` when idle. A listener 1000 events
behind gets `{"type": "overflow"}` and close 1013: reconnect and list again. Close 4401 for
missing or bad credentials.

## Other protocols
`/mcp` is a Model Context Protocol endpoint (streamable HTTP) with the tools `bash`,
`job_wait`, `job_cancel`, `read_output` (not part of this document).
"""
