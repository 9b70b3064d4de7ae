"""The bash reader: what a command line will run, read for the policy, the interceptor and the
leading `cd`."""
