"""Running the HTTP server: uvicorn with a bounded stop, the stop signal, `shellgate serve`, idle
memory."""
