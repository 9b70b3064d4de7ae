"""The MCP endpoint: the `bash` tool, its job tools, files and sessions tools, calls forwarded to
another replica."""
