"""Persistent sessions and the NDJSON streaming runner."""
