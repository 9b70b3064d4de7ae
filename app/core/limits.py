"""Sizes of the contract that more than one layer checks: the policy's env rules refuse a
larger `env`, and the strict JSON reader sizes a request body's room from it."""

ENV_MAX_BYTES = 512 * 1024
