"""Bearer tokens per organisation, with a role.

Agents ingest and read priors; admins manage their own organisation (tokens, runs, jobs);
operators, created only from the CLI, do fleet-wide work (any organisation, model activation).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.orm import Session

from services.profiler_api.auth import repository
from services.profiler_api.errors import Forbidden, Unauthorized

TOKEN_PREFIX = "tps_"
MAX_TOKEN_CHARS = 256


class Role(StrEnum):
    AGENT = "agent"
    ADMIN = "admin"
    OPERATOR = "operator"


# What each role may also do: an admin acts as an agent of its organisation, an operator as anyone.
_GRANTS: dict[Role, frozenset[Role]] = {
    Role.AGENT: frozenset({Role.AGENT}),
    Role.ADMIN: frozenset({Role.AGENT, Role.ADMIN}),
    Role.OPERATOR: frozenset(Role),
}


@dataclass(frozen=True)
class Principal:
    """Who is calling: an organisation and the role of the token it presented."""

    org_id: int
    org_name: str
    role: Role
    token_hash: str = ""

    @property
    def fleet_wide(self) -> bool:
        """Return whether the caller may act on every organisation."""
        return self.role is Role.OPERATOR

    def require(self, *roles: Role) -> Principal:
        """Return self when the role grants one of `roles`, else raise Forbidden."""
        if _GRANTS[self.role].intersection(roles):
            return self
        wanted = " or ".join(r.value for r in roles)
        raise Forbidden(f"this needs a token with role {wanted}; yours has role {self.role.value}")


def hash_token(token: str) -> str:
    """Return the SHA-256 that a token is stored and looked up by."""
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, *, org: str, role: Role, name: str | None = None) -> str:
    """Create a token for `org` (created when new) and return it; only its hash is kept."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    org_id = repository.upsert_organisation(session, org)
    repository.add_token(
        session, org_id=org_id, role=role.value, token_hash=hash_token(token), name=name
    )
    return token


def check_token(token: str | None) -> str:
    """Return the hash of a well-formed bearer token, or raise Unauthorized."""
    if not token:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    if len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("invalid or revoked token")
    return hash_token(token)


def lookup(session: Session, token_hash: str) -> Principal:
    """Return the principal a token hash stands for, or raise Unauthorized."""
    owner = repository.find_owner(session, token_hash)
    if owner is None:
        raise Unauthorized("invalid or revoked token")
    return Principal(
        org_id=owner.org_id, org_name=owner.org_name, role=Role(owner.role), token_hash=token_hash
    )


def authenticate(session: Session, token: str | None) -> Principal:
    """Return the principal a bearer token stands for, or raise Unauthorized."""
    return lookup(session, check_token(token))
