"""Requests and responses of the token endpoints."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from services.profiler_api.auth.service import Role
from tps import schemas
from tps.bounds import NO_NUL


class IssuableRole(StrEnum):
    """Roles the API issues; an operator token is created only with `tps token create`."""

    AGENT = "agent"
    ADMIN = "admin"


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    org: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=NO_NUL,
        description="default: the caller's organisation; only an operator names another",
    )
    role: IssuableRole
    name: str | None = Field(default=None, max_length=128, pattern=NO_NUL)


class IssuedToken(schemas.IssuedToken):
    """A new token; the service keeps only its hash, so this is the only time it is shown."""

    role: Role


class TokenOut(schemas.TokenInfo):
    """A token as listed: never the token itself, nor its hash."""

    role: Role
