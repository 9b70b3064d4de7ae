"""Prometheus metrics, one registry per app (no process-wide globals, so tests can build many)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.executions_started = Counter(
            "shellgate_executions_started_total",
            "Executions started, by mode",
            ["mode"],
            registry=self.registry,
        )
        self.executions_finished = Counter(
            "shellgate_executions_finished_total",
            "Executions finished, by terminal state",
            ["state"],
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
        self.http_requests = Histogram(
            "shellgate_http_request_seconds",
            "HTTP request latency by route and status",
            ["route", "status"],
            registry=self.registry,
        )

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
