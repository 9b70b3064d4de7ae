"""The base of every model a client sends: unknown fields and non-finite numbers are refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    # No NaN or ±Infinity in any number a client sends (a timeout of Infinity used to run).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
