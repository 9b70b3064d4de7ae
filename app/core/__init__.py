"""Shared by every room, importing none of them: settings, domain errors, ids, text and JSON
helpers, tokens."""
