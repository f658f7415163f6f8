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


def test_active_model_cache_reloads_on_activation_at_most_once_per_interval(
    db_session: Session,
) -> None:
    from models.bundle import checksum, train_bundle
    from services.profiler_api.model_registry.cache import ActiveModelCache
    from tests.factories import tuning_runs

    runs = tuning_runs(["RTX A4000", "W6600"], variant="cache_test")
    versions = []
    for seed in (0, 1):
        artifact = train_bundle(
            runs, model_params={"n_estimators": 3, "n_jobs": 1}, seed=seed, select_policy=False
        ).to_bytes()
        versions.append(
            repository.add_version(
                db_session,
                ops=["convolution"],
                data_counts={},
                params={},
                metrics={},
                artifact=artifact,
                sha256=checksum(artifact),
                job_id=None,
            )
        )
    now = [0.0]
    cache = ActiveModelCache(check_interval_s=1.0, clock=lambda: now[0])
    repository.activate(db_session, versions[0])
    loaded = cache.get(db_session)
    assert loaded is not None and loaded.version == versions[0]
    assert loaded.bundle.ops == ["convolution"]
    repository.activate(db_session, versions[1])
    now[0] = 0.5
    assert cache.get(db_session) is loaded  # asked again within the interval: not reloaded
    now[0] = 1.5
    reloaded = cache.get(db_session)
    assert reloaded is not None and reloaded.version == versions[1]
    assert cache.get(db_session) is reloaded


def test_active_model_cache_keeps_serving_when_an_artifact_is_corrupt(
    db_session: Session,
) -> None:
    from services.profiler_api.model_registry.cache import ActiveModelCache

    version = repository.add_version(
        db_session,
        ops=["convolution"],
        data_counts={},
        params={},
        metrics={},
        artifact=b"not gzip",
        sha256="0" * 64,
        job_id=None,
    )
    repository.activate(db_session, version)
    assert ActiveModelCache(check_interval_s=0.0).get(db_session) is None
