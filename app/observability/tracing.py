"""Optional OpenTelemetry tracing: install the `[otel]` extra and set
`OTEL_EXPORTER_OTLP_ENDPOINT`, and every request gets a span (with the execution id it
touched), with child spans for the policy, an approval wait, the spawn and the run.

When it is off nothing of OpenTelemetry is imported: the spans below are no-ops.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

logger = logging.getLogger("shellgate.tracing")

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
EXECUTION_ID_ATTRIBUTE = "shellgate.execution_id"


class RunSpan:
    """A span that outlives the call that opened it (an execution's run), ended explicitly."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def end(self, **attributes: str | int | float | bool | None) -> None:
        if self._span is not None:
            _set_attributes(self._span, attributes)
            self._span.end()
            self._span = None


class Tracing:
    def __init__(self, provider: TracerProvider | None = None) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("shellgate") if provider is not None else None

    @classmethod
    def from_environment(cls) -> Tracing:
        if not os.environ.get(ENDPOINT_VARIABLE):
            return cls()
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            logger.warning(
                "%s is set but OpenTelemetry is not installed (pip install 'shellgate[otel]'): "
                "tracing stays off",
                ENDPOINT_VARIABLE,
            )
            return cls()
        # The exporter reads the endpoint, headers and timeouts from the OTEL_* variables.
        provider = TracerProvider(resource=Resource.create({"service.name": "shellgate"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider)

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def instrument(self, app: Any) -> None:
        """A server span per HTTP request and WebSocket (the FastAPI instrumentation)."""
        if self.provider is None:
            return
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app, tracer_provider=self.provider)

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()

    @contextlib.contextmanager
    def span(self, name: str, **attributes: str | int | float | bool | None) -> Iterator[None]:
        if self._tracer is None:
            yield
            return
        with self._tracer.start_as_current_span(name) as span:
            _set_attributes(span, attributes)
            yield

    def start_run(self, name: str, **attributes: str | int | float | bool | None) -> RunSpan:
        if self._tracer is None:
            return RunSpan()
        span = self._tracer.start_span(name)
        _set_attributes(span, attributes)
        return RunSpan(span)

    def current_trace_id(self) -> str | None:
        """The W3C trace id (32 hex digits) of the current span, when tracing is on."""
        if self._tracer is None:
            return None
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        return f"{context.trace_id:032x}" if context.is_valid else None

    def tag_execution(self, execution_id: str) -> None:
        """Name the execution on the current span (the request's, when called in a request)."""
        if self._tracer is None:
            return
        from opentelemetry import trace

        trace.get_current_span().set_attribute(EXECUTION_ID_ATTRIBUTE, execution_id)


def _set_attributes(span: Any, attributes: dict[str, str | int | float | bool | None]) -> None:
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(f"shellgate.{key}", value)


TRACING_OFF = Tracing()
