"""The `shellgate` command line: serve, and the client commands on the SDK."""
