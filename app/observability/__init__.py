"""What an operator sees of a running server: log lines, lifecycle events, traces.

Prometheus metrics live in `app/observability/metrics.py`; the HTTP middleware that feeds all three
is `app/api/middleware.py`.
"""
