"""Completion delivery: an execution's terminal record POSTed, signed, to its `notify_url`
(docs/api.md#completion-delivery). `urls.py` says which URLs may be used (SSRF guard),
`signing.py` how a delivery is signed, `delivery.py` delivers, retries and resumes.
`approvals.py` sends approval events (docs/policy.md#hearing-of-prompts) through the same
deliverer."""

from app.notifications.delivery import Notifier

__all__ = ["Notifier"]
