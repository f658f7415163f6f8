"""The model registry in Postgres: versions, one active at a time, activation and rollback."""

from __future__ import annotations

import pytest
import sqlalchemy.exc
from sqlalchemy import update
from sqlalchemy.orm import Session

from services.profiler_api.model_registry import repository
from services.profiler_api.orm import ModelVersion


def _add(session: Session, tag: str) -> int:
    return repository.add_version(
        session,
        ops=["convolution"],
        data_counts={"measurements": 1},
        params={},
        metrics={"tag": tag},
        artifact=tag.encode(),
        sha256="0" * 64,
        job_id=None,
    )


def test_activate_rolls_forward_and_back_with_one_active(db_session: Session) -> None:
    first, second = _add(db_session, "a"), _add(db_session, "b")
    assert second > first
    assert repository.activate(db_session, first)
    assert repository.active_version(db_session) == first
    assert repository.activate(db_session, second)  # forward
    assert repository.active_version(db_session) == second
    assert repository.activate(db_session, first)  # and back
    assert repository.active_version(db_session) == first
    versions = {v["version"]: v for v in repository.list_versions(db_session, limit=10, offset=0)}
    assert versions[first]["status"] == "active"
    assert versions[second]["status"] == "retired"
    assert sum(v["active"] for v in versions.values()) == 1


def test_activate_unknown_version_changes_nothing(db_session: Session) -> None:
    version = _add(db_session, "c")
    repository.activate(db_session, version)
    assert not repository.activate(db_session, 2**31 - 1)
    assert repository.active_version(db_session) == version


def test_the_database_refuses_a_second_active_model(db_session: Session) -> None:
    first, second = _add(db_session, "d"), _add(db_session, "e")
    repository.activate(db_session, first)
    with pytest.raises(sqlalchemy.exc.IntegrityError, match="uq_model_versions_active"):
        db_session.execute(
            update(ModelVersion).where(ModelVersion.version == second).values(active=True)
        )
