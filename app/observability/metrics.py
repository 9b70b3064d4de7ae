"""Prometheus metrics, one registry per app (no process-wide globals, so tests can build many).

Who feeds what: the HTTP middleware (`app/api/middleware.py`) the request histogram; the
execution service verdicts, starts and ends; the approval service decisions; the stream route
the viewer gauge. Gauges that mirror live state read it at scrape time.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)

from app import __version__

# From 5 ms to a few minutes: most requests answer quickly, a foreground call may wait long.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Commands from a few milliseconds to an hour.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
# Output sizes from nothing to the artifact cap (256 MiB by default).
BYTES_BUCKETS = tuple(float(4**power) for power in range(0, 15))
# Human decisions: seconds to the default ten-minute expiry and beyond.
APPROVAL_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)


Child = TypeVar("Child", Counter, Histogram)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Each labelled child, looked up once: `labels()` checks and locks on every call (2 %
        # of a submit's CPU). The label values come from small fixed sets (modes, states,
        # route templates, statuses), so this stays small.
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        Info("shellgate_build", "Version of the running server", registry=self.registry).info(
            {"version": __version__, "python": platform.python_version()}
        )
        self.http_requests = Histogram(
            "shellgate_http_request_seconds",
            "HTTP request latency by method, route template and status",
            ["method", "route", "status"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.executions_started = Counter(
            "shellgate_executions_started_total",
            "Executions started, by mode",
            ["mode"],
            registry=self.registry,
        )
        self.spawns = Counter(
            "shellgate_spawns_total",
            "Commands started, by how: exec'd by the shell started ahead in its cgroups, or "
            "spawned on the request's path",
            ["how"],
            registry=self.registry,
        )
        self.executions_finished = Counter(
            "shellgate_executions_finished_total",
            "Executions finished, by terminal state",
            ["state"],
            registry=self.registry,
        )
        self.execution_seconds = Histogram(
            "shellgate_execution_duration_seconds",
            "Wall time of executions that ran, by terminal state",
            ["state"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.output_bytes = Histogram(
            "shellgate_execution_output_bytes",
            "Bytes of output (stdout, stderr, PTY) per execution that ran",
            buckets=BYTES_BUCKETS,
            registry=self.registry,
        )
        self.auto_backgrounded = Counter(
            "shellgate_auto_backgrounded_total",
            "Foreground calls converted into background jobs",
            registry=self.registry,
        )
        self.policy_verdicts = Counter(
            "shellgate_policy_verdicts_total",
            "Policy verdicts, by approval",
            ["approval"],
            registry=self.registry,
        )
        self.interceptions = Counter(
            "shellgate_interceptions_total",
            "Commands blocked by the interceptor",
            registry=self.registry,
        )
        self.approval_wait = Histogram(
            "shellgate_approval_wait_seconds",
            "Time from an approval's request to its decision, by outcome",
            ["state"],
            buckets=APPROVAL_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.stream_viewers = Gauge(
            "shellgate_stream_viewers",
            "WebSocket clients following an execution's output now",
            registry=self.registry,
        )

    def labelled(self, metric: Child, *values: str) -> Child:
        """`metric.labels(*values)`, the same child every time."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.labelled(self.http_requests, method, route, str(status)).observe(seconds)

    def observe_finished(self, state: str, seconds: float | None, output_bytes: int) -> None:
        self.labelled(self.executions_finished, state).inc()
        if seconds is not None:
            self.labelled(self.execution_seconds, state).observe(seconds)
            self.output_bytes.observe(output_bytes)

    def watch_running_jobs(self, read: Callable[[], int]) -> None:
        gauge = Gauge(
            "shellgate_running_jobs", "Background jobs running now", registry=self.registry
        )
        gauge.set_function(read)

    def watch_live_executions(self, read: Callable[[], int]) -> None:
        gauge = Gauge(
            "shellgate_live_executions", "Executions with a live process", registry=self.registry
        )
        gauge.set_function(read)

    def watch_waiting_calls(self, read: Callable[[], int]) -> None:
        gauge = Gauge(
            "shellgate_waiting_calls",
            "Calls held until an execution's state changes (long-polls, event feeds)",
            registry=self.registry,
        )
        gauge.set_function(read)

    def watch_commands_together(
        self,
        processes: Callable[[], float],
        memory_bytes: Callable[[], float],
        processes_limit: int | None,
        memory_limit_bytes: int | None,
    ) -> None:
        """What all commands together hold now, beside their shared limits (a cgroup backend:
        docs/operations.md#all-commands-together); a limit that is none is not exported."""
        Gauge(
            "shellgate_commands_processes",
            "Processes and threads of all commands together now",
            registry=self.registry,
        ).set_function(processes)
        Gauge(
            "shellgate_commands_memory_bytes",
            "Memory charged to all commands together now",
            registry=self.registry,
        ).set_function(memory_bytes)
        if processes_limit is not None:
            Gauge(
                "shellgate_commands_processes_limit",
                "Processes all commands together may hold (SHELLGATE_LIMIT_TOTAL_PROCESSES)",
                registry=self.registry,
            ).set(processes_limit)
        if memory_limit_bytes is not None:
            Gauge(
                "shellgate_commands_memory_limit_bytes",
                "Memory all commands together may use (SHELLGATE_LIMIT_TOTAL_MEMORY_MB)",
                registry=self.registry,
            ).set(memory_limit_bytes)

    def watch_pending_approvals(self, read: Callable[[], int]) -> None:
        gauge = Gauge(
            "shellgate_pending_approvals",
            "Approvals waiting for a decision now",
            registry=self.registry,
        )
        gauge.set_function(read)
