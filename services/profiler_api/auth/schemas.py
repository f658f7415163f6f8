"""Requests and responses of the token endpoints."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from services.profiler_api.auth.service import Role


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    org: str = Field(min_length=1, max_length=128)
    role: Role
    name: str | None = Field(default=None, max_length=128)


class IssuedToken(BaseModel):
    """A new token; the service keeps only its hash, so this is the only time it is shown."""

    org: str
    role: Role
    token: str
