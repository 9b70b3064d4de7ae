"""Files in and out of the machine (docs/api.md#files): where a requested path leads, what the
policy's `files` rules say about it, and the streamed transfers themselves.

Kept empty on purpose: `app/policy/engine.py` imports `app.policy.file_rules`, and this package's
service imports the policy."""
