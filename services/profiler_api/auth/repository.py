"""SQL of organisations and tokens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.profiler_api.orm import Organisation, Token

# Every replica listens on this channel and drops its token cache when a token is revoked.
REVOCATION_CHANNEL = "tps_token_revoked"


@dataclass(frozen=True)
class TokenOwner:
    org_id: int
    org_name: str
    role: str


@dataclass(frozen=True)
class TokenRow:
    id: int
    org: str
    role: str
    name: str | None
    created_at: datetime
    revoked_at: datetime | None


def upsert_organisation(session: Session, name: str) -> int:
    """Return the id of organisation `name`, creating it when it is new."""
    statement = (
        insert(Organisation)
        .values(name=name)
        .on_conflict_do_update(index_elements=[Organisation.name], set_={"name": name})
        .returning(Organisation.id)
    )
    return session.execute(statement).scalar_one()


def add_token(
    session: Session, *, org_id: int, role: str, token_hash: str, name: str | None
) -> int:
    """Store a token by its hash and return its id."""
    token = Token(org_id=org_id, role=role, token_hash=token_hash, name=name)
    session.add(token)
    session.flush()
    return token.id


def find_owner(session: Session, token_hash: str) -> TokenOwner | None:
    """Return who holds the token with this hash, or None for an unknown or revoked one."""
    row = session.execute(
        select(Token.org_id, Organisation.name, Token.role)
        .join(Organisation, Organisation.id == Token.org_id)
        .where(Token.token_hash == token_hash, Token.revoked_at.is_(None))
    ).first()
    return TokenOwner(org_id=row[0], org_name=row[1], role=row[2]) if row else None


def list_tokens(
    session: Session, *, org: str | None, limit: int, offset: int = 0
) -> list[TokenRow]:
    """Return tokens (of organisation `org`, or all), oldest first; never their hashes."""
    query = _token_rows().order_by(Token.id).limit(limit).offset(offset)
    if org is not None:
        query = query.where(Organisation.name == org)
    return [TokenRow(*row) for row in session.execute(query)]


def revoke_token(session: Session, token_id: int, *, org: str | None) -> TokenRow | None:
    """Revoke token `token_id` (only if it belongs to `org`, when given) and tell every replica.

    The notification is delivered when the transaction commits; a token already revoked
    keeps its first revocation time.
    """
    owned = select(Organisation.id).where(Organisation.name == org).scalar_subquery()
    statement = (
        update(Token)
        .where(Token.id == token_id)
        .values(revoked_at=func.coalesce(Token.revoked_at, func.now()))
        .returning(Token.id)
    )
    if org is not None:
        statement = statement.where(Token.org_id == owned)
    if session.execute(statement).first() is None:
        return None
    session.execute(
        text("SELECT pg_notify(:channel, :payload)"),
        {"channel": REVOCATION_CHANNEL, "payload": str(token_id)},
    )
    row = session.execute(_token_rows().where(Token.id == token_id)).one()
    return TokenRow(*row)


def _token_rows() -> Select[int, str, str, str | None, datetime, datetime | None]:
    return select(
        Token.id, Organisation.name, Token.role, Token.name, Token.created_at, Token.revoked_at
    ).join(Organisation, Organisation.id == Token.org_id)
