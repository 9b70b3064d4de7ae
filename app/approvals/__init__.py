"""Human approvals: request, decide, expire, and tell whoever is listening."""
