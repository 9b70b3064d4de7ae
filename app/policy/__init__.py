"""The policy: rules and their evaluation, critical patterns, env and file rules, the interceptor,
the bash reader (`policy.shell`), and the policy in force."""
