"""shellgate: run bash commands for remote AI agents over HTTP, safely."""

__version__ = "0.1.0"
