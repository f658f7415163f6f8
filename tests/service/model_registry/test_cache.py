"""The active model of a replica: loaded once, reloaded on activation, kept when broken."""

from __future__ import annotations

import gc
import weakref

from sqlalchemy.orm import Session

from models.bundle import checksum, train_bundle
from services.profiler_api.model_registry import repository
from services.profiler_api.model_registry.cache import ActiveModelCache, settle_heap
from tests.factories import tuning_runs


def _add_version(session: Session, artifact: bytes, *, sha256: str | None = None) -> int:
    return repository.add_version(
        session,
        ops=["convolution"],
        data_counts={},
        params={},
        metrics={},
        artifact=artifact,
        sha256=sha256 or checksum(artifact),
        job_id=None,
    )


def test_active_model_cache_reloads_on_activation_at_most_once_per_interval(
    db_session: Session,
) -> None:
    runs = tuning_runs(["RTX A4000", "W6600"], variant="cache_test")
    versions = []
    for seed in (0, 1):
        artifact = train_bundle(
            runs, model_params={"n_estimators": 3, "n_jobs": 1}, seed=seed, select_policy=False
        ).to_bytes()
        versions.append(_add_version(db_session, artifact))
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
    # An announced activation asks the database again at once, within the interval.
    repository.activate(db_session, versions[0])
    now[0] = 1.6
    assert cache.get(db_session) is reloaded
    cache.expire()
    rolled_back = cache.get(db_session)
    assert rolled_back is not None and rolled_back.version == versions[0]


def test_active_model_cache_keeps_serving_when_an_artifact_is_corrupt(
    db_session: Session,
) -> None:
    version = _add_version(db_session, b"not gzip", sha256="0" * 64)
    repository.activate(db_session, version)
    assert ActiveModelCache(check_interval_s=0.0).get(db_session) is None


class _Cycle:
    """An object that only the cycle collector can free."""

    def __init__(self) -> None:
        self.me = self


def test_a_loaded_model_leaves_the_collectors_working_set(db_session: Session) -> None:
    artifact = train_bundle(
        tuning_runs(["RTX A4000", "W6600"], variant="cache_gc"),
        model_params={"n_estimators": 3, "n_jobs": 1},
        select_policy=False,
    ).to_bytes()
    version = _add_version(db_session, artifact)
    repository.activate(db_session, version)
    try:
        loaded = ActiveModelCache(check_interval_s=0.0).get(db_session)
        assert loaded is not None
        # frozen: a full collection no longer walks the model's objects
        walked = {id(o) for o in gc.get_objects()}
        assert id(loaded.bundle) not in walked and id(loaded.bundle.models) not in walked
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_settling_the_heap_collects_what_an_earlier_settle_froze() -> None:
    cycle = _Cycle()
    gone = weakref.ref(cycle)
    gc.freeze()  # an earlier model's load froze it
    try:
        del cycle
        gc.collect()
        assert gone() is not None  # frozen garbage is not collected
        settle_heap()  # a switch to another model
        assert gone() is None
    finally:
        gc.unfreeze()
