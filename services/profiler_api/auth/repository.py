"""SQL of organisations and tokens."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.profiler_api.orm import Organisation, Token


@dataclass(frozen=True)
class TokenOwner:
    org_id: int
    org_name: str
    role: str


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
) -> None:
    """Store a token by its hash."""
    session.add(Token(org_id=org_id, role=role, token_hash=token_hash, name=name))
    session.flush()


def find_owner(session: Session, token_hash: str) -> TokenOwner | None:
    """Return who holds the token with this hash, or None for an unknown or revoked one."""
    row = session.execute(
        select(Token.org_id, Organisation.name, Token.role)
        .join(Organisation, Organisation.id == Token.org_id)
        .where(Token.token_hash == token_hash, Token.revoked_at.is_(None))
    ).first()
    return TokenOwner(org_id=row[0], org_name=row[1], role=row[2]) if row else None
