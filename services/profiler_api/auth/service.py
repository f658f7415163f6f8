"""Bearer tokens per organisation, with a role: agents ingest and read, admins do everything."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.orm import Session

from services.profiler_api.auth import repository
from services.profiler_api.errors import Forbidden, Unauthorized

TOKEN_PREFIX = "tps_"


class Role(StrEnum):
    AGENT = "agent"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    """Who is calling: an organisation and the role of the token it presented."""

    org_id: int
    org_name: str
    role: Role

    def require(self, *roles: Role) -> Principal:
        """Return self when the role is one of `roles` (admin always is), else raise Forbidden."""
        if self.role is Role.ADMIN or self.role in roles:
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


def authenticate(session: Session, token: str | None) -> Principal:
    """Return the principal a bearer token stands for, or raise Unauthorized."""
    if not token:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    owner = repository.find_owner(session, hash_token(token))
    if owner is None:
        raise Unauthorized("invalid or revoked token")
    return Principal(org_id=owner.org_id, org_name=owner.org_name, role=Role(owner.role))
