"""Several replicas on one PostgreSQL (docs/operations.md#several-replicas): each registers as
a node and heartbeats, the job cap is counted in the database, approval decisions reach the
replica that holds the waiting call, a silent replica's running executions become `lost`, and
requests that need a process are forwarded to the replica that runs it."""

from app.cluster.node import Cluster

__all__ = ["Cluster"]
